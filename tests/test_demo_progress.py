"""`make demo` reports every finished iteration of every run and checkpoints as it goes, so a demo stopped with
Ctrl-C continues when the same command runs again."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from recast.experiments.progress import RunProgress, finished_iterations

ROOT = Path(__file__).resolve().parents[1]


def _append(run: Path, n: int) -> None:
    run.mkdir(parents=True, exist_ok=True)
    with open(run / "metrics.jsonl", "a") as f:
        for _ in range(n):
            f.write('{"iteration": 0}\n')


def test_finished_iterations_counts_complete_lines_only(tmp_path):
    assert finished_iterations(tmp_path / "absent") == 0
    _append(tmp_path, 3)
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('{"iteration": 4')  # being written
    assert finished_iterations(tmp_path) == 3


def test_one_line_per_finished_iteration_with_its_time_once_a_run_has_moved_twice(tmp_path):
    clock = iter([10.0, 13.0, 20.0, 30.0]).__next__
    a, b = tmp_path / "a", tmp_path / "b"
    stream = io.StringIO()
    progress = RunProgress({"recast/seed_0": a, "uniform/seed_0": b}, 5, stream=stream, clock=clock)
    assert progress.poll() == []  # t=10: nothing yet
    _append(a, 2)
    assert progress.poll() == ["[demo] recast/seed_0: iteration 1/5", "[demo] recast/seed_0: iteration 2/5"]
    _append(a, 1)
    _append(b, 1)
    assert progress.poll() == ["[demo] recast/seed_0: iteration 3/5 (7.0 s/iteration)",  # (20 - 13) / 1
                               "[demo] uniform/seed_0: iteration 1/5"]
    _append(a, 2)
    assert progress.poll() == ["[demo] recast/seed_0: iteration 4/5 (5.0 s/iteration)",  # (30 - 20) / 2
                               "[demo] recast/seed_0: iteration 5/5 (5.0 s/iteration)"]
    assert stream.getvalue().splitlines()[-1] == "[demo] recast/seed_0: iteration 5/5 (5.0 s/iteration)"


def test_a_resumed_run_says_where_it_continued_from(tmp_path):
    run = tmp_path / "r"
    _append(run, 7)  # killed after 7 iterations
    progress = RunProgress({"r": run}, 10, stream=io.StringIO(), clock=iter([0.0, 1.0, 2.0, 3.0]).__next__)
    (run / "metrics.jsonl").write_text('{"iteration": 0}\n' * 5)  # the resume rewinds to its checkpoint at 5
    assert progress.poll() == []
    _append(run, 1)
    assert progress.poll() == ["[demo] r: iteration 6/10 (continued from iteration 5)"]
    _append(run, 1)
    assert progress.poll() == ["[demo] r: iteration 7/10 (1.0 s/iteration)"]


def test_a_finished_run_that_is_reused_prints_nothing(tmp_path):
    _append(tmp_path / "done", 4)
    progress = RunProgress({"done": tmp_path / "done"}, 4, stream=io.StringIO(), clock=iter([0.0, 1.0]).__next__)
    assert progress.poll() == []


def _demo(out: Path, figs: Path) -> list[str]:
    return [sys.executable, "-m", "recast", "demo", "--preset", "ci", "--methods", "recast", "--seeds", "0",
            "--iterations", "20", "--workers", "1", "--out", str(out)]


@pytest.mark.slow
def test_a_demo_stopped_with_ctrl_c_continues_from_its_checkpoint_when_rerun(tmp_path):
    from recast.experiments.demo import CHECKPOINT_EVERY

    out, env = tmp_path / "demo", {**os.environ, "RECAST_FIGURES_DIR": str(tmp_path / "figs"), "OMP_NUM_THREADS": "1"}
    run = out / "recast" / "seed_0"
    # a shell's background job (`make test &`, nohup) ignores SIGINT, and its children inherit that: give the demo
    # Python's own Ctrl-C handling back, as a terminal would have it
    proc = subprocess.Popen(_demo(out, tmp_path), cwd=tmp_path, env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 180
    while not (run / "checkpoint.pt").is_file() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert (run / "checkpoint.pt").is_file(), "no checkpoint before the deadline"
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C sends to the terminal's process group
    first = proc.communicate(timeout=60)[1]
    assert proc.returncode != 0
    done_before = finished_iterations(run)
    assert CHECKPOINT_EVERY <= done_before < 20
    assert [f"[demo] recast/seed_0: iteration {i}/20" in first for i in (1, CHECKPOINT_EVERY)] == [True, True]

    again = subprocess.run(_demo(out, tmp_path), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    lines = [line for line in again.stderr.splitlines() if line.startswith("[demo]")]
    assert "continued from iteration" in lines[0] and lines[-1].startswith("[demo] recast/seed_0: iteration 20/20")
    assert int(lines[0].split("iteration ")[1].split("/")[0]) > CHECKPOINT_EVERY  # not from iteration 0
    iterations = [json.loads(line)["iteration"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert iterations == list(range(1, 21))
    config = json.loads((run / "config.json").read_text())
    assert config["checkpoint_every"] == CHECKPOINT_EVERY and config["num_threads"] == 1
