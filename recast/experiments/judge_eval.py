"""Judge evaluation of trained runs (notebook 06): the same prompts and noise for every policy, pairwise win rates,
held-out judge tables, and side-by-side sample grids.

    base, runs = load_policy(run_dirs[0], which="base"), [load_policy(d) for d in run_dirs]
    images = sample_policy(p, prompts, seed=0)          # (N, 3, H, W) in [0, 1], identical noise for every policy
    verdicts = pairwise(world, images_a, images_b, prompts)

A policy is a finished run's EMA (what the trainer evaluates), or the base model (``which="base"``: adapters off).
Every policy of a comparison is sampled on the same prompts with the same starting noise (ODE, the run's grid), so a
pairwise verdict compares two policies, not two noise draws.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

__all__ = ["LoadedPolicy", "load_policy", "sample_policy", "sample_test_prompts", "pairwise", "JudgeEval",
           "draw_seeds", "evaluate_sweep", "judge_runs"]


@dataclass
class LoadedPolicy:
    """A run's world with its trained policy loaded.

    Attributes:
        run_dir: the run directory.
        world: the run's world (`recast.world.World`), its transformer carrying the trained adapters.
        policy: `recast.trainer.policy.Policy` holding the trained, old and EMA parameters.
        sigmas: the run's sampler grid (T+1,).
        which: "ema", "params" (the raw trained weights) or "base" (adapters disabled).
    """

    run_dir: Path
    world: object
    policy: object
    sigmas: torch.Tensor
    which: str


def load_policy(run_dir: str | Path, which: str = "ema", world_settings: dict | None = None) -> LoadedPolicy:
    """Load a finished run's world and policy from its config.json and checkpoint.pt.

    The policy always holds everything the checkpoint saved; `which` picks what `sample_policy` samples:

    - ``"ema"``: the exponential moving average of the trained weights (decay ``ema_decay``), which is what the
      trainer's own evaluations and sample grids use; with ``ema_decay`` 0 it equals the trained weights.
    - ``"params"``: the trained weights themselves as the last checkpoint left them, without averaging.
    - ``"base"``: the base model the run started from (the LoRA adapters disabled); LoRA runs only.

    The run's world is rebuilt from its config, and its base weights must be those the run was trained from: their
    fingerprint (`recast.trainer.checkpoint.weights_fingerprint` of the transformer and text encoder before LoRA, as
    the trainer computes it) is compared with the one config.json records under ``_run.world_fingerprint`` and the
    one in checkpoint.pt; a run that records none (made before fingerprints existed) is loaded unchecked.

    Raises:
        ValueError: unknown `which`, a run without LoRA asked for "base" (its base weights are not kept), a base
            model whose weights differ from the run's (naming the run and both fingerprints), a config.json that does
            not type-check, or a checkpoint.pt that is not this run's (`recast.trainer.runfiles.load_trained`).
        FileNotFoundError: no config.json or checkpoint.pt in `run_dir`.
    """
    from recast.config import TrainConfig, resolve_world
    from recast.sampling import sigma_schedule
    from recast.trainer.checkpoint import world_fingerprint
    from recast.trainer.policy import Policy
    from recast.trainer.runfiles import load_trained
    from recast.world import load_world, world_settings as resolve_settings

    if which not in ("ema", "params", "base"):
        raise ValueError(f"which must be 'ema', 'params' or 'base', got {which!r}")
    run_dir = Path(run_dir)
    # config.json type-checked, and checkpoint.pt this run's own (not one copied in from another run)
    raw, state = load_trained(run_dir, "cannot load")
    raw = dict(raw)
    marker = raw.pop("_run", None)
    cfg = TrainConfig.from_dict(raw)
    if which == "base" and cfg.lora_rank == 0:
        raise ValueError(f"{run_dir} is a full fine-tuning run: its base weights are not kept; load the world instead")
    spec = resolve_world(cfg.world)
    # as the trainer loaded it; `world_settings` adds evaluation-only settings (e.g. SD3's vlm_judge) over the run's
    settings, _ = resolve_settings(spec, cfg.setting, {**cfg.world_settings, **(world_settings or {})})
    world = load_world(spec, seed=cfg.seed, **({"settings": settings} if settings is not None else {}))
    recorded = {"config.json": marker.get("world_fingerprint") if isinstance(marker, dict) else None,
                "checkpoint.pt": state.get("world_fingerprint")}
    if any(recorded.values()):
        now = world_fingerprint(world)  # as `recast.trainer.loop.Trainer._build` takes it
        for source, fp in recorded.items():
            if fp is not None and fp != now:
                raise ValueError(f"cannot load {run_dir}: the base model's weights differ from those it was trained "
                                 f"from (fingerprint {str(fp)[:12]} in its {source} vs {now[:12]} of "
                                 f"{cfg.world!r} now), so its samples would not be the run's; restore the base model "
                                 "or retrain the run")
    world.freeze()
    policy = Policy(world.transformer, lora_rank=cfg.lora_rank, lora_alpha=cfg.lora_alpha, seed=cfg.seed,
                    keep_ref=False)
    policy.load_state_dict(state["policy"])
    return LoadedPolicy(run_dir, world, policy, sigma_schedule(cfg.num_steps, cfg.shift), which)


@torch.no_grad()
def sample_policy(p: LoadedPolicy, prompts: list[str], *, seed: int = 0, batch_size: int = 64) -> torch.Tensor:
    """ODE samples ``(N, 3, H, W)`` in [0, 1] of the policy on `prompts`; the starting noise depends only on `seed`,
    the prompt count and the world's sample shape, so every policy of one world sees the same noise."""
    from recast.sampling import sample_ode

    gen = torch.Generator().manual_seed(seed)
    noise = torch.randn((len(prompts), *p.world.sample_shape), generator=gen)
    out = []
    ctx = {"ema": lambda: p.policy.use("ema"), "base": lambda: p.policy.use("ref")}.get(p.which)
    for i in range(0, len(prompts), batch_size):
        embeds = p.world.encode_prompts(prompts[i:i + batch_size])
        if ctx is None:
            x0 = sample_ode(p.world.transformer, embeds, p.sigmas, noise=noise[i:i + batch_size],
                            return_trajectory=False).x0
        else:
            with ctx() as tr:
                x0 = sample_ode(tr, embeds, p.sigmas, noise=noise[i:i + batch_size], return_trajectory=False).x0
        out.append(p.world.decode(x0.float()).cpu())
    return torch.cat(out)


def sample_test_prompts(p: LoadedPolicy, n: int, *, seed: int = 0,
                        batch_size: int = 64) -> tuple[torch.Tensor, list[str]]:
    """The world's test prompts cycled to ``n``, and the policy's ODE samples of them (`sample_policy`, noise from
    ``seed``): the batch the probes and `recast.experiments.alone.reevaluate` read. Returns ``(images (n, 3, H, W),
    prompts)``."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    pool = p.world.prompts("test")
    prompts = [pool[i % len(pool)] for i in range(n)]
    return sample_policy(p, prompts, seed=seed, batch_size=batch_size), prompts


def pairwise(world, a_images: torch.Tensor, b_images: torch.Tensor, prompts: list[str]) -> list[int]:
    """The world's pairwise judge: +1 where A is preferred, -1 where B is, 0 for a tie.

    Raises:
        TypeError: the world has no pairwise judge (`prefer`).
    """
    prefer = getattr(world, "prefer", None)
    if prefer is None:
        raise TypeError(f"{type(world).__name__} has no pairwise judge (a `prefer(a, b, prompts)` method)")
    return [None if v is None else int(v) for v in prefer(a_images, b_images, prompts)]


@dataclass
class JudgeEval:
    """What `evaluate_sweep` measured.

    Attributes:
        win_rows: per (setting, budget, baseline): the method's wins / ties / losses against the baseline over every
            (seed, prompt) pair, the pooled win rate (ties half) with its Wilson interval over pairs
            (``pair_verdict``), and the win rate per seed with a t interval over seeds (``seed_rates``,
            ``seed_ci_low``, ``seed_ci_high``). ``verdict`` is the seed-level one: pairs within a seed share one
            trained policy, so only the seed interval carries training's own spread (`recast.winrate.SeedWinRates`).
        judge_rows: per (setting, budget, policy, seed): the world's held-out judges on the shared prompts; the
            policy "base" is the base model.
        grids: (setting, budget) -> policy -> images ``(n, 3, H, W)`` of the first seed (for side-by-side grids).
        prompts: the evaluation prompts of one draw.
        noise_seeds: seed of the sweep -> the noise seeds of its draws (`draw_seeds`).
    """

    win_rows: list[dict]
    judge_rows: list[dict]
    grids: dict
    prompts: list[str]
    noise_seeds: dict


def draw_seeds(noise_seed: int, seed: int, draws: int = 1, per_seed: bool = False) -> list[int]:
    """The noise seeds of a training seed's evaluation draws.

    Shared (``per_seed=False``): ``noise_seed, ..., noise_seed + draws - 1`` for every training seed, so each seed's
    policies are scored on the same samples and the draw's sampling error is common to all seeds: a t interval over
    seeds then misses it (one 256-sample draw moves a 3-seed mean by about 0.03, research/rounds/19-lambda-sweep.md "One
    256-sample draw cannot decide"). Per seed: ``noise_seed + draws * seed + d``, distinct for every (seed, draw), so
    the draw's error differs between seeds, enters the seed spread and averages over seeds. Within a seed every policy
    sees the same draws either way, so the pairwise and final - base comparisons stay paired.

    Raises:
        ValueError: ``draws`` < 1, or a negative training seed with ``per_seed``.
    """
    if draws < 1:
        raise ValueError(f"draws must be >= 1, got {draws}")
    if per_seed and seed < 0:
        raise ValueError(f"per-seed draws need a training seed >= 0, got {seed}")
    first = noise_seed + (draws * seed if per_seed else 0)
    return list(range(first, first + draws))


def evaluate_sweep(runs: list, *, method: str = "recast", num_prompts: int = 64, noise_seed: int = 0,
                   draws: int = 1, per_seed: bool = False, grid_size: int = 8,
                   confidence: float = 0.95, world_settings: dict | None = None) -> JudgeEval:
    """Pairwise-judge and held-out-judge evaluation of every cell of a finished sweep (`recast.experiments.sweep.SweepRun`s).

    In each cell and seed, the base model, `method` and every other method are sampled on the same test prompts with
    the same noise; `method` is judged pairwise against each other method. A seed's sample is ``draws`` draws of
    `num_prompts` prompts each, with the noise seeds of `draw_seeds` (shared across training seeds, or ``per_seed``),
    pooled: the judges score the ``draws * num_prompts`` images at once and the pairwise verdicts count every pair.

    Raises:
        ValueError: ``num_prompts`` or ``draws`` < 1, a cell without `method` runs, or runs that have not finished.
    """
    from recast.experiments.sweep import is_finished
    from recast.winrate import aggregate_verdicts, win_rates_over_seeds

    if num_prompts < 1:
        raise ValueError(f"num_prompts must be >= 1, got {num_prompts}")
    seeds_of = {int(r.seed): draw_seeds(noise_seed, int(r.seed), draws, per_seed) for r in runs}  # checks draws
    unfinished = [str(r.out_dir) for r in runs if not is_finished(r)]
    if unfinished:
        raise ValueError(f"runs not finished (run recast.experiments.sweep.run_sweep first): {unfinished[:3]}")
    win_rows, judge_rows, grids, prompts = [], [], {}, []
    for cell in sorted({(r.setting, r.budget) for r in runs}, key=str):
        in_cell = [r for r in runs if (r.setting, r.budget) == cell]
        methods = sorted({r.method for r in in_cell}, key=lambda m: (m != method, m))
        if methods[0] != method:
            raise ValueError(f"cell {cell} has no {method!r} runs")
        verdicts = {b: {} for b in methods[1:]}  # baseline -> seed -> verdicts
        for seed in sorted({r.seed for r in in_cell}):
            by_method = {r.method: r for r in in_cell if r.seed == seed}
            base = load_policy(by_method[method].out_dir, which="base", world_settings=world_settings)
            pool = base.world.prompts("test")
            prompts = [pool[i % len(pool)] for i in range(num_prompts)]
            noise = seeds_of[int(seed)]
            policies = {"base": base, **{m: load_policy(r.out_dir, world_settings=world_settings)
                                         for m, r in by_method.items()}}
            images = {name: torch.cat([sample_policy(p, prompts, seed=ns) for ns in noise])
                      for name, p in policies.items()}
            pooled = prompts * len(noise)
            for name, x in images.items():
                judge_rows.append({"setting": cell[0], "budget": cell[1], "policy": name, "seed": seed,
                                   **base.world.evaluate(x, pooled, seed=noise[0])})
            for b in methods[1:]:  # a world without a pairwise judge (SD3 without vlm_judge) gets no win rates
                if b in images and getattr(base.world, "pairwise_available", hasattr(base.world, "prefer")):
                    verdicts[b][seed] = pairwise(base.world, images[method], images[b], pooled)
            grids.setdefault(cell, {k: v[:grid_size] for k, v in images.items()})
        for b, per_seed_verdicts in verdicts.items():
            if not per_seed_verdicts:
                continue
            w = aggregate_verdicts([v for vs in per_seed_verdicts.values() for v in vs], confidence=confidence)
            s = win_rates_over_seeds(per_seed_verdicts.values(), confidence=confidence)
            win_rows.append({"setting": cell[0], "budget": cell[1], "method": method, "baseline": b,
                             "wins": w.wins, "ties": w.ties, "losses": w.losses, "abstained": w.abstained,
                             "win_rate": w.win_rate, "ci_low": w.ci_low, "ci_high": w.ci_high,
                             "pair_verdict": "win" if w.ci_low > 0.5 else "loss" if w.ci_high < 0.5 else "tie",
                             "seeds": len(s.rates), "seed_rates": " ".join(f"{r:.4f}" for r in s.rates),
                             "seed_ci_low": s.ci_low, "seed_ci_high": s.ci_high, "verdict": s.verdict})
    return JudgeEval(win_rows, judge_rows, grids, prompts, seeds_of)


def judge_runs(judge_rows: list[dict], num_prompts: int) -> list[dict]:
    """`JudgeEval.judge_rows` as one row per trained policy, shaped like `recast.experiments.sweep_results.collect`'s.

    Each row carries ``method`` (the policy), ``judge/<k>`` and, from the same cell and seed's base-model row,
    ``base:judge/<k>``, plus ``eval_prompts``, so `recast.experiments.sweep_results.compare` and `training_change` read
    it: the paired comparisons at this evaluation's sample count instead of the training-time one.

    Raises:
        ValueError: a (setting, budget, seed) without its base-model row, or ``num_prompts`` < 1.
    """
    if num_prompts < 1:
        raise ValueError(f"num_prompts must be >= 1, got {num_prompts}")
    fixed = ("setting", "budget", "policy", "seed")
    base = {(r["setting"], r["budget"], r["seed"]): r for r in judge_rows if r["policy"] == "base"}
    out = []
    for r in judge_rows:
        if r["policy"] == "base":
            continue
        key = (r["setting"], r["budget"], r["seed"])
        if key not in base:
            raise ValueError(f"no base-model row for setting {key[0]!r}, budget {key[1]!r}, seed {key[2]}")
        row = {"setting": r["setting"], "budget": r["budget"], "method": r["policy"], "seed": r["seed"],
               "eval_prompts": num_prompts}
        for k in (k for k in r if k not in fixed):
            row[f"judge/{k}"] = r[k]
            row[f"base:judge/{k}"] = base[key][k]
        out.append(row)
    return out
