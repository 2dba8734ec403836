"""The paper's λ-sweep: settings × budgets × methods × seeds, every run a CLI command, resumable, aggregated.

    runs = plan_sweep(settings=("compose",), methods=("recast", "uniform", "reward_sum"), seeds=(0, 1, 2))
    report = run_sweep(runs, jobs=2)            # skips runs that already finished; resumes killed ones
    rows = collect(runs)                         # one row per run: final judges and rewards, and its command
    table = summarise(rows)                      # mean ± std per (setting, budget, method, metric)
    cells = compare(rows, baseline="uniform")    # paired ReCAST - baseline differences with 95 % intervals

The budget grid is written down once, in `budget_grid`: uniform, plus one budget per reward that puts `EMPHASIS` on
it and shares the rest equally (0.55 / 0.15 / 0.15 / 0.15 for four rewards). Each run is exactly the command in its
row (`SweepRun.command`), with `num_threads=1` pinned so that rerunning it reproduces the row bit for bit.
"""

from __future__ import annotations

import concurrent.futures as cf
import os
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

__all__ = ["EMPHASIS", "results_dir", "budget_grid", "lambda_grid", "SweepRun", "SweepReport", "plan_sweep", "is_finished", "images_per_iteration",
           "run_sweep", "collect", "curves", "summarise", "compare", "efficiency"]

EMPHASIS: float = 0.55  # the budget a reward-emphasising λ puts on its reward; the others share the rest equally


def results_dir() -> Path:
    """Where result tables go: $RECAST_RESULTS_DIR if set (the test suite points it at a temp dir), else data/results."""
    env = os.environ.get("RECAST_RESULTS_DIR")
    return Path(env) if env else Path(__file__).resolve().parents[1] / "data" / "results"


def budget_grid(reward_names: tuple[str, ...] | list[str]) -> dict[str, tuple[float, ...]]:
    """The five (for K = 4) budgets of one setting: "uniform" and "<reward>-heavy" for each reward.

    Raises:
        ValueError: fewer than two rewards, or duplicate names.
    """
    names = tuple(reward_names)
    K = len(names)
    if K < 2 or len(set(names)) != K:
        raise ValueError(f"a budget grid needs at least two distinct rewards, got {names}")
    grid = {"uniform": tuple(1.0 / K for _ in names)}
    for k, name in enumerate(names):
        grid[f"{name}-heavy"] = tuple(EMPHASIS if j == k else (1.0 - EMPHASIS) / (K - 1) for j in range(K))
    return grid


def lambda_grid(world: str, setting: str) -> dict[str, tuple[float, ...]]:
    """`budget_grid` of a world's named reward setting (reads the world's static description, loads nothing)."""
    from recast.config import resolve_world
    from recast.world import world_info

    info = world_info(resolve_world(world))
    if setting not in info.reward_settings:
        raise ValueError(f"unknown setting {setting!r} for world {world!r}; choose one of "
                         f"{sorted(info.reward_settings)}")
    return budget_grid(info.reward_settings[setting])


@dataclass(frozen=True)
class SweepRun:
    """One run of a sweep.

    Attributes:
        setting, budget, method, seed: the cell and the seed.
        lam: the budget's λ.
        out_dir: the run directory.
        args: the arguments of `python -m recast train` that make it (without --resume / --overwrite).
    """

    setting: str
    budget: str
    lam: tuple[float, ...]
    method: str
    seed: int
    out_dir: Path
    args: tuple[str, ...]

    @property
    def command(self) -> str:
        """The shell command that regenerates this run."""
        return shlex.join(["python", "-m", "recast", "train", *self.args])


def plan_sweep(*, world: str = "data/digit_base", settings: tuple[str, ...] = ("compose", "quality"),
               budgets: tuple[str, ...] = (), methods: tuple[str, ...] = ("recast", "uniform", "reward_sum"),
               seeds: tuple[int, ...] = (0, 1, 2), preset: str = "cpu", iterations: int | None = None,
               sets: dict[str, object] | None = None, out_root: str | os.PathLike = "runs/sweep") -> list[SweepRun]:
    """Every run of a sweep, in a fixed order, each at the same sample budget (the preset's, or `iterations`).

    Args:
        world: world spec (all runs share it).
        settings: reward settings of the world.
        budgets: budget names to keep (() = all of `lambda_grid`).
        methods, seeds: every method runs every seed.
        preset: `recast.config.preset` name.
        iterations: override of the preset's iterations.
        sets: extra `--set FIELD=VALUE` overrides shared by every run.
        out_root: runs go to ``out_root/<setting>/<budget>/<method>/seed_<s>``.

    Raises:
        ValueError: an unknown setting or budget name, an unknown method, no seeds, or duplicate seeds.
    """
    from recast.config import METHODS, preset as make_preset

    make_preset(preset)  # unknown preset -> ValueError before anything is planned
    bad = sorted(set(methods) - set(METHODS))
    if bad or not methods:
        raise ValueError(f"unknown methods {bad or methods}; choose from {METHODS}")
    if not seeds or len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must be distinct and non-empty, got {seeds}")
    extra = {"num_threads": 1, **(sets or {})}
    runs = []
    for setting in settings:
        grid = lambda_grid(world, setting)
        unknown = sorted(set(budgets) - set(grid))
        if unknown:
            raise ValueError(f"unknown budgets {unknown} for setting {setting!r}; choose from {sorted(grid)}")
        for budget, lam in grid.items():
            if budgets and budget not in budgets:
                continue
            for method in methods:
                for seed in seeds:
                    out = Path(out_root) / setting / budget / method / f"seed_{seed}"
                    args = ["--preset", preset, "--world", world, "--setting", setting, "--method", method,
                            "--lam", ",".join(f"{x:g}" for x in lam), "--seed", str(seed), "--out", str(out)]
                    if iterations is not None:
                        args += ["--iterations", str(iterations)]
                    for k, v in extra.items():
                        args += ["--set", f"{k}={v}"]
                    runs.append(SweepRun(setting, budget, lam, method, seed, out, tuple(args)))
    return runs


def is_finished(run: SweepRun) -> bool:
    """True when the run's last iteration and its final evaluation are on disk."""
    from recast.trainer.metrics import load_run

    try:
        r = load_run(run.out_dir)
    except (FileNotFoundError, ValueError, OSError):
        return False
    n = int(r.config.get("iterations", -1))
    return bool(r.metrics) and r.metrics[-1].get("iteration") == n and bool(r.evals) and \
        r.evals[-1].get("iteration") == n


@dataclass(frozen=True)
class SweepReport:
    """What `run_sweep` did: runs trained, skipped (already finished) and failed (with their stderr tails)."""

    ran: list[SweepRun] = field(default_factory=list)
    skipped: list[SweepRun] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    wall_time_s: float = 0.0


def _launch(run: SweepRun, python: str) -> tuple[SweepRun, int, str]:
    """Run one training command; resume a killed run from its checkpoint, restart one without a checkpoint."""
    extra = ["--resume"] if (run.out_dir / "checkpoint.pt").is_file() else \
        ["--overwrite"] if run.out_dir.exists() and any(run.out_dir.iterdir()) else []
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([python, "-m", "recast", "train", *run.args, *extra], capture_output=True, text=True,
                          env=env)
    return run, proc.returncode, proc.stderr[-2000:]


def run_sweep(runs: list[SweepRun], *, jobs: int = 1, python: str = sys.executable) -> SweepReport:
    """Train every unfinished run, `jobs` at a time, each as its own `python -m recast train` process.

    A run that fails does not stop the others; its stderr tail is in `SweepReport.failed`.
    """
    if jobs < 1:
        raise ValueError(f"jobs must be >= 1, got {jobs}")
    start = time.perf_counter()
    todo = [r for r in runs if not is_finished(r)]
    skipped = [r for r in runs if r not in todo]
    ran, failed = [], {}
    with cf.ThreadPoolExecutor(max_workers=jobs) as pool:
        for run, code, err in pool.map(lambda r: _launch(r, python), todo):
            (ran.append(run) if code == 0 else failed.__setitem__(str(run.out_dir), err))
    return SweepReport(ran, skipped, failed, time.perf_counter() - start)


def images_per_iteration(config: dict) -> int:
    """Images sampled (and scored by every reward) per iteration of a run, from its ``config.json`` dict."""
    return int(config.get("batch_size") or config["prompts_per_iter"] * config["group_size"])


def collect(runs: list[SweepRun]) -> list[dict]:
    """One row per finished run: its cell, seed, sample budget, command, and every final eval metric.

    The base model's scores (the evaluation at iteration 0, when the preset evaluates there) are kept under
    ``base:<metric>``.
    """
    from recast.trainer.metrics import load_run

    rows = []
    for run in runs:
        if not is_finished(run):
            continue
        r = load_run(run.out_dir)
        row = {"setting": run.setting, "budget": run.budget, "lam": ",".join(f"{x:g}" for x in run.lam),
               "method": run.method, "seed": run.seed, "iterations": int(r.config["iterations"]),
               "images": int(r.config["iterations"]) * images_per_iteration(r.config)}
        row.update({k: v for k, v in r.evals[-1].items() if k != "iteration" and isinstance(v, (int, float))})
        if r.evals[0].get("iteration") == 0:
            row.update({f"base:{k}": v for k, v in r.evals[0].items() if k != "iteration"
                        and isinstance(v, (int, float))})
        row["command"] = run.command
        rows.append(row)
    return rows


def curves(runs: list[SweepRun]) -> list[dict]:
    """Long table of every evaluation of every finished run: cell, seed, iteration, images, metric, value."""
    from recast.trainer.metrics import load_run

    out = []
    for run in runs:
        if not is_finished(run):
            continue
        r = load_run(run.out_dir)
        per = images_per_iteration(r.config)
        for rec in r.evals:
            for k, v in rec.items():
                if k != "iteration" and isinstance(v, (int, float)):
                    out.append({"setting": run.setting, "budget": run.budget, "method": run.method,
                                "seed": run.seed, "iteration": rec["iteration"], "images": rec["iteration"] * per,
                                "metric": k, "value": float(v)})
    return out


def w_timing(runs: list[SweepRun]) -> list[dict]:
    """Per finished ReCAST run and reward: where its final W row puts its budget (`recast.stats.row_timing`): the
    share in the noisiest half of the steps (λ/T: 0.5) and the largest relative deviation from λ/T."""
    from recast.stats import row_timing
    from recast.trainer.metrics import load_run

    out = []
    for run in runs:
        if run.method != "recast" or not is_finished(run):
            continue
        r = load_run(run.out_dir)
        it, W = r.W_at(10**9)
        early, dev = row_timing(W)
        out += [{"setting": run.setting, "budget": run.budget, "seed": run.seed, "reward": name, "iteration": it,
                 "early_share": float(early[k]), "max_deviation": float(dev[k])}
                for k, name in enumerate(r.reward_names)]
    return out


def _metrics(rows: list[dict]) -> list[str]:
    keys = []
    for r in rows:
        keys += [k for k in r if (k.startswith("reward/") or k.startswith("judge/")) and k not in keys]
    return keys


def summarise(rows: list[dict]) -> list[dict]:
    """Mean ± std (ddof 1; 0 for one seed) over seeds per (setting, budget, method, metric)."""
    out = []
    cells = sorted({(r["setting"], r["budget"], r["method"]) for r in rows}, key=str)
    for setting, budget, method in cells:
        sel = [r for r in rows if (r["setting"], r["budget"], r["method"]) == (setting, budget, method)]
        for m in _metrics(sel):
            v = np.array([r[m] for r in sel if m in r], dtype=float)
            out.append({"setting": setting, "budget": budget, "method": method, "metric": m, "n": len(v),
                        "mean": float(v.mean()), "std": float(v.std(ddof=1)) if len(v) > 1 else 0.0})
    return out


def training_change(rows: list[dict], confidence: float = 0.95) -> list[dict]:
    """What training did in each (setting, budget, method): final − base model over the same seeds, per metric, with
    a t interval, and a reward-hacking flag per cell.

    ``verdict`` is "better" / "worse" / "unchanged" in the metric's own direction (the interval excludes zero or
    not). A cell whose weighted training reward got better while a held-out judge got worse is flagged
    ``reward_up_judge_down`` on every one of its rows: rewards are proxies, the judges decide.
    """
    from recast.stats import lower_is_better, paired_difference

    out = []
    for setting, budget, method in dict.fromkeys((r["setting"], r["budget"], r["method"]) for r in rows):
        sel = [r for r in rows if (r["setting"], r["budget"], r["method"]) == (setting, budget, method)]
        cell = []
        for m in _metrics(sel):
            if not all(m in r and f"base:{m}" in r for r in sel):
                continue
            d = paired_difference([r[m] for r in sel], [r[f"base:{m}"] for r in sel],
                                  higher_is_better=not lower_is_better(m), confidence=confidence)
            cell.append({"setting": setting, "budget": budget, "method": method, "metric": m, "n": d.n,
                         "base": float(np.mean([r[f"base:{m}"] for r in sel])), "change": d.mean,
                         "ci_low": d.ci_low, "ci_high": d.ci_high,
                         "verdict": {"win": "better", "loss": "worse", "tie": "unchanged"}[d.verdict]})
        up = any(c["metric"] == "reward/weighted" and c["verdict"] == "better" for c in cell)
        down = [c["metric"] for c in cell if c["metric"].startswith("judge/") and c["verdict"] == "worse"]
        out += [{**c, "reward_up_judge_down": bool(up and down), "judges_down": ";".join(down)} for c in cell]
    return out


def compare(rows: list[dict], *, method: str = "recast", baseline: str = "uniform",
            confidence: float = 0.95) -> list[dict]:
    """Paired method - baseline differences per (setting, budget, metric), over the seeds both ran.

    Each cell has the mean difference, its t interval and a verdict from the method's side ("win" only when the
    interval excludes zero on the better side; `recast.stats`).
    """
    from recast.stats import lower_is_better, paired_difference

    out = []
    for setting, budget in sorted({(r["setting"], r["budget"]) for r in rows}, key=str):
        a = {r["seed"]: r for r in rows if (r["setting"], r["budget"], r["method"]) == (setting, budget, method)}
        b = {r["seed"]: r for r in rows if (r["setting"], r["budget"], r["method"]) == (setting, budget, baseline)}
        seeds = sorted(set(a) & set(b))
        if not seeds:
            continue
        for m in _metrics([a[s] for s in seeds] + [b[s] for s in seeds]):
            if not all(m in a[s] and m in b[s] for s in seeds):
                continue
            d = paired_difference([a[s][m] for s in seeds], [b[s][m] for s in seeds],
                                  higher_is_better=not lower_is_better(m), confidence=confidence)
            out.append({"setting": setting, "budget": budget, "method": method, "baseline": baseline, "metric": m,
                        "n": d.n, "diff": d.mean, "ci_low": d.ci_low, "ci_high": d.ci_high, "verdict": d.verdict})
    return out


def efficiency(curve_rows: list[dict], metric: str, *, method: str = "recast", baseline: str = "uniform") -> list[dict]:
    """Per (setting, budget): images the method needs to reach the baseline's final seed-mean value of `metric`,
    as a ratio of the baseline's images, from seed-mean curves at shared evaluations (`recast.stats.efficiency_row`:
    ``ratio`` is None when it is never reached, or when ``baseline_improved`` is False)."""
    from recast.stats import efficiency_row, lower_is_better

    out = []
    for setting, budget in sorted({(r["setting"], r["budget"]) for r in curve_rows}, key=str):
        def mean_curve(m):
            sel = [r for r in curve_rows if (r["setting"], r["budget"], r["method"], r["metric"]) ==
                   (setting, budget, m, metric)]
            xs = sorted({r["images"] for r in sel})
            return np.array(xs, dtype=float), np.array([np.mean([r["value"] for r in sel if r["images"] == x])
                                                        for x in xs])
        (xa, ya), (xb, yb) = mean_curve(method), mean_curve(baseline)
        if len(xa) == 0 or not np.array_equal(xa, xb):
            continue
        out.append({"setting": setting, "budget": budget, "method": method, "baseline": baseline, "metric": metric,
                    **efficiency_row(xa, ya, yb, higher_is_better=not lower_is_better(metric))})
    return out
