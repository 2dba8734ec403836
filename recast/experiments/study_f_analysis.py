"""Stage F's pre-registered analysis (research/study/preregistration.md, "Amendment: stage F"): pure functions of the
long rows in research/study/data/F.csv, and the page's tables and figures.

The unit is the matched pair (budget, seed): the same prompts, noise and columns for both arms. Per setting and per
comparison (ReCAST against static, and against each variant):
* primary family (Holm over its two endpoints): P1, the held-out-judge composite: per run, the mean over the setting's
  held-out judges of (value − the static arm's mean) / the static arm's sd, signed so that up is better (the judges'
  means and sds over all the setting's static runs, final evaluation); P2, the aggregate training reward Σ λ_k r_k on
  the held-out prompts (``reward/weighted``);
* secondary family (Holm over the judges): each held-out judge;
* the paper's table: base, static and arm means of every training reward and judge, with wins out of the pairs.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np

__all__ = ["COMPARISONS", "PRIMARY_JUDGE", "TOST_MARGIN", "ENDPOINTS", "finals", "composite", "endpoint", "paired",
           "paper_table", "analyse", "sensitivity", "effective_scale", "scale_matched", "null_table", "paper_claim",
           "report", "readable", "page_block", "main"]

COMPARISONS = (("recast", "static"), ("recast", "recast_self"), ("recast", "recast_live"), ("recast", "reading"),
               ("recast_kl2", "reading_kl2"))  # the last: the kl_beta sensitivity check, where it was due
PRIMARY_JUDGE = {"compose": "judge/color", "quality": "judge/fid"}  # stage A's primary judges, reported beside P1
TOST_MARGIN = {"composite": 0.2, "judge/color": 0.0336, "judge/fid": 34.0}  # recast vs recast_live
LOWER_IS_BETTER = ("judge/fid", "judge/defect_")
LEFT_OUT = ("judge/pairwise",)  # lexicographic in the attribute judges, as in stage A


def _sign(metric: str) -> float:
    return -1.0 if metric.startswith(LOWER_IS_BETTER) else 1.0


def finals(rows, setting: str, arm: str, metric: str, *, iteration: int | None = None) -> dict[tuple, float]:
    """(budget, seed) -> the metric at the run's final evaluation (or at ``iteration``)."""
    last: dict = {}
    for r in rows:
        if (r["setting"], r["arm"], r["metric"]) == (setting, arm, metric) and (iteration is None or
                                                                                r["iteration"] == iteration):
            key = (r["budget"], r["seed"])
            if key not in last or r["iteration"] > last[key][0]:
                last[key] = (r["iteration"], r["value"])
    return {k: v for k, (_, v) in last.items()}


def judges(rows, setting: str) -> list[str]:
    return sorted({r["metric"] for r in rows if r["setting"] == setting and r["metric"].startswith("judge/")
                   and not r["metric"].startswith(LEFT_OUT)})


def composite(rows, setting: str, arm: str) -> dict[tuple, float]:
    """P1 per run: the mean over held-out judges of the signed z-score against the setting's static runs."""
    out: dict[tuple, list[float]] = {}
    for j in judges(rows, setting):
        ref = np.array(list(finals(rows, setting, "static", j).values()), dtype=float)
        if ref.size < 2 or ref.std(ddof=1) == 0:
            continue
        mu, sd = ref.mean(), ref.std(ddof=1)
        for k, v in finals(rows, setting, arm, j).items():
            out.setdefault(k, []).append(_sign(j) * (v - mu) / sd)
    n = max((len(v) for v in out.values()), default=0)
    return {k: float(np.mean(v)) for k, v in out.items() if len(v) == n}


ENDPOINTS = ("P1 judge composite", "P2 reward/weighted")  # the two primary endpoints, up is better for both


def endpoint(rows, setting: str, arm: str, metric: str) -> dict[tuple, float]:
    """(budget, seed) -> one of the `ENDPOINTS` per run: P1 the judge composite, P2 the aggregate training reward."""
    if metric not in ENDPOINTS:
        raise ValueError(f"unknown endpoint {metric!r}; known: {', '.join(ENDPOINTS)}")
    return composite(rows, setting, arm) if metric == ENDPOINTS[0] else finals(rows, setting, arm, "reward/weighted")


def _t(d: np.ndarray) -> tuple[float, float, float, float]:
    from scipy.stats import t as student_t

    n, mean = len(d), float(d.mean())
    se = float(d.std(ddof=1) / math.sqrt(n))
    q = float(student_t.ppf(0.975, n - 1))
    p = 1.0 if se == 0 and mean == 0 else 0.0 if se == 0 else float(2 * student_t.sf(abs(mean) / se, n - 1))
    return mean, mean - q * se, mean + q * se, p


def paired(a: dict, b: dict, *, metric: str, better_up: bool = True) -> dict | None:
    """Paired a − b over the keys both have: mean, 95 % t-interval, p, and wins of a (better side) out of n."""
    keys = sorted(set(a) & set(b))
    if len(keys) < 2:
        return None
    d = np.array([a[k] - b[k] for k in keys], dtype=float)
    mean, lo, hi, p = _t(d)
    wins = int(((d > 0) if better_up else (d < 0)).sum())
    return dict(metric=metric, n=len(keys), diff=mean, ci_low=lo, ci_high=hi, p=p, wins=wins)


def _holm(rows: list[dict]) -> None:
    from recast.stats import holm

    for r, keep in zip(rows, holm([r["p"] for r in rows]) if rows else []):
        better = (r["diff"] > 0) == r["better_up"]
        r["verdict_holm"] = ("win" if better else "loss") if keep else "tie"
        r["verdict_95"] = ("win" if better else "loss") if r["p"] < 0.05 else "tie"


def analyse(rows: list[dict]) -> dict[str, list[dict]]:
    """Every stage-F table: primary, secondary, paper, tost, spread, sensitivity, scale_matched (exploratory), null."""
    from recast.experiments.study_f import SETTINGS

    tables = {"primary": [], "secondary": [], "paper": [], "tost": [], "spread": [], "sensitivity": [],
              "scale_matched": [], "null": []}
    F = [r for r in rows if r["stage"] == "F"]
    for setting in [s for s in SETTINGS if any(r["setting"] == s for r in F)]:
        for arm, base in COMPARISONS:
            prim = []
            for metric in ENDPOINTS:
                r = paired(endpoint(F, setting, arm, metric), endpoint(F, setting, base, metric), metric=metric)
                if r:
                    prim.append(dict(setting=setting, arm=arm, baseline=base, better_up=True, **r))
            _holm(prim)
            tables["primary"] += prim
            sec = []
            for j in judges(F, setting):
                r = paired(finals(F, setting, arm, j), finals(F, setting, base, j), metric=j, better_up=_sign(j) > 0)
                if r:
                    sec.append(dict(setting=setting, arm=arm, baseline=base, better_up=_sign(j) > 0, **r))
            _holm(sec)
            tables["secondary"] += sec
        tables["paper"] += paper_table(F, setting)
        tables["tost"] += _tost(F, setting)
        for arm in sorted({r["arm"] for r in F if r["setting"] == setting}):
            v = finals(F, setting, arm, "signal/sd_mean")
            if v:
                tables["spread"].append(dict(setting=setting, arm=arm, runs=len(v), signal_sd=float(np.mean(list(
                    v.values())))))
    tables["sensitivity"] = sensitivity(tables["primary"], F)
    tables["scale_matched"] = scale_matched(F)
    tables["null"] = null_table(F)
    return tables


def sensitivity(primary: list[dict], rows) -> list[dict]:
    """The kl_beta sensitivity check, per setting where it ran: `recast − reading` at the setting's kl_beta (all pairs,
    and its equal-budget pairs alone) beside `recast_kl2 − reading_kl2` (equal budget, twice the kl_beta), and
    whether the verdict's sign and its Holm decision stay."""
    out = []
    for r2 in (r for r in primary if (r["arm"], r["baseline"]) == ("recast_kl2", "reading_kl2")):
        r1 = next((r for r in primary if (r["setting"], r["metric"], r["arm"], r["baseline"]) ==
                   (r2["setting"], r2["metric"], "recast", "reading")), None)
        if r1 is None:
            continue
        setting, metric = r2["setting"], r2["metric"]
        a, b = endpoint(rows, setting, "recast", metric), endpoint(rows, setting, "reading", metric)
        eq = paired({k: v for k, v in a.items() if k[0] == "equal"}, b, metric=metric)
        out.append(dict(setting=setting, metric=metric, n=r1["n"], diff=r1["diff"], verdict_holm=r1["verdict_holm"],
                        equal_n=eq["n"] if eq else 0, equal_diff=eq["diff"] if eq else float("nan"),
                        kl2_n=r2["n"], kl2_diff=r2["diff"], kl2_ci_low=r2["ci_low"], kl2_ci_high=r2["ci_high"],
                        kl2_verdict_holm=r2["verdict_holm"], sign_same=bool(np.sign(r1["diff"]) == np.sign(r2["diff"])),
                        decision_same=r1["verdict_holm"] == r2["verdict_holm"]))
    return out


def effective_scale(rows, setting: str, arm: str) -> float:
    """The arm's mean combined-signal spread over its equal-budget runs, over the kl_beta it trained at: against a
    fixed KL term, a signal twice as large acts like half the KL weight (NaN where the arm has no such runs)."""
    from recast.experiments.study_f import KL_BETA, SENSITIVITY

    v = [x for k, x in finals(rows, setting, arm, "signal/sd_mean").items() if k[0] == "equal"]
    return float(np.mean(v)) / (KL_BETA[setting] * (2 if arm in SENSITIVITY else 1)) if v else float("nan")


def scale_matched(rows) -> list[dict]:
    """Exploratory, added after the results were read (deviation F.2), no multiplicity correction: the paper's recipe
    at twice kl_beta (`recast_kl2`) against our reading at the preset's (`reading`), the one cross pair of the
    sensitivity check's runs whose effective scales (`effective_scale`) are close; paired over the equal budget's
    seeds, P1 and P2, with both scales and their ratio."""
    a_arm, b_arm, out = "recast_kl2", "reading", []
    for setting in sorted({r["setting"] for r in rows} - {"null"}):
        sa, sb = effective_scale(rows, setting, a_arm), effective_scale(rows, setting, b_arm)
        for metric in ENDPOINTS:
            b = {k: v for k, v in endpoint(rows, setting, b_arm, metric).items() if k[0] == "equal"}
            r = paired(endpoint(rows, setting, a_arm, metric), b, metric=metric)
            if r:
                out.append(dict(setting=setting, arm=a_arm, baseline=b_arm, scale_arm=sa, scale_baseline=sb,
                                scale_ratio=sa / sb, **r))
    return out


def null_table(rows) -> list[dict]:
    """W's departure from λ/T (final W; max and root mean square over cells of |W_kt T / λ_k − 1|) under the
    real-trainer null (colour entered twice, `null_live`) beside `recast_live`'s runs in each setting, with the share
    of those runs above the null's 95th percentile (descriptive: the null has K = 2 rewards, the settings 4 and 5)."""
    from recast.experiments.study_f import NULL_ARM, SETTINGS

    out = []
    for metric in ("W/max_rel_departure", "W/rms_rel_departure"):
        null = np.array(list(finals(rows, "null", NULL_ARM, metric).values()), dtype=float)
        if null.size < 2:
            continue
        q95 = float(np.quantile(null, 0.95))
        groups = [("null: colour twice", null)]
        for setting in SETTINGS:
            v = finals(rows, setting, "recast_live", metric)
            groups += [(f"recast_live {setting}, all budgets", np.array(list(v.values()), dtype=float)),
                       (f"recast_live {setting}, equal budget",
                        np.array([x for k, x in v.items() if k[0] == "equal"], dtype=float))]
        for label, v in groups:
            if v.size:
                out.append(dict(metric=metric, runs=label, n=int(v.size), mean=float(v.mean()),
                                sd=float(v.std(ddof=1)) if v.size > 1 else 0.0, max=float(v.max()),
                                above_null_q95=float((v > q95).mean())))
    return out


def paper_table(rows, setting: str, arms=None) -> list[dict]:
    """The paper's form: per training reward and held-out judge, base / static / each arm's mean (the arms present,
    in ``arms``' order: default stage F's five by priority), and the arm's wins over static out of the matched
    pairs."""
    from recast.experiments.study_f import ARMS

    arms_order = list(ARMS if arms is None else arms)
    metrics = sorted({r["metric"] for r in rows if r["setting"] == setting and r["metric"].startswith("reward/")},
                     key=lambda m: (m == "reward/weighted", m)) + judges(rows, setting)
    out = []
    for m in metrics:
        base = finals(rows, setting, "static", m, iteration=0)
        row = dict(setting=setting, metric=m, kind="judge" if m.startswith("judge/") else "reward",
                   base=float(np.mean(list(base.values()))) if base else float("nan"))
        st = finals(rows, setting, "static", m)
        for arm in [a for a in arms_order if any(r["arm"] == a and r["setting"] == setting for r in rows)]:
            v = finals(rows, setting, arm, m)
            row[arm] = float(np.mean(list(v.values()))) if v else float("nan")
            if arm != "static":
                p = paired(v, st, metric=m, better_up=_sign(m) > 0)
                row[f"{arm}_wins"] = f"{p['wins']}/{p['n']}" if p else ""
        out.append(row)
    return out


def _tost(rows, setting) -> list[dict]:
    from recast.experiments.study import tost

    out = []
    for metric, a, b in (("composite", composite(rows, setting, "recast"), composite(rows, setting, "recast_live")),
                         (PRIMARY_JUDGE[setting], finals(rows, setting, "recast", PRIMARY_JUDGE[setting]),
                          finals(rows, setting, "recast_live", PRIMARY_JUDGE[setting]))):
        keys = sorted(set(a) & set(b))
        if len(keys) >= 2:
            out.append(dict(setting=setting, metric=metric, comparison="recast - recast_live",
                            **tost([a[k] - b[k] for k in keys], TOST_MARGIN[metric])))
    return out


def paper_claim(tables: dict[str, list[dict]]) -> list[dict]:
    """The amendment's reading of the paper's claim ("every held-out judge improves over static"), per setting: it
    holds where P1's `recast − static` is a win after Holm and no judge's 95 % interval lies wholly on its worse side;
    the judges on either side are named."""
    out = []
    for p1 in (r for r in tables["primary"] if (r["arm"], r["baseline"], r["metric"]) ==
               ("recast", "static", "P1 judge composite")):
        sec = [r for r in tables["secondary"] if (r["setting"], r["arm"], r["baseline"]) ==
               (p1["setting"], "recast", "static")]
        side = {r["metric"]: ("better" if (r["ci_low"] > 0) == r["better_up"] else "worse")
                for r in sec if r["ci_low"] > 0 or r["ci_high"] < 0}
        worse = sorted(m.removeprefix("judge/") for m, v in side.items() if v == "worse")
        holm = {v: sorted(r["metric"].removeprefix("judge/") for r in sec if r["verdict_holm"] == v)
                for v in ("win", "loss")}
        out.append(dict(setting=p1["setting"], holds=p1["verdict_holm"] == "win" and not worse,
                        p1=p1["verdict_holm"], judges=len(sec), worse=worse,
                        better=sorted(m.removeprefix("judge/") for m, v in side.items() if v == "better"),
                        holm_better=holm["win"], holm_worse=holm["loss"]))
    return out


def _fmt(r: dict) -> str:
    return f"{r['diff']:+.3g} [{r['ci_low']:+.3g}, {r['ci_high']:+.3g}]"


def _section(title: str, head: list[str], cells: list[list]) -> list[str]:
    """A markdown table under a `###` title, with a blank line after it."""
    return [f"### {title}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head),
            *["| " + " | ".join(str(c) for c in row) + " |" for row in cells], ""]


def report(tables: dict[str, list[dict]]) -> str:
    """Markdown of the stage-F tables (the results page's block)."""
    out = _section("Primary family (Holm over P1, P2 per setting and comparison)",
                   ["setting", "comparison", "endpoint", "n", "diff [95 % CI]", "wins", "after Holm"],
                   [[r["setting"], f"{r['arm']} − {r['baseline']}", r["metric"], r["n"], _fmt(r),
                     f"{r['wins']}/{r['n']}", r["verdict_holm"]] for r in tables["primary"]])
    names = lambda xs: ", ".join(xs) if xs else "none"  # noqa: E731
    claims = paper_claim(tables)
    for c in claims:
        out.append(f"- **{c['setting']}: the paper's claim {'holds' if c['holds'] else 'does not hold'} here.** "
                   f"P1, recast − static: {c['p1']} after Holm. Of {c['judges']} held-out judges, the unadjusted "
                   f"95 % interval lies wholly on the better side for {names(c['better'])} and wholly on the worse "
                   f"side for {names(c['worse'])}; after Holm over the judges, better: {names(c['holm_better'])}, "
                   f"worse: {names(c['holm_worse'])}.")
    out += [""] if claims else []
    for setting in sorted({r["setting"] for r in tables["paper"]}):
        rows = [r for r in tables["paper"] if r["setting"] == setting]
        arms = [k for k in rows[0] if k not in ("setting", "metric", "kind", "base") and not k.endswith("_wins")]
        out += _section(f"The paper's table, {setting}",
                        ["metric", "base", *arms, *[f"{a} wins" for a in arms if a != "static"]],
                        [[r["metric"], f"{r['base']:.4g}", *[f"{r[a]:.4g}" for a in arms],
                          *[r.get(f"{a}_wins", "") for a in arms if a != "static"]] for r in rows])
    sec = [r for r in tables["secondary"] if r["baseline"] == "static"]
    if sec:
        out += _section("Secondary family, ReCAST − static (Holm over the judges)",
                        ["setting", "judge", "n", "diff [95 % CI]", "wins", "after Holm"],
                        [[r["setting"], r["metric"], r["n"], _fmt(r), f"{r['wins']}/{r['n']}", r["verdict_holm"]]
                         for r in sec])
    yes = lambda b: "yes" if b else "no"  # noqa: E731
    if tables["tost"]:
        out += _section("Equivalence, recast − recast_live (TOST, 90 % interval inside ±margin)",
                        ["setting", "endpoint", "n", "diff [90 % CI]", "margin", "p", "equivalent"],
                        [[r["setting"], r["metric"], r["n"], f"{r['diff']:+.3g} [{r['ci90_low']:+.3g}, "
                          f"{r['ci90_high']:+.3g}]", f"±{r['margin']:g}", f"{r['p']:.3g}", yes(r["equivalent"])]
                         for r in tables["tost"]])
    if tables["spread"]:
        out += _section("The combined signal's spread (mean over iterations and runs)",
                        ["setting", "arm", "runs", "signal sd"],
                        [[r["setting"], r["arm"], r["runs"], f"{r['signal_sd']:.4g}"] for r in tables["spread"]])
    if tables["sensitivity"]:
        out += _section("kl_beta sensitivity, recast − reading (the pre-registered check)",
                        ["setting", "endpoint", "at kl_beta: diff (n), after Holm", "equal budget only: diff (n)",
                         "at 2 × kl_beta: diff [95 % CI] (n), after Holm", "sign kept", "decision kept"],
                        [[r["setting"], r["metric"], f"{r['diff']:+.3g} ({r['n']}), {r['verdict_holm']}",
                          f"{r['equal_diff']:+.3g} ({r['equal_n']})", f"{r['kl2_diff']:+.3g} [{r['kl2_ci_low']:+.3g}, "
                          f"{r['kl2_ci_high']:+.3g}] ({r['kl2_n']}), {r['kl2_verdict_holm']}", yes(r["sign_same"]),
                          yes(r["decision_same"])] for r in tables["sensitivity"]])
    if tables.get("scale_matched"):
        out += _section("Exploratory, after the results were read: the paper's recipe at twice kl_beta against our "
                        "reading at the preset's, the pair closest in effective scale (deviation F.2; no correction)",
                        ["setting", "comparison", "endpoint", "n", "diff [95 % CI]", "wins",
                         "signal sd / kl_beta (ratio)"],
                        [[r["setting"], f"{r['arm']} − {r['baseline']}", r["metric"], r["n"],
                          f"{r['diff']:+.3g} [{r['ci_low']:+.3g}, {r['ci_high']:+.3g}]", f"{r['wins']}/{r['n']}",
                          f"{r['scale_arm']:.3g} vs {r['scale_baseline']:.3g} ({r['scale_ratio']:.2f})"]
                         for r in tables["scale_matched"]])
    if tables["null"]:
        out += _section("W's departure from λ/T: the real-trainer null beside recast_live (final W)",
                        ["measure", "runs", "n", "mean", "sd", "max", "share above the null's 95th percentile"],
                        [[r["metric"].split("/")[1], r["runs"], r["n"], f"{r['mean']:.3f}", f"{r['sd']:.3f}",
                          f"{r['max']:.3f}", f"{r['above_null_q95']:.2f}"] for r in tables["null"]])
    return "\n".join(out)


PAGE = Path(__file__).resolve().parents[2] / "research" / "study" / "README.md"
PAGE_MARKS = ("<!-- report:F -->\n", "<!-- /report:F -->")


def readable(rows: list[dict], records: Path | None = None) -> list[dict]:
    """The rows of the arms whose runs are all in (`study_f.complete_arms`); the rest are not read yet.

    Raises:
        ValueError: the primary pair (static, recast) is not complete: nothing of the stage is read before it is.
    """
    from recast.experiments import study_f

    records = study_f.RECORDS if records is None else records
    done = study_f.complete_arms(records)
    if not {"static", "recast"} <= set(done):
        left = len(study_f.missing(("static", "recast"), records))
        raise ValueError(f"{left} of the static/recast runs have no record yet: the amendment reads nothing of "
                         "stage F until its primary pair is in (`python -m recast.experiments.study_f list`)")
    return [r for r in rows if r["arm"] in done]


def page_block(tables: dict[str, list[dict]], records: Path | None = None) -> str:
    """The results page's stage-F block: `report`, then the arms not yet read with the command that continues them."""
    from recast.experiments import study_f

    records = study_f.RECORDS if records is None else records
    done = study_f.complete_arms(records)
    due = study_f.sensitivity_due(records)
    todo = [f"`{a}`" for a in study_f.ARMS if a not in done]  # no run counts: the block stays put as records land
    if len(due) < len(study_f.SETTINGS) or (any(d["due"] for d in due.values()) and "recast_kl2" not in done):
        todo.append("the kl_beta sensitivity check (`recast_kl2`, `reading_kl2`" + (
            ", decided once `recast` and `reading` are in)" if len(due) < len(study_f.SETTINGS) else
            f", due in {', '.join(s for s, d in due.items() if d['due'])})"))
    if study_f.NULL_ARM not in done:
        todo.append(f"W's null for recast_live (`{study_f.NULL_ARM}`)")
    commits = sorted(study_f.trainer_commits(records))
    on = (f" --trainer ../studyF` (`git worktree add --detach ../studyF {commits[0][:10]}` makes that checkout of "
          "their trainer commit)" if len(commits) == 1 else "`")
    tail = ["", f"Not yet run, so not read: {', '.join(todo)}; `python -m recast.experiments.study_f run --jobs 2 "
            f"--commit{on} continues them, `list` prints each command and whether it is done."] if todo else []
    from recast.experiments.study_f_figures import figure_names

    captions = {"primary": "each comparison's primary endpoints, paired, 95 % CI",
                "renderings": "W per budget, the weight tables from the renderings proposal (`recast`)",
                "self": "W per budget, the weight tables from the model's own samples (`recast_self`)"}
    for name, src in figure_names(done).items():  # drawn by `figures --figures research/study/figures`
        tail += ["", f"![Stage F: {captions.get(src, f'W per budget, the final live W of `{src}`, mean over seeds')}]"
                 f"(figures/{name}.png)"]
    quiet = [f"{s} {d['ratio']:.2f}" for s, d in due.items() if not d["due"]]
    if quiet:
        tail += ["", f"The kl_beta sensitivity check is not due where `recast` and `reading` differ in mean signal "
                 f"spread by {study_f.SPREAD_RATIO:g}× or less: {', '.join(quiet)} (larger over smaller)."]
    return report(tables) + "\n".join(tail) + ("\n" if tail else "")


def main(argv=None) -> int:
    """`python -m recast.experiments.study_f_analysis analyse | report | page | figures [--figures DIR]`."""
    import argparse

    from recast.experiments.study import STUDY_DIR, _read
    from recast.io import atomic_write_bytes, write_csv

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("command", choices=("analyse", "report", "page", "figures"))
    ap.add_argument("--figures", default="runs/study/figures", help="where `figures` writes (the page's: "
                    "research/study/figures)")
    a = ap.parse_args(argv)
    command, figures_dir = a.command, a.figures

    path = STUDY_DIR / "data" / "F.csv"
    if not path.is_file():
        print(f"error: {path} is missing: run `python -m recast.experiments.study_f collect` first", file=sys.stderr)
        return 2
    try:
        tables = analyse(readable(_read(path)))
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if command == "report":
        print(report(tables), end="")
        return 0
    if command == "page":
        text = PAGE.read_text()
        head, rest = text.split(PAGE_MARKS[0], 1)
        _, tail = rest.split(PAGE_MARKS[1], 1)
        atomic_write_bytes(PAGE, (head + PAGE_MARKS[0] + page_block(tables) + PAGE_MARKS[1] + tail).encode())
        print(f"wrote the stage-F block of {PAGE}")
        return 0
    if command == "figures":
        from recast.experiments.study_f_figures import figures

        for p in figures(tables, Path(figures_dir)):  # the page links research/study/figures
            print(p)
        return 0
    out = STUDY_DIR / "results" / "F"
    out.mkdir(parents=True, exist_ok=True)
    for name, table in tables.items():
        if table:
            write_csv(out / f"{name}.csv", table)
    print({k: len(v) for k, v in tables.items()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
