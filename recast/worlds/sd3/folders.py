"""The tiny SD3 folders that stand in for SD3.5-Medium and the real reward models: a tiny random pipeline saved as a
diffusers folder (`recast.worlds.sd3.tiny.save_tiny_pipeline`) and tiny random reward models laid out as the real
ones are (`save_tiny_rewards`), so the paper-scale commands run end to end on any CPU. `recast tiny-sd3 OUT` writes
them (`recast.experiments.tiny_sd3`).

Each folder is written beside its final name and renamed into place when complete, so a killed call leaves no half
folder; a rerun keeps what is there (made with the same seed) and writes only what is missing.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from recast.io import check_target, write_json

__all__ = ["PIPELINE", "REWARDS", "write_folders"]

PIPELINE, REWARDS = "sd35", "reward_ckpts"  # the folders' names under OUT
_MARKER = "tiny_sd3.json"  # what made OUT's folders (the seed), so a rerun with another seed is refused


def _check(out: Path, seed: int) -> dict:
    """The marker's record, after refusing an OUT whose folders cannot be ours (before anything is built)."""
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"{out} is a file; tiny-sd3 needs a folder")
    marker = check_target(out / _MARKER)  # a link (dangling or not) planted there is refused, never followed
    record = json.loads(marker.read_text()) if marker.is_file() else {}
    if record and record.get("seed") != seed:
        raise ValueError(f"{out} holds tiny folders made with seed {record.get('seed')}, not {seed}; use that seed "
                         "or another folder")
    for name in (PIPELINE, REWARDS):
        if (out / name).exists() and name not in record.get("written", []):
            raise FileExistsError(f"{out / name} exists and was not written by tiny-sd3; choose another folder")
    return record


def write_folders(out: str | Path, seed: int = 0) -> dict[str, Path]:
    """Write ``out/sd35`` and ``out/reward_ckpts`` unless already there; returns name -> path and whether each was
    written now (``"written"``: the names written by this call).

    Raises:
        ValueError: ``out`` holds folders of another seed.
        FileExistsError: ``out`` is a file, or holds an sd35/ or reward_ckpts/ that tiny-sd3 did not write.
    """
    from recast.worlds.sd3.tiny import save_tiny_pipeline, save_tiny_rewards

    out = Path(out)
    record = _check(out, seed)
    out.mkdir(parents=True, exist_ok=True)
    done = list(record.get("written", []))
    now = []
    for name, save in ((PIPELINE, save_tiny_pipeline), (REWARDS, save_tiny_rewards)):
        if name in done and (out / name).is_dir():
            continue
        partial = out / f".{name}.partial"
        shutil.rmtree(partial, ignore_errors=True)  # a killed earlier call's leftovers, never a finished folder
        save(partial, seed=seed)
        done = list(dict.fromkeys([*done, name]))
        # the marker first: a kill between the two leaves a name whose folder is missing, which a rerun writes
        write_json(out / _MARKER, {"seed": seed, "written": done})  # atomic, never through a link
        partial.rename(out / name)
        now.append(name)
    return {PIPELINE: out / PIPELINE, REWARDS: out / REWARDS, "written": now}
