"""`python -m recast tiny-sd3 OUT`: the stand-ins that let the paper-scale commands run on any CPU.

    recast tiny-sd3 runs/tiny_sd3      # runs/tiny_sd3/sd35 and runs/tiny_sd3/reward_ckpts

It writes a tiny random SD3 pipeline as a diffusers folder, in place of SD3.5-Medium's, and tiny random reward models
laid out as the real ones are (`recast.worlds.sd3.folders`): SD35=OUT/sd35 and REWARDS=OUT/reward_ckpts then drive
the README's paper-scale block at toy size. It measures nothing. A rerun keeps what is there.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys

__all__ = ["FOLDERS", "add_parser", "run"]

# the SD3 world's writer, named as recast.world names a world's code, so no generic module imports a world package
FOLDERS = "recast.worlds.sd3.folders"


def add_parser(sub) -> argparse.ArgumentParser:
    """Register the `tiny-sd3` subcommand on an argparse subparsers object."""
    p = sub.add_parser("tiny-sd3", help="write a tiny random SD3 pipeline and reward models (OUT/sd35, "
                       "OUT/reward_ckpts) for the paper-scale commands at toy size")
    p.add_argument("out", help="folder for sd35/ and reward_ckpts/ (created; what is already there is kept)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random weights")
    return p


def run(args: argparse.Namespace) -> int:
    """The subcommand: one line per folder, then the variables the paper-scale block reads."""
    folders = importlib.import_module(FOLDERS)
    try:
        paths = folders.write_folders(args.out, args.seed)
    except (ValueError, FileExistsError, json.JSONDecodeError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for name, what in ((folders.PIPELINE, "a tiny random SD3 pipeline"), (folders.REWARDS, "tiny random reward models")):
        verb = "wrote" if name in paths["written"] else "kept"
        print(f"{verb} {paths[name]} ({what})")
    print(f"SD35={paths[folders.PIPELINE]} REWARDS={paths[folders.REWARDS]}")
    return 0
