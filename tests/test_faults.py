"""Damaged inputs and failing disks, networks and processes: one clear line naming the file, field or step at
fault, and nothing deleted or half-written. Each test is a case as a user, a broken disk or a dying job produces
it: demos with a missing column or an out-of-range value, a full disk under results.json, make_demos and
label_unpaired, the Hub answering 500 / 401 or dropping the connection, a killed make_demos pool, two make_demos
on one folder, and pseudo-labels that are no pseudo-labels or are damaged."""

from __future__ import annotations

import errno
import importlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx2
import pytest
from conftest import REPO, TINY_LEVEL, load_script, train_tiny
from datasets import Dataset, load_from_disk
from hub_helpers import FakeHfApi
from huggingface_hub.errors import HfHubHTTPError
from model_helpers import build

import msvae_hf.utils.run_folder as run_folder
from msvae_hf.data import demos as demos_module
from msvae_hf.data.demos import load_demos
from msvae_hf.data.pseudo_labels import label_unpaired, load_pseudo_labels
from msvae_hf.hub.push import HubRequestError, push_folder_to_hub
from msvae_hf.models.tokenization_msvae import MSVAETokenizer


def untrained_speaker():
    """A tiny untrained speaker with its tokenizer: it labels fast, and what it says does not matter here."""
    tokenizer = MSVAETokenizer.from_grammar()
    speaker = build("speaker", tokenizer)
    speaker.tokenizer = tokenizer
    return speaker


def one_line(text: str) -> str:
    """``text`` stripped; asserted to be one line."""
    assert "\n" not in text.strip() and "Traceback" not in text, text
    return text.strip()


def damaged_copy(demos: Path, out: Path, split: str, change) -> Path:
    """``demos`` saved again at ``out`` with ``change(dataset)`` in place of ``split`` (no checksums: the loader's
    schema checks are what stands between the damage and the model)."""
    data = load_from_disk(str(demos))
    data[split] = change(data[split])
    data.save_to_disk(str(out))
    return out


def with_first(column: str, value):
    """A change that sets ``column`` of row 0 to ``value(old)``."""
    return lambda ds: ds.map(lambda row, i: {column: value(row[column]) if i == 0 else row[column]},
                             with_indices=True, features=ds.features)


# ------------------------------------------------------------------------------------ the demos' schema
DAMAGES = {
    "no actions": ("paired", lambda ds: ds.remove_columns("actions"), r"split 'paired' has no 'actions' column"),
    "no instruction": ("valid", lambda ds: ds.remove_columns("instruction"),
                       r"split 'valid' has no 'instruction' column"),
    "direction 9": ("test", with_first("directions", lambda d: [9, *d[1:]]),
                    r"split 'test', column 'directions' holds 9, outside 0\.\.3"),
    "action -1": ("unpaired", with_first("actions", lambda a: [-1, *a[1:]]),
                  r"split 'unpaired', column 'actions' holds -1, outside 0\.\.6"),
    "a direction short": ("paired", with_first("directions", lambda d: d[:-1]),
                          r"split 'paired', row 0 holds \d+ directions in column 'directions' for \d+ actions"),
    "a frame short": ("paired", with_first("observations", lambda o: o[:-49]),
                      r"split 'paired', row 0 holds \d+ cell codes \(49 a frame\) in column 'observations'"),
}


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_demos_with_a_bad_column_are_refused_by_split_and_column(tiny_demos: Path, tmp_path: Path,
                                                                damage: str) -> None:
    split, change, reason = DAMAGES[damage]
    damaged = damaged_copy(tiny_demos, tmp_path / "demos", split, change)
    with pytest.raises(ValueError, match=reason) as info:
        load_demos(damaged)
    assert str(damaged) in one_line(str(info.value)) and "make_demos.py" in str(info.value)


def test_training_on_damaged_demos_stops_before_its_run_folder(tiny_demos: Path, tmp_path: Path) -> None:
    split, change, reason = DAMAGES["direction 9"]
    damaged = damaged_copy(tiny_demos, tmp_path / "demos", split, change)
    with pytest.raises(ValueError, match=reason):
        train_tiny("follower", tmp_path / "run", damaged)
    assert not (tmp_path / "run").exists()


# ------------------------------------------------------------------------------------------- full disks
def _full_disk(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_json_write_on_a_full_disk_leaves_the_old_file_and_names_the_path(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "results.json"
    run_folder.write_json(target, {"updates": 4})
    monkeypatch.setattr(run_folder.os, "fsync", _full_disk)
    with pytest.raises(OSError, match=r"^\[Errno 28\] no space left on device writing .*results\.json.*tmp; it "
                                      r"was removed and results\.json is as it was") as info:
        run_folder.write_json(target, {"updates": 8})
    one_line(str(info.value))
    assert json.loads(target.read_text()) == {"updates": 4}
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]


def test_an_empty_results_json_is_named_by_continue_from_and_push(tiny_demos: Path, tmp_path: Path) -> None:
    """What a full disk left before results.json was written in one rename: an empty file, named, not "Expecting
    value: line 1 column 1"."""
    run = tmp_path / "run"
    train_tiny("follower", run, tiny_demos)
    (run / "results.json").write_text("")
    with pytest.raises(ValueError, match=rf"^{run / 'results.json'} is empty: it was cut short") as info:
        train_tiny("follower", tmp_path / "more", tiny_demos, continue_from=str(run), max_updates=8)
    one_line(str(info.value))
    assert not (tmp_path / "more").exists()
    push = load_script("push_to_hub")
    with pytest.raises(SystemExit, match=rf"error: {run / 'results.json'} is empty"):
        push.main(["--run", str(run), "--repo", "someone/x"], api=FakeHfApi())


def test_make_demos_on_a_full_disk_keeps_its_chunks_and_goes_on(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    save, saves = Dataset.save_to_disk, []

    def full_on_second(self, path, *args, **kwargs):
        saves.append(path)
        if len(saves) == 2:
            Path(path).mkdir(parents=True)
            (Path(path) / "data-00000-of-00001.arrow").write_bytes(b"\0" * 64)
            _full_disk()
        return save(self, path, *args, **kwargs)

    monkeypatch.setattr(Dataset, "save_to_disk", full_on_second)
    out, make = tmp_path / "demos", load_script("make_demos")
    argv = ["--level", TINY_LEVEL, "--paired", "6", "--chunk-size", "3", "--out", str(out)]
    with pytest.raises(SystemExit) as stop:
        make.main(argv)
    message = one_line(str(stop.value.code))
    assert message.startswith("error: [Errno 28] no space left on device writing ") and "chunk-00001" in message
    work = tmp_path / "demos.chunks" / "paired"
    assert sorted(p.name for p in work.iterdir()) == ["chunk-00000"]  # no partial chunk, no played-rows cache
    monkeypatch.setattr(Dataset, "save_to_disk", save)
    make.main(argv)
    assert len(load_demos(out)["paired"]) == 6 and not (tmp_path / "demos.chunks").exists()


def test_a_full_disk_while_a_chunk_is_played_is_one_line_and_leaves_no_cache(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """datasets wraps the failed write of the played rows in its own error; the cause is found and named."""
    from datasets.exceptions import DatasetGenerationError

    import msvae_hf.data.demos as demos

    def full(level, split, seeds, num_proc, max_steps, time_limit_s, cache_dir):
        (Path(cache_dir) / "generator").mkdir(parents=True)
        (Path(cache_dir) / "generator" / "rows.arrow").write_bytes(b"\0" * 64)
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError as err:
            raise DatasetGenerationError("An error occurred while generating the dataset") from err

    monkeypatch.setattr(demos, "play_chunk", full)
    with pytest.raises(SystemExit) as stop:
        load_script("make_demos").main(["--level", TINY_LEVEL, "--paired", "4", "--out", str(tmp_path / "demos")])
    work = tmp_path / "demos.chunks" / "paired"
    assert one_line(str(stop.value.code)) == (
        f"error: [Errno 28] no space left on device writing {work / '.cache-00000'}; it was removed and the chunks "
        f"written so far are kept in {work}: free space, then rerun the same command to go on")
    assert list(work.iterdir()) == []


def test_label_unpaired_on_a_full_disk_leaves_the_old_labels(tiny_demos: Path, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    speaker = untrained_speaker()
    out = tmp_path / "labels"
    label_unpaired(speaker, tiny_demos, out, num_unpaired=4, progress=False)
    before = sorted(p.name for p in out.iterdir())
    monkeypatch.setattr(Dataset, "save_to_disk", lambda self, path, *a, **k: (Path(path).mkdir(), _full_disk()))
    with pytest.raises(OSError, match=r"^\[Errno 28\] no space left on device writing .*labels\.tmp; it was "
                                      r"removed and .*labels is as it was"):
        label_unpaired(speaker, tiny_demos, out, overwrite=True, progress=False)
    assert sorted(p.name for p in out.iterdir()) == before and not (tmp_path / "labels.tmp").exists()
    assert len(load_pseudo_labels(out)) == 4


# ------------------------------------------------------------------------------------------- the Hub
def _http_error(status: int) -> HfHubHTTPError:
    request = httpx2.Request("POST", "https://huggingface.co/api/models/someone/x/commit/main")
    return HfHubHTTPError(f"{status} Server said no", response=httpx2.Response(status, request=request))


class FailingHub(FakeHfApi):
    """A fake Hub whose upload fails with ``error``."""

    def __init__(self, error: BaseException) -> None:
        super().__init__()
        self.error = error

    def upload_folder(self, **kwargs):
        raise self.error


@pytest.mark.parametrize(("error", "advice"), [
    (_http_error(500), r"\(500\): a failure on the Hub's side: push again later"),
    (_http_error(401), r"\(401\): not logged in, or the token is invalid: log in with `hf auth login`"),
    (_http_error(403), r"\(403\): the token may not write to someone"),
    (ConnectionResetError(104, "Connection reset by peer"), r"cannot reach the Hub to upload to someone/x "
                                                            r"\(ConnectionResetError"),
    (httpx2.ConnectError("[Errno 111] Connection refused"), r"cannot reach the Hub .*\(ConnectError"),
])
def test_a_failing_hub_is_one_line_saying_what_to_do(tmp_path: Path, error: BaseException, advice: str) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "README.md").write_text("card")
    with pytest.raises(HubRequestError, match=advice) as info:
        push_folder_to_hub(folder, "someone/x", api=FailingHub(error))
    assert one_line(str(info.value)).endswith("nothing here was changed")
    assert sorted(p.name for p in folder.iterdir()) == ["README.md"]


def test_push_to_hub_script_says_the_hub_error_in_one_line(tiny_demos: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    train_tiny("follower", run, tiny_demos)
    with pytest.raises(SystemExit, match=r"^error: the Hub refused to upload to someone/x \(401\)"):
        load_script("push_to_hub").main(["--run", str(run), "--repo", "someone/x"], api=FailingHub(_http_error(401)))


# ----------------------------------------------------------------------------------- make_demos' processes
def _children(pid: int) -> set[int]:
    """The processes whose parent is ``pid``."""
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.add(int(stat.parent.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc; PR_SET_PDEATHSIG is Linux's")
@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL])
def test_a_killed_make_demos_leaves_no_process_behind(tmp_path: Path, how: signal.Signals) -> None:
    """SIGTERM stops make_demos as Ctrl-C does (one line, chunks kept); even SIGKILL, which no handler sees,
    takes its pool's workers and manager with it."""
    command = [sys.executable, str(REPO / "scripts" / "make_demos.py"), "--level", "GoToSeqLocal", "--paired",
               "4000", "--num-proc", "2", "--out", str(tmp_path / "demos")]
    log = tmp_path / "make_demos.log"  # a file, not a pipe: nothing waits on a full pipe buffer
    with open(log, "w") as sink:
        proc = subprocess.Popen(command, cwd=REPO, stdout=sink, stderr=sink, start_new_session=True,
                                env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        deadline, children = time.monotonic() + 120, set()
        while len(children) < 3 and time.monotonic() < deadline and proc.poll() is None:  # 2 workers, 1 manager
            time.sleep(0.2)
            children = _children(proc.pid)
        assert len(children) >= 3, "the pool did not start"
        proc.send_signal(how)
        proc.wait(timeout=120)
        err = log.read_text()
        deadline = time.monotonic() + 10
        while any(map(_alive, children)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [pid for pid in children if _alive(pid)]
        if how == signal.SIGTERM:
            assert proc.returncode == 128 + signal.SIGTERM and err.strip().splitlines()[-1] == (
                f"stopped: the same command goes on from the chunks saved in {tmp_path / 'demos.chunks'}")
            assert not list((tmp_path / "demos.chunks" / "paired").glob(".cache-*"))
    finally:
        with_group = [proc.pid, *_children(proc.pid)]
        for pid in with_group:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait(timeout=30)


@pytest.mark.parametrize(("after_s", "twice"), [(0.3, False), pytest.param(2.0, False, marks=pytest.mark.slow),
                                               (5.0, False), pytest.param(9.0, False, marks=pytest.mark.slow),
                                               pytest.param(5.0, True, marks=pytest.mark.slow)])
def test_ctrl_c_at_any_moment_of_make_demos_says_one_line(tmp_path: Path, after_s: float, twice: bool) -> None:
    """Ctrl-C while the package loads, while flags are read, while the pool starts or while chunks are played and
    saved ends in one line, "stopped" (with where the saved chunks are once any can be), never a traceback; pressed
    again while the first stop cleans up, it ends the process at once, in one line too."""
    command = [sys.executable, str(REPO / "scripts" / "make_demos.py"), "--level", "GoToSeqLocal", "--paired",
               "4000", "--num-proc", "2", "--chunk-size", "200", "--out", str(tmp_path / "demos")]
    log = tmp_path / "make_demos.log"
    with open(log, "w") as sink:  # Ctrl-C as in a terminal: not ignored, as it is in a shell's background job
        proc = subprocess.Popen(command, cwd=REPO, stdout=sink, stderr=sink, start_new_session=True,
                                env={**os.environ, "PYTHONPATH": str(REPO)},
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        time.sleep(after_s)
        proc.send_signal(signal.SIGINT)
        if twice:
            time.sleep(0.1)
            proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)
        lines = [line for line in log.read_text().splitlines() if line.strip()]
        assert "Traceback" not in log.read_text() and lines[-1].startswith("stopped"), log.read_text()[-3000:]
        assert proc.returncode != 0
    finally:
        for pid in [proc.pid, *_children(proc.pid)]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait(timeout=30)


def test_the_pool_drops_only_the_shard_writers_complaint_on_closing(monkeypatch: pytest.MonkeyPatch,
                                                                     capsys: pytest.CaptureFixture) -> None:
    """Ctrl-C ends the queue under a worker playing a chunk; datasets' shard writer, which yields in its ``finally``,
    is then closed with "generator ignored GeneratorExit": a pool process drops that complaint (the player says
    "stopped" in one line) and prints any other as Python does."""

    class Builder:
        def _prepare_split_single(self):
            try:
                yield 1
            finally:
                yield 2  # as datasets' writer does

        def _generate(self):
            try:
                yield 1
            finally:
                raise ValueError("a fault of its own")

    monkeypatch.setattr(sys, "unraisablehook", demos_module._quiet_shard_writer)  # as _end_with_player sets it
    for make in (Builder()._prepare_split_single, Builder()._generate):
        generator = make()
        next(generator)
        del generator  # closed as it is collected: the complaint is unraisable
    err = capsys.readouterr().err
    assert "GeneratorExit" not in err and "_prepare_split_single" not in err
    assert "Builder._generate" in err and "ValueError: a fault of its own" in err


def test_a_ctrl_c_that_lands_where_python_cannot_raise_still_stops_make_demos(monkeypatch: pytest.MonkeyPatch,
                                                                              capsys: pytest.CaptureFixture) -> None:
    """Ctrl-C inside an at-fork callback (logging's lock release as the pool forks) or a finaliser is swallowed by
    Python as "Exception ignored"; make_demos delivers it again on the main thread's next step, as one stop, with
    nothing printed."""
    cli = importlib.import_module("msvae_hf.cli.make_demos")

    class Finalised:
        def __del__(self) -> None:
            signal.raise_signal(signal.SIGINT)  # the handler runs here, where its KeyboardInterrupt is unraisable

    monkeypatch.setattr(cli, "_SIGNALS", [])
    monkeypatch.setattr(cli, "_REDELIVERED", [])
    monkeypatch.setattr(cli, "_WATCHDOGS", [])
    monkeypatch.setattr(sys, "unraisablehook", cli._redeliver_swallowed_stop)
    previous = signal.signal(signal.SIGINT, cli._interrupt)
    try:
        with pytest.raises(KeyboardInterrupt):
            Finalised()  # collected at once
            for _ in range(1000):  # the main thread's next steps
                time.sleep(0.001)
    finally:
        signal.signal(signal.SIGINT, previous)
        for watchdog in cli._WATCHDOGS:  # the stop's watchdog would end this process
            watchdog.cancel()
    assert cli._SIGNALS == [signal.SIGINT] and cli._REDELIVERED == []  # one stop, not a second Ctrl-C
    assert len(cli._WATCHDOGS) == 1  # armed once, by the one stop
    assert "Exception ignored" not in capsys.readouterr().err


def test_a_second_make_demos_on_the_same_folder_is_refused_at_once(tmp_path: Path) -> None:
    out = tmp_path / "demos"
    holder = run_folder.RunLock(tmp_path / "demos.chunks", "python scripts/make_demos.py --out demos")
    try:
        with pytest.raises(SystemExit) as stop:
            load_script("make_demos").main(["--level", TINY_LEVEL, "--paired", "4", "--out", str(out)])
    finally:
        holder.release()
    assert one_line(str(stop.value.code)) == (
        f"error: {tmp_path / 'demos.chunks'} is in use by pid {os.getpid()} on {os.uname().nodename} (python "
        "scripts/make_demos.py --out demos): wait for it to finish, or write another --out")
    assert sorted(p.name for p in (tmp_path / "demos.chunks").iterdir()) == [".lock"]  # the holder's, untouched
    assert not out.exists()


def test_a_refused_make_demos_leaves_no_work_folder(tiny_demos: Path) -> None:
    with pytest.raises(SystemExit, match="exists and is not empty"):
        load_script("make_demos").main(["--level", TINY_LEVEL, "--paired", "4", "--out", str(tiny_demos)])
    assert not tiny_demos.with_name(tiny_demos.name + ".chunks").exists()


# ------------------------------------------------------------------------------------------ pseudo-labels
@pytest.fixture(scope="module")
def labels(tiny_demos: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Pseudo-labels of 6 unpaired trajectories by an untrained speaker (read-only: tests damage copies)."""
    out = tmp_path_factory.mktemp("labels") / "labels"
    speaker = untrained_speaker()
    label_unpaired(speaker, tiny_demos, out, num_unpaired=6, progress=False,
                   command="python scripts/label_unpaired.py --speaker s --demos d --out labels")
    return out


def test_pseudo_labels_carry_checksums_and_load_back(labels: Path) -> None:
    assert set(json.loads((labels / "checksums.json").read_text())["sha256"]) == {
        p.relative_to(labels).as_posix() for p in labels.rglob("*.arrow")}
    assert len(load_pseudo_labels(labels)) == 6


def test_a_demo_dataset_given_as_pseudo_labels_is_named(tiny_demos: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=rf"^{tiny_demos} holds a DatasetDict \(splits paired, unpaired, valid, "
                                         r"test\), not pseudo-labels"):
        train_tiny("follower", tmp_path / "run", tiny_demos, pseudo_labels=str(tiny_demos))
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("damage", ["cut short", "a flipped bit", "no instruction"])
def test_damaged_pseudo_labels_name_the_file_and_the_command_that_relabels(labels: Path, tmp_path: Path,
                                                                           damage: str) -> None:
    import shutil

    copy = tmp_path / "labels"
    shutil.copytree(labels, copy)
    arrow = next(copy.glob("*.arrow"))
    data = arrow.read_bytes()
    if damage == "cut short":
        arrow.write_bytes(data[: len(data) // 2])
        reason = rf"^{arrow}: its sha256 differs"
    elif damage == "a flipped bit":
        arrow.write_bytes(data[:-100] + bytes([data[-100] ^ 1]) + data[-99:])
        reason = rf"^{arrow}: its sha256 differs"
    else:
        load_from_disk(str(labels)).remove_columns("instruction").save_to_disk(str(tmp_path / "unlabelled"))
        copy = tmp_path / "unlabelled"
        reason = rf"^{copy}: split 'pseudo-labelled' has no 'instruction' column"
    with pytest.raises(ValueError, match=reason) as info:
        load_pseudo_labels(copy)
    if damage != "no instruction":
        assert "`python scripts/label_unpaired.py --speaker s --demos d --out labels --overwrite`" in str(info.value)
    one_line(str(info.value))


def test_pseudo_labels_that_are_not_a_dataset_are_named(tmp_path: Path) -> None:
    (tmp_path / "labels").mkdir()
    with pytest.raises(ValueError, match=rf"^{tmp_path / 'labels'} is not a dataset saved with save_to_disk"):
        load_pseudo_labels(tmp_path / "labels")
    with pytest.raises(FileNotFoundError, match=r"no pseudo-labels at .*: write them with scripts/label_unpaired"):
        load_pseudo_labels(tmp_path / "absent")

