"""Single-reward runs: does each training reward, alone, raise the held-out judge that checks the same property?

    runs = plan_alone(rewards=("digit", "color"), seeds=(0, 1, 2))     # uniform method, cpu preset, one reward each
    run_sweep(runs, jobs=2)                                             # recast.experiments.sweep's resumable runner
    table = alone_table(collect(runs))                                  # one row per (reward, judge)

A reward passes when its matching judge (`MATCHING_JUDGES`) improves on the base model by more than its seed-std
across seeds, and no other judge gets worse by more than one seed-std (the paired change final − base over the same
seeds; "worse" follows each metric's direction, `recast.stats.lower_is_better`). For the quality rewards the matching
judges are their defect rate and the Fréchet distance to held-out real canvases. The `placebo` reward (a hash of the
pixels, no signal) is the control: it has no matching judge, and what it does to the judges is optimisation noise.

    python -m recast.experiments.alone --rewards digit,color,position,size,sharpness,clean,contrast,realism --seeds 0,1,2 --jobs 2
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

__all__ = ["MATCHING_JUDGES", "plan_alone", "change_over_seeds", "changes_over_seeds", "alone_table",
           "versus_control", "base_and_final_samples", "probe_args", "sample_probe", "rule_false_alarm", "reevaluate",
           "reevaluate_draw", "pool_draws", "DRAW_STRIDE", "draw_spread", "alone_markdown", "main"]

# reward -> the held-out judges that check the same property
MATCHING_JUDGES: dict[str, tuple[str, ...]] = {
    "digit": ("judge/digit",), "color": ("judge/color",), "position": ("judge/position",), "size": ("judge/size",),
    "position_flat": ("judge/position",), "size_half_max": ("judge/size",),
    "sharpness": ("judge/defect_blur", "judge/fid"), "clean": ("judge/defect_speckle", "judge/fid"),
    "clean_mass": ("judge/defect_speckle", "judge/fid"), "speck_free": ("judge/defect_speckle", "judge/fid"),
    "speck_free_abs": ("judge/defect_speckle", "judge/fid"), "sharpness_steep": ("judge/defect_blur", "judge/fid"),
    "sharpness_steep_hinged": ("judge/defect_blur", "judge/fid"),
    "contrast": ("judge/defect_fade", "judge/fid"), "contrast_flat": ("judge/defect_fade", "judge/fid"),
    "wash_free": ("judge/defect_fade", "judge/fid"), "realism": ("judge/fid",),
    "realism_canonical": ("judge/fid",), "realism_conditional": ("judge/fid",),
    "realism_centred": ("judge/fid",),
    # the null: a reward with no signal (a hash of the pixels) has no judge to raise, and passes when it lowers none.
    # What it does to the judges is what optimisation noise alone does, the control for every row above.
    "placebo": (),
    # the oracle controls: a held-out verdict as its own reward (`recast.worlds.digits.rewards.ORACLE_VERDICTS`), matched
    # to the same judges as the setting rewards it controls, so it is held to the same rule
    "oracle_digit": ("judge/digit",), "oracle_color": ("judge/color",), "oracle_position": ("judge/position",),
    "oracle_size": ("judge/size",), "oracle_not_blur": ("judge/defect_blur", "judge/fid"),
    "oracle_not_speckle": ("judge/defect_speckle", "judge/fid"), "oracle_not_fade": ("judge/defect_fade", "judge/fid"),
}


def plan_alone(*, rewards: tuple[str, ...], seeds: tuple[int, ...] = (0, 1, 2), world: str = "data/digit_base",
               preset: str = "cpu", iterations: int | None = None, method: str = "uniform",
               out_root: str | Path = "runs/alone", kl_beta: float | None = None):
    """One `recast.experiments.sweep.SweepRun` per (reward, seed): ``python -m recast train --rewards <reward>``, λ = (1,).

    A reward list keeps the preset's ``kl_beta`` (1 for cpu); ``kl_beta`` overrides it, e.g. 3 to run a quality reward
    at the quality setting's weight.

    Raises:
        ValueError: an unknown reward (no matching judge), no seeds or duplicate seeds, an unknown preset, a
            negative or non-finite ``kl_beta``.
    """
    import math

    from recast.config import preset as make_preset
    from recast.experiments.sweep import SweepRun

    make_preset(preset)
    unknown = sorted(set(rewards) - set(MATCHING_JUDGES))
    if unknown or not rewards:
        raise ValueError(f"rewards {unknown or list(rewards)}: choose from {', '.join(MATCHING_JUDGES)}")
    if not seeds or len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must be distinct and non-empty, got {seeds}")
    if kl_beta is not None and not (math.isfinite(kl_beta) and kl_beta >= 0):
        raise ValueError(f"kl_beta must be a finite number >= 0, got {kl_beta}")
    runs = []
    for reward in rewards:
        for seed in seeds:
            out = Path(out_root) / reward / f"seed_{seed}"
            args = ["--preset", preset, "--world", world, "--rewards", reward, "--method", method, "--lam", "1",
                    "--seed", str(seed), "--out", str(out), "--set", "num_threads=1"]
            if iterations is not None:
                args += ["--iterations", str(iterations)]
            if kl_beta is not None:
                args += ["--set", f"kl_beta={float(kl_beta)!r}"]
            runs.append(SweepRun("alone", reward, (1.0,), method, seed, out, tuple(args)))
    return runs


def change_over_seeds(rows: list[dict], metric: str) -> dict:
    """The paired change final − base of ``metric`` over the runs in ``rows`` (one per seed, carrying
    ``base:<metric>``): ``n``, ``delta`` (mean), ``seed_std`` (ddof 1, at least one prompt for a pass rate when the
    rows carry ``eval_prompts``; 0 for one seed), and ``improved`` / ``worse``
    (the change beats one seed-std in the metric's better / worse direction, `recast.stats.lower_is_better`)."""
    from recast.stats import lower_is_better
    from recast.experiments.sweep_results import pass_rate_resolution

    d = np.array([r[metric] - r[f"base:{metric}"] for r in rows], dtype=float)
    std = float(d.std(ddof=1)) if len(d) > 1 else 0.0
    if len(d) > 1:  # a pass rate's seed-std is not taken below one prompt (as in `recast.stats.paired_difference`)
        std = max(std, pass_rate_resolution(rows, [r[k] for r in rows for k in (metric, f"base:{metric}")]))
    better = -d.mean() if lower_is_better(metric) else d.mean()  # > 0: the metric improved
    return {"n": len(d), "delta": float(d.mean()), "seed_std": std, "improved": bool(better > std),
            "worse": bool(better < -std)}


def changes_over_seeds(rows: list[dict]) -> dict[str, dict]:
    """`change_over_seeds` of every judge and reward the rows carry with its base value (``judge/<k>`` and
    ``reward/<r>`` beside ``base:...``), in the rows' key order: the tables of the tuning and probe scripts."""
    metrics = [k for k in rows[0] if k.startswith(("judge/", "reward/")) and f"base:{k}" in rows[0]]
    return {m: change_over_seeds(rows, m) for m in metrics}


def versus_control(rows: list[dict], control: str = "placebo", *, confidence: float = 0.95) -> list[dict]:
    """Each reward's judge changes against the control's: what training on the reward does beyond what training does.

    Per (reward, judge), the paired difference over shared seeds of the reward run's change final − base and the
    control run's (`recast.stats.paired_difference`: t-interval, a pass rate's s.d. floored at one prompt).
    ``verdict`` is "better", "worse" or "tie" in the judge's own direction (`recast.stats.lower_is_better`).

    Args:
        rows: `recast.experiments.sweep_results.collect` or `reevaluate` rows of `plan_alone` runs, the control's among them.
        control: the reward whose runs are the control (``"placebo"``: no signal).

    Raises:
        ValueError: no rows of the control, or a reward that shares fewer than 2 seeds with it.
    """
    from recast.stats import lower_is_better, paired_difference
    from recast.experiments.sweep_results import pass_rate_resolution

    ctrl = {r["seed"]: r for r in rows if r["budget"] == control}
    if not ctrl:
        raise ValueError(f"no runs of the control {control!r} among the rows (rewards: "
                         f"{sorted({r['budget'] for r in rows})})")
    out = []
    for reward in sorted({r["budget"] for r in rows} - {control}, key=list(MATCHING_JUDGES).index):
        sel = {r["seed"]: r for r in rows if r["budget"] == reward and r["seed"] in ctrl}
        if len(sel) < 2:
            raise ValueError(f"reward {reward!r} shares {len(sel)} seed(s) with the control {control!r}; need >= 2")
        seeds = sorted(sel)
        first = sel[seeds[0]]
        for j in [k for k in first if k.startswith("judge/") and f"base:{k}" in first and k in ctrl[seeds[0]]]:
            a = [sel[s][j] - sel[s][f"base:{j}"] for s in seeds]
            b = [ctrl[s][j] - ctrl[s][f"base:{j}"] for s in seeds]
            pair = [sel[s] for s in seeds] + [ctrl[s] for s in seeds]
            res = pass_rate_resolution(pair, [r[k] for r in pair for k in (j, f"base:{j}")])
            d = paired_difference(a, b, higher_is_better=not lower_is_better(j), confidence=confidence,
                                  resolution=res)
            out.append({"reward": reward, "control": control, "judge": j, "matching": j in MATCHING_JUDGES[reward],
                        "n": d.n, "delta": d.mean, "lo": d.ci_low, "hi": d.ci_high,
                        "verdict": {"win": "better", "loss": "worse"}.get(d.verdict, "tie")})
    return out


def base_and_final_samples(rewards, seeds, *, root: str | Path = "runs/alone", num_prompts: int = 128):
    """For each finished single-reward run ``<root>/<reward>/seed_<seed>``, the base model (adapters off) and then
    the final EMA policy sampled on ``num_prompts`` test prompts with the same noise (seed + 1000): yields
    ``(reward, seed, policy, images, prompts)`` with ``policy`` "base" or "final". The probes of what a run changes in
    its samples (`research/probes/alone_samples_probe.py`, `research/probes/contrast_probe.py`) read these."""
    from dataclasses import replace

    from recast.experiments.judge_eval import load_policy, sample_test_prompts

    for reward in rewards:
        for seed in seeds:
            base = load_policy(f"{root}/{reward}/seed_{seed}", "base")
            for policy, loaded in (("base", base), ("final", replace(base, which="ema"))):
                images, prompts = sample_test_prompts(loaded, num_prompts, seed=seed + 1000, batch_size=64)
                yield reward, seed, policy, images, prompts


def probe_args(description: str, argv: list[str] | None = None) -> argparse.Namespace:
    """The command line of those probes: rewards (positional), ``--seeds`` (default 0,1,2), ``--root``,
    ``--num-prompts`` (default 128)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("rewards", nargs="+")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--root", default="runs/alone")
    ap.add_argument("--num-prompts", type=int, default=128)
    a = ap.parse_args(argv)
    a.seeds = tuple(int(s) for s in a.seeds.split(",") if s)
    return a


def sample_probe(description: str, argv: list[str] | None, measure, out_name: str) -> list[dict]:
    """Run a sample probe: `probe_args`, then one row ``{reward, seed, policy, **measure(images, prompts)}`` per
    `base_and_final_samples` draw (2 threads), each printed as it comes; writes the rows to ``<results>/out_name``
    (`recast.experiments.sweep.results_dir`) and returns them."""
    import torch

    from recast.io import write_csv
    from recast.experiments.sweep import results_dir

    a = probe_args(description, argv)
    torch.set_num_threads(2)
    rows = []
    for reward, seed, policy, images, prompts in base_and_final_samples(a.rewards, a.seeds, root=a.root,
                                                                         num_prompts=a.num_prompts):
        rows.append({"reward": reward, "seed": seed, "policy": policy, **measure(images, prompts)})
        print(" ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in rows[-1].items()),
              flush=True)
    write_csv(results_dir() / out_name, rows)
    return rows


def rule_false_alarm(n_seeds: int, n_judges: int = 1) -> float:
    """The noise floor of the one-seed-std rule: how often it calls a judge with no true change "worse".

    With the per-seed changes d_1..d_n i.i.d. normal with mean 0, "worse" is ``mean(d) < -std(d)`` (ddof 1), i.e. the
    one-sample t statistic ``mean / (std / sqrt n)`` falls below ``-sqrt n``: probability ``F_{t, n-1}(-sqrt n)``
    (0.113 at 3 seeds, 0.045 at 5). For ``n_judges`` independent judges without a change, the chance that at least
    one of them is called worse is ``1 - (1 - p)^m``; correlated judges (strict with digit) give less.

    Raises:
        ValueError: fewer than 2 seeds (no seed-std) or fewer than 1 judge.
    """
    import math

    from scipy.stats import t as student_t

    if int(n_seeds) != n_seeds or n_seeds < 2:
        raise ValueError(f"n_seeds must be an integer >= 2 (the rule needs a seed-std), got {n_seeds}")
    if int(n_judges) != n_judges or n_judges < 1:
        raise ValueError(f"n_judges must be an integer >= 1, got {n_judges}")
    p = float(student_t.cdf(-math.sqrt(n_seeds), df=n_seeds - 1))
    return 1.0 - (1.0 - p) ** int(n_judges)


REEVAL_SEED_OFFSET: int = 20_011  # noise of the re-evaluation: run seed + this (the training-time evals use 10_007)


def reevaluate(runs, *, num_prompts: int = 256, batch_size: int = 64, which: str = "ema",
               noise_seed: int | None = None) -> list[dict]:
    """Re-score finished runs (single-reward runs or a setting's) on more samples than their training-time
    evaluations.

    The training-time evaluations read the 64 test prompts once, so a judge's pass rate carries a binomial s.e. of
    about 0.06 per run, as large as most single-reward effects. Here each run's base model (its adapters off) and its
    final EMA policy are sampled on the test prompts cycled to ``num_prompts``, with the same noise for both (seeded
    by the run's seed + `REEVAL_SEED_OFFSET`), and scored by the world's judges and each of the run's rewards.

    By default each seed's runs get their own draw, so the draw's sampling error varies across seeds and enters the
    seed-std. ``noise_seed`` instead gives every run one shared draw, as notebook 06 (`recast.experiments.judge_eval.evaluate_sweep`
    with the same ``noise_seed``) does: its sampling error is then common to all seeds and the seed-std misses it.

    Args:
        runs: `plan_alone` or `recast.experiments.sweep.plan_sweep` runs (unfinished ones are skipped).
        num_prompts: samples per policy.
        batch_size: sampling batch.
        which: the final policy, "ema" (what the trainer evaluates) or "params" (the raw trained weights).
        noise_seed: one draw shared by every run (prompt noise and judge seed), or None for the per-seed draws.

    Returns:
        rows shaped like `recast.experiments.sweep_results.collect`'s (``budget``: the run's, which for a single-reward run is the
        reward; ``judge/<k>`` and ``base:judge/<k>``; ``reward/<r>`` and ``base:reward/<r>`` for each of the run's
        rewards; ``eval_prompts``; ``noise_seed``, the draw's), so `alone_table` and `change_over_seeds` read them.
        The diversity judge, which only exists for repeated prompts, is left out, so the judges are the same as at
        training time.

    Raises:
        ValueError: ``num_prompts`` < 1, ``which`` not "ema" or "params", or a run whose config.json does not
            record its rewards.
    """
    from dataclasses import replace
    from pathlib import Path

    import torch

    from recast.io import read_json
    from recast.experiments.judge_eval import load_policy, sample_test_prompts
    from recast.experiments.sweep import is_finished

    if num_prompts < 1:
        raise ValueError(f"num_prompts must be >= 1, got {num_prompts}")
    if which not in ("ema", "params"):
        raise ValueError(f"which must be 'ema' or 'params', got {which!r}")
    rows = []
    for run in runs:
        if not is_finished(run):
            continue
        base = load_policy(run.out_dir, "base")  # checks the run has adapters to switch off
        final = replace(base, which=which)  # the same loaded world and policy, through its EMA or raw weights
        # the rewards the run trained, as it recorded them (a setting's list can change after the run)
        names = read_json(Path(run.out_dir) / "config.json").get("_run", {}).get("reward_names")
        if not names:
            raise ValueError(f"{run.out_dir}/config.json records no reward_names: not a recast-run/1 run")
        rewards = {name: final.world.reward(name, "cpu") for name in names}
        seed = int(run.seed) + REEVAL_SEED_OFFSET if noise_seed is None else int(noise_seed)
        row = {"setting": run.setting, "budget": run.budget, "method": run.method, "seed": run.seed,
               "eval_prompts": num_prompts, "policy": which, "noise_seed": seed, "command": run.command}
        for prefix, loaded in (("", final), ("base:", base)):
            images, prompts = sample_test_prompts(loaded, num_prompts, seed=seed, batch_size=batch_size)
            scores = final.world.evaluate(images, prompts, seed=seed)
            row.update({f"{prefix}judge/{k}": v for k, v in scores.items() if k != "diversity"})
            for name, reward in rewards.items():
                row[f"{prefix}reward/{name}"] = float(torch.as_tensor(reward(images, prompts)).float().mean())
        rows.append(row)
    return rows


DRAW_STRIDE: int = 1_000  # draw d of a run of seed s uses noise seed REEVAL_SEED_OFFSET + s + d * this


def reevaluate_draw(runs, draw: int, *, num_prompts: int = 256, which: str = "ema") -> list[dict]:
    """`reevaluate` on per-seed draw ``draw``: each run of seed ``s`` sampled with noise seed ``REEVAL_SEED_OFFSET + s
    + draw * DRAW_STRIDE``, so draw 0 is `reevaluate`'s default and every reward's run of one seed shares each draw.
    Rows carry ``draw``."""
    if draw < 0:
        raise ValueError(f"draw must be >= 0, got {draw}")
    rows = []
    for run in runs:
        rows += [{**r, "draw": draw} for r in reevaluate([run], num_prompts=num_prompts, which=which,
                                                         noise_seed=REEVAL_SEED_OFFSET + int(run.seed)
                                                         + draw * DRAW_STRIDE)]
    return rows


def pool_draws(rows: list[dict], *, by: tuple[str, str] = ("budget", "seed")) -> list[dict]:
    """One row per run, a run being one value of the ``by`` columns (a single-reward run is its reward, ``budget``,
    and seed; a demo run its ``method`` and seed), with every ``judge/``, ``reward/`` and ``base:`` column averaged
    over the run's draws and ``eval_prompts`` their total, so `alone_table`, `versus_control` and `change_over_seeds`
    read the pooled samples (a pass rate's seed-std floor becomes one sample of the pool).

    Raises:
        ValueError: runs with different numbers of draws, or one draw of a run given twice (by ``noise_seed``, where
            the rows carry it).
    """
    cells: dict[tuple, list[dict]] = {}
    for r in rows:
        cells.setdefault((r[by[0]], int(r[by[1]])), []).append(r)
    if len({len(v) for v in cells.values()}) != 1:
        raise ValueError(f"runs were scored on different numbers of draws: "
                         f"{sorted({k: len(v) for k, v in cells.items()}.items())}")
    out = []
    for (run, seed), sel in cells.items():
        noise = [r.get("noise_seed") for r in sel]
        if None not in noise and len(set(noise)) != len(sel):
            raise ValueError(f"run {run!r} seed {seed} has one draw twice (noise seeds {noise})")
        # a CSV's union header leaves other runs' reward columns empty (None): keep the columns every draw has
        keys = [k for k in sel[0] if k.startswith(("judge/", "reward/", "base:judge/", "base:reward/"))
                and all(r.get(k) is not None for r in sel)]
        row = {k: v for k, v in sel[0].items() if k not in keys and k not in ("noise_seed", "draw")
               and not (k.startswith(("judge/", "reward/", "base:")) and v is None)}
        row.update({k: float(np.mean([float(r[k]) for r in sel])) for k in keys})
        row["eval_prompts"] = int(sum(int(float(r["eval_prompts"])) for r in sel))
        row["draws"] = len(sel)
        out.append(row)
    return out


def draw_spread(rows: list[dict], metric: str) -> dict:
    """How much of a paired change final − base is the evaluation draw's: the test on each draw, and pooled.

    ``rows`` hold every run (one per seed) scored on each of the same N >= 2 shared draws (`reevaluate` with
    ``noise_seed`` 0..N−1, or any N distinct seeds): a matrix Δ[seed, draw]. Returns

    - ``shared``: `change_over_seeds` on each draw, all seeds on that one draw (as notebook 06 reads them);
    - ``per_seed``: for k = 0..N−1, seed i (in sorted order) on draw (k + i) mod N, so each seed has its own draw (as
      `reevaluate` reads them by default);
    - ``pooled``: the test on each seed's Δ averaged over all N draws, which averages the draw's error out: ``n``,
      ``delta``, ``seed_std`` (ddof 1; not floored, a mean over N draws is not a pass rate of one draw), ``per_seed``
      (the averaged Δ, by seed), ``improved`` and ``worse`` (beyond one seed-std, `recast.stats.lower_is_better`);
    - ``draw_mean``, ``draw_sd``: the mean and s.d. over draws of the shared test's mean Δ;
    - ``corr_base``: over draws, the correlation of the draw's mean base value with its mean Δ (nan if either is
      constant); strongly negative when a draw where the base model looks good leaves more room to look worse.

    Raises:
        ValueError: fewer than 2 draws or 2 seeds, or a (seed, draw) pair missing or repeated.
    """
    from recast.stats import lower_is_better

    seeds = sorted({r["seed"] for r in rows})
    draws = sorted({r["noise_seed"] for r in rows})
    if len(seeds) < 2 or len(draws) < 2:
        raise ValueError(f"need >= 2 seeds and >= 2 draws, got {len(seeds)} seeds and {len(draws)} draws")
    by = {}
    for r in rows:
        key = (r["seed"], r["noise_seed"])
        if key in by:
            raise ValueError(f"seed {key[0]} is scored twice on draw {key[1]}")
        by[key] = r
    missing = [(s, d) for s in seeds for d in draws if (s, d) not in by]
    if missing:
        raise ValueError(f"every seed must be scored on every draw; missing (seed, draw): {missing[:5]}")
    n = len(draws)
    shared = [change_over_seeds([by[s, d] for s in seeds], metric) for d in draws]
    per_seed = [change_over_seeds([by[s, draws[(k + i) % n]] for i, s in enumerate(seeds)], metric) for k in range(n)]
    avg = np.array([np.mean([by[s, d][metric] - by[s, d][f"base:{metric}"] for d in draws]) for s in seeds])
    std = float(avg.std(ddof=1))
    better = -avg.mean() if lower_is_better(metric) else avg.mean()
    means = np.array([c["delta"] for c in shared])
    base = np.array([np.mean([by[s, d][f"base:{metric}"] for s in seeds]) for d in draws])
    corr = float(np.corrcoef(base, means)[0, 1]) if means.std() > 0 and base.std() > 0 else float("nan")
    return {"shared": shared, "per_seed": per_seed, "draw_mean": float(means.mean()),
            "draw_sd": float(means.std(ddof=1)), "corr_base": corr,
            "pooled": {"n": len(seeds), "delta": float(avg.mean()), "seed_std": std, "per_seed": avg.tolist(),
                       "improved": bool(better > std), "worse": bool(better < -std)}}


def alone_table(rows: list[dict]) -> list[dict]:
    """Per (reward, judge): the paired change final − base over seeds, its seed-std, and whether it is the matching
    judge; plus a ``verdict`` row per reward ("pass" / "fail") under judge ``"*"``.

    Args:
        rows: `recast.experiments.sweep_results.collect` rows of `plan_alone` runs (they carry ``base:<metric>``).
    """
    out = []
    for reward in sorted({r["budget"] for r in rows}, key=list(MATCHING_JUDGES).index):
        sel = [r for r in rows if r["budget"] == reward]
        judges = [k for k in sel[0] if k.startswith("judge/") and f"base:{k}" in sel[0]]
        ok_match, ok_others = [], []
        for j in judges:
            c = change_over_seeds(sel, j)
            match = j in MATCHING_JUDGES[reward]
            (ok_match if match else ok_others).append(c["improved"] if match else not c["worse"])
            out.append({"reward": reward, "judge": j, "matching": match, **c})
        train = change_over_seeds(sel, f"reward/{reward}")
        passed = (bool(ok_match) or not MATCHING_JUDGES[reward]) and all(ok_match) and all(ok_others)
        out.append({"reward": reward, "judge": "*", "matching": True, "n": train["n"], "delta": train["delta"],
                    "seed_std": train["seed_std"], "improved": passed, "worse": not passed})
    return out


def alone_markdown(table: list[dict]) -> str:
    """`alone_table` as a markdown table: each judge's change and seed-std, and each reward's verdict."""
    lines = ["| reward | judge | Δ (final − base) | seed-std | verdict |", "|---|---|---|---|---|"]
    for r in table:
        tag = ("PASS" if r["improved"] else "FAIL") if r["judge"] == "*" else \
            ("matching, " if r["matching"] else "") + ("up" if r["improved"] else "down" if r["worse"] else "flat")
        label = "training reward" if r["judge"] == "*" else r["judge"]
        lines.append(f"| {r['reward']} | {label} | {r['delta']:+.3f} | {r['seed_std']:.3f} | {tag} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """CLI: plan, run (resumable) and tabulate single-reward runs; writes ``<results>/alone{,_runs}.csv``."""
    from recast.io import write_csv
    from recast.experiments.sweep import results_dir, run_sweep
    from recast.experiments.sweep_results import collect

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rewards", default=",".join(MATCHING_JUDGES), help="comma-separated rewards")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--preset", default="cpu")
    p.add_argument("--world", default="data/digit_base")
    p.add_argument("--iterations", type=int)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--out", default="runs/alone")
    p.add_argument("--kl-beta", type=float, help="override the preset's kl_beta (reward lists keep the preset's 1)")
    p.add_argument("--name", default="alone", help="results file stem under research/tables (or $RECAST_RESULTS_DIR)")
    p.add_argument("--reeval-prompts", type=int, default=0,
                   help="re-score base and final policy of every run on this many test samples (`reevaluate`) "
                        "instead of the training-time evaluations (0: use those)")
    p.add_argument("--policy", choices=("ema", "params"), default="ema",
                   help="with --reeval-prompts: score the final EMA (what the trainer evaluates at the cpu preset for "
                        "a reward list) or the raw trained weights (what compose evaluates, ema_decay 0; the EMA is "
                        "evaluation-only, so the runs are the same)")
    p.add_argument("--control", help="also compare every reward's judge changes with this reward's runs at the same "
                                     "seeds (`versus_control`; e.g. placebo, which must be among --rewards)")
    a = p.parse_args(argv)
    if a.control and a.control not in a.rewards.split(","):
        p.error(f"--control {a.control} must be one of --rewards ({a.rewards})")
    if a.reeval_prompts < 0:
        p.error(f"--reeval-prompts must be >= 0, got {a.reeval_prompts}")
    if a.policy != "ema" and not a.reeval_prompts:
        p.error("--policy params needs --reeval-prompts (the training-time evaluations score the EMA)")
    runs = plan_alone(rewards=tuple(x for x in a.rewards.split(",") if x),
                      seeds=tuple(int(s) for s in a.seeds.split(",") if s), world=a.world, preset=a.preset,
                      iterations=a.iterations, out_root=a.out, kl_beta=a.kl_beta)
    report = run_sweep(runs, jobs=a.jobs)
    for path, err in report.failed.items():
        print(f"failed: {path}\n{err}")
    rows = reevaluate(runs, num_prompts=a.reeval_prompts, which=a.policy) if a.reeval_prompts else collect(runs)
    table = alone_table(rows)
    write_csv(results_dir() / f"{a.name}_runs.csv", rows)
    write_csv(results_dir() / f"{a.name}.csv", table)
    print(alone_markdown(table))
    if a.control:
        vs = versus_control(rows, a.control)
        write_csv(results_dir() / f"{a.name}_vs_{a.control}.csv", vs)
        print(f"\n| reward | judge | Δ − {a.control}'s Δ [95 % CI] | verdict |\n|---|---|---|---|")
        for r in vs:
            print(f"| {r['reward']} | {r['judge']}{' (matching)' if r['matching'] else ''} | {r['delta']:+.3f} "
                  f"[{r['lo']:+.3f}, {r['hi']:+.3f}] | {r['verdict']} |")
    n = min((r["n"] for r in table), default=0)
    if n >= 2:
        m = max(sum(1 for r in table if r["reward"] == w and r["judge"] != "*" and not r["matching"])
                for w in {r["reward"] for r in table})
        print(f"noise floor of the rule at {n} seeds: a judge without a true change is called worse with probability "
              f"{rule_false_alarm(n):.3f}; at least one of {m} independent such judges: {rule_false_alarm(n, m):.3f}")
    print(f"\n{len(report.ran)} runs trained, {len(report.skipped)} skipped in {report.wall_time_s:.0f} s")
    return 1 if report.failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
