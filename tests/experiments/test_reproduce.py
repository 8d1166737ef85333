"""experiments/reproduce.py: the order it runs cells in, and what it skips (no training: the cells are stubs)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import pytest
import reproduce
from cells import Cell, level_cells


def dry_run(level: str, capsys: pytest.CaptureFixture, *args: str) -> list[str]:
    reproduce.main([level, "--dry-run", *args])
    return [line.split(":", 1)[0] for line in capsys.readouterr().out.splitlines()]


@pytest.mark.parametrize("level", ["bosslocal", "gotoseqlocal"])
def test_dry_run_lists_every_cell_needs_first(level: str, tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    listed = dry_run(level, capsys)
    cells = {c.name: c for c in level_cells(level)}
    assert sorted(listed) == sorted(cells)
    for i, name in enumerate(listed):
        assert set(cells[name].needs) <= set(listed[:i]), name
    assert list(tmp_path.iterdir()) == []  # a dry run writes nothing


def test_finished_cells_are_skipped_and_recorded(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data/gotoseqlocal_100k").mkdir(parents=True)
    (tmp_path / "data/gotoseqlocal_100k/README.md").write_text("demos\n")
    follower = tmp_path / "runs/gotoseqlocal/follower"
    follower.mkdir(parents=True)
    (follower / "train_config.json").write_text(json.dumps({"model_type": "follower"}))
    (follower / "results.json").write_text(json.dumps({"test": {"success_rate": 0.5}}))
    listed = dry_run("gotoseqlocal", capsys, "--cells", "follower/*", "msvae/seed0")
    assert listed == ["speaker/seed0", "msvae/seed0", "follower/seed1", "follower/seed2"]  # demos, follower: done
    record = json.loads((tmp_path / "results/gotoseqlocal/runs/follower.json").read_text())
    assert record["run"] == "follower" and record["test"]["success_rate"] == 0.5


def test_a_retrained_run_is_recorded_beside_the_first(tmp_path: Path) -> None:
    """A run folder trained again (the first folder gone) keeps the first record and adds one under reruns/."""
    run = tmp_path / "runs/bosslocal/follower"
    run.mkdir(parents=True)
    (run / "train_config.json").write_text(json.dumps({"model_type": "follower"}))
    first = {"test": {"success_rate": 0.42}, "wall_time_s": 641.1, "updates": 1200}
    (run / "results.json").write_text(json.dumps(first))
    written = reproduce.save_record("bosslocal", run, tmp_path / "results")
    assert written == tmp_path / "results/bosslocal/runs/follower.json"
    before = written.read_bytes()
    assert reproduce.save_record("bosslocal", run, tmp_path / "results") is None  # the same run: nothing new
    (run / "results.json").write_text(json.dumps({**first, "test": {"success_rate": 0.45}, "commit": "abcdef123"}))
    again = reproduce.save_record("bosslocal", run, tmp_path / "results")
    assert again == tmp_path / "results/bosslocal/reruns/follower_abcdef1.json"
    assert json.loads(again.read_text())["test"]["success_rate"] == 0.45
    assert written.read_bytes() == before  # the first record is untouched
    assert reproduce.save_record("bosslocal", run, tmp_path / "results") is None


def test_a_labelling_is_recorded_like_a_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A labels cell's record (with its wall time) goes to results/<level>/labels/, labelled again beside it;
    a record without a wall time is not kept."""
    monkeypatch.chdir(tmp_path)
    labels = Path("data/pseudo_labels/bosslocal/speaker")
    labels.mkdir(parents=True)
    cell = Cell("labels/speaker", ("python", "scripts/label_unpaired.py"), labels / "pseudo_labels.json")
    first = {"speaker": "runs/bosslocal/speaker/best", "command": "python scripts/label_unpaired.py ...",
             "wall_time_s": 301.5, "commit": "0123456789"}
    (labels / "pseudo_labels.json").write_text(json.dumps({k: v for k, v in first.items() if k != "wall_time_s"}))
    assert reproduce.save_cell_record("bosslocal", cell) is None
    (labels / "pseudo_labels.json").write_text(json.dumps(first))
    written = reproduce.save_cell_record("bosslocal", cell)
    assert written == Path("results/bosslocal/labels/speaker.json")
    assert json.loads(written.read_text()) == first
    assert reproduce.save_cell_record("bosslocal", cell) is None
    (labels / "pseudo_labels.json").write_text(json.dumps({**first, "wall_time_s": 250.0, "commit": "abcdef123"}))
    again = reproduce.save_cell_record("bosslocal", cell)
    assert again == Path("results/bosslocal/labels/speaker_abcdef1.json")  # not in reruns/, which holds runs
    assert json.loads(written.read_text()) == first  # the first record is untouched
    assert reproduce.save_cell_record("bosslocal", cell) is None
    (labels / "pseudo_labels.json").write_text(json.dumps({**first, "wall_time_s": 240.0, "commit": "abcdef123"}))
    assert reproduce.save_cell_record("bosslocal", cell) is None  # a third time at one commit: the two kept
    assert sorted(p.name for p in Path("results/bosslocal/labels").iterdir()) == ["speaker.json",
                                                                                    "speaker_abcdef1.json"]


def stub(name: str, needs: tuple[str, ...] = (), fails: bool = False) -> Cell:
    """A cell whose command writes ``<name>.done`` (or fails)."""
    code = "raise SystemExit(1)" if fails else f"open('{name}.done', 'w').write('x')"
    return Cell(name, (sys.executable, "-c", code), Path(f"{name}.done"), needs)


def test_runs_what_is_left_in_order_and_blocks_what_needs_a_failure(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    Path("a.done").write_text("x")  # finished: its command would fail if it ran again
    cells = [stub("a", fails=True), stub("b", ("a",)), stub("c", ("b",)), stub("d", fails=True), stub("e", ("d",)),
             stub("f", ("e",))]
    monkeypatch.setattr(reproduce, "level_cells", lambda level, seeds, threads, num_proc: cells)
    monkeypatch.setattr(reproduce.time, "sleep", lambda s: None)
    with pytest.raises(SystemExit, match="failed or blocked: d, e, f"):
        reproduce.main(["gotoseqlocal", "--cells", "c", "f", "--jobs", "1"])
    out = capsys.readouterr().out
    assert "start  a" not in out and out.index("done   b") < out.index("start  c")
    assert Path("b.done").exists() and Path("c.done").exists() and not Path("e.done").exists()


def test_recorded_runs_are_finished_unless_a_cell_to_run_needs_their_folder(tmp_path: Path, monkeypatch,
                                                                          capsys) -> None:
    """On a machine without the run folders: recorded runs are skipped, but a baseline that an unrecorded run
    starts from is trained again, with the input it needs; --again trains every run anew."""
    monkeypatch.chdir(tmp_path)

    def run(name: str, needs: tuple[str, ...] = ()) -> Cell:
        folder = Path("runs/bosslocal", name)
        return Cell(f"{name}/seed0", ("true",), folder / "results.json", needs, folder)

    demos = Cell("demos", ("true",), Path("data/demos/README.md"))
    cells = [demos, run("follower", ("demos",)), run("speaker", ("demos",)), run("msvae", ("follower/seed0",)),
             run("msvae_v", ("follower/seed0",))]
    monkeypatch.setattr(reproduce, "level_cells", lambda level, seeds, threads, num_proc: cells)
    Path("results/bosslocal/runs").mkdir(parents=True)
    for name in ("follower", "speaker", "msvae"):
        Path(f"results/bosslocal/runs/{name}.json").write_text("{}")
    assert dry_run("bosslocal", capsys) == ["demos", "follower/seed0", "msvae_v/seed0"]
    assert dry_run("bosslocal", capsys, "--again") == [c.name for c in cells]
    Path("results/bosslocal/runs/msvae_v.json").write_text("{}")
    assert dry_run("bosslocal", capsys) == []
    assert dry_run("bosslocal", capsys, "--cells", "demos") == ["demos"]  # an input named is made


def _driver_with_a_slow_cell(tmp_path: Path, cell_code: str, setup: str = ""):
    """A reproduce.py driver running one cell (``cell_code``, which writes ``started`` first), once it started;
    ``setup``: lines the driver runs first."""
    import subprocess
    import time

    script = tmp_path / "driver.py"
    script.write_text(
        "import sys\nfrom pathlib import Path\nimport reproduce\nfrom cells import Cell\n"
        f"cell = Cell('slow', (sys.executable, '-c', {cell_code!r}), Path('slow.done'))\n"
        "reproduce.level_cells = lambda level, seeds, threads, num_proc: [cell]\n"
        f"{setup}reproduce.main(['gotoseqlocal'])\n")
    path = os.pathsep.join([str(Path(reproduce.__file__).parent), os.environ.get("PYTHONPATH", "")])
    proc = subprocess.Popen([sys.executable, str(script)], cwd=tmp_path, env={**os.environ, "PYTHONPATH": path},
                            stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 600  # importing the package can take long on a loaded machine
    while not (tmp_path / "started").exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.2)
    assert (tmp_path / "started").exists(), f"the driver did not start its cell: {proc.stderr.read()}"
    return proc


def test_a_stop_signal_stops_the_running_cells(tmp_path: Path) -> None:
    """SIGTERM (gpu_grid.sh's deadline) ends the cells it started too, and the driver exits 124."""
    import signal
    import subprocess

    proc = _driver_with_a_slow_cell(tmp_path, 'import time; open("started", "w"); time.sleep(60)')
    log = (tmp_path / "runs" / "gotoseqlocal" / "logs" / "slow.log").read_text()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 124
    assert "import time" in log
    children = subprocess.run(["pgrep", "-f", "open(\"started\""], capture_output=True, text=True).stdout
    assert not children.strip(), "the cell's process outlived the driver"


def test_a_second_stop_signal_while_the_cells_stop_is_ignored(tmp_path: Path) -> None:
    """timeout(1) signals the driver, then its whole process group: the driver still waits for its cells and
    exits 124, without a traceback."""
    import signal
    import time

    code = ('import signal, time; signal.signal(signal.SIGTERM, lambda *a: (time.sleep(2), exit(0))); '
            'open("started", "w"); time.sleep(60)')  # a cell that takes two seconds to stop
    proc = _driver_with_a_slow_cell(tmp_path, code)
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.5)  # the driver is now waiting for its cell
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 124
    assert "Traceback" not in proc.stderr.read()


def test_a_cell_that_ignores_the_stop_signal_is_killed(tmp_path: Path) -> None:
    """A cell still running STOP_GRACE_S after SIGTERM is killed, so that gpu_grid.sh goes on to its archive."""
    import signal
    import subprocess

    code = 'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); open("started", "w"); time.sleep(60)'
    proc = _driver_with_a_slow_cell(tmp_path, code, setup="reproduce.STOP_GRACE_S = 1\n")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 124
    children = subprocess.run(["pgrep", "-f", "SIG_IGN); open"], capture_output=True, text=True).stdout
    assert not children.strip(), "the cell outlived the driver"


def test_the_stop_handler_is_put_back(tmp_path: Path, monkeypatch) -> None:
    """After a run the process's SIGTERM handler is the one it had (forked worker pools must die on SIGTERM)."""
    import signal

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(reproduce, "level_cells", lambda level, seeds, threads, num_proc: [stub("a")])
    monkeypatch.setattr(reproduce.time, "sleep", lambda s: None)
    before = signal.getsignal(signal.SIGTERM)
    reproduce.main(["gotoseqlocal"])
    assert signal.getsignal(signal.SIGTERM) is before and Path("a.done").exists()


def test_continued_runs_wait_for_the_run_they_continue_or_train_the_whole_budget_where_it_is_not_here(
        tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "configs").symlink_to(Path(__file__).resolve().parents[2] / "configs")

    def dry_run(*args: str) -> dict[str, str]:
        reproduce.main(["bosslocal", "--dry-run", *args])
        return dict(line.split(": ", 1) for line in capsys.readouterr().out.splitlines())

    lines = dry_run("--cells", "msvae_4000/*")  # the runs to continue are not started for them
    assert lines["msvae_4000/seed2"] == (
        "python scripts/train.py --config configs/msvae.yaml --level BossLocal --threads 1 --max-updates 4000 "
        "--model.follower_conditioning head --model.previous_action_input true "
        "--continue-from runs/bosslocal/msvae_seed2 --seed 2 --output-dir runs/bosslocal/msvae_4000_seed2")
    assert not any(name.startswith("msvae/") for name in lines)
    cell = next(c for c in level_cells("bosslocal") if c.name == "msvae_4000/seed2")
    assert cell.after == ("msvae/seed2",) and "msvae/seed2" not in cell.needs
    source = tmp_path / "runs" / "bosslocal" / "msvae_seed2"
    source.mkdir(parents=True)  # a finished run without its checkpoint -> the whole budget from the start
    assert "--continue-from" not in reproduce.prepare(cell)
    (source / "checkpoints" / "step-0002000").mkdir(parents=True)
    (source / "checkpoints" / "step-0002000" / "train_state.json").write_text("{}")
    assert reproduce.prepare(cell) == list(cell.command)


def test_a_cell_runs_after_a_pending_cell_but_does_not_start_it(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(reproduce.time, "sleep", lambda s: None)
    Path("logs").mkdir()
    later = Cell("later", stub("later").command, Path("later.done"), after=("first",))
    args = argparse.Namespace(level="gotoseqlocal", jobs=2)
    reproduce.schedule([later, stub("first")], [later, stub("first")], {}, set(), [], Path("logs"), args)
    out = capsys.readouterr().out
    assert out.index("done   first") < out.index("start  later") and Path("later.done").exists()
    Path("later.done").unlink()
    reproduce.schedule([later], [later], {}, set(), [], Path("logs"), args)  # "first" not to run: no wait
    assert "start  later" in capsys.readouterr().out and Path("later.done").exists()


def test_a_cell_whose_run_folder_another_process_trains_is_left_to_it(tmp_path: Path, monkeypatch, capsys) -> None:
    """A run folder locked by another trainer (before its first checkpoint, where a start would otherwise clear it) is
    neither cleared nor resumed nor logged to: the cell counts as failed here, and what needs it is blocked."""
    from msvae_hf.utils.run_folder import RunLock, run_folder_holder

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(reproduce.time, "sleep", lambda s: None)
    Path("logs").mkdir()
    folder = Path("runs/gotoseqlocal/follower")
    busy = Cell("follower/seed0", stub("follower").command, folder / "results.json", run_dir=folder)
    after = stub("msvae", ("follower/seed0",))
    args = argparse.Namespace(level="gotoseqlocal", jobs=2)
    lock = RunLock(folder, command="the other driver's trainer")
    try:
        (folder / "train_config.json").write_text("{}")  # a start before its first checkpoint
        holder = run_folder_holder(folder)
        assert holder is not None and holder.endswith("(the other driver's trainer)")
        failed: list[str] = []
        reproduce.schedule([busy, after], [busy, after], {}, set(), failed, Path("logs"), args)
        assert failed == ["follower/seed0", "msvae"]
        assert f"BUSY   follower/seed0: {folder} is in use by {holder}; left to it" in capsys.readouterr().out
        assert (folder / "train_config.json").read_text() == "{}" and not list(Path("logs").iterdir())
    finally:
        lock.release()
    assert run_folder_holder(folder) is None and run_folder_holder(tmp_path / "absent") is None
    assert not (tmp_path / "absent").exists()


def test_cuda_graphs_reaches_the_training_cells_only(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    reproduce.main(["bosslocal", "--dry-run", "--cuda-graphs", "--cells", "demos", "msvae/seed0"])
    lines = dict(line.split(": ", 1) for line in capsys.readouterr().out.splitlines())
    assert lines["msvae/seed0"].endswith("--cuda-graphs --loader-workers 2")
    assert lines["follower/seed0"].startswith("python scripts/train.py") and "--cuda-graphs" in lines["follower/seed0"]
    assert "--cuda-graphs" not in lines["demos"]


def test_eval_workers_reach_the_training_cells_only(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    reproduce.main(["bosslocal", "--dry-run", "--cuda-graphs", "--eval-workers", "3", "--cells", "demos",
                    "msvae/seed0"])
    lines = dict(line.split(": ", 1) for line in capsys.readouterr().out.splitlines())
    assert lines["msvae/seed0"].endswith("--cuda-graphs --loader-workers 2 --eval-workers 3")
    assert "--eval-workers" not in lines["demos"]
    reproduce.main(["bosslocal", "--dry-run", "--cells", "msvae/seed0"])  # default: evaluation in the process
    assert "--eval-workers" not in capsys.readouterr().out
