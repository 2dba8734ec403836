"""Checkpoints that restore a run bit-exactly: parameters, old policy, EMA, optimiser, every RNG, tracker, iteration.

A checkpoint is one file, `<run>/checkpoint.pt`, written to a temp file and renamed over the old one, so a crash
never leaves a half-written checkpoint and the last good one survives. The run's log files are cut back to the
checkpoint's iteration on resume, so a killed run continues exactly as if it had never stopped.
"""

from __future__ import annotations

import io
import json
import random
from pathlib import Path

import numpy as np
import torch

from recast.io import atomic_write_bytes, read_json, read_jsonl, to_jsonable

__all__ = ["CHECKPOINT", "RESUMABLE_FIELDS", "capture_rng", "restore_rng", "save_checkpoint", "load_checkpoint",
           "check_resume_config", "truncate_jsonl"]

CHECKPOINT = "checkpoint.pt"
# Fields that may change between a run and its resumption (they do not change the trajectory up to the checkpoint).
RESUMABLE_FIELDS = ("iterations", "progress", "log_with", "checkpoint_every", "eval_every", "grid_every")


def capture_rng(generators: dict[str, torch.Generator]) -> dict:
    """States of python, numpy, torch (CPU and CUDA) and of the named torch generators."""
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state(),
             "generators": {k: g.get_state() for k, g in generators.items()}}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict, generators: dict[str, torch.Generator]) -> None:
    """Inverse of `capture_rng` (generators are restored in place)."""
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    missing = set(generators) - set(state["generators"])
    if missing:
        raise ValueError(f"checkpoint has no RNG state for generators {sorted(missing)}")
    for k, g in generators.items():
        g.set_state(state["generators"][k])


def save_checkpoint(run_dir: str | Path, state: dict) -> Path:
    """Atomically write `state` (a dict of tensors and plain values) to `<run_dir>/checkpoint.pt`."""
    buf = io.BytesIO()
    torch.save(state, buf)
    return atomic_write_bytes(Path(run_dir) / CHECKPOINT, buf.getvalue())


def load_checkpoint(run_dir: str | Path) -> dict:
    """Read `<run_dir>/checkpoint.pt`; FileNotFoundError with a hint when there is none."""
    path = Path(run_dir) / CHECKPOINT
    if not path.is_file():
        raise FileNotFoundError(f"cannot resume: no checkpoint at {path} (start without --resume, or point --out at "
                                "the run directory that holds checkpoint.pt)")
    return torch.load(path, map_location="cpu", weights_only=False)


def check_resume_config(run_dir: str | Path, cfg_dict: dict) -> None:
    """Raise ValueError naming each field where `cfg_dict` differs from the run's saved config.json.

    Fields in RESUMABLE_FIELDS may differ (e.g. more iterations).
    """
    path = Path(run_dir) / "config.json"
    if not path.is_file():
        raise FileNotFoundError(f"cannot resume: {path} is missing (is {run_dir} a run directory?)")
    saved = read_json(path)
    now = to_jsonable(cfg_dict)
    diff = [k for k in sorted(set(saved) | set(now))
            if k not in RESUMABLE_FIELDS and not k.startswith("_") and saved.get(k) != now.get(k)]
    if diff:
        detail = ", ".join(f"{k}: saved {saved.get(k)!r} vs now {now.get(k)!r}" for k in diff)
        raise ValueError(f"cannot resume {run_dir}: config differs from the saved config.json ({detail}); "
                         "resume with the same settings or start a new --out")


def truncate_jsonl(path: str | Path, last_iteration: int) -> None:
    """Keep only records with `iteration <= last_iteration` (drops what a killed run wrote after its checkpoint)."""
    path = Path(path)
    if not path.is_file():
        return
    keep = [r for r in read_jsonl(path) if r.get("iteration", -1) <= last_iteration]
    atomic_write_bytes(path, "".join(json.dumps(r) + "\n" for r in keep).encode())
