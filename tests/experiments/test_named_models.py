"""experiments/named_models.py: models named on the command line, loaded and checked before any work."""

from __future__ import annotations

import json
import time

import huggingface_hub
import named_models
import pytest


def test_models_load_in_order_under_their_names(baseline_runs):
    """NAME=DIR keeps NAME (the last "=" splits, so names may hold one); a bare DIR is named by itself."""
    speaker, follower = baseline_runs["speaker"] / "best", baseline_runs["follower"] / "best"
    models = named_models.load_named([f"gamma=1={speaker}", str(follower)])
    assert list(models) == ["gamma=1", str(follower)]
    assert models["gamma=1"][0] == str(speaker) and models["gamma=1"][1].config.model_type == "msvae_speaker"
    assert models[str(follower)][1].config.model_type == "msvae_follower"


@pytest.mark.parametrize("specs, check, message", [
    (["a={speaker}", "a={follower}"], None, "two models are named 'a'"),
    (["a={speaker}", "b={follower}"], named_models.check_speaks, "{follower}: it holds a msvae_follower model, "
                                                                "which cannot speak"),
    (["a={speaker}"], named_models.check_follows, "which cannot follow"),
    (["a={follower}"], named_models.check_reads_trajectories, "which reads no trajectories"),
    (["a={speaker}"], named_models.check_posteriors, "not MS-VAE: it has no posteriors"),
    (["a={speaker}/.."], None, "did you mean"),
    (["a=/no/such/dir"], None, "no model at /no/such/dir"),
    (["a=someone/absent-model"], None, "someone/absent-model: "),
])
def test_bad_models_exit_in_one_line_before_any_is_used(baseline_runs, specs, check, message, monkeypatch):
    """Each problem exits in one line naming the folder (or the name given twice); a Hub id is tried, offline."""
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    paths = {"speaker": baseline_runs["speaker"] / "best", "follower": baseline_runs["follower"] / "best"}
    with pytest.raises(SystemExit) as exit_:
        named_models.load_named([spec.format(**paths) for spec in specs], check)
    line = str(exit_.value.code)
    assert line.startswith("error: ") and message.format(**paths) in line and "\n" not in line


def test_an_error_without_words_is_named_by_its_kind(baseline_runs):
    def silent(model):
        raise ValueError()

    with pytest.raises(SystemExit, match=r"^error: .*best: ValueError$"):
        named_models.load_checked(str(baseline_runs["speaker"] / "best"), silent)


def test_an_unwritable_report_folder_exits_before_any_work(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(SystemExit, match="^error: .*file"):
        named_models.check_out(tmp_path / "file" / "report.json")
    named_models.check_out(tmp_path / "new" / "report.json")  # a folder still to make is writable
    named_models.check_out(None)


def test_report_holds_its_wall_time_and_provenance(tmp_path):
    out = tmp_path / "deep" / "report.json"
    report = named_models.write_report({"rows": 3}, str(out), started=time.perf_counter() - 5.0)
    written = json.loads(out.read_text())
    assert written == report and written["rows"] == 3 and 5.0 <= written["wall_time_s"] < 60 and "commit" in written
