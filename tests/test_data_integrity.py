"""Damaged demonstration files are refused in one line naming the file and the command that regenerates it: an
arrow file cut short, single flipped bits (checksums.json, checked once per file and cached), the ways to skip the
check, datasets without checksums, and checksums of the final files after a resumed run and a conversion."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shlex
import shutil
import time
from pathlib import Path

import pytest
from conftest import as_array4d, load_script
from datasets import DatasetDict

from msvae_hf.data import demos as demos_lib
from msvae_hf.data.demos import SPLITS, convert_demos, load_demos, make_demos

#: The names users see (README, messages): spelled out here so that renaming them fails a test.
CHECKSUMS_FILE = "checksums.json"
SKIP_CHECKSUMS_ENV = "MSVAE_SKIP_DEMO_CHECKSUMS"

COUNTS = {"paired": 3, "unpaired": 2, "valid": 1, "test": 1}
ARGS = ["--level", "BossLocal", *(a for s, n in COUNTS.items() for a in (f"--{s}", str(n)))]
PAIRED = "paired/data-00000-of-00001.arrow"


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny dataset written by scripts/make_demos.py (so stats.json records its command); copy before changing."""
    out = tmp_path_factory.mktemp("integrity") / "demos"
    load_script("make_demos").main([*ARGS, "--out", str(out)])
    return out


@pytest.fixture(autouse=True)
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test gets its own checksum cache, no skip variable and a short racy window (files older than 50 ms
    are cached)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv(SKIP_CHECKSUMS_ENV, raising=False)
    monkeypatch.setattr(demos_lib, "RACY_WINDOW_NS", 50_000_000, raising=False)
    return tmp_path / "cache"


def copy_of(made: Path, tmp_path: Path, name: str = "copy") -> Path:
    """A copy of the dataset, old enough (> the racy window) for its digests to be cached."""
    copy = tmp_path / name
    shutil.copytree(made, copy)
    time.sleep(0.1)
    return copy


def recorded_command(made: Path) -> str:
    """What the messages must give: the script's command that stats.json records, plus --overwrite."""
    return shlex.join(["python", "scripts/make_demos.py", *ARGS, "--out", str(made)]) + " --overwrite"


def flip_bit(file: Path, offset: int, bit: int = 0, keep_mtime: bool = False) -> None:
    """Flip one bit of ``file`` in place (same size); with ``keep_mtime`` its access and modification times are set
    back to what they were, else the modification time moves 10 s on."""
    st = file.stat()
    data = bytearray(file.read_bytes())
    data[offset] ^= 1 << bit
    file.write_bytes(bytes(data))
    mtime = st.st_mtime_ns if keep_mtime else st.st_mtime_ns + 10_000_000_000
    os.utime(file, ns=(st.st_atime_ns, mtime))
    assert file.stat().st_size == st.st_size


def count_hashes(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Record every file hashed."""
    hashed: list[Path] = []
    sha256 = demos_lib._sha256

    def counting(file: Path) -> str:
        hashed.append(Path(file))
        return sha256(file)

    monkeypatch.setattr(demos_lib, "_sha256", counting)
    return hashed


def assert_one_line_naming(message: str, file: Path, command: str) -> None:
    assert "\n" not in message
    assert str(file) in message
    assert command in message


@pytest.mark.parametrize("kwargs", [{}, {"verify": False}], ids=["checked", "unchecked"])
def test_truncated_file_is_named_with_the_recorded_command(made, tmp_path, kwargs) -> None:
    """Half an arrow file: caught by its checksum, or (checksums skipped) by pyarrow, named either way."""
    copy = copy_of(made, tmp_path)
    arrow = copy / PAIRED
    with open(arrow, "r+b") as f:
        f.truncate(arrow.stat().st_size // 2)
    with pytest.raises((ValueError, OSError)) as err:
        load_demos(copy, **kwargs)
    assert_one_line_naming(str(err.value), arrow, recorded_command(made))


def test_truncated_file_without_recorded_command_gives_one_rebuilt_from_the_arguments(made, tmp_path) -> None:
    """stats.json without a make_demos command (make_demos called from Python): the command is rebuilt from its
    arguments, and running it restores the dataset."""
    copy = copy_of(made, tmp_path)
    stats = json.loads((copy / "stats.json").read_text())
    (copy / "stats.json").write_text(json.dumps({**stats, "command": ""}))
    arrow = copy / "unpaired" / "data-00000-of-00001.arrow"
    with open(arrow, "r+b") as f:
        f.truncate(arrow.stat().st_size // 2)
    rebuilt = shlex.join(["python", "scripts/make_demos.py", "--level", "BabyAI-BossLocal-v0",
                          *(a for s, n in COUNTS.items() for a in (f"--{s}", str(n))), "--seed", "0",
                          "--out", str(copy), "--overwrite"])
    for verify in (True, False):
        with pytest.raises(ValueError) as err:
            load_demos(copy, verify=verify)
        assert_one_line_naming(str(err.value), arrow, rebuilt)
    load_script("make_demos").main(shlex.split(rebuilt)[2:])
    restored, original = load_demos(copy), load_demos(made)
    for split in SPLITS:
        assert restored[split].to_dict() == original[split].to_dict(), split


@pytest.mark.parametrize("keep_mtime", [False, True], ids=["new-mtime", "mtime-restored"])
def test_single_bit_flips_are_refused(made, tmp_path, keep_mtime) -> None:
    """A flipped bit anywhere in an arrow file (same size; mtime moved or restored) is refused in one line naming
    the file, the checksum record, the command and both ways to skip."""
    size = (made / PAIRED).stat().st_size
    for k, offset in enumerate([0, 7, size // 8, size // 3, size // 2, 2 * size // 3, size - 9, size - 1]):
        copy = copy_of(made, tmp_path, f"flip{k}")
        flip_bit(copy / PAIRED, offset, bit=k % 8, keep_mtime=keep_mtime)
        with pytest.raises(ValueError) as err:
            load_demos(copy)
        message = str(err.value)
        assert_one_line_naming(message, copy / PAIRED, recorded_command(made))
        assert "sha256 differs" in message and CHECKSUMS_FILE in message, offset
        assert "verify=False" in message and f"{SKIP_CHECKSUMS_ENV}=1" in message


def test_each_file_is_hashed_once_and_a_later_change_is_still_caught(made, tmp_path, monkeypatch, own_cache) -> None:
    """Two loads hash each arrow file once (the digests are cached); a flip afterwards is caught whether its
    mtime moved or was set back (the ctime moves either way); an unwritable cache only costs the caching."""
    copy = copy_of(made, tmp_path)
    arrows = sorted(copy.rglob("*.arrow"))
    hashed = count_hashes(monkeypatch)
    load_demos(copy)
    load_demos(copy)
    assert sorted(hashed) == arrows  # once each, over both loads
    assert (own_cache / "msvae_hf").is_dir()

    flip_bit(copy / PAIRED, (copy / PAIRED).stat().st_size // 2, keep_mtime=False)
    with pytest.raises(ValueError, match="sha256 differs"):
        load_demos(copy)
    assert hashed[len(arrows):] == [copy / PAIRED]  # only the changed file is hashed again

    again = copy_of(made, tmp_path, "again")
    load_demos(again)
    time.sleep(0.05)  # beyond the file system's timestamp granularity: the flip's ctime differs
    flip_bit(again / PAIRED, (again / PAIRED).stat().st_size // 2, keep_mtime=True)
    with pytest.raises(ValueError, match="sha256 differs"):
        load_demos(again)

    blocked = tmp_path / "not-a-folder"
    blocked.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))  # the cache cannot be created there
    del hashed[:]
    assert len(load_demos(made)["paired"]) == COUNTS["paired"]
    assert len(load_demos(made)["paired"]) == COUNTS["paired"]
    assert len(hashed) == 2 * len(arrows)


def test_verification_can_be_skipped_for_data_edited_on_purpose(made, tmp_path, monkeypatch) -> None:
    """An edited split (paired replaced by the valid rows) is refused, unless verify=False or the variable is 1."""
    copy = copy_of(made, tmp_path)
    shutil.copy(copy / "valid" / "data-00000-of-00001.arrow", copy / PAIRED)
    with pytest.raises(ValueError, match="sha256 differs"):
        load_demos(copy)
    assert load_demos(copy, verify=False)["paired"]["seed"] == load_demos(made)["valid"]["seed"]
    monkeypatch.setenv(SKIP_CHECKSUMS_ENV, "0")
    with pytest.raises(ValueError, match="sha256 differs"):
        load_demos(copy)
    monkeypatch.setenv(SKIP_CHECKSUMS_ENV, "1")
    hashed = count_hashes(monkeypatch)
    assert len(load_demos(copy)["paired"]) == 1 and hashed == []


def test_dataset_without_checksums_loads_unhashed_and_says_so_once(made, tmp_path, monkeypatch, caplog) -> None:
    """A dataset without checksums.json loads as before; one info line says it is
    unchecked."""
    copy = copy_of(made, tmp_path)
    (copy / CHECKSUMS_FILE).unlink()
    hashed = count_hashes(monkeypatch)
    with caplog.at_level(logging.INFO, logger=demos_lib.__name__):
        for _ in range(2):
            assert len(load_demos(copy)["unpaired"]) == COUNTS["unpaired"]
    assert hashed == []
    said = [r.getMessage() for r in caplog.records]
    assert said.count(f"{copy} has no {CHECKSUMS_FILE}: its files are not verified") == 1


def digests(folder: Path) -> dict[str, str]:
    """What checksums.json must hold: every arrow file's sha256, by path relative to the folder."""
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*.arrow"))}


def test_resumed_run_and_conversion_record_the_final_files(made, tmp_path, monkeypatch) -> None:
    """After an interrupted make_demos is resumed, and after convert_demos (which must not keep a copied
    checksums.json), checksums.json lists exactly the final arrow files with their sha256."""
    assert json.loads((made / CHECKSUMS_FILE).read_text())["sha256"] == digests(made)
    assert set(digests(made)) == {f"{s}/data-00000-of-00001.arrow" for s in SPLITS}

    play = demos_lib.play_chunk
    played: list[int] = []

    def stopping(*args, **kwargs):
        if len(played) == 3:
            raise KeyboardInterrupt
        played.append(1)
        return play(*args, **kwargs)

    out = tmp_path / "resumed"
    monkeypatch.setattr(demos_lib, "play_chunk", stopping)
    with pytest.raises(KeyboardInterrupt):
        make_demos("BossLocal", COUNTS, out, chunk_size=1)
    monkeypatch.setattr(demos_lib, "play_chunk", play)
    resumed = make_demos("BossLocal", COUNTS, out, chunk_size=2)
    assert json.loads((out / CHECKSUMS_FILE).read_text())["sha256"] == digests(out)
    assert resumed["paired"].to_dict() == load_demos(made)["paired"].to_dict()

    old = tmp_path / "old"
    dd = load_demos(made)
    DatasetDict({s: as_array4d(ds) for s, ds in dd.items()}).save_to_disk(str(old), num_shards={"test": 1})
    for name in ("README.md", "stats.json", CHECKSUMS_FILE):  # checksums.json of other files: must not survive
        shutil.copy(made / name, old / name)
    new = tmp_path / "new"
    convert_demos(old, new)
    assert json.loads((new / CHECKSUMS_FILE).read_text())["sha256"] == digests(new)
    assert load_demos(new)["valid"].to_dict() == dd["valid"].to_dict()
