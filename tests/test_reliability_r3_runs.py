"""Reliability, third round (issue 60): the one file writer, run folders (named pipes, a deleted checkpoint, another
tool's files, hand-edited or damaged files), the one checkpoint check (resume, --auto, export, load_policy), figures
and the demo. Cases are named as in ../shared/reliability-r3.md."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from recast.config import preset  # noqa: E402
from recast.io import (NotRegularFileError, append_jsonl, atomic_write, open_regular, read_jsonl,  # noqa: E402
                       save_torch, write_json)
from recast.plotting import savefig  # noqa: E402
from recast.trainer import train  # noqa: E402
from recast.trainer.rundir import check_run_dir  # noqa: E402
from recast.trainer.validate import validate  # noqa: E402
from test_reliability_r3 import returns_within  # noqa: E402

CI = dict(iterations=1, eval_prompts=2, rewards=("color", "size"))


@pytest.fixture(scope="module")
def done_run(tmp_path_factory):
    """A finished one-iteration ci run (LoRA rank 4, alpha 8), copied by the tests that change it."""
    out = tmp_path_factory.mktemp("r3") / "run"
    train(preset("ci", **CI), out)
    return out


@pytest.fixture(scope="module")
def other_run(tmp_path_factory):
    """Another finished run, of LoRA rank 2 and lr 1e-3: its checkpoint is the one copied in."""
    out = tmp_path_factory.mktemp("r3") / "other"
    train(preset("ci", **CI, lora_rank=2, lr=1e-3), out)
    return out


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    (dst / ".recast.lock").unlink(missing_ok=True)
    return dst


def _edit_config(run: Path, **fields) -> None:
    cfg = json.loads((run / "config.json").read_text())
    (run / "config.json").write_text(json.dumps({**cfg, **fields}))


def _victim(tmp_path: Path, text: bytes = b"precious user file") -> Path:
    victim = tmp_path / "victim.png"
    victim.write_bytes(text)
    return victim


# ------------------------------------------------------------------------------ the one writer
def test_atomic_write_refuses_links_folders_and_pipes_and_leaves_them_as_they_are(tmp_path):
    victim = _victim(tmp_path)
    link, folder, fifo = tmp_path / "link.json", tmp_path / "dir.json", tmp_path / "fifo.json"
    link.symlink_to(victim)
    folder.mkdir()
    os.mkfifo(fifo)
    for path, kind in ((link, "a symbolic link"), (folder, "a folder"), (fifo, r"a named pipe \(FIFO\)")):
        with pytest.raises(NotRegularFileError, match=f"{path.name} is {kind}; recast writes only regular files"):
            write_json(path, {"a": 1})
        with pytest.raises(NotRegularFileError):
            returns_within(30, append_jsonl, path, {"a": 1})
    assert victim.read_bytes() == b"precious user file" and link.is_symlink() and folder.is_dir()
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]  # no temp file left behind
    dangling = tmp_path / "dangling.pt"
    dangling.symlink_to(tmp_path / "nowhere")
    with pytest.raises(NotRegularFileError, match="a symbolic link"):
        save_torch(dangling, {"x": 1})
    assert not (tmp_path / "nowhere").exists()


def test_atomic_write_replaces_a_regular_file_whole_and_names_a_file_in_the_way_of_its_folder(tmp_path):
    path = atomic_write(tmp_path / "a" / "b.bin", lambda fh: fh.write(b"new"))
    assert path.read_bytes() == b"new"
    atomic_write(path, lambda fh: fh.write(b"newer"))
    assert path.read_bytes() == b"newer"
    (tmp_path / "file").write_text("x")
    with pytest.raises(NotRegularFileError, match="is a file, not a folder"):
        atomic_write(tmp_path / "file" / "c.bin", lambda fh: fh.write(b""))


def test_readers_refuse_a_named_pipe_at_once_and_skip_damaged_log_lines(tmp_path):
    fifo = tmp_path / "metrics.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(NotRegularFileError, match=r"named pipe \(FIFO\), not a regular file"):
        returns_within(30, open_regular, fifo)
    log = tmp_path / "eval.jsonl"
    log.write_bytes(b'{"iteration": 1}\n5\n\xff\xfe garbage\n[1, 2]\n{"iteration": 2}\n{"iter')
    assert read_jsonl(log) == [{"iteration": 1}, {"iteration": 2}]


# ------------------------------------------------------------------------------ P09, N02, K07: figures (bad)
def test_P09_K07_savefig_never_writes_through_a_link(tmp_path):
    victim = _victim(tmp_path)
    figures = tmp_path / "figures"
    figures.mkdir()
    (figures / "profile.png").symlink_to(victim)
    fig = plt.figure()
    with pytest.raises(NotRegularFileError, match="profile.png is a symbolic link"):
        savefig(fig, "profile", outdir=figures)
    assert victim.read_bytes() == b"precious user file"
    assert not (figures / "profile.pdf").exists()  # both targets checked before either is written
    paths = savefig(fig, "other", outdir=figures)
    assert [p.read_bytes()[:4] for p in paths] == [b"\x89PNG", b"%PDF"]
    plt.close(fig)


def test_N02_N01_the_demo_refuses_its_figure_target_before_training(tmp_path, monkeypatch):
    from recast.experiments.demo import run_demo

    victim = _victim(tmp_path)
    out = tmp_path / "demo"
    out.mkdir()
    (out / "demo_compose.png").symlink_to(victim)
    monkeypatch.delenv("RECAST_FIGURES_DIR", raising=False)
    kwargs = dict(preset_name="ci", methods=("recast", "uniform"), seeds=(0,), iterations=1, workers=1)
    with pytest.raises(NotRegularFileError, match="demo_compose.png is a symbolic link"):
        run_demo(out, figure_name="demo_compose", **kwargs)
    assert victim.read_bytes() == b"precious user file" and not (out / "recast").exists()  # nothing trained
    blocker = tmp_path / "figfile"
    blocker.write_text("not a folder")
    monkeypatch.setenv("RECAST_FIGURES_DIR", str(blocker))
    with pytest.raises(FileExistsError, match=f"RECAST_FIGURES_DIR={blocker} is not a folder"):
        run_demo(tmp_path / "demo1", figure_name="demo_compose", **kwargs)
    assert not (tmp_path / "demo1" / "recast").exists()


# ------------------------------------------------------------------------------ K01, K01c: named pipes (bad)
@pytest.mark.parametrize("name", ["config.json", "metrics.jsonl"])
def test_K01_K01c_a_named_pipe_in_a_run_folder_is_refused_not_waited_on(done_run, tmp_path, name):
    run = _copy(done_run, tmp_path / "fifo_run")
    (run / name).unlink()
    os.mkfifo(run / name)
    with pytest.raises(FileExistsError, match=rf"{name} is a named pipe \(FIFO\) where the run keeps a file"):
        returns_within(60, validate, preset("ci", **CI), run, resume="auto")


# ------------------------------------------------------------------------------ R07L, R07b: another run's checkpoint
def test_R07b_R07L_a_checkpoint_copied_from_another_run_is_refused_by_auto_and_load_policy(done_run, other_run,
                                                                                             tmp_path):
    from recast.experiments.judge_eval import load_policy

    run = _copy(done_run, tmp_path / "a")
    shutil.copy(other_run / "checkpoint.pt", run / "checkpoint.pt")
    msg = r"checkpoint.pt is not the checkpoint of the run in .*config.json \(.*lora_rank: config.json 4 vs " \
          r"checkpoint.pt 2, lr: config.json 0.0003 vs checkpoint.pt 0.001\)"
    with pytest.raises(ValueError, match=msg):  # --auto used to call it finished
        validate(preset("ci", **CI), run, resume="auto")
    with pytest.raises(ValueError, match=msg):  # notebook 06 used to load it as this run's weights
        load_policy(run)
    with pytest.raises(ValueError, match=msg):
        validate(preset("ci", **{**CI, "iterations": 2}), run, resume=True)
    assert load_policy(done_run).policy is not None  # the run's own checkpoint loads


# ------------------------------------------------------------------------------ E11, E14 (bad) and export's poor cases
def _metadata(folder: Path) -> dict:
    from safetensors import safe_open

    with safe_open(str(folder / "pytorch_lora_weights.safetensors"), "pt") as f:
        meta = json.loads(f.metadata()["lora_adapter_metadata"])  # diffusers' key, "transformer."-prefixed fields
    return {k.removeprefix("transformer."): v for k, v in meta.items()}


def test_E11_export_refuses_a_config_json_edited_after_training(done_run, tmp_path):
    from recast.trainer.adapters import export_adapter

    meta = _metadata(export_adapter(done_run, tmp_path / "ok"))
    assert (meta["r"], meta["lora_alpha"]) == (4, 8.0)  # the trained rank and alpha
    run = _copy(done_run, tmp_path / "edited")
    _edit_config(run, lora_alpha=999.0)
    with pytest.raises(ValueError, match=r"lora_alpha: config.json 999.0 vs checkpoint.pt 8.0"):
        export_adapter(run, tmp_path / "e11")
    assert not (tmp_path / "e11").exists()


def test_E14_export_refuses_a_checkpoint_of_another_rank(done_run, other_run, tmp_path):
    from recast.cli import main

    run = _copy(done_run, tmp_path / "a")
    shutil.copy(other_run / "checkpoint.pt", run / "checkpoint.pt")
    assert main(["export", str(run), str(tmp_path / "e14")]) == 2
    assert not (tmp_path / "e14").exists()


def test_E02_E05_E06b_E12_E16_export_names_what_is_wrong_in_one_line(done_run, tmp_path, capsys):
    from recast.cli import main

    def refused(run, out, needle):
        assert main(["export", str(run), str(out)]) == 2
        err = capsys.readouterr().err
        assert needle in err and len(err.strip().splitlines()) == 1, err

    fresh = _copy(done_run, tmp_path / "fresh")
    (fresh / "checkpoint.pt").unlink()
    refused(fresh, tmp_path / "o1", "has no checkpoint.pt yet (stopped before its first checkpoint?)")  # E02
    (tmp_path / "file").write_text("mine")
    refused(done_run, tmp_path / "file", "is a file, not a folder")  # E05
    assert (tmp_path / "file").read_text() == "mine"
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    refused(done_run, tmp_path / "dangling", "is a dangling symbolic link")  # E06b
    listed = _copy(done_run, tmp_path / "listed")
    (listed / "config.json").write_text("[1, 2, 3]")
    refused(listed, tmp_path / "o2", "does not hold a recast config (a JSON object), but a list")  # E12
    typed = _copy(done_run, tmp_path / "typed")
    _edit_config(typed, lora_rank="abc")
    refused(typed, tmp_path / "o3", "config.json: config field lora_rank: expected int, got 'abc'")  # E16


# ------------------------------------------------------------------------------ --auto on damaged runs (poor)
@pytest.mark.parametrize("value, shown", [("abc", "'abc'"), (None, "None")])
def test_R04_R04b_a_hand_edited_iterations_names_config_json_and_the_field(done_run, tmp_path, value, shown):
    run = _copy(done_run, tmp_path / "r04")
    _edit_config(run, iterations=value)
    with pytest.raises(ValueError, match=rf"config.json: config field iterations: expected int, got {shown}"):
        validate(preset("ci", **CI), run, resume="auto")


def test_R11_a_non_object_line_in_metrics_leaves_a_finished_run_finished(done_run, tmp_path):
    run = _copy(done_run, tmp_path / "r11")
    with open(run / "metrics.jsonl", "a") as fh:
        fh.write("5\n")
    assert check_run_dir(run, preset("ci", **CI), resume="auto", overwrite=False) == "finished"


def test_R12_a_damaged_eval_log_is_restored_from_the_checkpoint(done_run, tmp_path):
    run = _copy(done_run, tmp_path / "r12")
    want = read_jsonl(done_run / "eval.jsonl")
    (run / "eval.jsonl").write_bytes(b"\xff\xfe garbage\n")
    train(preset("ci", **CI), run, resume="auto")
    assert read_jsonl(run / "eval.jsonl")[-1]["iteration"] == want[-1]["iteration"] == 1
    assert read_jsonl(run / "eval.jsonl")[-1] == want[-1]  # the final evaluation is evaluated again, identically


def test_R14_a_finished_run_whose_checkpoint_was_deleted_is_not_retrained_silently(done_run, tmp_path):
    run = _copy(done_run, tmp_path / "r14")
    (run / "checkpoint.pt").unlink()
    cfg = preset("ci", **CI)
    for resume in ("auto", False):
        with pytest.raises(FileExistsError, match="holds a run that wrote a checkpoint .* checkpoint.pt is missing"):
            check_run_dir(run, cfg, resume=resume, overwrite=False)
    assert check_run_dir(run, cfg, resume="auto", overwrite=True) == "fresh"


def test_a_run_killed_before_its_first_checkpoint_still_starts_again(done_run, tmp_path):
    run = tmp_path / "killed"
    run.mkdir()
    shutil.copy(done_run / "config.json", run / "config.json")
    shutil.copy(done_run / "metrics.jsonl", run / "metrics.jsonl")
    assert check_run_dir(run, preset("ci", **CI), resume="auto", overwrite=False) == "fresh"


def test_D06_a_folder_of_another_tools_files_is_refused_unless_overwrite(tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match=r"holds files that are not a run's \(notes.txt\)"):
        validate(preset("ci", **CI), out)
    with pytest.raises(FileExistsError, match="notes.txt"):
        validate(preset("ci", **CI), out, resume="auto")
    assert check_run_dir(out, preset("ci", **CI), resume=False, overwrite=True) == "fresh"
    assert (out / "notes.txt").read_text() == "mine"
