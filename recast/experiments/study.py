"""The pre-registered study (research/study/preregistration.md): its runs, their per-seed data, and its analysis.

    python -m recast.experiments.study run --stage A --jobs 2     # train a stage's runs (resumable; finished are kept)
    python -m recast.experiments.study collect --stage A          # their evaluations -> research/study/data/A.csv
    python -m recast.experiments.study analyse                    # every table of the results page, from data/
    python -m recast.experiments.study report                     # those tables as markdown
    python -m recast.experiments.study figures --figures DIR      # the page's figures

Runs are `python -m recast train` commands on the sweep machinery (`recast.experiments.sweep`), under
``runs/study/<stage>/<setting>/<budget>/<arm>-<backend>/seed_<s>``. `collect` keeps each run's evaluation curve
(every 3 iterations, 256 test prompts) as long rows, so every table re-derives from the committed CSVs alone.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

from recast.experiments.sweep import SweepRun, budget_grid, is_finished, lambda_grid, run_sweep
from recast.io import atomic_write

__all__ = ["ARMS", "STAGES", "STUDY_DIR", "plan_stage", "collect", "paired_table", "tost", "auc",
           "images_to_reach", "analyse", "report", "figures", "stage_rows"]

STUDY_DIR = Path(__file__).resolve().parents[2] / "research" / "study"
SEEDS = tuple(range(10))  # research/study/power.json
PRIMARY = {"compose": "judge/color", "quality": "judge/fid"}
MARGIN = {"compose": 0.0336, "quality": 34.0}  # TOST margins: half the committed colour effect; one fid seed-sd
LOWER_IS_BETTER = ("judge/fid", "judge/defect_")
# arm -> (trainer method, uses a committed W file)
# (stage A's "recast" is the live estimate of our first reading, named recast_live since the paper's recipe took the
# name; its runs train on the "reading" preset, the recipe stage A ran as "cpu")
ARMS = {"reward_sum": ("reward_sum", False), "uniform": ("uniform", False), "recast": ("recast_live", False),
        "fixed_gt": ("fixed", True), "placebo": ("fixed", True), "per_step": ("per_step", False),
        "otca": ("otca", False)}
DENSE = {"eval_every": 3, "eval_prompts": 256}
# stage -> list of (setting, budget, arms, backend, extra --set fields); the order runs are trained in
STAGES: dict[str, list] = {
    "A": [(s, "default", tuple(ARMS), "nft", DENSE) for s in ("compose", "quality")],
    "B": [("compose", "default", ("uniform", "recast", "per_step", "otca"), "grpo", DENSE)],
    "C": [("compose", "null", ("recast",), "nft", {"rewards": "color_jitter_a,color_jitter_b"})],
    "D": [(s, b, ("uniform", "recast", "fixed_gt"), "nft", {"eval_every": 0, "eval_prompts": 256})
          for s, bs in (("compose", ("color-heavy", "sharpness-heavy")), ("quality", ("uniform", "realism_centred-heavy")))
          for b in bs],
    "E": [("compose", "default", ("recast",), "nft", {**DENSE, "replay_share": 0.25}),
          ("compose", "default", ("recast",), "nft", {**DENSE, "prompts_per_iter": 5})],
}


def _lam(world: str, setting: str, budget: str) -> tuple[float, ...] | None:
    if budget in ("default", "null"):
        return None
    return lambda_grid(world, setting)[budget]


def w_file(setting: str, budget: str, arm: str) -> Path:
    """The committed W of a fixed arm (research/study/make_w.py)."""
    return STUDY_DIR / "w" / f"{setting}_{budget}_{arm}.json"


def plan_stage(stage: str, *, seeds=SEEDS, world: str = "data/digit_base", out_root="runs/study") -> list[SweepRun]:
    """Every run of a stage, each a `python -m recast train` command with one torch thread."""
    if stage not in STAGES:
        raise ValueError(f"unknown stage {stage!r}; choose from {sorted(STAGES)}")
    runs = []
    for setting, budget, arms, backend, sets in STAGES[stage]:
        lam = _lam(world, setting, budget)
        tag = "-".join(f"{k}{v}" for k, v in sets.items() if k in ("replay_share", "prompts_per_iter"))
        for arm in arms:
            method, fixed = ARMS[arm]
            for seed in seeds:
                name = arm + ("-grpo" if backend == "grpo" else "") + (f"-{tag}" if tag else "")
                out = Path(out_root) / stage / setting / budget / name / f"seed_{seed}"
                args = ["--preset", "reading", "--world", world, "--method", method, "--backend", backend, "--seed",
                        str(seed), "--out", str(out), "--set", "num_threads=1"]
                if "rewards" not in sets:
                    args[4:4] = ["--setting", setting]
                if lam is not None:
                    args += ["--lam", ",".join(f"{x:g}" for x in lam)]
                if fixed:
                    args += ["--fixed-w", str(w_file(setting, budget, arm).relative_to(STUDY_DIR.parents[1]))]
                for k, v in sets.items():
                    args += ["--rewards", str(v)] if k == "rewards" else ["--set", f"{k}={v}"]
                runs.append(SweepRun(setting, budget, lam or (), name, seed, out, tuple(args)))
    return runs


def collect(runs: list[SweepRun], stage: str) -> list[dict]:
    """Long rows (one per run × evaluation × metric) of the finished runs, and each run's final W departure."""
    from recast.trainer.metrics import load_run

    rows = []
    for run in runs:
        if not is_finished(run):
            continue
        r = load_run(run.out_dir)
        B = int(r.config["prompts_per_iter"]) * int(r.config["group_size"])
        key = dict(stage=stage, setting=run.setting, budget=run.budget, arm=run.method, seed=run.seed)
        for ev in r.evals:
            for metric, value in ev.items():
                if metric.startswith(("judge/", "reward/")) and isinstance(value, (int, float)):
                    rows.append(dict(key, iteration=ev["iteration"], images=ev["iteration"] * B, metric=metric,
                                     value=float(value)))
        W = np.asarray(r.metrics[-1]["W"], dtype=float) if r.metrics[-1].get("W") is not None else None
        if W is not None:
            lam_T = W.sum(1, keepdims=True) / W.shape[1]
            rows.append(dict(key, iteration=r.metrics[-1]["iteration"], images=0, metric="W/max_rel_departure",
                             value=float(np.abs(W / lam_T - 1).max())))
            half = W.shape[1] // 2
            for k, name in enumerate(r.reward_names):  # (was config["_run"], which load_run removes: never written)
                rows.append(dict(key, iteration=r.metrics[-1]["iteration"], images=0,
                                 metric=f"W/early_share/{name}", value=float(W[k, :half].sum() / W[k].sum())))
        rows.append(dict(key, iteration=r.metrics[-1]["iteration"], images=0, metric="time/train_s",
                         value=float(sum(m.get("time/total", 0.0) for m in r.metrics))))
        rows.append(dict(key, iteration=r.metrics[-1]["iteration"], images=0, metric="config/ema_decay",
                         value=float(r.config.get("ema_decay", 0.0))))
        for name in ("reward_queries", "reward_queries_proxy"):  # the x̂_0 rewards ReCAST scores are extra queries
            if isinstance(r.metrics[-1].get(name), (int, float)):
                rows.append(dict(key, iteration=r.metrics[-1]["iteration"], images=0, metric=f"queries/{name}",
                                 value=float(r.metrics[-1][name])))
    return rows


# ---------------------------------------------------------------------------------------------------------------------
# analysis (pure functions of the long rows)

def _better_sign(metric: str) -> float:
    return -1.0 if metric.startswith(LOWER_IS_BETTER) else 1.0


def paired_table(rows: list[dict], *, setting: str, budget: str, metrics, arm: str, baselines, iteration=None,
                 value_fn=None) -> list[dict]:
    """Paired per-seed differences ``arm − baseline`` of each metric (final evaluation unless ``iteration``), with the
    t-interval, the two-sided p-value and Holm's verdict over the whole table (its family)."""
    from scipy.stats import t as student_t

    from recast.stats import holm

    def per_seed(a, metric):
        sel = [r for r in rows if r["setting"] == setting and r["budget"] == budget and r["arm"] == a and
               r["metric"] == metric]
        if value_fn is not None:
            return value_fn(sel)
        last = {}
        for r in sel:
            if iteration is None or r["iteration"] == iteration:
                if r["seed"] not in last or r["iteration"] > last[r["seed"]][0]:
                    last[r["seed"]] = (r["iteration"], r["value"])
        return {s: v for s, (_, v) in last.items()}

    out = []
    for metric in metrics:
        mine = per_seed(arm, metric)
        for base in baselines:
            theirs = per_seed(base, metric)
            seeds = sorted(set(mine) & set(theirs))
            d = np.array([mine[s] - theirs[s] for s in seeds], dtype=float)
            n = len(d)
            if n < 2:
                continue
            mean, se = float(d.mean()), float(d.std(ddof=1) / math.sqrt(n))
            q = float(student_t.ppf(0.975, n - 1))
            p = 1.0 if se == 0 and mean == 0 else 0.0 if se == 0 else float(2 * student_t.sf(abs(mean) / se, n - 1))
            out.append(dict(setting=setting, budget=budget, metric=metric, arm=arm, baseline=base, n=n, diff=mean,
                            ci_low=mean - q * se, ci_high=mean + q * se, p=p))
    keep = holm([r["p"] for r in out]) if out else []
    for r, k in zip(out, keep):
        better = _better_sign(r["metric"]) * r["diff"] > 0
        r["verdict_95"] = ("win" if better else "loss") if r["p"] < 0.05 else "tie"
        r["verdict_holm"] = ("win" if better else "loss") if k else "tie"
    return out


def tost(d, margin: float, alpha: float = 0.05) -> dict:
    """Two one-sided t-tests of |mean(d)| < margin: equivalence when the (1 − 2α) interval lies inside ±margin."""
    from scipy.stats import t as student_t

    d = np.asarray(d, dtype=float)
    n = len(d)
    mean, se = float(d.mean()), float(d.std(ddof=1) / math.sqrt(n))
    q = float(student_t.ppf(1 - alpha, n - 1))
    if se == 0:
        p = 0.0 if abs(mean) < margin else 1.0
    else:
        p = max(float(student_t.sf((mean + margin) / se, n - 1)), float(student_t.cdf((mean - margin) / se, n - 1)))
    return dict(n=n, diff=mean, ci90_low=mean - q * se, ci90_high=mean + q * se, margin=margin, p=p,
                equivalent=bool(mean - q * se > -margin and mean + q * se < margin))


def auc(curve: list[tuple[float, float]]) -> float:
    """The mean value of a curve over its images (trapezoids; the span normalised to 1)."""
    xs, ys = zip(*sorted(curve))
    span = xs[-1] - xs[0]
    return float(np.trapezoid(ys, xs) / span) if span > 0 else float(ys[0])


def images_to_reach(curve: list[tuple[float, float]], threshold: float, higher_is_better: bool = True) -> float:
    """Images at which a curve first reaches ``threshold`` (linear between evaluations); inf if it never does."""
    pts = sorted(curve)
    sign = 1.0 if higher_is_better else -1.0
    for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
        if sign * y0 >= sign * threshold:
            return float(x0)
        if sign * y1 >= sign * threshold:
            return float(x0 + (x1 - x0) * (threshold - y0) / (y1 - y0))
    return 0.0 if pts and sign * pts[-1][1] >= sign * threshold and len(pts) == 1 else math.inf


def analyse(rows: list[dict]) -> dict[str, list[dict]]:
    """Every pre-registered table, from the long rows of every stage."""
    judges = sorted({r["metric"] for r in rows if r["metric"].startswith("judge/")})
    others = [a for a in ARMS if a != "recast"]
    tables: dict[str, list[dict]] = {"primary": [], "secondary": [], "pooled": [], "tost": [], "efficiency": [],
                                     "null": [], "replay": [], "grpo": [], "hacking": [], "time": []}
    A = [r for r in rows if r["stage"] == "A"]
    for setting, metric in PRIMARY.items():
        tables["primary"] += paired_table(A, setting=setting, budget="default", metrics=[metric], arm="recast",
                                          baselines=others)
        tables["secondary"] += paired_table(A, setting=setting, budget="default", arm="recast", baselines=others,
                                            metrics=[j for j in judges if j != metric])
        fixed = {s: v for s, v in _final(A, setting, "default", "fixed_gt", metric).items()}
        live = _final(A, setting, "default", "recast", metric)
        seeds = sorted(set(fixed) & set(live))
        if len(seeds) >= 2:
            tables["tost"].append(dict(setting=setting, metric=metric, comparison="fixed_gt - recast",
                                       **tost([fixed[s] - live[s] for s in seeds], MARGIN[setting])))
        tables["efficiency"] += _efficiency(A, setting, metric)
    B = [r for r in rows if r["stage"] == "B"]
    if B:
        tables["grpo"] = _grpo(B, judges)
    D = [r for r in rows if r["stage"] in ("A", "D")]
    tables["pooled"] = _pooled(D, judges)
    C = [r for r in rows if r["stage"] == "C"]
    if C:
        tables["null"] = _null(C, A)
    E = [r for r in rows if r["stage"] == "E"]
    if E:
        tables["replay"] = _replay(E, A)
    tables["hacking"] = _hacking(A)
    tables["time"] = _wall_time(rows)
    return tables


def _final(rows, setting, budget, arm, metric) -> dict[int, float]:
    last: dict = {}
    for r in rows:
        if (r["setting"], r["budget"], r["arm"], r["metric"]) == (setting, budget, arm, metric):
            if r["seed"] not in last or r["iteration"] > last[r["seed"]][0]:
                last[r["seed"]] = (r["iteration"], r["value"])
    return {s: v for s, (_, v) in last.items()}


def _curves(rows, setting, budget, arm, metric) -> dict[int, list[tuple[float, float]]]:
    out: dict = {}
    for r in rows:
        if (r["setting"], r["budget"], r["arm"], r["metric"]) == (setting, budget, arm, metric):
            out.setdefault(r["seed"], []).append((r["images"], r["value"]))
    return out


def _efficiency(rows, setting, metric) -> list[dict]:
    """AUC of the primary endpoint (paired, ReCAST − uniform), and the images each needs to reach uniform's own final
    seed mean (the baseline's threshold), per seed."""
    higher = _better_sign(metric) > 0
    mine, base = _curves(rows, setting, "default", "recast", metric), _curves(rows, setting, "default", "uniform",
                                                                              metric)
    seeds = sorted(set(mine) & set(base))
    if len(seeds) < 2:
        return []
    threshold = float(np.mean([max(base[s])[1] for s in seeds]))
    aucs = [_better_sign(metric) * (auc(mine[s]) - auc(base[s])) for s in seeds]
    reach_m = [images_to_reach(mine[s], threshold, higher) for s in seeds]
    reach_b = [images_to_reach(base[s], threshold, higher) for s in seeds]
    from scipy.stats import t as student_t

    a = np.array(aucs)
    q = float(student_t.ppf(0.975, len(a) - 1)) * a.std(ddof=1) / math.sqrt(len(a))
    return [dict(setting=setting, metric=metric, n=len(seeds), auc_advantage=float(a.mean()),
                 auc_ci_low=float(a.mean() - q), auc_ci_high=float(a.mean() + q), threshold=threshold,
                 recast_reached=sum(math.isfinite(x) for x in reach_m), uniform_reached=sum(math.isfinite(x) for x in
                                                                                         reach_b),
                 recast_median_images=float(np.median(reach_m)), uniform_median_images=float(np.median(reach_b)))]


def _grpo(rows, judges) -> list[dict]:
    out = []
    for metric in [PRIMARY["compose"]] + [j for j in judges if j != PRIMARY["compose"]]:
        out += paired_table(rows, setting="compose", budget="default", metrics=[metric], arm="recast-grpo",
                            baselines=["uniform-grpo", "per_step-grpo", "otca-grpo"])
    return out


def _pooled(rows, judges) -> list[dict]:
    """Budget-pooled paired tests of ReCAST against uniform and fixed_gt: per seed, the mean difference over the
    setting's budgets (default and the sweep's), then a t-test over seeds; Holm over the judges per comparison."""
    from scipy.stats import t as student_t

    from recast.stats import holm

    out = []
    for setting in PRIMARY:
        budgets = sorted({r["budget"] for r in rows if r["setting"] == setting and r["budget"] not in ("null",)})
        if len(budgets) < 2:  # one budget: nothing pooled (the primary and secondary tables already hold it)
            continue
        for base in ("uniform", "fixed_gt"):
            fam = []
            for metric in judges:
                per_seed: dict = {}
                for b in budgets:
                    m, o = _final(rows, setting, b, "recast", metric), _final(rows, setting, b, base, metric)
                    for s in set(m) & set(o):
                        per_seed.setdefault(s, []).append(m[s] - o[s])
                d = np.array([np.mean(v) for s, v in sorted(per_seed.items()) if len(v) == len(budgets)])
                if len(d) < 2:
                    continue
                se = d.std(ddof=1) / math.sqrt(len(d))
                q = float(student_t.ppf(0.975, len(d) - 1))
                p = float(2 * student_t.sf(abs(d.mean()) / se, len(d) - 1)) if se > 0 else float(d.mean() == 0)
                fam.append(dict(setting=setting, metric=metric, arm="recast", baseline=base, budgets=len(budgets),
                                n=len(d), diff=float(d.mean()), ci_low=float(d.mean() - q * se),
                                ci_high=float(d.mean() + q * se), p=p))
            for r, k in zip(fam, holm([r["p"] for r in fam]) if fam else []):
                better = _better_sign(r["metric"]) * r["diff"] > 0
                r["verdict_holm"] = ("win" if better else "loss") if k else "tie"
            out += fam
    return out


def _null(C, A) -> list[dict]:
    """W's departure from λ/T under the real-trainer null (one reward profile entered twice, independent noise)
    beside live ReCAST's in each setting."""
    out = []
    for label, rows, setting in (("null: colour twice", C, "compose"), ("recast compose", A, "compose"),
                                 ("recast quality", A, "quality")):
        v = [r["value"] for r in rows if r["setting"] == setting and r["arm"].startswith("recast") and
             r["metric"] == "W/max_rel_departure" and (label.startswith("null") or r["budget"] == "default")]
        if v:
            out.append(dict(run=label, n=len(v), mean=float(np.mean(v)), sd=float(np.std(v, ddof=1)) if len(v) > 1
                            else 0.0, max=float(np.max(v))))
    return out


def _replay(E, A) -> list[dict]:
    rows = A + E
    out = []
    for arm, label in (("recast-replay_share0.25", "replay at equal reward queries"),
                       ("recast-prompts_per_iter5", "more fresh samples at equal compute")):
        for metric in (PRIMARY["compose"], "judge/strict", "judge/fid"):
            r = paired_table(rows, setting="compose", budget="default", metrics=[metric], arm=arm,
                             baselines=["recast"])
            for x in r:
                x["comparison"] = label
            out += r
    return out


def _t_interval(d) -> tuple[float, float, float]:
    """The mean of per-seed differences ``d`` with its 95 % t-interval (`recast.stats.paired_difference` against 0)."""
    from recast.stats import paired_difference

    r = paired_difference(d, np.zeros(len(d)))
    return r.mean, r.ci_low, r.ci_high


def _hacking(A) -> list[dict]:
    """The reward-hacking check of the pre-registration's reading rule: per setting and arm, each held-out judge's
    change from the base model (iteration 0) to the final evaluation, paired per seed, beside the change of the
    weighted training reward on the same test prompts. A judge whose 95 % interval lies wholly on its worse side
    while the reward's lies wholly above 0 is flagged ``hacked``."""
    from recast.stats import paired_difference

    def change(setting, arm, metric):  # final − first evaluation, per seed with at least two evaluations
        curves = _curves(A, setting, "default", arm, metric).values()
        return [max(c)[1] - min(c)[1] for c in curves if len(c) > 1]

    out = []
    for setting in PRIMARY:
        for arm in ARMS:
            reward = change(setting, arm, "reward/weighted")
            if len(reward) < 2:
                continue
            rw = paired_difference(reward, np.zeros(len(reward)))
            judges = sorted({r["metric"] for r in A if r["setting"] == setting and r["arm"] == arm and
                             r["metric"].startswith("judge/")})
            for metric in judges:
                d = change(setting, arm, metric)
                if len(d) < 2:
                    continue
                j = paired_difference(d, np.zeros(len(d)), higher_is_better=_better_sign(metric) > 0)
                out.append(dict(setting=setting, arm=arm, metric=metric, n=j.n, diff=j.mean, ci_low=j.ci_low,
                                ci_high=j.ci_high, reward_change=rw.mean, reward_ci_low=rw.ci_low,
                                reward_ci_high=rw.ci_high, hacked=bool(j.verdict == "loss" and rw.ci_low > 0)))
    return out


def _wall_time(rows) -> list[dict]:
    """Each arm's training time per run (the trainer's own iteration clock, one thread, two runs sharing 2 cores)."""
    out = []
    keys = sorted({(r["stage"], r["setting"], r["budget"], r["arm"]) for r in rows if r["metric"] == "time/train_s"})
    for stage, setting, budget, arm in keys:
        v = [r["value"] for r in rows if (r["stage"], r["setting"], r["budget"], r["arm"], r["metric"]) ==
             (stage, setting, budget, arm, "time/train_s")]
        q = {m: [r["value"] for r in rows if (r["stage"], r["setting"], r["budget"], r["arm"], r["metric"]) ==
                 (stage, setting, budget, arm, f"queries/{m}")] for m in ("reward_queries", "reward_queries_proxy")}
        out.append(dict(stage=stage, setting=setting, budget=budget, arm=arm, runs=len(v), mean_s=float(np.mean(v)),
                        total_s=float(np.sum(v)), **{m: float(np.mean(x)) if x else math.nan for m, x in q.items()}))
    return out


def _fmt(r: dict, key: str = "diff") -> str:
    fid = r["metric"] == "judge/fid"
    f = "{:+.1f} [{:+.1f}, {:+.1f}]" if fid else "{:+.3f} [{:+.3f}, {:+.3f}]"
    return f.format(r[key], r["ci_low"], r["ci_high"])


def report(tables: dict[str, list[dict]], stages: set[str]) -> str:
    """The results page's tables as markdown, from `analyse` (each table says which stage it needs)."""
    out = [f"Stages in the data: {', '.join(sorted(stages)) or 'none'}.", ""]
    if tables["primary"]:
        out += ["### Primary: ReCAST − each arm on the primary endpoint (Holm over the six, per setting)", "",
                "| setting | endpoint | baseline | n | ReCAST − baseline [95 % CI] | p | per cell | after Holm |",
                "|---|---|---|---|---|---|---|---|"]
        out += [f"| {r['setting']} | {r['metric'].removeprefix('judge/')} | {r['baseline']} | {r['n']} | {_fmt(r)} | "
                f"{r['p']:.3g} | {r['verdict_95']} | **{r['verdict_holm']}** |" for r in tables["primary"]]
    sec = [r for r in tables["secondary"] if r["verdict_holm"] != "tie"]
    if tables["secondary"]:
        out += ["", f"### Secondary judges: cells that survive Holm ({len(sec)} of {len(tables['secondary'])})", ""]
        out += [f"- {r['setting']}, ReCAST − {r['baseline']}, {r['metric'].removeprefix('judge/')}: {_fmt(r)} "
                f"({r['verdict_holm']})" for r in sec] or ["- none"]
    if tables["tost"]:
        out += ["", "### Fixed against live W: equivalence (TOST, α = 0.05 each side)", "",
                "| setting | endpoint | fixed_gt − recast | 90 % CI | margin | p | equivalent |", "|---|---|---|---|---|---|---|"]
        out += [f"| {r['setting']} | {r['metric'].removeprefix('judge/')} | {r['diff']:+.4f} | [{r['ci90_low']:+.4f}, "
                f"{r['ci90_high']:+.4f}] | ±{r['margin']} | {r['p']:.3g} | {'yes' if r['equivalent'] else 'no'} |"
                for r in tables["tost"]]
    if tables["efficiency"]:
        out += ["", "### Sample efficiency (primary endpoint, evaluation every 3 iterations on 256 prompts)", "",
                "| setting | ReCAST's advantage over uniform in area under the curve, positive = ReCAST better [95 % CI] | threshold (uniform's final mean) | "
                "seeds reaching it: ReCAST / uniform | median images: ReCAST / uniform |", "|---|---|---|---|---|"]
        out += [f"| {r['setting']} | {r['auc_advantage']:+.4f} [{r['auc_ci_low']:+.4f}, {r['auc_ci_high']:+.4f}] | "
                f"{r['threshold']:.4f} | {r['recast_reached']} / {r['uniform_reached']} of {r['n']} | "
                f"{r['recast_median_images']:.0f} / {r['uniform_median_images']:.0f} |" for r in tables["efficiency"]]
    for name, title in (("grpo", "GRPO backend, compose: ReCAST − each arm (Holm per judge over the three)"),
                        ("pooled", "Budget-pooled (stages A + D): ReCAST − baseline, Holm over the judges"),
                        ("replay", "Replay (stage E), against ReCAST without it")):
        rows = tables[name]
        if rows:
            out += ["", f"### {title}", "", "| setting | judge | comparison | n | difference [95 % CI] | after Holm |",
                    "|---|---|---|---|---|---|"]
            out += [f"| {r['setting']} | {r['metric'].removeprefix('judge/')} | {r.get('comparison', r['arm'] + ' − ' + r['baseline'])} | "
                    f"{r['n']} | {_fmt(r)} | {r.get('verdict_holm', '')} |" for r in rows]
    hacked = [r for r in tables.get("hacking", []) if r["hacked"]]
    if tables.get("hacking"):
        out += ["", f"### Reward hacking: held-out judges that fell while the weighted reward rose "
                f"({len(hacked)} of {len(tables['hacking'])} arm × judge cells, final − base model, 95 % CI)", ""]
        out += [f"- {r['setting']}, {r['arm']}, {r['metric'].removeprefix('judge/')}: {_fmt(r)} while the weighted "
                f"reward moved {r['reward_change']:+.3f} [{r['reward_ci_low']:+.3f}, {r['reward_ci_high']:+.3f}]"
                for r in hacked] or ["- none"]
    if tables.get("time"):
        total = sum(r["total_s"] for r in tables["time"])
        out += ["", f"### Training time and reward queries ({total / 3600:.1f} hours on the trainer's clock over "
                f"{sum(r['runs'] for r in tables['time'])} runs, evaluation not included; wall time on 2 shared "
                "cores, two runs at a time beside other jobs, so it is not a cost comparison between arms)", "",
                "| stage | setting | budget | arm | runs | mean s per run | reward queries: images / x̂_0 proxies |",
                "|---|---|---|---|---|---|---|"]
        out += [f"| {r['stage']} | {r['setting']} | {r['budget']} | {r['arm']} | {r['runs']} | {r['mean_s']:.0f} | "
                f"{r['reward_queries']:.0f} / {r['reward_queries_proxy']:.0f} |" for r in tables["time"]]
    if tables["null"]:
        out += ["", "### W's departure from λ/T: the real-trainer null beside live ReCAST", "",
                "| runs | n | mean max |W/(λ/T) − 1| | sd | max |", "|---|---|---|---|---|"]
        out += [f"| {r['run']} | {r['n']} | {r['mean']:.3f} | {r['sd']:.3f} | {r['max']:.3f} |" for r in tables["null"]]
    return "\n".join(out) + "\n"


_NAMES = {"judge/color": "colour pass rate", "judge/fid": "Fréchet distance (lower is better)"}


def _policy(rows, setting) -> str:
    """Which weights a setting's evaluations sampled, from the runs' recorded ``ema_decay`` (the evaluation samples
    the EMA, which is the trained weights at decay 0)."""
    v = {r["value"] for r in rows if r["setting"] == setting and r["metric"] == "config/ema_decay"}
    if not v:
        return "weights not recorded"
    if len(v) > 1:
        return "EMA or trained weights by run"
    d = v.pop()
    return f"EMA of the weights, decay {d:g}" if d > 0 else "the trained weights"


def figures(rows: list[dict], tables: dict[str, list[dict]], out_dir) -> list[Path]:
    """The results page's figures: the primary family as paired differences with their intervals (filled where the
    difference survives Holm), and each arm's dense evaluation curve with ReCAST − uniform per evaluation."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    prim = tables["primary"]
    if prim:
        fig, axes = plt.subplots(1, len(PRIMARY), figsize=(5.2 * len(PRIMARY), 3.4), squeeze=False)
        for ax, (setting, metric) in zip(axes[0], PRIMARY.items()):
            rs = [r for r in prim if r["setting"] == setting]
            for y, r in enumerate(rs):
                held = r["verdict_holm"] != "tie"
                ax.errorbar(r["diff"], y, xerr=[[r["diff"] - r["ci_low"]], [r["ci_high"] - r["diff"]]], fmt="o",
                            color="C3" if r["verdict_holm"] == "loss" else "C2" if held else "0.3",
                            mfc=None if held else "white", capsize=3)
            ax.axvline(0, color="0.6", lw=0.8)
            ax.set_yticks(range(len(rs)), [r["baseline"] for r in rs])
            ax.invert_yaxis()
            ax.set_xlabel(f"ReCAST − baseline, {_NAMES.get(metric, metric)}")
            n = rs[0]["n"] if rs else 0
            ax.set_title(f"{setting}: final evaluation, {n} seeds, 95 % CI\n({_policy(rows, setting)}; filled: "
                         f"survives Holm over the six)", fontsize=9)
        from matplotlib.lines import Line2D

        keys = [Line2D([], [], marker="o", ls="", color=c, mfc=f, label=t) for c, f, t in (
            ("C2", None, "ReCAST better (after Holm)"), ("C3", None, "ReCAST worse (after Holm)"),
            ("0.3", "white", "tie after Holm"))]
        fig.legend(handles=keys, loc="lower center", ncol=3, frameon=False, fontsize=8)
        fig.tight_layout(rect=(0, 0.07, 1, 1))  # room for the legend of the colours below the panels
        paths.append(out_dir / "study_primary.png")
        atomic_write(paths[-1], lambda fh, fig=fig: fig.savefig(fh, format="png", dpi=130))
        plt.close(fig)
    A = [r for r in rows if r["stage"] == "A"]
    if A:
        fig, axes = plt.subplots(2, len(PRIMARY), figsize=(5.2 * len(PRIMARY), 6.4), squeeze=False, sharex="col")
        for c, (setting, metric) in enumerate(PRIMARY.items()):
            for k, arm in enumerate(ARMS):
                cur = _curves(A, setting, "default", arm, metric)
                if not cur:
                    continue
                xs = sorted({x for v in cur.values() for x, _ in v})
                ys = [np.mean([dict(v)[x] for v in cur.values() if x in dict(v)]) for x in xs]
                axes[0, c].plot(xs, ys, marker=".", lw=2.2 if arm == "recast" else 1.0, color=f"C{k}", label=arm)
            axes[0, c].set_ylabel(_NAMES.get(metric, metric))
            axes[0, c].set_title(f"{setting}: seed mean per evaluation ({_policy(rows, setting)})", fontsize=9)
            mine, base = (_curves(A, setting, "default", a, metric) for a in ("recast", "uniform"))
            seeds = sorted(set(mine) & set(base))
            if len(seeds) >= 2:
                xs = sorted({x for s in seeds for x, _ in mine[s]} & {x for s in seeds for x, _ in base[s]})
                band = [_t_interval([dict(mine[s])[x] - dict(base[s])[x] for s in seeds]) for x in xs]
                axes[1, c].plot(xs, [b[0] for b in band], color="C2")
                axes[1, c].fill_between(xs, [b[1] for b in band], [b[2] for b in band], color="C2", alpha=0.25)
                axes[1, c].axhline(0, color="0.6", lw=0.8)
                axes[1, c].set_title(f"ReCAST − uniform, paired over {len(seeds)} seeds, 95 % CI per evaluation "
                                     "(uncorrected)", fontsize=9)
            axes[1, c].set_xlabel("training images")
            axes[1, c].set_ylabel("difference")
        axes[0, 0].legend(fontsize=7, ncol=2)
        fig.tight_layout()
        paths.append(out_dir / "study_curves.png")
        atomic_write(paths[-1], lambda fh, fig=fig: fig.savefig(fh, format="png", dpi=130))
        plt.close(fig)
    return paths


def _read(path: Path) -> list[dict]:
    from recast.io import read_csv

    rows = read_csv(path)
    for r in rows:
        r["seed"], r["iteration"], r["images"], r["value"] = int(r["seed"]), int(r["iteration"]), int(r["images"]), \
            float(r["value"])
    return rows


def stage_rows(data: Path) -> list[dict]:
    """The per-seed rows of stages A–E in ``data`` (their `collect` CSVs); stage F's F.csv has its own analysis
    (`recast.experiments.study_f_analysis`) and is not read here."""
    return [r for p in sorted(Path(data).glob("*.csv")) if p.stem in STAGES for r in _read(p)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("command", choices=("run", "collect", "analyse", "report", "figures", "list"))
    ap.add_argument("--stage", default="A")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--out-root", default="runs/study")
    ap.add_argument("--data", default=str(STUDY_DIR / "data"))
    ap.add_argument("--figures", default="runs/study/figures", help="where `figures` writes (the page's figures: "
                    "research/study/figures)")
    a = ap.parse_args(argv)
    runs = plan_stage(a.stage, out_root=a.out_root) if a.command in ("run", "collect", "list") else []
    if a.command == "list":
        for r in runs:
            print(r.command)
        return 0
    if a.command == "run":
        rep = run_sweep(runs, jobs=a.jobs)
        print(f"stage {a.stage}: {len(rep.ran)} trained, {len(rep.skipped)} already finished, {len(rep.failed)} "
              f"failed, {rep.wall_time_s:.0f} s")
        for k, v in rep.failed.items():
            print(f"FAILED {k}: {v.strip().splitlines()[-1] if v.strip() else ''}", file=sys.stderr)
        return 1 if rep.failed else 0
    data = Path(a.data)
    if a.command == "collect":
        from recast.io import write_csv

        rows = collect(runs, a.stage)
        data.mkdir(parents=True, exist_ok=True)
        write_csv(data / f"{a.stage}.csv", rows)
        print(f"{len(rows)} rows of {len({(r['setting'], r['budget'], r['arm'], r['seed']) for r in rows})} runs "
              f"-> {data / (a.stage + '.csv')}")
        return 0
    rows = stage_rows(data)
    from recast.io import write_csv

    out = STUDY_DIR / "results"
    tables = analyse(rows)
    if a.command == "report":
        print(report(tables, {r["stage"] for r in rows}), end="")
        return 0
    if a.command == "figures":
        for path in figures(rows, tables, a.figures):
            print(path)
        return 0
    out.mkdir(parents=True, exist_ok=True)
    for name, table in tables.items():
        if table:
            write_csv(out / f"{name}.csv", table)
    print(json.dumps({k: len(v) for k, v in tables.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
