"""A trained run's own files, read and checked in one place: its config.json, and whether its checkpoint.pt is its
own. Everything that reads a checkpoint of a run (resume, ``--auto``, export, `recast.experiments.judge_eval`) goes
through `check_checkpoint_config`, so a checkpoint.pt copied in from another run, or a config.json edited after
training, is refused wherever it is read rather than used as this run's.
"""

from __future__ import annotations

import math
from pathlib import Path

from recast.io import read_json
from recast.trainer.checkpoint import CHECKPOINT, CheckpointError, config_diff, load_checkpoint

__all__ = ["read_run_config", "check_checkpoint_config", "load_trained"]


def read_run_config(run_dir: str | Path) -> dict:
    """A run's config.json as a dict, its fields checked against `TrainConfig`'s types.

    Returns:
        The JSON object as written (the ``_run`` marker included).

    Raises:
        FileNotFoundError: no config.json (not a run directory).
        ValueError: naming config.json: not JSON, not an object, an unknown field, or a field of the wrong type
            (e.g. ``iterations: "abc"``, naming the field).
    """
    from recast.config import INF_OK, TrainConfig, check_field_types

    path = Path(run_dir) / "config.json"
    if not path.is_file():
        raise FileNotFoundError(f"{run_dir} is not a run directory (no config.json)")
    raw = read_json(path)
    if not isinstance(raw, dict):
        raise ValueError(f"{path} does not hold a recast config (a JSON object), but a {type(raw).__name__}")
    # strict JSON stores the one infinite value a config may hold (temperature inf) as null
    fields = {k: (math.inf if v is None and k in INF_OK else v) for k, v in raw.items() if not k.startswith("_")}
    try:
        check_field_types(TrainConfig.from_dict(fields))
    except (TypeError, ValueError) as err:
        raise ValueError(f"{path}: {err}") from None
    return raw


def check_checkpoint_config(run_dir: str | Path, state: dict, saved: dict | None = None) -> None:
    """Refuse a checkpoint whose own config differs from the run's config.json (fields a resume may change apart;
    the world by the fingerprints of its base weights where both record one, not by its path).

    Args:
        state: the checkpoint (`recast.trainer.checkpoint.load_checkpoint`).
        saved: config.json if already read (`read_run_config`).

    Raises:
        ValueError: naming the fields, both values and both files.
    """
    saved = read_run_config(run_dir) if saved is None else saved
    own = state.get("config")
    # A run moved with its world names the world's new place: the world is compared by the fingerprints of its base
    # weights (each checked against the weights on disk wherever they are loaded; a run made before fingerprints
    # has none and is loaded unchecked), never by its path.
    marker = saved.get("_run") if isinstance(saved.get("_run"), dict) else {}
    fp, recorded = state.get("world_fingerprint"), marker.get("world_fingerprint")
    detail = config_diff(saved, own if isinstance(own, dict) else {}, CHECKPOINT, resolved=("world",))
    if fp and recorded and fp != recorded:
        detail = ", ".join(filter(None, [detail, f"base weights: config.json {str(recorded)[:12]} vs {CHECKPOINT} "
                                                 f"{str(fp)[:12]}"]))
    if detail:
        raise ValueError(f"{Path(run_dir) / CHECKPOINT} is not the checkpoint of the run in "
                         f"{Path(run_dir) / 'config.json'} ({detail}): copied from another run, or config.json "
                         "edited after training? Put back this run's own files, or use the run the checkpoint came "
                         "from")


def load_trained(run_dir: str | Path, action: str, *, mmap: bool = False) -> tuple[dict, dict]:
    """A run's config.json (`read_run_config`) and its checkpoint, checked to be this run's
    (`check_checkpoint_config`), for reading a trained policy.

    Args:
        action: how messages begin ("cannot export", "cannot load").

    Raises:
        FileNotFoundError: no config.json, or no checkpoint yet (a run stopped before its first one).
        CheckpointError / ValueError: an unreadable checkpoint, or one that is not this run's.
    """
    run_dir = Path(run_dir)
    saved = read_run_config(run_dir)
    if not (run_dir / CHECKPOINT).is_file():
        raise FileNotFoundError(f"{action} {run_dir}: it has no {CHECKPOINT} yet (stopped before its first "
                                "checkpoint?); train it until it writes one (checkpoint_every, or its last iteration)")
    state = load_checkpoint(run_dir, mmap=mmap, action=f"{action} {run_dir}")
    if not isinstance(state.get("policy"), dict):
        raise CheckpointError(f"{action} {run_dir}: its {CHECKPOINT} holds no policy")
    check_checkpoint_config(run_dir, state, saved)
    return saved, state
