"""Bot demos as a DatasetDict: determinism across processes and chunks, resuming an interrupted run, splits,
replay, card, bad inputs, converting a dataset in the nested-list format, push."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from conftest import as_array4d
from datasets import Dataset, DatasetDict
from hub_helpers import FakeHfApi

from msvae_hf.data import demos as demos_lib
from msvae_hf.data.collator import decode_frames
from msvae_hf.data.demos import (
    MAX_DATASET_SEED,
    SPLIT_OFFSET_GAP,
    SPLITS,
    demo_features,
    episode_seeds,
    load_demos,
    make_demos,
    replay_episode,
    work_dir,
)
from msvae_hf.envs.seeds import TEST_SEED_START, VALID_SEED_START

COUNTS = {"paired": 6, "unpaired": 5, "valid": 3, "test": 3}
PLAY_CHUNK = demos_lib.play_chunk
ROOT = Path(__file__).resolve().parents[1]


def _load_script():
    spec = importlib.util.spec_from_file_location("make_demos_script", ROOT / "scripts" / "make_demos.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def demos(tmp_path_factory: pytest.TempPathFactory) -> DatasetDict:
    return make_demos("BossLocal", COUNTS, tmp_path_factory.mktemp("d") / "one", num_proc=1, command="test")


def test_same_dataset_for_any_num_proc(demos: DatasetDict, tmp_path: Path) -> None:
    two = make_demos("BossLocal", COUNTS, tmp_path / "two", num_proc=2)
    for split in SPLITS:
        assert demos[split].to_dict() == two[split].to_dict(), split


class Interrupt(KeyboardInterrupt):
    """What Ctrl-C raises, from inside the n-th chunk played."""


def interrupt_after(monkeypatch: pytest.MonkeyPatch, chunks: int) -> list[int]:
    """Let ``chunks`` chunks be played, then stop the run; returns the list of seeds each played chunk began at."""
    played = []

    def stopping(level, split, seeds, *args):
        if len(played) == chunks:
            raise Interrupt
        played.append(seeds[0])
        return PLAY_CHUNK(level, split, seeds, *args)

    monkeypatch.setattr(demos_lib, "play_chunk", stopping)
    return played


def test_interrupted_run_resumes_to_the_uninterrupted_dataset(demos, tmp_path, monkeypatch) -> None:
    out = tmp_path / "resumed"
    played = interrupt_after(monkeypatch, 5)
    with pytest.raises(Interrupt):
        make_demos("BossLocal", COUNTS, out, chunk_size=2, command="test")
    work = work_dir(out)
    assert not out.exists() and len(played) == 5
    assert sorted(p.name for p in (work / "paired").iterdir()) == ["chunk-00000", "chunk-00001", "chunk-00002"]
    assert sorted(p.name for p in (work / "unpaired").iterdir()) == ["chunk-00000", "chunk-00001"]
    (work / "unpaired" / "chunk-00002.partial").mkdir()  # a chunk cut off while being written
    (work / "unpaired" / "chunk-00002.partial" / "data-00000-of-00001.arrow").write_bytes(b"half")

    # chunk size and processes do not change the data: the rerun may use others
    played = interrupt_after(monkeypatch, 100)
    resumed = make_demos("BossLocal", COUNTS, out, num_proc=2, chunk_size=3, command="test")
    assert played[0] == episode_seeds("unpaired", 4, 1)[0]  # it went on where the interruption was
    assert not work.exists()
    for split in SPLITS:
        assert resumed[split].features == demos[split].features
        assert resumed[split].to_dict() == demos[split].to_dict(), split
    one = Path(demos["paired"].cache_files[0]["filename"]).parents[1]
    assert json.loads((out / "stats.json").read_text()) == json.loads((one / "stats.json").read_text())
    assert (out / "README.md").read_text() == (one / "README.md").read_text()



def test_killed_script_resumes_to_the_uninterrupted_dataset(demos, tmp_path) -> None:
    """SIGKILL (no clean-up runs) in the middle of a run of the script; the same command then finishes it."""
    out = tmp_path / "killed"
    args = ["--level", "BossLocal", *(f"--{s}={n}" for s, n in COUNTS.items()), "--chunk-size", "1", "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, str(ROOT / "scripts" / "make_demos.py"), *args], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    third = work_dir(out) / "paired" / "chunk-00002"
    deadline = time.monotonic() + 300
    while not third.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    proc.kill()
    proc.wait()
    if out.exists():
        pytest.skip("the script finished before it could be killed")
    assert third.exists()
    _load_script().main(args)
    resumed = load_demos(out)
    for split in SPLITS:
        assert resumed[split].to_dict() == demos[split].to_dict(), split

def test_resume_refuses_other_arguments(tmp_path, monkeypatch, capsys) -> None:
    out = tmp_path / "stopped"
    interrupt_after(monkeypatch, 1)
    counts = {"paired": 3, "unpaired": 2, "valid": 0, "test": 0}
    with pytest.raises(Interrupt):
        make_demos("GoToSeqLocal", counts, out, chunk_size=2)
    with pytest.raises(ValueError, match=r"unpaired: 2 there, 4 now; valid: 0 there, 1 now") as err:
        make_demos("GoToSeqLocal", {**counts, "unpaired": 4, "valid": 1}, out, chunk_size=2)
    assert f"delete {work_dir(out)} to start over" in str(err.value)
    with pytest.raises(ValueError, match=r"max_steps: None there, 30 now"):
        make_demos("GoToSeqLocal", counts, out, max_steps=30)
    args = ["--level", "BossLocal", "--paired", "3", "--unpaired", "2", "--out", str(out)]
    with pytest.raises(SystemExit, match=r"level: 'BabyAI-GoToSeqLocal-v0' there, 'BabyAI-BossLocal-v0' now"):
        _load_script().main(args)
    assert sorted(p.name for p in (work_dir(out) / "paired").iterdir()) == ["chunk-00000"]  # left as it was


@pytest.fixture(scope="module")
def old_demos(demos: DatasetDict, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ``demos`` fixture's folder in the nested-list format (arrays, card, stats)."""
    one = Path(demos["paired"].cache_files[0]["filename"]).parents[1]
    old = tmp_path_factory.mktemp("old") / "demos"
    DatasetDict({split: as_array4d(ds) for split, ds in demos.items()}).save_to_disk(str(old), num_shards={"test": 1})
    for name in ("README.md", "stats.json"):
        (old / name).write_text((one / name).read_text().replace("one-byte cell codes", "uint8 arrays"))
    return old


def test_old_datasets_are_refused_with_the_command_that_converts_them(old_demos: Path) -> None:
    with pytest.raises(ValueError) as err:
        load_demos(old_demos)
    message = str(err.value)
    assert "not as one-byte cell codes" in message
    assert f"python scripts/make_demos.py --convert {old_demos} --out NEW_DIR" in message


def test_convert_gives_the_generated_dataset(demos, old_demos, tmp_path) -> None:
    from conftest import tree_digest

    before = tree_digest(old_demos)
    _load_script().main(["--convert", str(old_demos), "--out", str(tmp_path / "new")])
    converted = load_demos(tmp_path / "new")
    assert tree_digest(old_demos) == before  # nothing written to the old folder
    for split in SPLITS:
        assert converted[split].features == demos[split].features
        assert converted[split].to_dict() == demos[split].to_dict(), split
    one = Path(demos["paired"].cache_files[0]["filename"]).parents[1]
    assert (tmp_path / "new" / "README.md").read_text() == (one / "README.md").read_text()
    assert (tmp_path / "new" / "stats.json").read_text() == (old_demos / "stats.json").read_text()
    with pytest.raises(SystemExit, match="already stores observations as cell codes"):
        _load_script().main(["--convert", str(tmp_path / "new"), "--out", str(tmp_path / "again")])


def test_convert_a_pseudo_labelled_split(demos, tmp_path) -> None:
    """A single Dataset (scripts/label_unpaired.py's output) converts too, keeping its pseudo_labels.json."""
    from msvae_hf.data.demos import convert_demos

    old = tmp_path / "labels"
    as_array4d(demos["valid"]).save_to_disk(str(old))
    (old / "pseudo_labels.json").write_text('{"speaker": "s"}')
    converted = convert_demos(old, tmp_path / "labels_codes")
    assert converted.to_dict() == demos["valid"].to_dict()
    assert (tmp_path / "labels_codes" / "pseudo_labels.json").read_text() == '{"speaker": "s"}'


def test_features_and_sizes(demos: DatasetDict) -> None:
    assert list(demos) == list(SPLITS)
    for split, ds in demos.items():
        assert len(ds) == COUNTS[split]
        assert ds.features == demo_features(split != "unpaired")
        assert ("instruction" in ds.column_names) == (split != "unpaired")
        row = ds.with_format("numpy")[0]
        t = len(row["actions"])
        assert decode_frames(row["observations"]).shape == (t, 7, 7, 3) and len(row["directions"]) == t
        assert len(row["observations"]) == t * 49
        assert row["level"] == "BabyAI-BossLocal-v0"
    assert demos["paired"].data.column("observations").type == pa.binary()


def test_split_seeds_disjoint_and_sorted(demos: DatasetDict) -> None:
    seeds = {split: demos[split]["seed"] for split in SPLITS}
    assert all(s == sorted(s) for s in seeds.values())
    assert len(set().union(*map(set, seeds.values()))) == sum(COUNTS.values())


def test_seed_ranges_keep_demonstrations_test_and_validation_apart() -> None:
    """Every demonstration seed < every test seed < every validation seed; one dataset seed more would cross."""
    ranges = [(episode_seeds(split, 0, 1, d)[0], episode_seeds(split, SPLIT_OFFSET_GAP - 1, 1, d)[0])
              for d in range(MAX_DATASET_SEED + 1) for split in SPLITS]
    assert max(last for _, last in ranges) < TEST_SEED_START < VALID_SEED_START
    ranges.sort()
    assert all(a_last < b_first for (_, a_last), (b_first, _) in zip(ranges, ranges[1:]))  # pairwise disjoint
    with pytest.raises(ValueError, match="dataset seed must be in"):
        episode_seeds("paired", 0, 1, MAX_DATASET_SEED + 1)
    with pytest.raises(ValueError, match="needs more than"):
        episode_seeds("test", SPLIT_OFFSET_GAP - 1, 2, MAX_DATASET_SEED)


def test_replay_reproduces_episode(demos: DatasetDict) -> None:
    for row in demos["paired"].select(range(3)):
        replay = replay_episode(row["level"], row["seed"], row["actions"])
        np.testing.assert_array_equal(replay.observations, decode_frames(row["observations"]))
        np.testing.assert_array_equal(replay.directions, row["directions"])
        assert replay.instruction == row["instruction"] and replay.success


def test_card_and_stats(demos: DatasetDict) -> None:
    out = Path(demos["paired"].cache_files[0]["filename"]).parents[1]
    card = (out / "README.md").read_text()
    assert "| paired | 6 |" in card and "test" in card and "12.07" in card
    stats = json.loads((out / "stats.json").read_text())
    assert stats["splits"]["unpaired"]["episodes"] == 5 and stats["dropped"] == {}


def test_step_limit_drops_and_counts(tmp_path: Path) -> None:
    counts = {"paired": 5, "unpaired": 0, "valid": 0, "test": 0}
    dd = make_demos("BossLocal", counts, tmp_path / "short", max_steps=8)
    assert len(dd["paired"]) == 5 and max(len(a) for a in dd["paired"]["actions"]) <= 8
    stats = json.loads((tmp_path / "short" / "stats.json").read_text())
    dropped = stats["dropped"]
    assert dropped.get("paired/step_limit", 0) > 0
    # the mean over the kept episodes only (the dropped ones stay in the chunks, without frames)
    assert stats["splits"]["paired"]["mean_steps"] == np.mean([len(a) for a in dd["paired"]["actions"]])
    assert "paired/step_limit" in (tmp_path / "short" / "README.md").read_text()


def test_hopeless_step_limit_raises(tmp_path: Path) -> None:
    counts = {"paired": 2, "unpaired": 0, "valid": 0, "test": 0}
    with pytest.raises(RuntimeError, match="step_limit"):
        make_demos("GoToSeqLocal", counts, tmp_path / "never", max_steps=1)
    assert not (tmp_path / "never").exists() and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "args, message",
    [
        (["--level", "BossLocl", "--paired", "1"], "unknown level 'BossLocl'; valid names: GoToSeqLocal"),
        (["--level", "BossLocal", "--paired", "-1"], "must be >= 0"),
        (["--level", "BossLocal"], "all episode counts are zero"),
        (["--paired", "1"], "--level is required (unless --convert)"),
        (["--convert", "old", "--level", "BossLocal", "--paired", "1"], "drop --paired --level"),
    ],
)
def test_script_rejects_bad_arguments(args, message, tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        _load_script().main([*args, "--out", str(tmp_path / "x")])
    assert exc.value.code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_script_refuses_non_empty_out_unless_overwrite(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("precious")
    args = ["--level", "GoToSeqLocal", "--paired", "2", "--out", str(out)]
    with pytest.raises(SystemExit, match="not empty"):
        _load_script().main(args)
    assert (out / "keep.txt").read_text() == "precious" and len(list(out.iterdir())) == 1
    _load_script().main([*args, "--overwrite"])
    assert not (out / "keep.txt").exists() and len(load_demos(out)["paired"]) == 2


def test_load_demos_errors(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="make_demos"):
        load_demos(tmp_path / "missing")
    (tmp_path / "junk").mkdir()
    with pytest.raises(ValueError, match="not a dataset"):
        load_demos(tmp_path / "junk")
    DatasetDict({"valid": Dataset.from_dict({"a": [1]})}).save_to_disk(str(tmp_path / "nopaired"))
    with pytest.raises(ValueError, match="no 'paired' split"):
        load_demos(tmp_path / "nopaired")
    Dataset.from_dict({"a": [1]}).save_to_disk(str(tmp_path / "single"))
    with pytest.raises(ValueError, match="single Dataset"):
        load_demos(tmp_path / "single")


def test_push_uses_upload_folder(demos: DatasetDict) -> None:
    out = Path(demos["paired"].cache_files[0]["filename"]).parents[1]
    api = FakeHfApi()
    info = demos_lib.push_demos_to_hub(out, "me/demos", api=api)
    assert info is api.commits[-1] and info.repo_url.repo_id == "me/demos"
    name, kwargs = api.calls[-1]
    assert name == "upload_folder"
    assert [kwargs[k] for k in ("folder_path", "repo_id", "repo_type")] == [str(out), "me/demos", "dataset"]
