"""The main job: the paper's ReCAST against its static baseline on one reward setting, same seeds, same sample budget.

    python -m recast demo                       # compose setting, cpu (= paper) preset, seeds 0,1,2, both methods
    python -m recast demo --methods recast,static,recast_live,uniform      # and our first reading beside them

Each (method, seed) is a full training run (`recast.trainer.train`) in `out_dir/<method>/seed_<s>`; runs are spread
over worker processes (one torch thread each). The summary — mean ± std over seeds of every training reward and
held-out judge, at the base model and at the end — is written to `out_dir/results.{json,csv}`, printed as a markdown
table, and drawn in `<out>/<figure_name>.{png,pdf}` (in $RECAST_FIGURES_DIR when that is set).
"""

from __future__ import annotations

import concurrent.futures as cf
import math
import multiprocessing as mp
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from recast.experiments.alone import DRAW_STRIDE as RESCORE_DRAW_STRIDE  # draw d of seed s: noise seed offset + s + d * this
from recast.stats import efficiency_label

__all__ = ["DemoResult", "run_demo", "summarise", "paired", "efficiency", "efficiency_label", "plot_demo",
           "plot_paired_judges",
           "demo_runs", "rescore", "rescore_paired", "rescore_changes", "rescore_compare", "RESCORE_DRAW_STRIDE"]


CHECKPOINT_EVERY = 5  # iterations between a demo run's checkpoints (as the cpu preset itself)


@dataclass(frozen=True)
class DemoResult:
    """What `run_demo` produced.

    Attributes:
        out_dir: the folder holding every run and the summary files.
        rows: one dict per (method, metric): base and final mean ± std over seeds, and the seeds' count.
        runs: method -> list of run directories (one per seed, in seed order).
        wall_time_s: wall-clock seconds of the whole demo.
        paired: ReCAST − baseline per (baseline, metric) over the shared seeds (`paired`); empty without ReCAST.
        efficiency: empty. The interpolated ratio (`efficiency`, kept for the research pages that cite it) read
            three evaluation points and no crossing of the baseline's own; the study measures efficiency instead.
    """

    out_dir: Path
    rows: list[dict]
    runs: dict[str, list[Path]]
    wall_time_s: float
    paired: list[dict] = field(default_factory=list)
    efficiency: list[dict] = field(default_factory=list)

    def markdown(self) -> str:
        """The summary as a markdown table."""
        lines = ["| method | metric | base | final | Δ |", "|---|---|---|---|---|"]
        for r in self.rows:
            lines.append(f"| {r['method']} | {r['metric']} | {r['base_mean']:.3f} ± {r['base_std']:.3f} | "
                         f"{r['final_mean']:.3f} ± {r['final_std']:.3f} | {r['delta_mean']:+.3f} ± {r['delta_std']:.3f} |")
        if self.paired:
            lines += ["", "Paired ReCAST − baseline over the same seeds, mean with its 95 % t-interval (for the Fréchet "
                      "distance and defect rates lower is better). 'interval' says whether that one interval excludes "
                      "0; many metrics are read at once, so only the Holm column (family-wise 5 % over every metric "
                      "of a baseline) is a win or a loss.", "",
                      "| baseline | metric | ReCAST − baseline | 95 % CI | interval | after Holm |",
                      "|---|---|---|---|---|---|"]
            for r in self.paired:
                lines.append(f"| {r['baseline']} | {r['metric']} | {r['diff']:+.3f} | "
                             f"[{r['ci_low']:+.3f}, {r['ci_high']:+.3f}] | {r['verdict']} | {r.get('holm', 'tie')} |")
        lines += ["", "Sample efficiency is not read from a demo: three evaluation points cannot locate where a curve "
                  "crosses the baseline's level (research/study/ measures it from dense evaluation)."]
        return "\n".join(lines)


def _train_one(job: tuple) -> str:
    """Worker: one full training run (imports inside, so spawned processes start clean)."""
    preset_name, overrides, out, overwrite = job
    import torch

    from recast.config import preset
    from recast.trainer import train

    torch.set_num_threads(1)
    train(preset(preset_name, **overrides), out, resume="auto", overwrite=overwrite)  # a rerun continues, never clears
    return out


def _check_options(methods, seeds, workers, known) -> None:
    """Refuse empty, malformed or duplicate methods and seeds, naming the demo option at fault."""
    if not methods:
        raise ValueError(f"methods (--methods) is empty: name at least one of {', '.join(known)}")
    unknown = [m for m in methods if m not in known]
    if unknown:
        raise ValueError(f"methods (--methods): unknown {unknown}; choose from {', '.join(known)}")
    if not seeds:
        raise ValueError("seeds (--seeds) is empty: give at least one seed, e.g. --seeds 0,1,2")
    if any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in seeds):
        raise ValueError(f"seeds (--seeds) must be integers >= 0, got {list(seeds)}")
    for name, values in (("methods (--methods)", methods), ("seeds (--seeds)", seeds)):
        if len(set(values)) != len(values):
            raise ValueError(f"{name} has duplicates {list(values)}: each run needs its own directory")
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise ValueError(f"workers (--workers) must be a positive integer, got {workers!r}")


def run_demo(
    out_dir: str | os.PathLike = "runs/demo",
    *,
    preset_name: str = "cpu",
    setting: str = "compose",
    lam: tuple[float, ...] = (),
    methods: tuple[str, ...] = ("recast", "static"),
    seeds: tuple[int, ...] = (0, 1, 2),
    iterations: int | None = None,
    workers: int | None = None,
    figure_name: str | None = "demo_compose",
    overwrite: bool = False,
) -> DemoResult:
    """Train every method with every seed, then summarise and plot.

    Args:
        out_dir: where runs and summaries go.
        preset_name: a `recast.config.preset` name.
        setting: reward setting (compose | quality).
        lam: budgets (empty = the setting's defaults, `recast.config.resolve_budgets`; results.json records the
            normalised budgets the runs trained with).
        methods: methods to compare; all share the preset, seeds and sample budget.
        seeds: training seeds (each method runs every seed).
        iterations: override the preset's iteration count.
        workers: parallel processes (default: CPU count, at most the number of runs).
        figure_name: figure written through `recast.plotting.savefig` (None: no figure); a plain name, no path.
        overwrite: retrain runs made with other settings in ``out_dir`` (without it they are refused). Finished runs
            of the same settings are reused and killed ones continue, either way.

    Returns:
        `DemoResult`.
    """
    from recast.config import METHODS, preset
    from recast.io import check_target, write_csv, write_json

    _check_options(methods, seeds, workers, METHODS)
    if figure_name is not None and (not figure_name or Path(figure_name).name != figure_name or figure_name in (".", "..")):
        raise ValueError(f"figure name (--figure) must be a plain file name without a folder, got {figure_name!r}")
    out = Path(out_dir)
    # progress: the workers' bars are off (RunProgress prints one line per finished iteration instead);
    # checkpoint_every: a stopped demo continues from its last checkpoint when rerun
    overrides = {"setting": setting, "lam": tuple(lam), "progress": False, "checkpoint_every": CHECKPOINT_EVERY}
    if iterations is not None:
        overrides["iterations"] = iterations
    from recast.trainer.validate import validate

    cfg = preset(preset_name, **overrides)
    if cfg.eval_every <= 0:
        overrides["eval_every"] = cfg.iterations  # the summary needs the base model's scores (iteration 0)
    # every file the demo writes at the end is checked before any compute: a link or a file in the way fails now
    targets = [out / name for name in ("results.json", "results.csv", "paired.csv")]
    if figure_name:
        from recast.plotting import check_figures_dir

        fig_dir = check_figures_dir(None if os.environ.get("RECAST_FIGURES_DIR") else out)
        targets += [fig_dir / f"{figure_name}{suffix}" for suffix in (".png", ".pdf")]
    for path in targets:
        check_target(path)
    for m in methods:  # validate every config before any compute
        for s in seeds:
            spec = validate(preset(preset_name, **overrides, method=m, seed=s), out / m / f"seed_{s}", resume="auto",
                            overwrite=overwrite)
    jobs = [(preset_name, {**overrides, "method": m, "seed": s}, str(out / m / f"seed_{s}"), overwrite)
            for m in methods for s in seeds]
    workers = workers or min(len(jobs), os.cpu_count() or 1)
    start = time.perf_counter()
    from recast.experiments.progress import RunProgress

    with RunProgress({f"{m}/seed_{s}": out / m / f"seed_{s}" for m in methods for s in seeds}, cfg.iterations):
        if workers == 1:
            for job in jobs:
                _train_one(job)
        else:
            with cf.ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn")) as pool:
                list(pool.map(_train_one, jobs))
    runs = {m: [out / m / f"seed_{s}" for s in seeds] for m in methods}
    rows = summarise(runs)
    pairs, eff = paired(runs), []  # the interpolated efficiency ratio is retired (research/study/preregistration.md)
    result = DemoResult(out, rows, runs, time.perf_counter() - start, pairs, eff)
    write_json(out / "results.json", {"preset": preset_name, "setting": setting, "lam": spec.lam.tolist(),
                                      "seeds": list(seeds),
                                      "wall_time_s": result.wall_time_s, "rows": rows, "paired": pairs,
                                      "efficiency": eff})
    write_csv(out / "results.csv", rows)
    if pairs:
        write_csv(out / "paired.csv", pairs)
    if figure_name:
        from recast.plotting import savefig

        # beside its results unless the caller points figures elsewhere (make figures: the committed figures/)
        savefig(plot_demo(runs, rows), figure_name, outdir=None if os.environ.get("RECAST_FIGURES_DIR") else out)
    return result


def summarise(runs: dict[str, list[Path]]) -> list[dict]:
    """Per method and eval metric: base (iteration 0) and final mean ± std over seeds, and the paired change."""
    from recast.trainer.metrics import load_run

    rows = []
    for method, paths in runs.items():
        evals = [load_run(p).evals for p in paths]
        keys = [k for k in evals[0][-1] if k != "iteration"]
        for key in keys:
            if any(e[0]["iteration"] != 0 for e in evals):
                raise ValueError(f"runs of {method} have no evaluation at iteration 0 (set eval_every > 0)")
            base = np.array([e[0][key] for e in evals], dtype=float)
            final = np.array([e[-1][key] for e in evals], dtype=float)
            delta = final - base
            rows.append({"method": method, "metric": key, "seeds": len(paths),
                         "base_mean": base.mean(), "base_std": base.std(ddof=1) if len(base) > 1 else 0.0,
                         "final_mean": final.mean(), "final_std": final.std(ddof=1) if len(final) > 1 else 0.0,
                         "delta_mean": delta.mean(), "delta_std": delta.std(ddof=1) if len(delta) > 1 else 0.0})
    return rows


def paired(runs: dict[str, list[Path]], *, method: str = "recast", confidence: float = 0.95) -> list[dict]:
    """Paired ``method`` − baseline differences of every final eval metric, for each other method as the baseline.

    Runs pair by seed (``seed_<s>`` folders of the same index share the seed, base model, prompts and noise), so
    seed-to-seed variation cancels; ``verdict`` follows `recast.stats.paired_difference` (one 95 % interval, not
    adjusted for the many metrics read at once), with a pass rate's s.d. taken as at least one prompt of the runs'
    shared ``eval_prompts`` (`recast.experiments.sweep_results.pass_rate_resolution`); ``holm`` is the verdict after
    Holm's correction over every metric of that baseline (family-wise 5 %; "tie" where it does not survive), with
    the ``p_value`` it used (`recast.stats.interval_p_value`).
    """
    from recast.stats import holm, interval_p_value, lower_is_better, paired_difference
    from recast.experiments.sweep_results import pass_rate_resolution
    from recast.trainer.metrics import load_run

    if method not in runs:
        return []
    loaded = {m: [load_run(p) for p in paths] for m, paths in runs.items()}
    final = {m: [r.evals[-1] for r in rs] for m, rs in loaded.items()}
    counts = [{"eval_prompts": r.config.get("eval_prompts")} for rs in loaded.values() for r in rs]
    out = []
    for baseline in (m for m in runs if m != method):
        if len(runs[baseline]) != len(runs[method]):
            raise ValueError(f"{method} and {baseline} ran different numbers of seeds; pairs need the same seeds")
        for key in (k for k in final[method][0] if k != "iteration"):
            a, b = [e[key] for e in final[method]], [e[key] for e in final[baseline]]
            d = paired_difference(a, b, higher_is_better=not lower_is_better(key), confidence=confidence,
                                  resolution=pass_rate_resolution(counts, a + b))
            out.append({"method": method, "baseline": baseline, "metric": key, "n": d.n, "diff": d.mean,
                        "ci_low": d.ci_low, "ci_high": d.ci_high, "verdict": d.verdict})
        family = [r for r in out if r["baseline"] == baseline]
        ps = [interval_p_value(r["diff"], r["ci_low"], r["ci_high"], r["n"])
              if r["n"] >= 2 and math.isfinite(r["ci_low"]) else 1.0 for r in family]
        for r, p, kept in zip(family, ps, holm(ps) if ps else []):
            r["p_value"], r["holm"] = p, r["verdict"] if kept else "tie"
    return out


def efficiency(runs: dict[str, list[Path]], *, method: str = "recast", prefix: str = "judge/") -> list[dict]:
    """For each baseline and each eval metric under ``prefix``: the share of the baseline's images ``method`` needs
    to reach the baseline's final seed-mean value (`recast.stats.efficiency_ratio`), with a paired bootstrap interval
    over seeds (`recast.stats.efficiency_row`). ``ratio`` is None when the method never gets there, or when the
    baseline ended no better than it started (``baseline_improved`` False). Run directories are paired by name
    (``seed_<n>``).

    Raises:
        ValueError: a baseline that did not run the method's seeds, or was evaluated at other sample counts."""
    from recast.stats import efficiency_row, lower_is_better
    from recast.experiments.sweep_results import images_per_iteration
    from recast.trainer.metrics import load_run

    if method not in runs:
        return []
    loaded = {m: [load_run(p) for p in paths] for m, paths in runs.items()}

    def seed_curves(m: str, key: str) -> tuple[np.ndarray, np.ndarray]:
        per = images_per_iteration(loaded[m][0].config)
        its = [e["iteration"] for e in loaded[m][0].evals]
        vals = np.array([[e[key] for e in r.evals] for r in loaded[m]], dtype=float)  # (seeds, evaluations)
        return np.asarray(its, dtype=float) * per, vals

    out = []
    for baseline in (m for m in runs if m != method):
        if [p.name for p in runs[baseline]] != [p.name for p in runs[method]]:
            raise ValueError(f"{method} and {baseline} must run the same seeds (paired): "
                             f"{[p.name for p in runs[method]]} vs {[p.name for p in runs[baseline]]}")
        for key in (k for k in loaded[method][0].evals[-1] if k.startswith(prefix)):
            (xa, ya), (xb, yb) = seed_curves(method, key), seed_curves(baseline, key)
            if not np.array_equal(xa, xb) or ya.shape != yb.shape:
                raise ValueError(f"{method} and {baseline} were evaluated at different sample counts")
            out.append({"method": method, "baseline": baseline, "metric": key,
                        **efficiency_row(xa, ya, yb, higher_is_better=not lower_is_better(key))})
    return out


def plot_demo(runs: dict[str, list[Path]], rows: list[dict] | None = None):
    """Three panels: weighted training reward (mean ± std over seeds), the paired ReCAST − baseline differences on
    every held-out judge with their 95 % intervals (the policy evaluated named: the EMA or the trained weights; the
    Fréchet distance on its own scale beside the rates), and the last ReCAST W.

    Args:
        runs: method -> run directories, as in `DemoResult.runs`.
        rows: `summarise(runs)` if already computed (it reads every run directory).
    """
    import matplotlib.pyplot as plt

    from recast.plotting import plot_weights
    from recast.trainer.metrics import load_run

    fig = plt.figure(figsize=(18, 3.8), constrained_layout=True)
    grid = fig.add_gridspec(1, 4, width_ratios=[1, 1.3, 0.22, 1.3])
    axes = [fig.add_subplot(grid[0, i]) for i in range(4)]
    ax = axes[0]
    for method, paths in runs.items():
        curves = [load_run(p).curve("reward/weighted") for p in paths]
        it, ys = curves[0][0], np.stack([c[1] for c in curves])
        ax.plot(it, ys.mean(0), label=method)
        ax.fill_between(it, ys.mean(0) - ys.std(0), ys.mean(0) + ys.std(0), alpha=0.25)
    ax.set(xlabel="iteration", ylabel="weighted training reward")
    ax.set_title("(a) training reward, mean ± std over seeds", fontsize=9)
    ax.legend(frameon=False)

    first = load_run(next(iter(runs.values()))[0])
    policy = "EMA of the weights" if float(first.config.get("ema_decay", 0.9)) > 0 else "the trained weights"
    plot_paired_judges(axes[1], axes[2], [r for r in paired(runs) if r["metric"].startswith("judge/")], policy)

    recast_runs = runs.get("recast") or runs.get("recast_live")
    if recast_runs:
        run = load_run(recast_runs[0])
        it, W = run.W_at(10**9)
        if run.weights:  # the live estimate: W as last re-solved
            title = f"(c) recast_live's W at iteration {it} (seed 0)"
        else:  # the paper's: one W, the run's weight table
            title = "(c) ReCAST's W (its weight table)"
        plot_weights(W, run.reward_names, sigmas=run.sigmas, ax=axes[3], title=title)
    else:
        axes[3].axis("off")
    return fig


def plot_paired_judges(ax, ax_fid, pairs: list[dict], policy: str = "") -> None:
    """Panel (b) of `plot_demo`: ReCAST − each baseline on every held-out judge with its interval, up = ReCAST better
    (lower-is-better metrics negated). Pass and defect rates share ``ax``; the Fréchet distance, whose differences
    are hundreds of times larger, gets ``ax_fid`` and its own scale (on one axis its interval made every rate's
    difference a dot on zero).

    Args:
        ax, ax_fid: the two axes; either is switched off when it has nothing to show.
        pairs: `paired` rows of judge metrics.
        policy: which weights the evaluations sampled, for the title.
    """
    from recast.stats import lower_is_better

    baselines = list(dict.fromkeys(r["baseline"] for r in pairs))
    rates = [m for m in dict.fromkeys(r["metric"] for r in pairs) if m != "judge/fid"]
    fid = [m for m in dict.fromkeys(r["metric"] for r in pairs) if m == "judge/fid"]
    for axis, metrics in ((ax, rates), (ax_fid, fid)):
        if not metrics:
            axis.axis("off")
            continue
        for i, b in enumerate(baselines):
            sel = {r["metric"]: r for r in pairs if r["baseline"] == b}
            xs = np.arange(len(metrics)) + (i - (len(baselines) - 1) / 2) * 0.25
            sign = np.array([-1.0 if lower_is_better(m) else 1.0 for m in metrics])
            mid = sign * [sel[m]["diff"] for m in metrics]
            ends = sign[:, None] * [[sel[m]["ci_low"], sel[m]["ci_high"]] for m in metrics]
            axis.errorbar(xs, mid, yerr=[mid - ends.min(1), ends.max(1) - mid], fmt="o", capsize=3, color=f"C{i}",
                          label=f"ReCAST − {b}")
        axis.axhline(0, color="0.4", lw=0.8)
        axis.set_xticks(np.arange(len(metrics)), [m.removeprefix("judge/") + (" (−)" if lower_is_better(m) else "")
                                                  for m in metrics], rotation=35, ha="right", fontsize=8)
        axis.set_xlim(-0.6, len(metrics) - 0.4)
    if rates:
        ax.set(ylabel="paired difference (up: ReCAST better)")
        ax.set_title("(b) ReCAST − baseline, held-out judges, 95 % CI" + (f"\n(policy: {policy})" if policy else ""),
                     fontsize=9)
        ax.legend(frameon=False, fontsize=7)
    if fid:
        ax_fid.set_title("Fréchet distance\n(its own scale)", fontsize=8)
        ax_fid.tick_params(axis="y", labelsize=7)


# ------------------------------------------------------------------------------------ re-scoring on more samples


@dataclass(frozen=True)
class _DemoRun:
    """One finished demo run, shaped as `recast.experiments.alone.reevaluate` reads a run."""

    method: str
    seed: int
    out_dir: Path
    setting: str = ""
    budget: str = "default"

    @property
    def command(self) -> str:
        return f"python -m recast demo (run {self.out_dir})"


def demo_runs(out_dir: str | Path) -> dict[str, list[Path]]:
    """method -> the demo's run folders ``<out_dir>/<method>/seed_<s>``, in seed order.

    Raises:
        FileNotFoundError: no run folder under ``out_dir``.
        ValueError: methods that ran different seeds (pairs need the same seeds).
    """
    out = Path(out_dir)
    runs = {m.name: sorted(m.glob("seed_*"), key=lambda p: int(p.name.split("_", 1)[1]))
            for m in sorted(out.iterdir()) if m.is_dir() and any(m.glob("seed_*"))} if out.is_dir() else {}
    if not runs:
        raise FileNotFoundError(f"no demo runs (<method>/seed_<s>) under {out}")
    seeds = {m: [p.name for p in ps] for m, ps in runs.items()}
    if len({tuple(v) for v in seeds.values()}) != 1:
        raise ValueError(f"the methods under {out} ran different seeds: {seeds}")
    return runs


def rescore(out_dir: str | Path, *, num_prompts: int = 256, draws: int = 1, which: str = "ema") -> list[dict]:
    """Re-score every run of a finished demo on ``num_prompts`` test samples per policy and draw.

    The demo's own table reads 64 test prompts once per run, so its judge pass rates carry a binomial s.e. of about
    0.06 and its Fréchet distance the error of 64 samples. Here each run's base model and final policy are sampled
    again (`recast.experiments.alone.reevaluate_draw`, same noise for both). Draw ``d`` of seed ``s`` uses noise seed
    ``REEVAL_SEED_OFFSET + s + d * RESCORE_DRAW_STRIDE``, shared by every method of that seed, so the methods stay
    paired within a draw and draw 0 is `reevaluate`'s own per-seed draw.

    Returns:
        one row per (method, seed, draw), as `recast.experiments.alone.reevaluate` writes them, plus ``draw``.

    Raises:
        FileNotFoundError: no demo runs under ``out_dir``.
        ValueError: ``draws`` or ``num_prompts`` < 1, ``which`` not "ema" or "params" (these two checked by
            `recast.experiments.alone.reevaluate` before its first sample), methods that ran different seeds, or an unfinished
            run; all before any sampling.
    """
    from recast.experiments.alone import reevaluate_draw
    from recast.experiments.sweep import is_finished

    if draws < 1:
        raise ValueError(f"draws must be >= 1, got {draws}")
    runs = [_DemoRun(m, int(p.name.split("_", 1)[1]), p) for m, paths in demo_runs(out_dir).items() for p in paths]
    unfinished = [str(r.out_dir) for r in runs if not is_finished(r)]
    if unfinished:
        raise ValueError(f"unfinished demo runs: {unfinished}")
    return [row for d in range(draws) for row in reevaluate_draw(runs, d, num_prompts=num_prompts, which=which)]


def _pooled(rows: list[dict]) -> tuple[dict[tuple[str, int], dict[str, float]], list[str], int]:
    """(method, seed) -> every metric averaged over the draws (`recast.experiments.alone.pool_draws`); the metric names; samples
    per run in all draws."""
    from recast.experiments.alone import pool_draws

    runs = pool_draws(rows, by=("method", "seed"))
    keys = [k for k in runs[0] if k.startswith(("judge/", "reward/", "base:judge/", "base:reward/"))]
    return {(r["method"], int(r["seed"])): {k: r[k] for k in keys} for r in runs}, keys, int(runs[0]["eval_prompts"])


def rescore_paired(rows: list[dict], *, method: str = "recast", confidence: float = 0.95) -> list[dict]:
    """``method`` − baseline of every final metric of `rescore`'s rows, each run's metric averaged over its draws
    first, paired by seed; as `paired`, with a pass rate's s.d. floored at one sample of the pooled draws."""
    from recast.stats import count_resolution, lower_is_better, paired_difference

    pooled, keys, samples = _pooled(rows)
    seeds = sorted({s for _, s in pooled})
    methods = list(dict.fromkeys(m for m, _ in pooled))
    out = []
    for baseline in (m for m in methods if m != method):
        for key in (k for k in keys if not k.startswith("base:")):
            a, b = [pooled[(method, s)][key] for s in seeds], [pooled[(baseline, s)][key] for s in seeds]
            res = count_resolution(a + b, samples) if key.startswith("judge/") else 0.0
            d = paired_difference(a, b, higher_is_better=not lower_is_better(key), confidence=confidence,
                                  resolution=res)
            out.append({"method": method, "baseline": baseline, "metric": key, "n": d.n, "samples": samples,
                        "diff": d.mean, "ci_low": d.ci_low, "ci_high": d.ci_high, "verdict": d.verdict})
    return out


def rescore_changes(rows: list[dict]) -> list[dict]:
    """Per method and metric: final − base of `rescore`'s rows (each run averaged over its draws), mean ± std over
    seeds, and whether it moved the wrong way by more than one seed-std (``worse``)."""
    from recast.stats import lower_is_better

    pooled, keys, samples = _pooled(rows)
    out = []
    for m in dict.fromkeys(m for m, _ in pooled):
        for key in (k for k in keys if not k.startswith("base:")):
            delta = np.array([v[key] - v[f"base:{key}"] for (mm, _), v in pooled.items() if mm == m])
            base = np.array([v[f"base:{key}"] for (mm, _), v in pooled.items() if mm == m])
            mean, std = float(delta.mean()), float(delta.std(ddof=1)) if delta.size > 1 else 0.0
            gain = -mean if lower_is_better(key) else mean
            out.append({"method": m, "metric": key, "seeds": int(delta.size), "samples": samples,
                        "base_mean": float(base.mean()), "delta_mean": mean, "delta_std": std,
                        "worse": bool(gain < -std)})
    return out


def rescore_compare(rows: list[dict], other: list[dict], *, confidence: float = 0.95) -> list[dict]:
    """Two demos' re-scores against each other, method by method: ``rows`` − ``other`` of every final judge, paired
    by seed, on the draws both have (the same noise seeds, so the samples differ only by the policies). Use it for
    demos that differ in one thing (a reward swapped, a budget), each run by `rescore`.

    Raises:
        ValueError: no method, seed and draw in common, or two runs of one (method, seed) on different numbers of
            common draws.
    """
    from recast.stats import count_resolution, lower_is_better, paired_difference

    key = lambda r: (r["method"], int(r["seed"]), int(r["draw"]))  # noqa: E731
    common = {key(r) for r in rows} & {key(r) for r in other}
    if not common:
        raise ValueError("the two re-scores share no (method, seed, draw)")
    a, b = ([r for r in rs if key(r) in common] for rs in (rows, other))
    (pa, keys_a, samples), (pb, keys_b, _) = _pooled(a), _pooled(b)
    judges = [k for k in keys_a if k.startswith("judge/") and k in keys_b]
    out = []
    for method in dict.fromkeys(m for m, _ in pa):
        seeds = sorted(s for m, s in pa if m == method)
        for k in judges:
            x, y = [pa[(method, s)][k] for s in seeds], [pb[(method, s)][k] for s in seeds]
            d = paired_difference(x, y, higher_is_better=not lower_is_better(k), confidence=confidence,
                                  resolution=count_resolution(x + y, samples))
            out.append({"method": method, "metric": k, "n": d.n, "samples": samples, "diff": d.mean,
                        "ci_low": d.ci_low, "ci_high": d.ci_high, "verdict": d.verdict})
    return out
