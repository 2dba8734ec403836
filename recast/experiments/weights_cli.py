"""The paper's offline W from the command line: profiles from a proposal, and weight tables from profiles.

    python -m recast profile --proposal renderings --rewards all --out data/profiles/digit_base_renderings_T6.npz
    python -m recast profile --world sd3:PATH --proposal DIR --num-steps 25 --out runs/sd35_profile.npz
    python -m recast weights PROFILE.npz --lam 2,1,1,1 --out recast_weights.npz

`profile --proposal SOURCE` writes a density-ratio archive in the release's format (`recast.archives`): SOURCE is
``self`` (the model's own samples, which the authors call too weak a proposal), ``renderings`` (the digit world's
clean renderings of each prompt, its analogue of a strong external generator) or a folder of images with their
prompts (``prompts.jsonl``, one ``{"file": "a.png", "prompt": "..."}`` per line: any external generator). `weights`
turns a profile into a weight table for budgets λ in milliseconds. Bad input exits 2 with one line, before compute.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

__all__ = ["add_proposal_arguments", "add_weights_parser", "run_proposal", "run_weights"]

MAX_STEPS = 1000


def add_proposal_arguments(p: argparse.ArgumentParser) -> None:
    """The proposal mode's options of `recast profile`."""
    g = p.add_argument_group("density-ratio profile (--proposal): the paper's offline W")
    g.add_argument("--proposal", help="self | renderings | a folder of images with prompts.jsonl: writes the "
                   "density-ratio archive (--out FILE.npz, or OUT/profile.npz)")
    g.add_argument("--proposals-per-prompt", type=int, default=1, help="proposal samples per prompt (self, renderings)")
    g.add_argument("--num-continuations", type=int, default=4, help="M model continuations from each noised proposal")
    g.add_argument("--num-base", type=int, default=8, help="the model's own samples per prompt, for E[r | prompt]")
    g.add_argument("--reward-offset", action="append", default=[], metavar="NAME=C", help="add C to every score of "
                   "reward NAME (a reward that can be negative needs it; recorded in the archive)")
    g.add_argument("--no-debias", action="store_true", help="keep the continuations' Monte-Carlo excess in D")
    g.add_argument("--auto", action="store_true", help="rerun-safe: keep an existing --out archive made with these "
                   "settings (refuse one made with others); without it an existing archive needs --overwrite")
    g.add_argument("--batch-size", type=int, default=256, help="states per forward pass")
    g.add_argument("--config", dest="train_config", metavar="YAML", help="a train config (e.g. configs/paper/"
                   "stage2_ocr.yaml) whose world, world_settings, rewards, num_steps and shift the profile uses; "
                   "--world, --rewards, --num-steps and --shift given explicitly win")
    g.add_argument("--set", dest="sets", action="append", default=[], metavar="FIELD=VALUE", help="with --config: a "
                   "TrainConfig field over the file's, e.g. --set world_settings.reward_root=DIR (repeatable)")


def add_weights_parser(sub) -> argparse.ArgumentParser:
    """Register `recast weights PROFILE --lam ... --out TABLE.npz`."""
    w = sub.add_parser("weights", help="a weight table (the paper's W for budgets λ) from a density-ratio profile")
    w.add_argument("profile", help="a density-ratio archive (recast profile --proposal, or the release's format)")
    w.add_argument("--lam", required=True, help="budgets, one per reward, comma-separated")
    w.add_argument("--rewards", help="the table's rewards, comma-separated, in row order (default: all the profile's)")
    w.add_argument("--temperature", default="1", help="τ: one value, or one per reward, comma-separated")
    w.add_argument("--alpha", type=float, default=2.0, help="Rényi order (> 1)")
    w.add_argument("--out", help="the table's path (.npz; an existing file is refused unless --overwrite); "
                   "required unless --check")
    w.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    c = w.add_argument_group("checks (recast.checks): exit 1 when a problem is found")
    c.add_argument("--check", action="store_true", help="check the table before you train with it: degenerate "
                   "profile columns, per-cell bootstrap intervals of W, the proposals its shape needs")
    c.add_argument("--num-boot", type=int, default=200, help="bootstrap resamples of the proposals (--check)")
    c.add_argument("--seed", type=int, default=0, help="the bootstrap's seed (--check)")
    c.add_argument("--compare", metavar="TABLE", help="with --check: a weight table of the same rewards and "
                   "budgets to compare with (cosine of the departures from lambda/T, centres of mass, largest cells)")
    c.add_argument("--samples", metavar="NPZ", help="with --check: an .npz of your own samples' raw rewards "
                   "(`rewards` (B, K) in the table's row order, `group_ids` (B,)): each reward's share of the pre "
                   "signal's within-group variance per step")
    return w


def _floats(text: str, flag: str) -> list[float]:
    try:
        values = [float(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"{flag} expects comma-separated numbers, got {text!r}"[:200]) from None
    if not values or not all(math.isfinite(v) for v in values):
        raise ValueError(f"{flag} expects finite numbers, got {text!r}"[:200])
    return values


def _out_path(out: str, default_name: str, overwrite: bool) -> Path:
    from recast.io import check_target

    p = Path(out)
    if p.suffix != ".npz":
        p = p / default_name
    check_target(p)  # a link, a folder or a pipe where the archive goes is refused before compute
    if p.exists() and not overwrite:
        raise FileExistsError(f"--out {p} exists; pass --overwrite to replace it")
    p.parent.mkdir(parents=True, exist_ok=True)
    return p


def run_weights(args: argparse.Namespace) -> int:
    """Entry point of `recast weights`; returns the exit status."""
    from recast.archives import load_profile, load_table, save_table, table_from_profile
    from recast.solver import ConvergenceError

    try:
        names = [n for n in (args.rewards or "").split(",") if n] or None
        profile = load_profile(args.profile, names)
        names = names or list(profile.reward_names)
        lam = _floats(args.lam, "--lam")
        if len(lam) != len(names):
            raise ValueError(f"--lam has {len(lam)} budgets for {len(names)} rewards {names}")
        tau = _floats(args.temperature, "--temperature")
        if len(tau) not in (1, len(names)):
            raise ValueError(f"--temperature needs 1 or {len(names)} values, got {len(tau)}")
        checks = getattr(args, "check", False)
        if not checks and (args.compare or args.samples):
            raise ValueError("--compare and --samples are parts of --check: add --check")
        if args.out is None and not checks:
            raise ValueError("--out is required (or --check alone, to check the table without writing it)")
        temperature = tau if len(tau) > 1 else tau[0]
        other = load_table(args.compare) if args.compare else None
        samples = _samples(args.samples, len(names)) if args.samples else None
        out = _out_path(args.out, "recast_weights.npz", args.overwrite) if args.out else None
        table = table_from_profile(profile, lam, temperature, reward_names=names, alpha=args.alpha)
        if out is not None:
            save_table(table, out)
        if checks:
            from recast.checks import check_table, compare_tables

            report = check_table(profile, lam, reward_names=names, temperature=temperature, alpha=args.alpha,
                                 num_boot=args.num_boot, seed=args.seed, samples=samples)
            print(report.summary())
            if other is not None:
                cmp = compare_tables(table, other)
                print(f"against {args.compare}: cosine of the departures {cmp.cosine:+.3f}; centre of mass (this, "
                      f"that) " + ", ".join(f"{n} {a:.2f}/{b:.2f}" for n, (a, b) in cmp.centre_of_mass.items()))
                print("largest cells (W / (lambda/T), this vs that): " + ", ".join(
                    f"{n}[{j}] {a:.2f}/{b:.2f}" for n, j, a, b in cmp.largest))
            if out is not None:
                print(f"wrote {out}")
            return 0 if report.ok else 1
    except (ValueError, FileNotFoundError, FileExistsError, PermissionError, ConvergenceError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(json.dumps({"table": str(out), "reward_names": list(table.reward_names), "num_steps": table.num_steps,
                      "row_sums": [round(x, 6) for x in table.W.sum(1).tolist()],
                      "max_departure_from_static": round(float(abs(table.W * table.num_steps /
                                                                   table.W.sum(1, keepdims=True) - 1).max()), 4)}))
    return 0


def _samples(path: str, K: int):
    """(rewards (B, K), group_ids (B,)) from an .npz of the user's samples, checked before any compute."""
    import numpy as np

    if not Path(path).is_file():
        raise FileNotFoundError(f"--samples {path}: no such file")
    try:
        with np.load(path, allow_pickle=False) as arc:
            if "rewards" not in arc.files or "group_ids" not in arc.files:
                raise ValueError(f"--samples {path}: needs arrays 'rewards' (B, K) and 'group_ids' (B,), has "
                                 f"{arc.files}")
            rewards, groups = arc["rewards"], arc["group_ids"]
    except (OSError, EOFError) as err:
        raise ValueError(f"--samples {path}: not a NumPy archive ({err})") from None
    if rewards.ndim != 2 or rewards.shape[1] != K:
        raise ValueError(f"--samples {path}: rewards must be (B, K={K}), got {rewards.shape}")
    return rewards, groups


def _offsets(items) -> dict:
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise ValueError(f"--reward-offset expects NAME=C, got {item!r}"[:200])
        out[name] = _floats(value, f"--reward-offset {name}")[0]
    return out


def _check(args: argparse.Namespace, names) -> dict:
    """Every input of the proposal mode, before anything loads; returns the reward offsets."""
    import torch

    for flag, value, low in [("--num-prompts", args.num_prompts, 1), ("--num-steps", args.num_steps, 1),
                             ("--num-continuations", args.num_continuations, 1), ("--num-base", args.num_base, 1),
                             ("--substeps", args.substeps, 1), ("--proposals-per-prompt", args.proposals_per_prompt, 1),
                             ("--batch-size", args.batch_size, 1)]:
        if value < low:
            raise ValueError(f"{flag} must be >= {low}, got {value}")
    if args.num_steps > MAX_STEPS:
        raise ValueError(f"--num-steps must be <= {MAX_STEPS}, got {args.num_steps}")
    if not (math.isfinite(args.shift) and args.shift > 0):
        raise ValueError(f"--shift must be a finite number > 0, got {args.shift}")
    try:
        dev = torch.device(args.device)
    except (RuntimeError, TypeError):
        raise ValueError(f"--device {args.device!r} is not a device; use cpu or cuda") from None
    if dev.type not in ("cpu", "cuda") or (dev.type == "cuda" and not torch.cuda.is_available()):
        raise ValueError(f"--device {args.device!r} is not available here (use cpu)")
    offsets = _offsets(args.reward_offset)
    unknown = sorted(set(offsets) - set(names))
    if unknown:
        raise ValueError(f"--reward-offset names rewards {unknown} that are not profiled ({list(names)})")
    return offsets


def refuse_sets_without_config(args: argparse.Namespace) -> None:
    """--set layers over a --config file's fields; without one it would be dropped silently, so it is refused."""
    if getattr(args, "sets", None) and not getattr(args, "train_config", None):
        raise ValueError(f"--set {args.sets[0]} needs --config: --set layers over a train config's fields "
                         "(e.g. --config configs/paper/stage1.yaml --set world_settings.reward_root=DIR)")


def config_settings(args: argparse.Namespace, spec: str, names):
    """With --config: (world spec, reward names, the world's settings object) from the train config file, the flags
    the user gave explicitly winning; without it, what the flags say and no settings."""
    refuse_sets_without_config(args)
    if not getattr(args, "train_config", None):
        return spec, names, None
    from recast.config import resolve_rewards, resolve_world
    from recast.configfile import layered_config
    from recast.world import world_settings

    from recast.config import parse_overrides
    from recast.configfile import merge_world_settings

    sets: dict = {}
    for key, value in parse_overrides(args.sets).items():
        sets[key] = merge_world_settings(sets.get(key, {}), value) if key == "world_settings" else value
    cfg = layered_config(None, args.train_config, {}, sets)
    if args.world_given:
        cfg = cfg.replace(world=args.world)
    if names:
        cfg = cfg.replace(rewards=tuple(names))
    for flag, field in (("num_steps", "num_steps"), ("shift", "shift")):
        if not getattr(args, f"{flag}_given"):
            setattr(args, flag, getattr(cfg, field))
    spec = resolve_world(cfg.world)
    names = resolve_rewards(cfg, spec)
    settings, _ = world_settings(spec, cfg.setting, cfg.world_settings, rewards=names)
    return spec, names, settings


def _keep(target: Path, args: argparse.Namespace, names, offsets: dict) -> int:
    """--auto onto an existing archive: keep it when it was made with these settings, else refuse naming the field."""
    from recast.archives import load_profile

    meta = load_profile(target).meta
    want = {"world": str(args.world), "proposal": str(args.proposal), "num_steps": args.num_steps, "shift": args.shift, "seed": args.seed,
            "num_continuations": args.num_continuations, "num_base": args.num_base, "substeps": args.substeps,
            "offsets": offsets, "debias": not args.no_debias}
    diff = [f"{k}: {meta.get(k)!r} there vs {v!r} now" for k, v in want.items() if meta.get(k) != v]
    have = set(load_profile(target).reward_names)
    if not set(names) <= have:
        diff.append(f"rewards: {sorted(have)} there, {sorted(names)} asked")
    if diff:
        raise_msg = f"error: --out {target} holds a profile made with other settings ({'; '.join(diff)}); pass " \
                    "--overwrite to make it again"
        print(raise_msg, file=sys.stderr)
        return 2
    print(f"kept {target}: made with these settings")
    return 0


def run_proposal(args: argparse.Namespace, spec: str, names) -> int:
    """`recast profile --proposal ...`: the density-ratio archive of a world's rewards (and a summary line)."""
    import torch

    from recast.archives import save_profile
    from recast.informativeness.ratios import density_ratios
    from recast.sampling import sample_ode, sigma_schedule
    from recast.world import load_world

    try:
        spec, names, settings = config_settings(args, spec, names)
        offsets = _check(args, names)
        target = Path(args.out) if Path(args.out).suffix == ".npz" else Path(args.out) / "profile.npz"
        if getattr(args, "auto", False) and target.is_file() and not getattr(args, "overwrite", False):
            return _keep(target, args, names, offsets)
        out = _out_path(args.out, "profile.npz", getattr(args, "overwrite", False))
        folder = None
        if args.proposal not in ("self", "renderings"):
            from recast.profile import read_proposal_folder

            folder = read_proposal_folder(args.proposal)
    except (ValueError, FileNotFoundError, FileExistsError, PermissionError, TypeError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    torch.manual_seed(args.seed)
    world = load_world(spec, seed=args.seed, **({"settings": settings} if settings is not None else {}))
    world = world.to(args.device)
    world.freeze()
    sigmas = sigma_schedule(args.num_steps, args.shift)
    gen = torch.Generator().manual_seed(args.seed)
    with torch.no_grad():
        if folder is not None:
            if not hasattr(world, "encode_images"):
                print(f"error: world {spec!r} cannot encode proposal images", file=sys.stderr)
                return 2
            images, prompts = folder
            try:
                x0 = torch.cat([world.encode_images(im[None].to(args.device)) for im in images])
            except ValueError as err:
                print(f"error: {err}", file=sys.stderr)
                return 2
        else:
            pool = world.prompts(args.split)
            base = pool[:: max(1, len(pool) // args.num_prompts)][:args.num_prompts]
            prompts = [p for p in base for _ in range(args.proposals_per_prompt)]
            if args.proposal == "renderings":
                if not hasattr(world, "render_proposals"):
                    print(f"error: world {spec!r} has no renderings; use --proposal self or a folder", file=sys.stderr)
                    return 2
                x0 = world.render_proposals(prompts, gen)
            else:
                x0 = sample_ode(world.transformer, world.encode_prompts(prompts), sigmas,
                                shape=world.sample_shape, generator=gen, return_trajectory=False).x0
    meta = {"proposal": str(args.proposal), "world": str(args.world), "split": args.split,
            "num_steps": args.num_steps, "shift": args.shift, "model": "the world's base model"}
    try:
        profile = density_ratios(world, names, prompts, x0, sigmas=sigmas, num_continuations=args.num_continuations,
                                 num_base=args.num_base, substeps=args.substeps, seed=args.seed, offsets=offsets,
                                 debias=not args.no_debias, batch_size=args.batch_size, meta=meta,
                                 progress=(lambda line: print(line, file=sys.stderr, flush=True)))
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    save_profile(profile, out)
    cost = profile.meta["cost"]
    print(f"wrote {out}: {len(names)} rewards x {len(prompts)} proposals x {args.num_steps} steps; cost "
          f"{cost['reward_queries']} reward queries, {cost['model_evaluations']} model evaluations, "
          f"{cost['seconds']:.0f} s")
    return 0
