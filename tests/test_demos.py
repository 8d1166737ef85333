"""Bot demos as a DatasetDict: determinism across processes, splits, replay, card, bad inputs, push."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
from datasets import Dataset, DatasetDict

from msvae_hf.data import demos as demos_lib
from msvae_hf.data.demos import (
    MAX_DATASET_SEED,
    SPLIT_OFFSET_GAP,
    SPLITS,
    demo_features,
    episode_seeds,
    load_demos,
    make_demos,
    replay_episode,
)
from msvae_hf.envs.seeds import TEST_SEED_START, VALID_SEED_START

COUNTS = {"paired": 6, "unpaired": 5, "valid": 3, "test": 3}
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


def test_features_and_sizes(demos: DatasetDict) -> None:
    assert list(demos) == list(SPLITS)
    for split, ds in demos.items():
        assert len(ds) == COUNTS[split]
        assert ds.features == demo_features(split != "unpaired")
        assert ("instruction" in ds.column_names) == (split != "unpaired")
        row = ds.with_format("numpy")[0]
        t = len(row["actions"])
        assert row["observations"].shape == (t, 7, 7, 3) and len(row["directions"]) == t
        assert row["level"] == "BabyAI-BossLocal-v0"
    assert demos["paired"].data.column("observations").type.value_type == "uint8"


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
        np.testing.assert_array_equal(replay.observations, np.asarray(row["observations"], np.uint8))
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
    dropped = json.loads((tmp_path / "short" / "stats.json").read_text())["dropped"]
    assert dropped.get("paired/step_limit", 0) > 0
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


class FakeHfApi:
    """Records calls instead of talking to the Hub."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple, dict]] = []

    def create_repo(self, *args, **kwargs):
        self.calls.append(("create_repo", args, kwargs))

    def upload_folder(self, *args, **kwargs):
        self.calls.append(("upload_folder", args, kwargs))
        return "https://huggingface.co/datasets/me/demos"


def test_push_uses_upload_folder(demos: DatasetDict) -> None:
    out = Path(demos["paired"].cache_files[0]["filename"]).parents[1]
    api = FakeHfApi()
    assert demos_lib.push_demos_to_hub(out, "me/demos", api=api).endswith("me/demos")
    name, _, kwargs = api.calls[-1]
    assert name == "upload_folder"
    assert [kwargs[k] for k in ("folder_path", "repo_id", "repo_type")] == [str(out), "me/demos", "dataset"]
