"""The run directory: one run per directory under a lock, and what a new start may do with what it finds there.

The lock is `fcntl.flock` on `<run>/.recast.lock`, so the kernel drops it the moment its process exits, however it
exits (`kill -9` included): a stale lock file never blocks the next run. The holder writes its pid into the file so a
refused run can say who holds the directory. The lock file is opened without following a symbolic link.

`check_run_dir` decides, under the lock, how a run starts: fresh, resumed from its checkpoint, or already finished.
A run directory never reaches outside itself: a symbolic link among its files is refused, or with ``overwrite``
removed as a link; nothing is ever written or deleted through one.
"""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
import stat
import sys
from pathlib import Path

import torch

from recast.io import read_json, read_jsonl
from recast.trainer.checkpoint import (CHECKPOINT, LOG_FILES, RESOLVED_FIELDS, check_resume_config,
                                      load_checkpoint)
from recast.trainer.ranks import check_processes

__all__ = ["EXIT_BUSY", "LOCK_FILE", "RUN_FILES", "RUN_MARKER", "RunDirBusyError", "RunLock", "check_out_dir", "is_recast_run",
           "check_run_dir", "is_finished", "unlink_run_files"]

LOCK_FILE = ".recast.lock"
# Everything a run writes: any of these in a folder means "this folder holds something".
RUN_FILES = ("config.json", *LOG_FILES, CHECKPOINT, "grids", "adapters", "recast_weights.npz")
_FOLDERS = ("grids", "adapters")
RUN_MARKER = "_run"  # config.json of a recast run holds this key (reward names, budgets, grid, world fingerprint)
AUTO = "auto"
EXIT_BUSY = 75  # `python -m recast train` exits so when another live run holds --out (EX_TEMPFAIL): a sweep waits


class RunDirBusyError(FileExistsError):
    """Another live process holds the run directory's lock."""


class RunLock:
    """An exclusive, non-blocking lock on a run directory.

    Use `RunLock(path).acquire()` (or `with RunLock(path):`), and `release()` when the run ends; the lock is also
    released when the object is garbage-collected or the process dies.

    Raises:
        RunDirBusyError: from `acquire`, naming the holder's pid, when another process holds the directory.
        FileExistsError: the lock path is a symbolic link or a directory (nothing is opened through it).
    """

    def __init__(self, run_dir: str | os.PathLike):
        self.path = Path(run_dir) / LOCK_FILE
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> "RunLock":
        if self._fd is not None:
            return self
        if self.path.is_symlink() or self.path.is_dir():
            kind = "a symbolic link" if self.path.is_symlink() else "a directory"
            raise FileExistsError(f"{self.path} is {kind}; a run locks its own directory through a plain file and "
                                  "never follows a link out of it: remove it or choose another --out")
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o666)
        except OSError as err:
            if err.errno == errno.ELOOP:  # a link made between the check and the open
                raise FileExistsError(f"{self.path} is a symbolic link; remove it or choose another --out") from None
            raise
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise RunDirBusyError(f"{self.path.parent} is in use by another run (pid {holder}); wait for it to finish, "
                                  "stop it, or choose another --out") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def __enter__(self) -> "RunLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()

    def __del__(self):
        self.release()


# how the refusal of a run made with other settings names the knob that replaces it: the CLI's flag, or a
# notebook's own parameter (`recast.nbparams.typed_parameters` sets it in the notebook's kernel)
OVERWRITE_HINT = "--overwrite"


def _need(ok: bool, msg: str) -> None:
    if not ok:
        raise ValueError(msg)


def check_out_dir(out_dir: str | os.PathLike) -> Path:
    """Create the run directory if needed and check that it is writable; returns it as a Path.

    Raises:
        ValueError: an empty path (it would mean the current folder).
        PermissionError: the folder cannot be created or written.
    """
    _need(str(out_dir).strip() != "", "--out / out_dir is empty: give the run directory a name, e.g. runs/x")
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / f".write-probe-{os.getpid()}"
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))  # never via a link
        probe.unlink()
    except OSError as err:
        raise PermissionError(f"out_dir {out} is not writable ({err.strerror}); choose another --out") from None
    return out


def is_recast_run(out_dir: str | os.PathLike) -> bool:
    """Whether `out_dir/config.json` is a recast run's config (a JSON object with the `_run` marker)."""
    path = Path(out_dir) / "config.json"
    if path.is_symlink():
        return False
    try:
        cfg = read_json(path)
    except (OSError, ValueError):
        return False
    return isinstance(cfg, dict) and isinstance(cfg.get(RUN_MARKER), dict)


def _check_entries(out: Path, overwrite: bool) -> None:
    """Refuse a symbolic link among the run's files (unless it is to be removed as a link), a directory where the
    run keeps a file, or a named pipe, socket or device (reading one would block or never end)."""
    for name in RUN_FILES:
        path = out / name
        if path.is_symlink():
            _need(overwrite, f"{path} is a symbolic link; a run never writes or deletes through a link out of its "
                             "directory: remove it, choose another --out, or pass --overwrite to remove the link")
        elif name not in _FOLDERS and path.is_dir():
            raise FileExistsError(f"{path} is a directory where the run keeps a file; remove it or choose another "
                                  "--out")
        elif path.exists() and not path.is_dir() and not path.is_file():
            kind = "a named pipe (FIFO)" if stat.S_ISFIFO(path.lstat().st_mode) else "not a regular file"
            raise FileExistsError(f"{path} is {kind} where the run keeps a file; a run reads and writes only regular "
                                  "files: remove it or choose another --out")
    grids = out / "grids"
    if grids.is_dir() and not grids.is_symlink():
        links = [p.name for p in grids.iterdir() if p.is_symlink()]
        _need(not links or overwrite, f"{grids} holds symbolic links ({', '.join(sorted(links)[:3])}); a run never "
                                      "writes through one: remove them or pass --overwrite to remove the links")


def is_finished(out: Path, iterations: int) -> bool:
    """Whether the run in `out` has its checkpoint, its last iteration and its final evaluation at `iterations`."""
    try:
        cfg = read_json(out / "config.json")
        metrics, evals = read_jsonl(out / "metrics.jsonl"), read_jsonl(out / "eval.jsonl")
    except (OSError, ValueError):
        return False
    return ((out / CHECKPOINT).is_file() and isinstance(cfg, dict) and cfg.get("iterations") == iterations
            and bool(metrics) and metrics[-1].get("iteration") == iterations and bool(evals)
            and evals[-1].get("iteration") == iterations)


def check_run_dir(out: Path, cfg, *, resume: bool | str, overwrite: bool, spec=None, num_processes: int = 1,
                  change_processes: bool = False) -> str:
    """Decide how a run starts in `out`, from what it holds and what was asked for.

    Args:
        resume: True (continue the checkpoint, or fail), False (a fresh start), or "auto": continue a compatible
            run, do nothing for a finished one, start an empty folder; refuse anything else.
        overwrite: start over even if `out` holds a run or another tool's files (with "auto": only where the run
            there is incompatible). Symbolic links among the run's files are then removed as links.
        spec: the config's `RunSpec`. With it, a resume compares the reward names and normalised budgets the config
            resolves to with those the run trained with (its run marker) instead of the raw ``setting``,
            ``rewards`` and ``lam`` fields.
        num_processes: the processes of this launch. A resume on another number than the run's marker records
            is refused (the global batch would change silently), unless ``change_processes``.
        change_processes: allow that resume.

    Returns:
        "fresh", "resume" or "finished".

    Raises:
        FileNotFoundError: resume without a checkpoint or config.json.
        FileExistsError: a fresh start in a folder that holds a run or other files; a link or a directory where a
            run file belongs.
        ValueError: --resume with --overwrite; a resume whose config differs from the run's, naming the fields;
            a resume on another number of processes, naming both.
    """
    _need(not (resume is True and overwrite), "--resume and --overwrite contradict each other: --resume continues "
                                              "the run in --out, --overwrite deletes it; pass one")
    _need(resume in (True, False, AUTO), f"resume must be True, False or 'auto', got {resume!r}")
    _check_entries(out, overwrite)
    if resume == AUTO:
        has_run, ckpt = is_recast_run(out), (out / CHECKPOINT).is_file()
        if has_run and ckpt:
            try:
                _check_resume(out, cfg, spec)
                finished = is_finished(out, cfg.iterations)
                if not finished:  # a finished run is returned as it is, whatever launched it
                    check_processes(out, cfg, num_processes, change_processes)
            except ValueError as err:
                if overwrite:
                    return "fresh"
                raise ValueError(f"{err}; or pass {OVERWRITE_HINT} to replace it") from None
            return "finished" if finished else "resume"
        if has_run:  # killed before its first checkpoint: nothing to continue, and its files are this run's
            _check_not_lost(out, cfg, overwrite)
            try:
                check_resume_config(out, cfg.to_dict(), resolved=RESOLVED_FIELDS if spec is not None else ())
                _say_restart(out)
                return "fresh"
            except ValueError as err:
                if overwrite:
                    return "fresh"
                raise ValueError(f"{err}; or pass {OVERWRITE_HINT} to replace it") from None
        resume = False
    if resume:
        _check_resume(out, cfg, spec)
        check_processes(out, cfg, num_processes, change_processes)
        return "resume"
    present = [f for f in RUN_FILES if (out / f).exists() or (out / f).is_symlink()]
    if present and not overwrite and is_recast_run(out) and not (out / CHECKPOINT).is_file():
        _check_not_lost(out, cfg, overwrite)
        try:  # a start that failed before its first checkpoint: the same command starts again, and says so
            check_resume_config(out, cfg.to_dict(), resolved=RESOLVED_FIELDS if spec is not None else ())
            _say_restart(out)
            return "fresh"
        except ValueError:
            pass
    if present and not overwrite:
        if is_recast_run(out):
            knob = "overwrite=True (--overwrite)" if OVERWRITE_HINT == "--overwrite" else OVERWRITE_HINT
            raise FileExistsError(f"{out} already holds a run: pass resume=True (--resume) to continue it or "
                                  f"{knob} to start over")
        raise FileExistsError(f"{out} holds {', '.join(present)} but is not a recast run directory; refusing to "
                              "overwrite another tool's files: choose another --out (or pass --overwrite)")
    others = _other_files(out)
    if others and not overwrite:
        raise FileExistsError(f"{out} holds files that are not a run's ({', '.join(others[:3])}"
                              f"{', ...' if len(others) > 3 else ''}); a run starts in an empty folder or its own: "
                              "choose another --out (or pass --overwrite to start among them; they are kept)")
    return "fresh"


def _say_restart(out: Path) -> None:
    """A rerun over a run that stopped before its first checkpoint starts it again; it says so, and how many logged
    iterations that discards, rather than starting over silently."""
    if os.environ.get("RANK", "0") != "0":  # one line per launch, from the main process
        return
    try:
        logged = len(read_jsonl(out / "metrics.jsonl"))
    except (OSError, ValueError):
        logged = 0
    lost = f"its {logged} logged iteration{'s' if logged != 1 else ''} cannot be continued" if logged else \
        "it logged no iteration"
    print(f"note: {out} holds this run stopped before its first checkpoint ({lost}); starting it again from "
          "iteration 0 (checkpoint_every sets how often a run checkpoints)", file=sys.stderr, flush=True)


def _other_files(out: Path) -> list[str]:
    """Names in `out` that no run writes: not a run file, the lock, a write probe or an interrupted write's temp."""
    own = set(RUN_FILES) | {LOCK_FILE}
    return sorted(p.name for p in out.iterdir() if p.name not in own and not p.name.startswith(".write-probe-")
                  and not (p.name.startswith(".") and p.name.endswith(".tmp")))


def _check_not_lost(out: Path, cfg, overwrite: bool) -> None:
    """A run without its checkpoint that did checkpoint once (its adapters are written with every checkpoint, its
    final evaluation after the last): its checkpoint was deleted, and starting again would retrain it from scratch
    over its logs and adapters. Refused unless --overwrite."""
    if overwrite:
        return
    adapters = out / "adapters"
    try:
        finished = any(r.get("iteration") == cfg.iterations for r in read_jsonl(out / "eval.jsonl"))
    except OSError:  # no log, or not a regular file (refused by _check_entries)
        finished = False
    if (adapters.is_dir() and any(adapters.iterdir())) or finished:
        what = "adapters and final evaluation" if finished else "adapters"
        raise FileExistsError(f"{out} holds a run that wrote a checkpoint (its {what} are there) but {CHECKPOINT} "
                              "is missing: it cannot continue, and starting again would "
                              "retrain it from scratch over its logs and adapters; restore checkpoint.pt, choose "
                              "another --out, or pass --overwrite to retrain it")


def _check_resume(out: Path, cfg, spec) -> None:
    from recast.trainer.runfiles import check_checkpoint_config, read_run_config

    if not (out / CHECKPOINT).is_file():
        raise FileNotFoundError(f"cannot resume: no checkpoint at {out / CHECKPOINT}")
    saved = read_run_config(out)  # names config.json and a field of the wrong type (a hand edit)
    check_resume_config(out, cfg.to_dict(), resolved=RESOLVED_FIELDS if spec is not None else ())
    _need(is_recast_run(out), f"cannot resume: {out / 'config.json'} is not a recast run's config")
    # the checkpoint must be this run's (not one copied in from another run); its tensors are mapped, not read
    check_checkpoint_config(out, load_checkpoint(out, mmap=True), saved)
    if spec is not None:
        _check_resolved(out, cfg, spec)


def _check_resolved(out: Path, cfg, spec) -> None:
    """The reward names and budgets of a run's marker against those its config resolves to now."""
    marker = read_json(out / "config.json")[RUN_MARKER]
    names, lam = tuple(marker.get("reward_names", spec.reward_names)), marker.get("lam")
    _need(names == spec.reward_names,
          f"cannot resume {out}: it trained the rewards {list(names)}, but the config now resolves to "
          f"{list(spec.reward_names)} (setting {cfg.setting!r}); resume with --rewards {','.join(names)}")
    same = lam is None or (len(lam) == len(spec.lam) and torch.allclose(
        torch.tensor(lam, dtype=torch.float64), spec.lam, rtol=0, atol=1e-12))
    _need(same, f"cannot resume {out}: it trained the budgets {lam}, but the config now resolves to "
                f"{[round(x, 6) for x in spec.lam.tolist()]} (the setting's default budgets changed?); resume with "
                f"--lam {','.join(f'{x:g}' for x in (lam or []))}")


def unlink_run_files(out: Path) -> None:
    """Remove what a fresh start replaces, never through a link: links are removed as links, and only the run's
    own files and the grid PNGs directly in `grids/` (config.json is rewritten, not removed)."""
    for name in RUN_FILES:
        target = out / name
        if target.is_symlink():
            target.unlink()
        elif name == "adapters" and target.is_dir():
            shutil.rmtree(target)  # rmtree never follows a link inside the tree
        elif target.is_dir():
            for png in target.glob("*.png"):  # the old run's grids must not sit beside the new ones
                if png.is_symlink() or png.is_file():
                    png.unlink()
        elif name != "config.json":
            target.unlink(missing_ok=True)
