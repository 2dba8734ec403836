"""`python -m recast tiny-sd3 OUT`: the stand-ins that let the paper-scale commands run on any CPU.

    recast tiny-sd3 runs/tiny_sd3      # runs/tiny_sd3/sd35 and runs/tiny_sd3/reward_ckpts

It writes a tiny random SD3 pipeline as a diffusers folder (`recast.worlds.sd3.tiny.save_tiny_pipeline`), in place
of SD3.5-Medium's, and tiny random reward models laid out as the real ones are (`save_tiny_rewards`): SD35=OUT/sd35
and REWARDS=OUT/reward_ckpts then drive the README's paper-scale block at toy size. It measures nothing.

Each folder is written beside its final name and renamed into place when complete, so a killed command leaves no
half folder; a rerun keeps what is there (made with the same seed) and writes only what is missing.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

__all__ = ["PIPELINE", "REWARDS", "add_parser", "write_folders", "run"]

PIPELINE, REWARDS = "sd35", "reward_ckpts"  # the folders' names under OUT
_MARKER = "tiny_sd3.json"  # what made OUT's folders (the seed), so a rerun with another seed is refused


def add_parser(sub) -> argparse.ArgumentParser:
    """Register the `tiny-sd3` subcommand on an argparse subparsers object."""
    p = sub.add_parser("tiny-sd3", help="write a tiny random SD3 pipeline and reward models (OUT/sd35, "
                       "OUT/reward_ckpts) for the paper-scale commands at toy size")
    p.add_argument("out", help="folder for sd35/ and reward_ckpts/ (created; what is already there is kept)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random weights")
    return p


def _check(out: Path, seed: int) -> dict:
    """The marker's record, after refusing an OUT whose folders cannot be ours (before anything is built)."""
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"{out} is a file; tiny-sd3 needs a folder")
    marker = out / _MARKER
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
        (out / _MARKER).write_text(json.dumps({"seed": seed, "written": done}) + "\n")
        partial.rename(out / name)
        now.append(name)
    return {PIPELINE: out / PIPELINE, REWARDS: out / REWARDS, "written": now}


def run(args: argparse.Namespace) -> int:
    """The subcommand: one line per folder, then the variables the paper-scale block reads."""
    try:
        paths = write_folders(args.out, args.seed)
    except (ValueError, FileExistsError, json.JSONDecodeError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for name, what in ((PIPELINE, "a tiny random SD3 pipeline"), (REWARDS, "tiny random reward models")):
        verb = "wrote" if name in paths["written"] else "kept"
        print(f"{verb} {paths[name]} ({what})")
    print(f"SD35={paths[PIPELINE]} REWARDS={paths[REWARDS]}")
    return 0
