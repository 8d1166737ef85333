"""experiments/probe_latent.py: mission labels read by the level's grammar, alignment of the two posteriors
against a closed form, and a whole probe of a tiny MS-VAE that says what it measured."""

from __future__ import annotations

import probe_latent
import pytest
import torch
from conftest import tiny_model

from msvae_hf.data.collator import for_loader, read_rows
from msvae_hf.data.demos import load_demos


def test_mission_labels_follow_the_order_of_execution():
    labels = probe_latent.mission_labels(["go to the red ball after you go to a box",
                                          "go to the blue key and go to a grey door"])
    assert labels["goal count"] == ["2", "2"]
    assert labels["first goal's object type"][0] == "box" and labels["first goal's colour"][0] is None
    assert labels["last goal's object type"][0] == "ball" and labels["last goal's colour"][0] == "red"


def test_trajectory_labels_are_the_first_action_and_the_length_quartile():
    actions = [[2, 0], [1, 2, 2], [0] * 5, [2] * 8, [1] * 4, [2] * 6, [0] * 7, [1]]
    labels = probe_latent.trajectory_labels(actions)
    assert labels["first action"] == ["2", "1", "0", "2", "1", "2", "0", "1"]
    # lengths 2, 3, 5, 8, 4, 6, 7, 1: sorted 1 2 3 4 5 6 7 8, quartiles cut at 3, 5 and 7
    assert labels["steps quartile"] == ["q1", "q2", "q3", "q4", "q2", "q3", "q4", "q1"]
    # tied lengths share a bin, a length equal to a cut going up: 2 2 2 2 2 3 3 9 cut at 2, 2 and 3
    tied = probe_latent.trajectory_labels([[0] * n for n in (2, 2, 2, 2, 2, 3, 3, 9)])["steps quartile"]
    assert tied == ["q3"] * 5 + ["q4"] * 3


def test_alignment_ranks_each_pair_among_the_held_out_ones():
    mean_tau = torch.tensor([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0]])
    aligned = probe_latent.alignment(mean_tau + 0.1, mean_tau)
    assert aligned["top1"] == 1.0 and aligned["median_rank_share"] == 0.0
    assert aligned["mean_sq_distance_same_pair"] == pytest.approx(0.02, rel=1e-5)
    assert aligned["mean_sq_distance_rolled_pair"] == pytest.approx((100.02 + 200.0 + 100.02) / 3, rel=1e-3)
    swapped = probe_latent.alignment(mean_tau.roll(1, 0), mean_tau)  # each z_y sits on another pair's z_tau
    assert swapped["top1"] == 0.0 and swapped["median_rank_share"] > 0.0


def test_probe_of_a_tiny_msvae_reports_every_label_from_both_sides(tok, tiny_demos):
    from msvae_hf import MSVAEConfig, MSVAEModel

    torch.manual_seed(0)
    model = MSVAEModel(MSVAEConfig(**{**tiny_model("msvae"), "vocab_size": len(tok)})).eval()
    model.tokenizer = tok
    paired = load_demos(tiny_demos)["paired"]
    rows = read_rows(for_loader(paired), range(len(paired)))
    report = probe_latent.probe_model(model, rows, [row["instruction"] for row in rows])
    assert set(report["labels"]) == {"goal count", "first goal's object type", "first goal's colour",
                                     "last goal's object type", "last goal's colour", "first action",
                                     "steps quartile"}
    for result in report["labels"].values():
        for key in ("from z_y", "from z_tau", "fit on z_y, scored on z_tau", "fit on z_tau, scored on z_y",
                    "majority"):
            assert 0.0 <= result[key] <= 1.0
    assert report["alignment"]["pairs"] == len(rows) - int(len(rows) * 0.8)


def test_the_table_reads_the_probe_record(tmp_path):
    import json

    from result_tables.pairs_curve import table_latent_probe

    with pytest.raises(SystemExit, match="no latent probe at"):
        table_latent_probe("gotoseqlocal", root=tmp_path)
    label = {"majority": 0.4, "from z_y": 0.998, "from z_tau": 0.582, "fit on z_y, scored on z_tau": 0.262,
             "fit on z_tau, scored on z_y": 0.215}
    alignment = {"pairs": 400, "top1": 0.0, "median_rank_share": 0.482, "mean_sq_distance_same_pair": 87.83,
                 "mean_sq_distance_rolled_pair": 87.89}
    (tmp_path / "gotoseqlocal").mkdir()
    (tmp_path / "gotoseqlocal" / "latent_probe.json").write_text(json.dumps(
        {"models": {"m10k": {"labels": {"goal count": label}, "alignment": alignment}}}))
    lines = table_latent_probe("gotoseqlocal", root=tmp_path)
    assert lines[2] == "| m10k | goal count | 40.0 | 99.8 | 58.2 | 26.2 | 21.5 |"
    assert lines[-1] == "| m10k | 400 | 0.0 | 0.482 | 87.83 | 87.89 |"


def test_a_named_probe_record_is_its_own_table(tmp_path):
    """``--table latent_probe:<name>`` reads results/<level>/<name>.json, a probe of other models beside the first."""
    import json

    from result_tables.markdown import render

    label = {"majority": 0.33, "from z_y": 0.8, "from z_tau": 0.5, "fit on z_y, scored on z_tau": 0.25,
             "fit on z_tau, scored on z_y": 0.3}
    alignment = {"pairs": 400, "top1": 0.025, "median_rank_share": 0.1, "mean_sq_distance_same_pair": 1.5,
                 "mean_sq_distance_rolled_pair": 3.25}
    (tmp_path / "gotoseqlocal").mkdir()
    for name, model in (("latent_probe", "m10k"), ("latent_probe_m1k", "m1k")):
        (tmp_path / "gotoseqlocal" / f"{name}.json").write_text(json.dumps(
            {"models": {model: {"labels": {"goal count": label}, "alignment": alignment}}}))
    table = render("gotoseqlocal", "latent_probe:latent_probe_m1k", tmp_path).splitlines()
    assert table[2] == "| m1k | goal count | 33.0 | 80.0 | 50.0 | 25.0 | 30.0 |"
    assert table[-1] == "| m1k | 400 | 2.5 | 0.100 | 1.50 | 3.25 |"
    assert render("gotoseqlocal", "latent_probe", tmp_path).splitlines()[2].startswith("| m10k |")
    with pytest.raises(SystemExit, match="no latent probe at .*latent_probe_m3k.json"):
        render("gotoseqlocal", "latent_probe:latent_probe_m3k", tmp_path)
