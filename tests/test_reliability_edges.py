"""Reliability, second round: the edges around the trainer's core, each case a regression test of the audit's finding
(issue 50). Bad cases: a symlinked lock or grids folder, overwriting another tool's files, sweeps retraining or
reusing runs, extending a finished run, duplicate rewards. Poor cases: each refused with one line naming the file,
field or reward, before any compute where the input can be checked up front."""

from __future__ import annotations

import errno
import json
import os
import signal

import pytest
import torch

from recast.config import preset
from recast.trainer import Trainer, train

CI = dict(iterations=1, eval_prompts=2)


def _cli(argv, capsys):
    from recast.cli import main

    code = main(argv)
    err = capsys.readouterr().err
    return code, err


# ----------------------------------------------------------------------------------------------- run directories

def test_a_symlinked_lock_is_refused_and_its_target_left_alone(tmp_path):
    precious = tmp_path / "precious.txt"
    precious.write_text("keep me")
    out = tmp_path / "run"
    out.mkdir()
    (out / ".recast.lock").symlink_to(precious)
    with pytest.raises(FileExistsError, match="symbolic link"):
        Trainer(preset("ci", **CI), out)
    assert precious.read_text() == "keep me"


def test_overwrite_removes_a_symlinked_grids_folder_as_a_link_and_never_what_it_points_to(tmp_path):
    other = tmp_path / "photos"
    other.mkdir()
    (other / "holiday.png").write_bytes(b"png")
    out = tmp_path / "run"
    train(preset("ci", **CI), out)
    import shutil

    shutil.rmtree(out / "grids")
    (out / "grids").symlink_to(other, target_is_directory=True)
    with pytest.raises(ValueError, match="symbolic link"):  # without --overwrite: refused, nothing touched
        Trainer(preset("ci", **{**CI, "iterations": 2}), out, resume=True)
    train(preset("ci", **CI), out, overwrite=True)
    assert (other / "holiday.png").read_bytes() == b"png"
    assert (out / "grids").is_dir() and not (out / "grids").is_symlink()


@pytest.mark.parametrize("name", ["metrics.jsonl", ".recast.lock"])
def test_a_directory_where_a_run_file_belongs_is_named(tmp_path, name):
    out = tmp_path / "run"
    (out / name).mkdir(parents=True)
    with pytest.raises(FileExistsError, match=f"{name} is a directory"):
        Trainer(preset("ci", **CI), out)


def test_auto_resume_never_touches_another_tools_files(tmp_path):
    out = tmp_path / "theirs"
    out.mkdir()
    for name, data in (("config.json", b'{"model": "theirs"}'), ("checkpoint.pt", b"theirs"),
                       ("metrics.jsonl", b'{"loss": 1}\n')):
        (out / name).write_bytes(data)
    with pytest.raises(FileExistsError, match="not a recast run directory"):
        train(preset("ci", **CI), out, resume="auto")
    assert (out / "checkpoint.pt").read_bytes() == b"theirs"


def test_auto_resume_continues_refuses_changes_and_returns_a_finished_run(tmp_path):
    out = tmp_path / "run"
    first = train(preset("ci", **CI), out, resume="auto")
    stamp = (out / "checkpoint.pt").stat().st_mtime_ns
    again = train(preset("ci", **CI), out, resume="auto")  # finished: nothing retrained
    assert (out / "checkpoint.pt").stat().st_mtime_ns == stamp and again.metrics == first.metrics
    with pytest.raises(ValueError, match=r"seed: config.json 0 vs now 3.*--overwrite"):
        train(preset("ci", **{**CI, "seed": 3}), out, resume="auto")
    train(preset("ci", **{**CI, "seed": 3}), out, resume="auto", overwrite=True)
    assert json.loads((out / "config.json").read_text())["seed"] == 3


def test_extending_a_finished_run_keeps_its_last_evaluation_and_records_the_new_length(tmp_path):
    from recast.io import read_jsonl
    from recast.trainer.rundir import is_finished

    out = tmp_path / "run"
    train(preset("ci", **{**CI, "iterations": 2}), out)
    train(preset("ci", **{**CI, "iterations": 4}), out, resume=True)
    assert [r["iteration"] for r in read_jsonl(out / "eval.jsonl")] == [2, 4]
    assert json.loads((out / "config.json").read_text())["iterations"] == 4 and is_finished(out, 4)


def test_resume_behind_the_checkpoint_and_resume_with_overwrite_are_refused(tmp_path, capsys):
    out = tmp_path / "run"
    train(preset("ci", **{**CI, "iterations": 2}), out)
    code, err = _cli(["train", "--preset", "ci", "--out", str(out), "--resume", "--iterations", "1", "--set",
                      "eval_prompts=2"], capsys)
    assert code == 2 and "already at iteration 2" in err
    code, err = _cli(["train", "--preset", "ci", "--out", str(out), "--resume", "--overwrite"], capsys)
    assert code == 2 and "contradict" in err


# ----------------------------------------------------------------------------------------------- sweeps

def _sweep(tmp_path, **sets):
    from recast.experiments.sweep import plan_sweep

    return plan_sweep(world="tiny", settings=("compose",), budgets=("uniform",), methods=("uniform",), seeds=(0,),
                      preset="ci", iterations=1, sets={"eval_prompts": 2, **sets}, out_root=tmp_path / "sweep")


@pytest.mark.slow
def test_a_sweep_child_decides_under_the_lock_finished_runs_are_never_retrained(tmp_path):
    import sys

    from recast.experiments.sweep import _launch, run_sweep
    from recast.trainer.rundir import EXIT_BUSY, RunLock

    (run,) = _sweep(tmp_path)
    assert not run_sweep([run]).failed
    stamp = (run.out_dir / "checkpoint.pt").stat().st_mtime_ns
    # a second sweep that decided before the first finished: its child finds the run finished and leaves it
    _, code, err = _launch(run, sys.executable, False)
    assert code == 0 and err.endswith("__finished__")
    assert (run.out_dir / "checkpoint.pt").stat().st_mtime_ns == stamp
    with RunLock(run.out_dir):  # another live run holds it: reported busy, not failed, nothing touched
        _, code, _ = _launch(run, sys.executable, False)
    assert code == EXIT_BUSY and (run.out_dir / "checkpoint.pt").stat().st_mtime_ns == stamp


@pytest.mark.slow
def test_a_sweep_never_reuses_a_run_made_with_other_settings(tmp_path):
    from recast.experiments.sweep import is_finished, run_sweep

    (old,) = _sweep(tmp_path)
    run_sweep([old])
    (new,) = _sweep(tmp_path, eval_prompts=3)  # the same folder, planned with another setting
    assert not is_finished(new)
    report = run_sweep([new])
    assert list(report.failed) == [str(new.out_dir)] and "eval_prompts" in report.failed[str(new.out_dir)]
    report = run_sweep([new], rerun_changed=True)
    assert report.ran == [new] and is_finished(new)


def test_the_sweep_driver_forwards_sigterm_to_its_children():
    import subprocess
    import sys

    from recast.experiments import sweep

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    sweep._CHILDREN.add(child)
    try:
        with pytest.raises(KeyboardInterrupt, match="signal"):
            sweep._stop_children(signal.SIGTERM, None)
        assert child.wait(timeout=10) == -signal.SIGTERM
    finally:
        sweep._CHILDREN.discard(child)
        if child.poll() is None:
            child.kill()


# ----------------------------------------------------------------------------------------------- clear errors

@pytest.mark.parametrize("over, msg", [
    (dict(rewards=("color", "color")), r"rewards \['color'\] are named more than once"),
    (dict(lr=1e300), "0 < lr <= 1"),
])
def test_bad_config_is_refused_naming_it_before_compute(tmp_path, over, msg):
    with pytest.raises(ValueError, match=msg):
        Trainer(preset("ci", **CI, **over), tmp_path)
    assert not (tmp_path / "config.json").exists()


def test_a_reward_of_the_wrong_shape_is_named(tmp_path):
    from recast.trainer.loop import RewardError

    tr = Trainer(preset("ci", **CI), tmp_path)
    tr.rewards[1] = lambda images, prompts: torch.zeros(images.shape[0], 2)
    with pytest.raises(RewardError, match=r"reward 'color' returned \(\d+, 2\)"):
        tr.run()


@pytest.mark.slow
def test_a_full_disk_at_the_checkpoint_is_one_line(tmp_path, capsys, monkeypatch):
    import recast.trainer.checkpoint as ckpt

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "run" / "checkpoint.pt"))

    monkeypatch.setattr(ckpt, "atomic_write_bytes", full)
    code, err = _cli(["train", "--preset", "ci", "--iterations", "1", "--set", "eval_prompts=2", "--out",
                      str(tmp_path / "run")], capsys)
    assert code == 2 and "No space left on device" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_a_deeply_nested_config_json_is_named(tmp_path):
    from recast.io import read_json

    path = tmp_path / "config.json"
    path.write_text("[" * 200_000 + "]" * 200_000)
    with pytest.raises(ValueError, match="nested too deeply"):
        read_json(path)


def test_fixed_w_reward_names_must_be_a_list(tmp_path):
    from recast.config import load_fixed_W

    path = tmp_path / "w.json"
    path.write_text(json.dumps({"W": [[0.5, 0.5]], "reward_names": "color"}))
    with pytest.raises(ValueError, match="reward_names.*must be a list"):
        load_fixed_W(path)


def test_demo_figure_names_cannot_leave_the_run_folder(tmp_path):
    from recast.experiments.demo import run_demo

    for bad in ("../../..", "a/b", ".."):
        with pytest.raises(ValueError, match="plain file name"):
            run_demo(tmp_path, preset_name="ci", figure_name=bad, seeds=(0,))


@pytest.mark.parametrize("content, msg", [
    (b"\xff\xfe not utf-8", "not UTF-8 text"),
    (b'[1, 2]\n', "must be a JSON object"),
])
def test_bad_prompt_files_are_named(tmp_path, content, msg):
    from recast.worlds.sd3.prompts import load_prompts

    path = tmp_path / "p.jsonl"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=msg):
        load_prompts(path)


def test_a_prompt_file_with_a_byte_order_mark_reads_cleanly(tmp_path):
    from recast.worlds.sd3.prompts import load_prompts

    path = tmp_path / "p.txt"
    path.write_bytes("\ufeffa red circle\ntwo dogs\n".encode())
    assert load_prompts(path) == ["a red circle", "two dogs"]


def test_an_sd3_folder_without_a_component_is_named_and_nothing_is_looked_up_online(tmp_path, monkeypatch):
    import shutil

    from recast.worlds.sd3.tiny import save_tiny_pipeline
    from recast.worlds.sd3.world import load_sd3_world

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    folder = save_tiny_pipeline(tmp_path / "sd3")
    shutil.rmtree(folder / "vae")
    with pytest.raises(FileNotFoundError, match=r"lists vae in model_index.json but has no such folder"):
        load_sd3_world(str(folder))
    assert os.environ.get("HF_HUB_OFFLINE") == "1"
