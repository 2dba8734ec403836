"""`python -m recast profile`: when is each reward informative, before spending a training run on it.

    python -m recast profile --setting compose --estimator rollout --out runs/profile
    python -m recast profile --rewards digit,size --lam 0.7,0.3 --json > profile.json

For a world, a prompt split and a reward set it computes D_k(σ) on the model's own samples with either estimator
(`recast.informativeness.probe.estimate_profiles`), writes OUT/profile.json (σ grid, D, its 5-95 % bootstrap
band, the gains, their noise shares and the W they give) and draws OUT/profile.{png,pdf}. `--json` prints the same
object to stdout. Bad input exits 2 with a one-line message before any compute.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

__all__ = ["add_parser", "run", "profile_object"]


def add_parser(sub) -> argparse.ArgumentParser:
    """Register the `profile` subcommand on an argparse subparsers object."""
    p = sub.add_parser("profile", help="D_k(sigma) of a world's rewards with a band, its gains and W (profile.json)")
    p.add_argument("--world", default=None, help="world spec: a digit-world folder, tiny, sd3:PATH, ... (default "
                   "data/digit_base, or the --config file's)")
    p.add_argument("--split", default="train", help="prompt split: train | test")
    p.add_argument("--setting", default="compose", help="reward setting: compose | quality")
    p.add_argument("--rewards", help="comma-separated reward names (instead of --setting), or all (every reward of every setting)")
    p.add_argument("--lam", default="", help="budgets, one per reward, comma-separated (default: the setting's "
                   "budgets, equal unless the world sets them; equal with --rewards)")
    p.add_argument("--estimator", default="tweedie", help="tweedie (cheap) | rollout (ground truth)")
    p.add_argument("--num-prompts", type=int, default=64, help="samples, one per prompt spread over the split")
    p.add_argument("--num-steps", type=int, default=None, help="T: grid steps, the columns of W (default 6)")
    p.add_argument("--shift", type=float, default=None, help="SD3 time shift of the grid (default 3)")
    p.add_argument("--num-rollouts", type=int, default=8, help="M continuations per state (rollout)")
    p.add_argument("--substeps", type=int, default=16, help="ancestral steps per grid step (sampling, rollout); 16 "
                   "is where the digit world's attribute rewards' ground truth settles (4 decides them early)")
    p.add_argument("--bootstrap", type=int, default=200, help="bootstrap replicates for the band and noise shares")
    p.add_argument("--temperature", type=float, default=1.0, help="solver temperature tau")
    p.add_argument("--alpha", type=float, default=2.0, help="Renyi order")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu", help="cpu | cuda")
    p.add_argument("--out", default="runs/profile", help="folder for profile.json and profile.{png,pdf}")
    p.add_argument("--json", action="store_true", help="also print the profile object to stdout")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out archive (--proposal)")
    from recast.experiments.weights_cli import add_proposal_arguments

    add_proposal_arguments(p)
    return p


def _checked(args: argparse.Namespace):
    """Resolve and check every input before any compute; returns (world spec, reward names, lam)."""
    from recast.config import default_budgets, resolve_world
    from recast.informativeness.probe import ESTIMATORS
    from recast.world import world_info

    if args.estimator not in ESTIMATORS:
        raise ValueError(f"unknown --estimator {args.estimator!r}; choose one of {ESTIMATORS}")
    from recast.experiments.weights_cli import refuse_sets_without_config

    refuse_sets_without_config(args)
    spec = resolve_world(args.world)
    info = world_info(spec)  # a missing or damaged world is refused here, before any weights are read
    if args.rewards == "all":  # every reward some setting trains
        names = tuple(dict.fromkeys(n for setting in info.reward_settings.values() for n in setting))
    elif args.rewards:
        names = tuple(n for n in args.rewards.split(",") if n)
    elif args.setting in info.reward_settings:
        names = tuple(info.reward_settings[args.setting])
    else:
        raise ValueError(f"unknown --setting {args.setting!r}; choose one of {sorted(info.reward_settings)}")
    unknown = [n for n in names if n not in info.reward_names]
    if unknown:
        raise ValueError(f"unknown reward(s) {unknown} for world {spec!r}; valid: {', '.join(info.reward_names)}")
    if args.split not in info.splits:
        raise ValueError(f"unknown --split {args.split!r}; choose one of {list(info.splits)}")
    try:
        lam = tuple(float(x) for x in args.lam.split(",") if x.strip())
    except ValueError:
        raise ValueError(f"--lam expects comma-separated numbers, got {args.lam!r}") from None
    lam = default_budgets(info, args.setting, lam=lam, rewards=names if args.rewards else ())
    if lam and (len(lam) != len(names) or min(lam) < 0 or sum(lam) <= 0 or any(x != x for x in lam)):
        raise ValueError(f"--lam needs {len(names)} budgets >= 0 with a positive sum, got {args.lam!r}")
    if getattr(args, "proposal", None):
        return spec, names, lam
    for flag, value, low in [("--num-prompts", args.num_prompts, 4), ("--num-steps", args.num_steps, 1),
                             ("--num-rollouts", args.num_rollouts, 1), ("--substeps", args.substeps, 1),
                             ("--bootstrap", args.bootstrap, 0)]:
        if value < low:
            raise ValueError(f"{flag} must be >= {low}, got {value}")
    if not (args.temperature > 0 and args.alpha > 0 and args.shift > 0):
        raise ValueError("--temperature, --alpha and --shift must be > 0")
    return spec, names, lam


def profile_object(args: argparse.Namespace, spec: str, names, lam):
    """Load the world, compute the profile; returns (the JSON object, the Profile)."""
    import torch

    from recast.informativeness.probe import estimate_profiles
    from recast.world import load_world

    world = load_world(spec, seed=args.seed).to(args.device)
    world.freeze()
    pool = world.prompts(args.split)
    prompts = pool[:: max(1, len(pool) // args.num_prompts)][:args.num_prompts]
    with torch.no_grad():
        prof = estimate_profiles(world, names, prompts, estimators=(args.estimator,), lam=lam,
                                 num_steps=args.num_steps, shift=args.shift, num_rollouts=args.num_rollouts,
                                 substeps=args.substeps, alpha=args.alpha, temperature=args.temperature,
                                 bootstrap=args.bootstrap, seed=args.seed)[args.estimator]
    obj = {"world": str(args.world), "split": args.split, "num_prompts": len(prompts), "seed": args.seed,
           "num_rollouts": args.num_rollouts if args.estimator == "rollout" else None, "substeps": args.substeps,
           "bootstrap": args.bootstrap, "temperature": args.temperature, "alpha": args.alpha, **prof.to_json()}
    return obj, prof


def _figure(prof, out: Path) -> list[Path]:
    """D_k(σ) with its band per reward, and the W the gains give."""
    import matplotlib.pyplot as plt

    from recast.informativeness.probe import plot_profiles
    from recast.plotting import plot_weights, savefig

    K = len(prof.reward_names)
    fig = plt.figure(figsize=(3.2 * K + 4.5, 3.2), constrained_layout=True)
    axes = fig.subplots(1, K + 1, gridspec_kw={"width_ratios": [1] * K + [1.6]})
    plot_profiles({prof.estimator: prof}, axes=axes[:K])
    plot_weights(prof.W, list(prof.reward_names), ax=axes[K], annotate=K * prof.W.shape[1] <= 60,
                 title=f"W ({prof.estimator})")
    paths = savefig(fig, "profile", outdir=out)
    plt.close(fig)
    return paths


def run(args: argparse.Namespace) -> int:
    """Entry point of `python -m recast profile`; returns the exit status."""
    # the flags a --config may fill default to None, so a value typed is told from a default
    args.world_given, args.num_steps_given, args.shift_given = (args.world is not None, args.num_steps is not None,
                                                                args.shift is not None)
    if args.world is None:
        args.world = "data/digit_base"
    if args.num_steps is None:
        args.num_steps = 6
    if args.shift is None:
        args.shift = 3.0
    from recast.io import write_json

    try:
        if args.proposal and getattr(args, "train_config", None):  # the world and rewards come from the config
            from recast.experiments.weights_cli import run_proposal

            given = tuple(n for n in (args.rewards or "").split(",") if n)
            return run_proposal(args, None, given)
        spec, names, lam = _checked(args)
        if args.proposal:
            from recast.experiments.weights_cli import run_proposal

            return run_proposal(args, spec, names)
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        from recast.io import check_target

        for suffix in (".json", ".png", ".pdf"):  # a link or a folder where a file goes: refused before compute
            check_target(out / f"profile{suffix}")
    except (ValueError, FileNotFoundError, FileExistsError, PermissionError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except OSError as err:
        print(f"error: --out {args.out} is not writable ({err.strerror})", file=sys.stderr)
        return 2
    obj, prof = profile_object(args, spec, names, lam)
    write_json(out / "profile.json", obj)
    _figure(prof, out)
    if args.json:
        from recast.io import to_jsonable

        print(json.dumps(to_jsonable(obj)))
    else:
        print(f"profile of {', '.join(names)} ({args.estimator}, {obj['num_prompts']} samples) in {out}/profile.json")
    return 0
