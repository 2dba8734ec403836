"""Failure behaviour: bad input refused before compute, safe checkpoints, one run per directory, nothing lost.

Each table is one kind of fault; every row is a case users hit by accident or on purpose (issue 9).
"""

import importlib.util
import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from recast.config import parse_bool, parse_field, parse_floats, preset
from recast.trainer import NonFiniteLossError, Trainer, load_run, train
from recast.trainer import checkpoint as ckpt
from recast.trainer.rundir import RunDirBusyError

ROOT = Path(__file__).resolve().parents[1]
CI = dict(iterations=1, rewards=("color", "size"), method="recast_live")


@pytest.fixture(scope="module")
def done_run(tmp_path_factory):
    """A finished one-iteration ci run (copied by the tests that change it)."""
    out = tmp_path_factory.mktemp("done") / "run"
    train(preset("ci", **CI), out)
    return out


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    (dst / ".recast.lock").unlink(missing_ok=True)
    return dst


# ------------------------------------------------------------------------------------------ config, before compute
@pytest.mark.parametrize("over, msg", [
    (dict(lr=float("inf")), "lr: expected a finite number"),
    (dict(lr=float("nan")), "lr: expected a finite number"),
    (dict(nft_beta=float("inf")), "nft_beta: expected a finite number"),
    (dict(adv_clip_max=float("inf")), "adv_clip_max"),
    (dict(shift=float("nan")), "shift"),
    (dict(temperature=float("nan")), "temperature"),
    (dict(lam=(1.0, float("inf"))), "lam"),
    (dict(lam=("[", "1", "]")), "lam"),
    (dict(adam_betas=(0.9,)), "adam_betas"),
    (dict(group_size="two"), "group_size: expected int"),
    (dict(nft_loss_scale="ture"), "nft_loss_scale: expected bool"),
    (dict(iterations=2.0), "iterations: expected int"),
    (dict(prompts_per_iter=0), "prompts_per_iter >= 1"),
    (dict(batch_size=-4), "batch_size >= 0"),
    (dict(floor=-1.0), "floor > 0"),
    (dict(temperature=1e-7, method="recast_live"), "smallest temperature"),
    (dict(temperature=1e-7, method="recast"), "temperature.*did not meet the marginals"),
    (dict(seed=10**20), "seed < 2\\*\\*32"),
    (dict(seed=-1), "0 <= seed"),
    (dict(device="banana"), "device"),
    (dict(device="tpu"), "device"),
    (dict(mixed_precision="fp8"), "mixed_precision"),
    (dict(eval_prompts=0), "eval_prompts >= 1"),
    (dict(eval_group=0), "eval_group >= 1"),
    (dict(noise_level=0.0), "noise_level > 0"),
])
def test_bad_config_is_refused_before_compute(tmp_path, over, msg):
    with pytest.raises(ValueError, match=msg):
        Trainer(preset("ci", **over), tmp_path / "run")
    assert not (tmp_path / "run").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_without_a_gpu_is_refused(tmp_path):
    with pytest.raises(ValueError, match="no CUDA device is available"):
        Trainer(preset("ci", device="cuda"), tmp_path / "run")


def test_missing_judge_weights_are_refused_before_compute(tmp_path, monkeypatch):
    import recast.worlds.digits.judges.features as features

    monkeypatch.setattr(features, "WEIGHTS_PATH", tmp_path / "judge_features.safetensors")
    with pytest.raises(FileNotFoundError, match="judge weights .* are missing"):
        Trainer(preset("ci", **CI), tmp_path / "run")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("text, value", [("true", True), ("TRUE", True), ("1", True), ("yes", True), ("false", False),
                                         ("0", False), ("no", False), (" No ", False)])
def test_booleans_parse_strictly(text, value):
    assert parse_bool(text) is value
    assert parse_field("skip_last_column", text) is value


@pytest.mark.parametrize("arg, msg", [
    ("group_size=two", "group_size: expected int, got 'two'"),
    ("nft_loss_scale=ture", "nft_loss_scale: expected a boolean"),
    ("skip_last_column=2", "skip_last_column: expected a boolean"),
    ("lr=fast", "lr: expected float"),
    ("lam=1,x", "lam: expected comma-separated numbers"),
    ("fixed_W=0.5,a;0,1", "fixed_W"),
    ("no_such_field=1", "unknown TrainConfig field 'no_such_field'"),
    ("lr", "expected FIELD=VALUE"),
])
def test_bad_set_values_name_the_field(tmp_path, capsys, arg, msg):
    from recast.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["train", "--preset", "ci", "--out", str(tmp_path / "run"), "--set", arg])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--set" in err and msg in err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("argv, msg", [
    (["train", "--preset", "ci", "--set", "lr=inf"], "lr: expected a finite number"),
    (["train", "--preset", "ci", "--seed", "-5"], "seed"),
    (["train", "--preset", "ci", "--device", "banana"], "device"),
    (["train", "--preset", "ci", "--method", "recast_live", "--set", "temperature=1e-4", "--set", "floor=1e-300"],
     "smallest temperature"),
    (["demo", "--preset", "ci", "--seeds", ""], "--seeds"),
    (["demo", "--preset", "ci", "--seeds", "a,b"], "--seeds"),
    (["demo", "--preset", "ci", "--seeds", "0,0"], "--seeds"),
    (["demo", "--preset", "ci", "--methods", ""], "--methods"),
    (["demo", "--preset", "ci", "--methods", "recast,magic"], "--methods"),
])
def test_cli_errors_exit_2_naming_the_option(tmp_path, capsys, argv, msg):
    from recast.cli import main

    assert main([*argv, "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and msg in err and "Traceback" not in err


def test_notebook_helpers_give_clear_errors(done_run):
    assert parse_floats("[1]") == (1.0,) and parse_floats("0.4, 0.6") == (0.4, 0.6) and parse_floats([1, 2]) == (1, 2)
    with pytest.raises(ValueError, match="lam: expected comma-separated numbers"):
        parse_floats("[one]", "lam")
    from recast.trainer import Run

    with pytest.raises(ValueError, match="no W history.*'uniform'"):
        Run(path=done_run, config={"method": "uniform"}, reward_names=(), lam=()).solve_iterations(3)
    assert load_run(done_run).solve_iterations(3) == [1]


# ------------------------------------------------------------------------------------------ the run directory
def test_run_directory_cases(tmp_path, done_run):
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "config.json").write_text('{"tool": "other"}')
    with pytest.raises(FileExistsError, match="not a recast run"):
        Trainer(preset("ci", **CI), foreign)
    assert json.loads((foreign / "config.json").read_text()) == {"tool": "other"}
    with pytest.raises(ValueError, match="--out / out_dir is empty"):
        Trainer(preset("ci", **CI), "")
    run = _copy(done_run, tmp_path / "over")
    (run / "grids" / "iter_99999.png").write_bytes(b"old")
    (run / ".checkpoint.pt.abc123.tmp").write_bytes(b"half a checkpoint")
    train(preset("ci", **CI), run, overwrite=True)
    assert not (run / "grids" / "iter_99999.png").exists() and (run / "grids" / "iter_00001.png").exists()
    assert not list(run.glob(".*.tmp"))


def _lock_module():
    spec = importlib.util.spec_from_file_location("rundir", ROOT / "recast" / "trainer" / "rundir.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_one_run_per_directory_and_stale_locks_do_not_block(tmp_path):
    first = Trainer(preset("ci", **CI), tmp_path / "run")
    with pytest.raises(RunDirBusyError, match=f"in use by another run \\(pid {os.getpid()}\\)"):
        Trainer(preset("ci", **CI), tmp_path / "run", overwrite=True)
    first.run()  # releases the lock when done
    Trainer(preset("ci", **{**CI, "iterations": 2}), tmp_path / "run", resume=True).release()
    # a process that held the lock and was killed leaves the file behind, but not the lock
    code = ("import sys, os, importlib.util as u; s = u.spec_from_file_location('r', sys.argv[1]); m = "
            "u.module_from_spec(s); s.loader.exec_module(m); m.RunLock(sys.argv[2]).acquire(); "
            "print('held', flush=True); os.kill(os.getpid(), 9)")
    proc = subprocess.run([sys.executable, "-c", code, str(ROOT / "recast/trainer/rundir.py"), str(tmp_path / "run")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == -signal.SIGKILL and "held" in proc.stdout
    assert (tmp_path / "run" / ".recast.lock").read_text().strip() != str(os.getpid())
    lock = _lock_module().RunLock(tmp_path / "run").acquire()
    assert lock.held
    lock.release()


# ------------------------------------------------------------------------------------------ checkpoints
class _Payload:
    """Unpickling this calls builtins.open(path, "w"), creating a file: an `os.system` payload without the shell."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (str(self.path), "w"))


def test_the_code_payload_really_runs_under_plain_pickle(tmp_path):
    pickle.loads(pickle.dumps(_Payload(tmp_path / "ran")))  # so the refusals below are not vacuous
    assert (tmp_path / "ran").exists()


def _bad_checkpoints(tmp_path, good: bytes) -> dict:
    payload = tmp_path / "PWNED"
    buf = __import__("io").BytesIO()
    torch.save({"format": ckpt.FORMAT, "x": _Payload(payload)}, buf)
    return {"empty": (b"", "is empty"), "truncated": (good[: len(good) // 2], "not a loadable"),
            "random": (np.random.default_rng(0).bytes(4096), "not a loadable"),
            "json": (b'{"iteration": 3}', "not a loadable"),
            "code payload (torch.save)": (buf.getvalue(), "not a loadable"),
            "code payload (raw pickle)": (pickle.dumps(_Payload(payload)), "not a loadable"),
            "old format": (_saved({"iteration": 1}), "not a recast-checkpoint/2")}


def _saved(obj) -> bytes:
    buf = __import__("io").BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


@pytest.mark.parametrize("case", ["empty", "truncated", "random", "json", "code payload (torch.save)",
                                  "code payload (raw pickle)", "old format"])
def test_bad_checkpoint_files_are_refused_naming_the_file_and_never_run_code(tmp_path, done_run, case):
    run = _copy(done_run, tmp_path / "run")
    data, msg = _bad_checkpoints(tmp_path, (run / "checkpoint.pt").read_bytes())[case]
    (run / "checkpoint.pt").write_bytes(data)
    with pytest.raises(ckpt.CheckpointError, match=msg) as exc:
        Trainer(preset("ci", **CI), run, resume=True)
    assert str(run / "checkpoint.pt") in str(exc.value)
    assert not (tmp_path / "PWNED").exists(), "loading a checkpoint ran code"


def test_checkpoint_loads_weights_only_and_holds_only_plain_data(tmp_path, done_run):
    state = torch.load(done_run / "checkpoint.pt", weights_only=True)
    ckpt.check_plain(state)
    tr = Trainer(preset("ci", **{**CI, "method": "recast"}), tmp_path / "run")
    ckpt.check_plain(tr.state_dict())  # fields others add to the trainer's state are caught here
    tr.release()
    for bad, where in [({"rng": np.zeros(3)}, "state\\['rng'\\]"), ({"cfg": preset("ci")}, "TrainConfig"),
                       ({"a": [1, {"b": object()}]}, "state\\['a'\\]\\[1\\]"), ({1.5: 2}, "key of type float")]:
        with pytest.raises(TypeError, match=where):
            ckpt.save_checkpoint(tmp_path / "x", bad)
    assert not (tmp_path / "x" / "checkpoint.pt").exists()


def _world_dir(tmp_path) -> Path:
    from recast.worlds.digits.model import save_world, tiny_world

    return save_world(tiny_world(0), tmp_path / "world")


def test_resume_refuses_another_runs_checkpoint_and_a_changed_base_model(tmp_path):
    world = _world_dir(tmp_path)
    cfg = preset("ci", **CI, world=str(world))
    a, b = tmp_path / "a", tmp_path / "b"
    train(cfg, a)
    train(cfg.replace(lr=1e-2), b)
    shutil.copy(b / "checkpoint.pt", a / "checkpoint.pt")
    with pytest.raises(ValueError, match="lr: config.json 0.0003 vs checkpoint.pt 0.01"):
        Trainer(cfg.replace(iterations=2), a, resume=True)
    from recast.worlds.digits.model import load_world, save_world

    train(cfg, a, overwrite=True)
    base = load_world(world)
    with torch.no_grad():
        next(iter(base.transformer.parameters())).add_(1e-3)
    save_world(base, world)  # a deliberate change: its checksums are valid, so the resume's fingerprint refuses
    with pytest.raises(ValueError, match="base model's weights differ"):
        Trainer(cfg.replace(iterations=2), a, resume=True)


@pytest.mark.parametrize("damage, err, msg", [
    ("world.json not JSON", ValueError, "world.json is not valid JSON"),
    ("truncated safetensors", ValueError, "transformer.safetensors is truncated"),
    ("another architecture", ValueError, "cannot load the world"),
    ("config.json not JSON", ValueError, "config.json is not valid JSON"),
])
def test_damaged_files_name_the_file(tmp_path, damage, err, msg):
    world = _world_dir(tmp_path)
    cfg = preset("ci", **CI, world=str(world))
    resume = damage.startswith("config")
    if damage == "world.json not JSON":
        (world / "world.json").write_text("{not json")
    elif damage == "truncated safetensors":
        data = (world / "transformer.safetensors").read_bytes()
        (world / "transformer.safetensors").write_bytes(data[: len(data) - 100])
    elif damage == "another architecture":
        meta = json.loads((world / "world.json").read_text())
        meta["world"]["num_layers"] += 1
        (world / "world.json").write_text(json.dumps(meta))
    else:
        train(cfg, tmp_path / "run")
        (tmp_path / "run" / "config.json").write_text("{")
    with pytest.raises(err, match=msg):
        Trainer(cfg.replace(iterations=2), tmp_path / "run", resume=resume, overwrite=not resume)


def test_nan_weights_are_never_saved(tmp_path, done_run):
    run = _copy(done_run, tmp_path / "run")
    good = (run / "checkpoint.pt").read_bytes()
    tr = Trainer(preset("ci", **CI), run, resume=True)
    with torch.no_grad():
        tr.policy.ema[0].fill_(float("nan"))
    with pytest.raises(NonFiniteLossError, match="ema/"):
        tr.save()
    assert (run / "checkpoint.pt").read_bytes() == good


# ------------------------------------------------------------------------------------------ never lose work
def test_failed_final_evaluation_loses_no_training(tmp_path, monkeypatch):
    import recast.trainer.persist as persist

    def broken(trainer, grid=True):
        raise RuntimeError("judge exploded")

    cfg = preset("ci", **{**CI, "iterations": 2})
    monkeypatch.setattr(persist, "evaluate_policy", broken)
    with pytest.raises(RuntimeError, match="judge exploded"):
        train(cfg, tmp_path)
    monkeypatch.undo()
    assert torch.load(tmp_path / "checkpoint.pt", weights_only=True)["iteration"] == 2
    run = train(cfg, tmp_path, resume=True)  # nothing left to train: only the evaluation is redone
    assert [r["iteration"] for r in run.metrics] == [1, 2] and [r["iteration"] for r in run.evals] == [2]


def test_resume_rewrites_damaged_logs_from_the_checkpoint(tmp_path):
    cfg = preset("ci", **{**CI, "iterations": 3, "checkpoint_every": 1})
    straight = train(cfg, tmp_path / "straight")
    train(cfg.replace(iterations=2), tmp_path / "split")
    metrics = tmp_path / "split" / "metrics.jsonl"
    lines = metrics.read_text().splitlines(keepends=True)
    metrics.write_text(lines[1] + '{"iteration": 3, "tor')  # a lost first line and a torn record past the checkpoint
    run = train(cfg, tmp_path / "split", resume=True)
    strip = [{k: v for k, v in r.items() if not k.startswith("time/")} for r in run.metrics]
    assert strip == [{k: v for k, v in r.items() if not k.startswith("time/")} for r in straight.metrics]


class _Killed(BaseException):
    """Stands in for SIGKILL inside this process (nothing catches a BaseException subclass on the way out)."""


@pytest.mark.parametrize("backend, fault, real_kill", [
    pytest.param("nft", "ckpt_before_rename:2", True, marks=pytest.mark.slow),  # a child process: ~5 s of imports
    ("grpo", "metrics_torn:2", False)])
def test_kill_fuzz_short(tmp_path, monkeypatch, backend, fault, real_kill):
    """A kill inside a critical section (a checkpoint killed before its rename, with a real SIGKILL in a child
    process; a torn metrics line, in this process), then a resume that must match the uninterrupted run bit for bit.
    `scripts/kill_fuzz.py` runs the long version at random kill points."""
    spec = importlib.util.spec_from_file_location("kill_fuzz", ROOT / "scripts" / "kill_fuzz.py")
    fuzz = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fuzz)
    cfg = preset("ci", backend=backend, iterations=3, checkpoint_every=1, rewards=("color", "size"))
    ref, run = tmp_path / "ref", tmp_path / "run"
    train(cfg, ref)
    if real_kill:
        code, err = fuzz._train(["--preset", "ci", "--backend", backend, "--iterations", "3", "--set",
                                 "checkpoint_every=1", "--set", "rewards=color,size", "--out", str(run)], fault)
        assert code == -signal.SIGKILL, err
        assert list(run.glob(".checkpoint.pt.*.tmp")), "the kill should have left the temp checkpoint behind"
    else:
        import recast.io as rio
        import recast.trainer.loop as loop

        calls = {"n": 0}

        def torn_append(path, record):
            calls["n"] += Path(path).name == "metrics.jsonl"
            if Path(path).name == "metrics.jsonl" and calls["n"] == 2:
                line = json.dumps(rio.to_jsonable(record)) + "\n"
                Path(path).open("a").write(line[: len(line) // 2])
                raise _Killed
            rio.append_jsonl(path, record)

        monkeypatch.setattr(loop, "append_jsonl", torn_append)
        with pytest.raises(_Killed):
            train(cfg, run)
        monkeypatch.undo()
    assert torch.load(run / "checkpoint.pt", weights_only=True)["iteration"] == 1
    train(cfg, run, resume=True)
    assert fuzz.compare(ref, run) is None


def test_parse_overrides_parses_each_field_and_names_bad_items():
    from recast.config import parse_overrides

    assert parse_overrides(["recast_every=4", " lr =3e-4", "lam=1,2"]) == {"recast_every": 4, "lr": 3e-4,
                                                                         "lam": (1.0, 2.0)}
    assert parse_overrides([]) == {}
    with pytest.raises(ValueError, match="expected FIELD=VALUE"):
        parse_overrides(["recast_every"])
    with pytest.raises(ValueError, match="group_size: expected int"):
        parse_overrides(["group_size=two"])
