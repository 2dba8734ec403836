"""Checkpoints that restore a run bit-exactly: parameters, old policy, EMA, optimiser, every RNG (each process's own,
``rng_ranks``, when there are several: `recast.trainer.ranks`), tracker, iteration.

A checkpoint is one file, `<run>/checkpoint.pt`, written to a temp file and renamed over the old one, so a crash
never leaves a half-written checkpoint and the last good one survives. It holds only tensors and plain data (dict,
list, tuple, str, int, float, bool, None) and is read with `torch.load(..., weights_only=True)`: loading a checkpoint
never runs code, whoever made the file. It also carries the run's log files as they were when it was written, so a
resumed run rewrites them exactly (a torn last line, records logged after the checkpoint, or lines lost from the
file cannot leave a gap), and a fingerprint of the base model's weights, so a resume onto a changed base is refused.
"""

from __future__ import annotations

import hashlib
import io
import random
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import torch

from recast.io import atomic_write_bytes, read_json, read_jsonl, to_jsonable

__all__ = ["CHECKPOINT", "FORMAT", "LOG_FILES", "RESUMABLE_FIELDS", "CheckpointError", "capture_rng", "restore_rng",
           "check_plain", "save_checkpoint", "load_checkpoint", "check_resume_config", "upgrade_config", "config_diff",
           "weights_fingerprint",
           "world_fingerprint",
           "capture_logs", "restore_logs", "truncate_jsonl", "non_finite"]

CHECKPOINT = "checkpoint.pt"
FORMAT = "recast-checkpoint/2"  # version 1 (pickled numpy RNG states) needed weights_only=False and is refused
LOG_FILES = ("metrics.jsonl", "weights.jsonl", "eval.jsonl")
# Fields that may change between a run and its resumption (they do not change the trajectory up to the checkpoint).
RESUMABLE_FIELDS = ("iterations", "progress", "log_with", "checkpoint_every", "checkpoint_minutes", "eval_every",
                    "grid_every")
# Fields whose resolved values (reward names, normalised budgets) the run marker holds; `validate` compares those.
RESOLVED_FIELDS = ("setting", "rewards", "lam")
# Fields added after runs existed, whose default reproduces those runs exactly: a config.json that lacks one matches
# a config that holds its default (so runs made before trajectory replay still resume).
LATER_FIELDS = ("replay_share", "replay_priority", "replay_capacity", "replay_max_age", "step_credit_eps", "otca_explore",
                "world_settings", "sdpa_backend", "lora_merge_rollouts", "compile_blocks", "aggregation",
                "weight_file", "kernel", "lora_merged_old", "lora_bf16", "recompute_blocks", "initialize_from",
                "fsdp", "checkpoint_minutes")
# Values that name one behaviour: "auto" mixed precision resolves to "no" unless accelerate is configured otherwise
# (the run marker records what it resolved to), so a run made when the default was "no" still resumes.
SAME_VALUES = {"mixed_precision": ({"no", "auto"},)}


class CheckpointError(ValueError):
    """A checkpoint file that cannot be read as a recast checkpoint (the message names the file)."""


def capture_rng(generators: dict[str, torch.Generator]) -> dict:
    """States of python, numpy, torch (CPU and CUDA) and of the named torch generators, as tensors and plain data."""
    version, py_state, gauss = random.getstate()
    key, mt, pos, has_gauss, cached = np.random.get_state()
    state = {"python": {"version": version, "state": torch.tensor(py_state, dtype=torch.int64), "gauss": gauss},
             "numpy": {"key": str(key), "state": torch.from_numpy(mt.astype(np.int64)), "pos": int(pos),
                       "has_gauss": int(has_gauss), "gauss": float(cached)},
             "torch": torch.get_rng_state(), "generators": {k: g.get_state() for k, g in generators.items()}}
    if torch.cuda.is_available():
        state["cuda"] = list(torch.cuda.get_rng_state_all())
    return state


def restore_rng(state: dict, generators: dict[str, torch.Generator]) -> None:
    """Inverse of `capture_rng` (generators are restored in place)."""
    missing = set(generators) - set(state["generators"])
    if missing:
        raise ValueError(f"checkpoint has no RNG state for generators {sorted(missing)}")
    py = state["python"]
    random.setstate((int(py["version"]), tuple(int(x) for x in py["state"].tolist()), py["gauss"]))
    npy = state["numpy"]
    np.random.set_state((npy["key"], npy["state"].numpy().astype(np.uint32), int(npy["pos"]), int(npy["has_gauss"]),
                         float(npy["gauss"])))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    for k, g in generators.items():
        g.set_state(state["generators"][k])


_PLAIN = (str, int, float, bool, type(None))


def check_plain(obj, where: str = "state") -> None:
    """Raise TypeError naming the first entry of `obj` that is not a tensor or plain data.

    Plain data is what `torch.load(weights_only=True)` accepts without running code: dict (str keys), list, tuple,
    str, int, float, bool, None, and torch tensors.
    """
    if isinstance(obj, torch.Tensor) or isinstance(obj, _PLAIN):
        return
    if isinstance(obj, dict):
        for k, v in obj.items():
            if not isinstance(k, (str, int)):
                raise TypeError(f"checkpoint {where} has a key of type {type(k).__name__} ({k!r}); use str keys")
            check_plain(v, f"{where}[{k!r}]")
        return
    if isinstance(obj, (list, tuple)) and type(obj) in (list, tuple):
        for i, v in enumerate(obj):
            check_plain(v, f"{where}[{i}]")
        return
    raise TypeError(f"checkpoint {where} is a {type(obj).__module__}.{type(obj).__qualname__}; a checkpoint may hold "
                    "only tensors and plain data (dict/list/tuple/str/int/float/bool/None), so that it loads with "
                    "torch.load(weights_only=True): convert it (e.g. numpy arrays to tensors, dataclasses to dicts)")


def save_checkpoint(run_dir: str | Path, state: dict) -> Path:
    """Atomically write `state` (tensors and plain data only) to `<run_dir>/checkpoint.pt`.

    Raises:
        TypeError: naming the entry of `state` that is not a tensor or plain data (nothing is written).
    """
    state = {**state, "format": FORMAT}
    check_plain(state)
    buf = io.BytesIO()
    torch.save(state, buf)
    return atomic_write_bytes(Path(run_dir) / CHECKPOINT, buf.getvalue())


def load_checkpoint(run_dir: str | Path, *, mmap: bool = False, action: str = "cannot resume") -> dict:
    """Read `<run_dir>/checkpoint.pt` with `weights_only=True` (no code from the file runs).

    Args:
        mmap: map the tensors instead of reading them (to read the checkpoint's config of a large run cheaply).
        action: how messages begin ("cannot resume", "cannot export", ...).

    Raises:
        FileNotFoundError: there is no checkpoint (with a hint).
        CheckpointError: the file is empty, truncated, corrupt, holds code or objects, or is not a recast checkpoint
            of this format; the message names the file.
    """
    path = Path(run_dir) / CHECKPOINT
    if not path.is_file():
        raise FileNotFoundError(f"{action}: no checkpoint at {path} (start without --resume, or point --out at "
                                "the run directory that holds checkpoint.pt)")
    if path.stat().st_size == 0:
        raise CheckpointError(f"{action}: {path} is empty (0 bytes); start the run again with --overwrite")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except Exception as err:  # noqa: BLE001 — unpickling errors come in many types; all mean "not loadable"
        first = str(err).strip().splitlines()[0][:200] if str(err).strip() else type(err).__name__
        raise CheckpointError(f"{action}: {path} is not a loadable recast checkpoint ({type(err).__name__}: "
                              f"{first}). It may be truncated or corrupt, or hold code or objects, which are never "
                              "loaded; start the run again with --overwrite") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        found = state.get("format") if isinstance(state, dict) else type(state).__name__
        raise CheckpointError(f"{action}: {path} is not a {FORMAT} checkpoint (found {found!r})")
    return state


def check_resume_config(run_dir: str | Path, cfg_dict: dict, source: str | None = None, *,
                        resolved: tuple[str, ...] = ()) -> None:
    """Raise ValueError naming each field where `cfg_dict` differs from the run's saved config.json.

    Fields in RESUMABLE_FIELDS may differ (e.g. more iterations); a field in LATER_FIELDS missing from one side
    counts as its default.

    Args:
        run_dir: the run directory.
        cfg_dict: the config to compare (the run's now, or the checkpoint's own).
        source: what `cfg_dict` is, for the message ("now" by default).
        resolved: fields the caller compares after resolving them instead (`recast.trainer.validate.validate`
            compares the reward names and budgets a config resolves to with the run marker's, so a run whose
            setting's defaults changed since can be resumed by naming what it trained: RESOLVED_FIELDS).
    """
    path = Path(run_dir) / "config.json"
    if not path.is_file():
        raise FileNotFoundError(f"cannot resume: {path} is missing (is {run_dir} a run directory?)")
    saved = read_json(path)
    if not isinstance(saved, dict):
        raise ValueError(f"cannot resume: {path} does not hold a recast config (a JSON object)")
    detail = config_diff(saved, cfg_dict, source or "now", resolved=resolved)
    if detail:
        raise ValueError(f"cannot resume {run_dir}: config differs from the saved config.json ({detail}); "
                         "resume with the same settings or start a new --out")


def config_diff(saved: dict, other: dict, label: str, *, resolved: tuple[str, ...] = ()) -> str:
    """The fields where `other` differs from a run's saved config.json, as "field: config.json A vs LABEL B, ..."
    ("" where they agree); the rules of `check_resume_config` (RESUMABLE_FIELDS may differ, LATER_FIELDS default)."""
    from recast.bounded import short_repr
    from recast.config import TrainConfig

    saved, now = upgrade_config(saved), upgrade_config(to_jsonable(other))
    default = TrainConfig().to_dict()
    later = {k: default[k] for k in LATER_FIELDS}

    def same(k, a, b) -> bool:
        return a == b or any(a in group and b in group for group in SAME_VALUES.get(k, ()))

    diff = [k for k in sorted(set(saved) | set(now))
            if k not in RESUMABLE_FIELDS and k not in resolved and not k.startswith("_")
            and not same(k, saved.get(k, later.get(k)), now.get(k, later.get(k)))]
    return ", ".join(f"{k}: config.json {short_repr(saved.get(k, later.get(k)))} vs {label} "
                     f"{short_repr(now.get(k, later.get(k)))}" for k in diff)


def upgrade_config(d: dict) -> dict:
    """A config saved before the paper's recipe took the name "recast" (no ``aggregation`` field) with its method as
    it is named now: that "recast" estimated W live, which is method "recast_live" today."""
    if isinstance(d, dict) and "aggregation" not in d and d.get("method") == "recast":
        return {**d, "method": "recast_live"}
    return d


def weights_fingerprint(modules: Iterable[torch.nn.Module]) -> str:
    """SHA-256 over the names, dtypes, shapes and bytes of every tensor in the modules' state dicts (hex)."""
    h = hashlib.sha256()
    for module in modules:
        for name, t in module.state_dict().items():
            t = t.detach().to("cpu").contiguous()
            h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
            h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def world_fingerprint(world) -> str:
    """The fingerprint of a world's base weights as runs record it: transformer and text encoder, each once, taken
    before LoRA is added (`weights_fingerprint`)."""
    modules = (getattr(world, "transformer", None), getattr(world, "text_encoder", None))
    return weights_fingerprint({id(m): m for m in modules if isinstance(m, torch.nn.Module)}.values())


def capture_logs(run_dir: str | Path) -> dict[str, str]:
    """The run's log files as they are now (only those that exist)."""
    run_dir = Path(run_dir)
    return {name: (run_dir / name).read_text() for name in LOG_FILES if (run_dir / name).is_file()}


def restore_logs(run_dir: str | Path, logs: dict[str, str], keep_evals_at: int | None = None) -> None:
    """Rewrite each log file exactly as the checkpoint saw it (files it did not see are removed).

    Args:
        keep_evals_at: the checkpoint's iteration. The evaluation of that iteration runs after the checkpoint is
            written (so a killed evaluation loses no training); a record of it in eval.jsonl is kept, because
            evaluating changes nothing the checkpoint holds. Without it, extending a finished run would drop its
            last evaluation.
    """
    import json

    run_dir = Path(run_dir)
    for name in LOG_FILES:
        text = logs.get(name)
        if name == "eval.jsonl" and keep_evals_at is not None and (run_dir / name).is_file():
            seen = {r.get("iteration") for r in _parse_jsonl(text or "")}
            extra = [r for r in read_jsonl(run_dir / name)
                     if r.get("iteration") == keep_evals_at and keep_evals_at not in seen]
            if extra:
                text = (text or "") + "".join(json.dumps(r) + "\n" for r in extra[-1:])
        if text is not None:
            atomic_write_bytes(run_dir / name, text.encode())
        else:
            (run_dir / name).unlink(missing_ok=True)


def _parse_jsonl(text: str) -> list[dict]:
    import json

    out = []
    for line in text.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict):
            out.append(rec)
    return out


def truncate_jsonl(path: str | Path, last_iteration: int) -> None:
    """Keep only records with `iteration <= last_iteration` (drops what a killed run wrote after its checkpoint)."""
    path = Path(path)
    if not path.is_file():
        return
    import json

    keep = [r for r in read_jsonl(path) if r.get("iteration", -1) <= last_iteration]
    atomic_write_bytes(path, "".join(json.dumps(r) + "\n" for r in keep).encode())


def non_finite(tensors: dict[str, torch.Tensor | None]) -> list[str]:
    """Names of the tensors in `tensors` that hold a NaN or inf (None entries are skipped)."""
    return [k for k, t in tensors.items()
            if t is not None and t.is_floating_point() and not bool(torch.isfinite(t).all())]

