"""A stopped run is never lost (recast.trainer.stopping): SIGINT and SIGTERM finish the iteration under way, write a
checkpoint and say how to continue; the continued run equals an uninterrupted one bit for bit; a rerun over a run
that never checkpointed says so; every preset checkpoints on a schedule and on the clock."""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from recast.config import TrainConfig, preset
from recast.trainer import Trainer, TrainingStopped, load_run, train
from recast.trainer.stopping import StopRequests, exit_status

ROOT = Path(__file__).resolve().parents[1]


def _records(run: Path, name: str = "metrics.jsonl") -> list[dict]:
    return [{k: v for k, v in json.loads(line).items() if not k.startswith("time/")}
            for line in (run / name).read_text().splitlines()]


def _params(run: Path) -> dict:
    state = torch.load(run / "checkpoint.pt", weights_only=True)
    return {"iteration": state["iteration"], **{f"{g}/{n}": t for g in ("params", "old", "ema", "ref")
                                                for n, t in (state["policy"].get(g) or {}).items()}}


def _same_run(a: Path, b: Path) -> None:
    pa, pb = _params(a), _params(b)
    assert pa.keys() == pb.keys() and len(pa) > 1
    assert all(torch.equal(pa[k], pb[k]) if torch.is_tensor(pa[k]) else pa[k] == pb[k] for k in pa)
    for name in ("metrics.jsonl", "weights.jsonl", "eval.jsonl"):
        assert (a / name).exists() == (b / name).exists(), name
        if (a / name).exists():
            assert _records(a, name) == _records(b, name), name


def _signal_during(monkeypatch, at: int, signum: int, times: int = 1) -> None:
    """Send this process `signum` (`times` times) during the `at`-th training step, as a user's Ctrl-C would."""
    step, seen = Trainer.step, {"n": 0}

    def step_then_signal(self):
        seen["n"] += 1
        if seen["n"] == at:
            for _ in range(times):
                os.kill(os.getpid(), signum)
        return step(self)

    monkeypatch.setattr(Trainer, "step", step_then_signal)


CI = dict(iterations=4, rewards=("color", "size"))


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    out = tmp_path_factory.mktemp("straight") / "run"
    train(preset("ci", **CI), out)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_finishes_the_iteration_checkpoints_and_resume_continues_bit_for_bit(straight, tmp_path,
                                                                                      monkeypatch, capsys, signum):
    out = tmp_path / "run"
    _signal_during(monkeypatch, at=2, signum=signum)
    with pytest.raises(TrainingStopped) as info:
        train(preset("ci", **CI), out)
    err = info.value
    assert (err.iteration, err.iterations, err.signum, err.out) == (2, 4, signum, out)
    assert isinstance(err, KeyboardInterrupt)  # a notebook cell stops as on any interrupt
    name = signal.Signals(signum).name
    assert f"stopped on {name} after iteration 2 of 4 (checkpoint written at iteration 2 of 4)" in str(err)
    assert "--auto" in str(err) and "resume='auto'" in str(err)
    assert f"{name} received: finishing this iteration, then writing a checkpoint" in capsys.readouterr().err
    assert _params(out)["iteration"] == 2 and len(_records(out)) == 2
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the handlers are put back
    monkeypatch.undo()
    run = train(preset("ci", **CI), out, resume="auto")
    assert len(run.metrics) == 4
    _same_run(out, straight)


@pytest.mark.slow
def test_a_second_signal_stops_at_once_and_the_last_checkpoint_stays_intact(tmp_path, monkeypatch):
    out = tmp_path / "run"
    cfg = preset("ci", **CI, checkpoint_every=1)
    _signal_during(monkeypatch, at=3, signum=signal.SIGINT, times=2)
    with pytest.raises(KeyboardInterrupt, match="second SIGINT: stopped at once") as info:
        train(cfg, out)
    assert not isinstance(info.value, TrainingStopped)
    assert _params(out)["iteration"] == 2  # iteration 3 never finished; 2's checkpoint is whole
    monkeypatch.undo()
    assert len(train(cfg, out, resume="auto").metrics) == 4


def test_stop_requests_outside_the_main_thread_catch_nothing():
    seen = {}

    def body():
        with StopRequests() as stop:
            seen["handler"] = signal.getsignal(signal.SIGINT)
            seen["requested"] = stop.requested

    before = signal.getsignal(signal.SIGINT)
    t = threading.Thread(target=body)
    t.start()
    t.join()
    assert seen == {"handler": before, "requested": 0}


def test_stop_requests_record_the_first_signal_and_restore_the_handlers():
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    with StopRequests(announce=False) as stop:
        assert signal.getsignal(signal.SIGTERM) != before[signal.SIGTERM]
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.01)  # the handler runs between bytecodes of the main thread
        assert stop.requested == signal.SIGTERM
    assert {s: signal.getsignal(s) for s in before} == before
    assert (exit_status(signal.SIGINT), exit_status(signal.SIGTERM)) == (130, 143)


def test_every_preset_checkpoints_on_a_schedule_or_the_clock():
    from recast.config import _PRESETS

    for name in _PRESETS:
        cfg = preset(name)
        assert cfg.checkpoint_minutes > 0 and cfg.checkpoint_minutes <= 10, name
        if name in ("cpu", "paper"):  # about 4 s an iteration on 2 cores: a SIGKILL loses at most ~20 s
            assert 0 < cfg.checkpoint_every <= 5
    assert TrainConfig().checkpoint_minutes == 10.0


@pytest.mark.slow
def test_the_clock_checkpoints_a_run_with_no_schedule_without_changing_it(straight, tmp_path, monkeypatch):
    import types

    import recast.trainer.loop as loop

    clock = {"t": 0.0}

    def monotonic():  # each reading is 7 minutes after the last (the loop reads it at the start, after each
        clock["t"] += 7 * 60  # iteration, and after each save)
        return clock["t"]

    monkeypatch.setattr(loop, "time", types.SimpleNamespace(perf_counter=time.perf_counter, monotonic=monotonic))
    saved = []
    save = Trainer.save
    monkeypatch.setattr(Trainer, "save", lambda self: (saved.append(self.iteration), save(self))[1])
    out = tmp_path / "run"
    train(preset("ci", **CI), out)
    assert saved == [2, 4]  # 14 minutes after the start (iteration 2), then 14 after that save (4, also the last)
    _same_run(out, straight)
    saved.clear()
    train(preset("ci", **CI, checkpoint_minutes=0.0), tmp_path / "off")
    assert saved == [4]


def test_bad_checkpoint_minutes_are_refused_before_any_compute(tmp_path):
    for bad in (-1.0, float("nan")):
        with pytest.raises(ValueError, match=r"checkpoint_minutes(: expected a finite number| >= 0)"):
            Trainer(preset("ci", checkpoint_minutes=bad), tmp_path)
        assert not (tmp_path / "config.json").exists()


@pytest.mark.slow
def test_a_rerun_over_a_run_with_no_checkpoint_says_it_starts_again(tmp_path, capsys):
    out = tmp_path / "run"
    cfg = preset("ci", **CI)
    tr = Trainer(cfg, out)
    tr.step()
    tr.step()  # two logged iterations, no checkpoint (a SIGKILL before the first one)
    tr.release()
    capsys.readouterr()
    Trainer(cfg, out).release()
    note = capsys.readouterr().err
    assert f"note: {out} holds this run stopped before its first checkpoint (its 2 logged iterations cannot be " \
           "continued); starting it again from iteration 0" in note


def _cli(args: list[str], **kw) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "recast", "train", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT, **kw)


@pytest.mark.slow
def test_ctrl_c_on_recast_train_with_the_cpu_preset_then_auto_continues_bit_for_bit(tmp_path):
    """The issue's own path: `recast train --preset cpu`, Ctrl-C mid-run, the same command with --auto."""
    args = ["--preset", "cpu", "--iterations", "3", "--set", "eval_prompts=4", "--set", "checkpoint_every=0"]
    straight, out = tmp_path / "straight", tmp_path / "run"
    done = _cli([*args, "--out", str(straight)])
    assert done.wait(timeout=300) == 0, done.stderr.read()[-2000:]
    proc = _cli([*args, "--out", str(out)])
    deadline = time.monotonic() + 300
    while not ((out / "metrics.jsonl").is_file() and (out / "metrics.jsonl").read_text().count("\n") >= 1):
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()[-2000:]
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)  # during iteration 2 (or, on a slow machine, just after it)
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 130, stderr[-2000:]
    stopped = _params(out)["iteration"]
    assert stopped in (1, 2) and len(_records(out)) == stopped
    assert f"stopped: stopped on SIGINT after iteration {stopped} of 3 (checkpoint written at iteration {stopped} " \
           "of 3)" in stderr and "Traceback" not in stderr
    cont = _cli([*args, "--out", str(out), "--auto"])
    assert cont.wait(timeout=300) == 0, cont.stderr.read()[-2000:]
    assert len(load_run(out).metrics) == 3
    _same_run(out, straight)


@pytest.mark.slow
def test_sigterm_on_recast_train_exits_143_with_a_checkpoint(tmp_path):
    out = tmp_path / "run"
    proc = _cli(["--preset", "ci", "--iterations", "50", "--out", str(out)])
    deadline = time.monotonic() + 300
    while not ((out / "metrics.jsonl").is_file() and (out / "metrics.jsonl").read_text().count("\n") >= 2):
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()[-2000:]
        time.sleep(0.05)
    proc.terminate()
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 143, stderr[-2000:]
    stopped = _params(out)["iteration"]
    assert 2 <= stopped < 50 and len(_records(out)) == stopped
    assert f"stopped on SIGTERM after iteration {stopped} of 50" in stderr
