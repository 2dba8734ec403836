"""Command line of the ReCAST trainer.

    python -m recast train --preset cpu --setting compose --method recast --lam 0.4,0.15,0.15,0.15,0.15 --out runs/x
    python -m recast demo                  # ReCAST vs uniform, compose, cpu preset, seeds 0,1,2 (recast/experiments/demo.py)
    python -m recast profile --setting compose --estimator rollout   # when is each reward informative (profile.py)

Bad input exits with status 2 and a one-line message saying what to fix (no traceback).
"""

from __future__ import annotations

import argparse
import sys

from recast.config import BACKENDS, METHODS, TrainConfig, parse_floats, parse_overrides, preset


def _floats(text: str) -> tuple[float, ...]:
    try:
        return parse_floats(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None


def _override(text: str) -> tuple[str, object]:
    """`key=value` for any TrainConfig field; the value is parsed by the field's type (errors name the field)."""
    try:
        return next(iter(parse_overrides([text]).items()))
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _list_option(option: str, text: str, kind=str) -> tuple:
    """A non-empty comma-separated list for `option`; errors name the option."""
    items = [x.strip() for x in text.split(",") if x.strip()]
    if not items:
        raise ValueError(f"{option} is empty: give a comma-separated list, e.g. {option} 0,1,2")
    try:
        return tuple(kind(x) for x in items)
    except ValueError:
        raise ValueError(f"{option} expects comma-separated {kind.__name__}s, got {text!r}") from None


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for tests and docs)."""
    ap = argparse.ArgumentParser(prog="python -m recast", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="run (or resume) online RL training")
    t.add_argument("--preset", default="cpu", help="ci | cpu | gpu | sd35")
    t.add_argument("--world", help="world spec: tiny | digits:PATH | sd3:PATH_OR_HUB_ID | sd3-tiny | a digit-world "
                   "folder")
    t.add_argument("--setting", help="the world's reward setting: compose | quality (digits); composition | "
                   "quality (sd3)")
    t.add_argument("--rewards", help="comma-separated reward names (instead of --setting)")
    t.add_argument("--method", choices=METHODS, help="credit assignment across timesteps")
    t.add_argument("--lam", type=_floats, help="budgets, one per reward, comma-separated (normalised to sum 1; "
                   "default: the setting's, equal unless the world sets them, e.g. quality: sharpness-heavy)")
    t.add_argument("--backend", choices=BACKENDS, help="nft (DiffusionNFT loss) | grpo (Flow-GRPO)")
    t.add_argument("--iterations", type=int)
    t.add_argument("--seed", type=int)
    t.add_argument("--device", help="cpu | cuda")
    t.add_argument("--out", required=True, help="run directory")
    t.add_argument("--resume", action="store_true", help="continue from OUT/checkpoint.pt")
    t.add_argument("--overwrite", action="store_true", help="start over even if OUT holds a run")
    t.add_argument("--fixed-w", metavar="JSON", help="train method=fixed at the W of this file: profile.json of "
                   "`python -m recast profile` (same rewards, budgets and --num-steps) or a mean_W.json")
    t.add_argument("--set", type=_override, action="append", default=[], metavar="FIELD=VALUE",
                   help="override any TrainConfig field (repeatable), e.g. --set nft_beta=0.5")
    d = sub.add_parser("demo", help="ReCAST vs uniform (and other methods), same seeds; summary and paired tables, a figure")
    d.add_argument("--preset", default="cpu", help="ci | cpu | gpu")
    d.add_argument("--setting", default="compose", help="compose | quality")
    d.add_argument("--lam", type=_floats, default=(), help="budgets (default: the setting's; equal in compose, "
                   "sharpness-heavy in quality)")
    d.add_argument("--methods", default="recast,uniform",
                   help="comma-separated methods to compare, e.g. recast,uniform,reward_sum")
    d.add_argument("--seeds", default="0,1,2", help="comma-separated seeds; every method runs every seed")
    d.add_argument("--iterations", type=int, help="override the preset's iterations")
    d.add_argument("--workers", type=int, help="parallel training processes (default: CPU count)")
    d.add_argument("--out", default="runs/demo", help="folder for the runs and results.{json,csv}")
    d.add_argument("--figure", default=None, help="figure name, written beside the results (default: demo_<setting>)")
    from recast.experiments import profile

    profile.add_parser(sub)
    return ap


def _demo(args: argparse.Namespace) -> int:
    from recast.experiments.demo import run_demo

    try:
        result = run_demo(args.out, preset_name=args.preset, setting=args.setting, lam=args.lam,
                          methods=_list_option("--methods", args.methods),
                          seeds=_list_option("--seeds", args.seeds, int), iterations=args.iterations,
                          workers=args.workers, figure_name=args.figure or f"demo_{args.setting}")
    except (ValueError, FileNotFoundError, FileExistsError, PermissionError, TypeError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(result.markdown())
    print(f"\n{len(result.runs)} methods x {len(next(iter(result.runs.values())))} seeds in "
          f"{result.wall_time_s:.0f} s; summary in {result.out_dir}/results.json")
    return 0


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    """The TrainConfig the parsed arguments describe."""
    over = {k: v for k, v in dict(setting=args.setting, method=args.method, lam=args.lam, backend=args.backend,
                                  iterations=args.iterations, seed=args.seed, device=args.device,
                                  world=args.world).items()
            if v is not None}
    if args.rewards:
        over["rewards"] = tuple(r for r in args.rewards.split(",") if r)
    over.update(dict(args.set))
    names = None
    if getattr(args, "fixed_w", None):
        from recast.config import load_fixed_W

        if over.get("method", "fixed") != "fixed":
            raise ValueError(f"--fixed-w trains method='fixed'; drop --method {over['method']}")
        if "fixed_W" in over:
            raise ValueError("give the fixed W once: --fixed-w or --set fixed_W=..., not both")
        over["fixed_W"], names = load_fixed_W(args.fixed_w)
        over["method"] = "fixed"
    cfg = preset(args.preset, **over)
    if names is not None:
        from recast.config import resolve_rewards

        if tuple(names) != resolve_rewards(cfg):
            raise ValueError(f"--fixed-w {args.fixed_w} holds W for rewards {list(names)}, but this run trains "
                             f"{list(resolve_rewards(cfg))}: profile the same rewards, in the same order")
    return cfg


# the extra that installs each package the commands import (pyproject.toml)
EXTRAS = {"diffusers": "train", "transformers": "train", "accelerate": "train", "peft": "train",
          "safetensors": "train", "tqdm": "train", "yaml": "train", "sklearn": "digits", "scipy": "digits",
          "matplotlib": "plot", "seaborn": "plot", "sentencepiece": "sd3", "tensorboard": "tensorboard",
          "wandb": "wandb"}


def main(argv: list[str] | None = None) -> int:
    """Entry point of `python -m recast` and the `recast` script."""
    try:
        return _main(argv)
    except ModuleNotFoundError as err:
        top = (err.name or "").split(".")[0]
        if top not in EXTRAS:
            raise
        print(f"error: this command needs {top!r}, which the core install leaves out: pip install "
              f"'recast[{EXTRAS[top]}]' (or 'recast[all]' for every command)", file=sys.stderr)
        return 2


def _main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "demo":
        return _demo(args)
    if args.command == "profile":
        from recast.experiments import profile

        return profile.run(args)
    try:
        cfg = config_from_args(args)
        from recast.trainer import NonFiniteLossError, Trainer

        trainer = Trainer(cfg, args.out, resume=args.resume, overwrite=args.overwrite)
    except (ValueError, FileNotFoundError, FileExistsError, PermissionError, TypeError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    try:
        run = trainer.run()
    except NonFiniteLossError as err:
        print(f"error: {err}", file=sys.stderr)
        return 3
    last = run.metrics[-1] if run.metrics else {}
    print(f"done: {len(run.metrics)} iterations in {args.out}; last weighted reward "
          f"{last.get('reward/weighted', float('nan')):.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
