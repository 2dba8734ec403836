"""The arguments of `python -m recast train` and the TrainConfig they describe (shared by the CLI and the sweeps).

A sweep records each run as the exact argument list of `python -m recast train`; parsing it here, not in the CLI,
lets the library read a planned run's config without depending on the command line (tests/test_layers.py).
"""

from __future__ import annotations

import argparse

from recast.config import AGGREGATIONS, BACKENDS, METHODS, TrainConfig, parse_floats, parse_overrides

__all__ = ["add_train_arguments", "train_parser", "config_from_args", "list_option", "floats"]


def floats(text: str) -> tuple[float, ...]:
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


def list_option(option: str, text: str, kind=str) -> tuple:
    """A non-empty comma-separated list for `option`; errors name the option."""
    items = [x.strip() for x in text.split(",") if x.strip()]
    if not items:
        raise ValueError(f"{option} is empty: give a comma-separated list, e.g. {option} 0,1,2")
    try:
        return tuple(kind(x) for x in items)
    except ValueError:
        raise ValueError(f"{option} expects comma-separated {kind.__name__}s, got {text!r}") from None


def add_train_arguments(t: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the options of `python -m recast train` to a parser."""
    t.add_argument("--preset", default=None, help="ci | cpu (= paper) | reading | gpu | sd35 (default: the config file's, else cpu)")
    t.add_argument("--config", metavar="YAML", help="a config file of TrainConfig fields and world_settings (e.g. "
                   "configs/sd35_composition.yaml); the named options and --set override it")
    t.add_argument("--world", help="world spec: tiny | digits:PATH | sd3:PATH_OR_HUB_ID | sd3-tiny | a digit-world "
                   "folder")
    t.add_argument("--setting", help="the world's reward setting: compose | quality (digits); composition | "
                   "quality (sd3)")
    t.add_argument("--rewards", help="comma-separated reward names (instead of --setting)")
    t.add_argument("--method", choices=METHODS, help="credit assignment across timesteps: recast (the paper's), "
                   "static (its baseline), recast_live (our first reading), uniform, reward_sum, fixed, per_step, otca")
    t.add_argument("--aggregation", choices=("auto",) + AGGREGATIONS, help="how raw rewards become the signal "
                   "(default: the method's own; pre and loss are the paper's, per_reward ours)")
    t.add_argument("--initialize-from", metavar="RUN", help="start a new stage from RUN's last checkpoint (LoRA, "
                   "optimiser, old policy, EMA and update count kept; iterations, rewards and budgets this run's own)")
    t.add_argument("--weight-file", metavar="NPZ", help="method recast: a density-ratio profile (solved for the "
                   "run's budgets) or a weight table (default: the world's committed profile)")
    t.add_argument("--lam", type=floats, help="budgets, one per reward, comma-separated (normalised to sum 1; "
                   "default: the setting's, equal unless the world sets them, e.g. quality: sharpness-heavy)")
    t.add_argument("--backend", choices=BACKENDS, help="nft (DiffusionNFT loss) | grpo (Flow-GRPO)")
    t.add_argument("--iterations", type=int)
    t.add_argument("--seed", type=int)
    t.add_argument("--device", help="cpu | cuda")
    t.add_argument("--out", required=True, help="run directory")
    t.add_argument("--resume", action="store_true", help="continue from OUT/checkpoint.pt")
    t.add_argument("--overwrite", action="store_true", help="start over even if OUT holds a run (with --auto: only "
                   "when the run there was made with other settings)")
    t.add_argument("--auto", action="store_true", help="rerun-safe: continue a compatible run in OUT, leave a "
                   "finished one as it is, start an empty OUT; refuse a run made with other settings")
    t.add_argument("--change-processes", action="store_true", help="let a resume run on another number of "
                   "processes than the run trained on (the global batch changes; refused without this flag)")
    t.add_argument("--fixed-w", metavar="JSON", help="train method=fixed at the W of this file: profile.json of "
                   "`python -m recast profile` (same rewards, budgets and --num-steps) or a mean_W.json")
    t.add_argument("--set", type=_override, action="append", default=[], metavar="FIELD=VALUE",
                   help="override any TrainConfig field (repeatable), e.g. --set nft_beta=0.5")
    return t


def train_parser() -> argparse.ArgumentParser:
    """A parser of `python -m recast train`'s arguments alone."""
    return add_train_arguments(argparse.ArgumentParser(prog="python -m recast train"))


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    """The TrainConfig the parsed arguments describe."""
    from recast.configfile import layered_config, merge_world_settings

    over = {k: v for k, v in dict(setting=args.setting, method=args.method, lam=args.lam, backend=args.backend,
                                  iterations=args.iterations, seed=args.seed, device=args.device,
                                  world=args.world, aggregation=getattr(args, "aggregation", None),
                                  weight_file=getattr(args, "weight_file", None),
                                  initialize_from=getattr(args, "initialize_from", None)).items()
            if v is not None}
    if args.rewards:
        over["rewards"] = tuple(r for r in args.rewards.split(",") if r)
    sets: dict = {}
    for key, value in args.set:  # world_settings.NAME=VALUE items merge into one mapping
        sets[key] = merge_world_settings(sets.get(key, {}), value) if key == "world_settings" else value
    names = None
    if getattr(args, "fixed_w", None):
        from recast.config import load_fixed_W

        if {**over, **sets}.get("method", "fixed") != "fixed":
            raise ValueError(f"--fixed-w trains method='fixed'; drop --method {over.get('method', sets.get('method'))}")
        if "fixed_W" in sets:
            raise ValueError("give the fixed W once: --fixed-w or --set fixed_W=..., not both")
        over["fixed_W"], names = load_fixed_W(args.fixed_w)
        over["method"] = "fixed"
    cfg = layered_config(getattr(args, "preset", None), getattr(args, "config", None), over, sets)
    if names is not None:
        from recast.config import resolve_rewards

        if tuple(names) != resolve_rewards(cfg):
            raise ValueError(f"--fixed-w {args.fixed_w} holds W for rewards {list(names)}, but this run trains "
                             f"{list(resolve_rewards(cfg))}: profile the same rewards, in the same order")
    return cfg


