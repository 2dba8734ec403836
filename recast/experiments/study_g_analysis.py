"""Stage G's pre-registered analysis (research/study/preregistration.md, "Amendment: stage G"): pure functions of the
long rows in research/study/data/G.csv (`python -m recast.experiments.study_g collect`), committed before the first
run.

    python -m recast.experiments.study_g_analysis analyse    # research/study/results/G/*.csv and report.md

The unit is the matched pair (budget, seed) within a setting: the same prompts, noise and columns for both arms.
* Primary family, per setting (Holm over its 8 tests): {P2, TE} × each arm − static. P2 is the aggregate training
  reward Σ λ_k r_k at the final evaluation (``reward/weighted``); TE the timing endpoint, (colour judge accuracy −
  the late defect's rate) / 2 at the final evaluation (blur in compose, speckle in timing); up is better for both.
* Secondary, per setting and arm: P1 (stage F's judge composite), every held-out judge (Holm over the judges), and
  the joint domination and collapse rates over the per-sample verdicts (`recast.experiments.study_g.joint_rates`)
  with their t-intervals over the matched pairs, and their difference.
* Harms, one-sided at α = 0.05 each, uncorrected: within-prompt diversity lower, Fréchet distance higher.
* The paper's table per setting, and the readings written before the runs, each marked as holding or not.

An arm is read only when every one of its planned runs has a record (`study_g collect` writes only complete arms).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from recast.experiments.study_f_analysis import _holm, _sign, _t, composite, finals, judges, paired

__all__ = ["COMPARED", "ENDPOINTS", "TE_JUDGES", "HARMS", "endpoint", "timing_endpoint", "primary", "secondary",
           "joint", "harms", "paper_table", "readings", "analyse", "report", "main"]

COMPARED = ("recast_gt", "recast", "recast_r16", "recast_live")  # each against static, in the amendment's order
ENDPOINTS = ("P2 reward/weighted", "TE timing endpoint")
# setting -> (the early judge, up is better; the late defect rate, down is better): TE = (early − late) / 2
TE_JUDGES = {"compose": ("judge/color", "judge/defect_blur"), "timing": ("judge/color", "judge/defect_speckle")}
# harm -> (metric, the harmful direction of arm − static): one-sided tests
HARMS = {"diversity lower": ("judge/diversity", -1.0), "Fréchet distance higher": ("judge/fid", +1.0)}
ALPHA = 0.05


def timing_endpoint(rows, setting: str, arm: str) -> dict[tuple, float]:
    """(budget, seed) -> TE at the run's final evaluation."""
    early, late = TE_JUDGES[setting]
    a, b = finals(rows, setting, arm, early), finals(rows, setting, arm, late)
    return {k: (a[k] - b[k]) / 2 for k in sorted(set(a) & set(b))}


def endpoint(rows, setting: str, arm: str, metric: str) -> dict[tuple, float]:
    """(budget, seed) -> one of the `ENDPOINTS` per run."""
    if metric not in ENDPOINTS:
        raise ValueError(f"unknown endpoint {metric!r}; known: {', '.join(ENDPOINTS)}")
    if metric == ENDPOINTS[0]:
        return finals(rows, setting, arm, "reward/weighted")
    return timing_endpoint(rows, setting, arm)


def _arms(rows, setting: str) -> list[str]:
    present = {r["arm"] for r in rows if r["setting"] == setting}
    return [a for a in COMPARED if a in present] if "static" in present else []


def primary(rows) -> list[dict]:
    """Per setting: {P2, TE} × each present arm − static, paired t-intervals, Holm over the setting's tests."""
    out = []
    for setting in TE_JUDGES:
        fam = []
        for arm in _arms(rows, setting):
            for metric in ENDPOINTS:
                r = paired(endpoint(rows, setting, arm, metric), endpoint(rows, setting, "static", metric),
                           metric=metric)
                if r:
                    fam.append(dict(setting=setting, arm=arm, baseline="static", better_up=True, **r))
        _holm(fam)
        out += fam
    return out


def secondary(rows) -> list[dict]:
    """Per setting and arm: P1 (its own test), then every held-out judge with Holm over the judges."""
    out = []
    for setting in TE_JUDGES:
        for arm in _arms(rows, setting):
            p1 = paired(composite(rows, setting, arm), composite(rows, setting, "static"), metric="P1 judge composite")
            if p1:
                row = dict(setting=setting, arm=arm, baseline="static", family="P1", better_up=True, **p1)
                _holm([row])
                out.append(row)
            fam = []
            for j in judges(rows, setting):
                r = paired(finals(rows, setting, arm, j), finals(rows, setting, "static", j), metric=j,
                           better_up=_sign(j) > 0)
                if r:
                    fam.append(dict(setting=setting, arm=arm, baseline="static", family="judges",
                                    better_up=_sign(j) > 0, **r))
            _holm(fam)
            out += fam
    return out


def _one_sample(values: list[float]) -> tuple[float, float, float]:
    d = np.asarray(values, dtype=float)
    if d.size < 2:
        return float(d.mean()) if d.size else float("nan"), float("nan"), float("nan")
    mean, lo, hi, _ = _t(d)
    return mean, lo, hi


def joint(rows) -> list[dict]:
    """Per setting and arm: the mean joint domination and collapse rates over the matched pairs, and their difference
    (domination − collapse; above 0 means the arm more often passes every verdict static passes and one more), each
    with its 95 % t-interval over the pairs."""
    out = []
    for setting in TE_JUDGES:
        for arm in _arms(rows, setting):
            dom = finals(rows, setting, arm, "joint/dominate")
            col = finals(rows, setting, arm, "joint/collapse")
            keys = sorted(set(dom) & set(col))
            if not keys:
                continue
            row = dict(setting=setting, arm=arm, n=len(keys))
            for name, vals in (("dominate", [dom[k] for k in keys]), ("collapse", [col[k] for k in keys]),
                               ("net", [dom[k] - col[k] for k in keys])):
                row[name], row[f"{name}_low"], row[f"{name}_high"] = _one_sample(vals)
            out.append(row)
    return out


def harms(rows) -> list[dict]:
    """The two pre-registered harms per setting and arm: one-sided paired t-tests in the harmful direction, each at
    α = 0.05 with no correction; ``harm`` is True where it is significant."""
    from scipy.stats import t as student_t

    out = []
    for setting in TE_JUDGES:
        for arm in _arms(rows, setting):
            for harm, (metric, direction) in HARMS.items():
                a, b = finals(rows, setting, arm, metric), finals(rows, setting, "static", metric)
                keys = sorted(set(a) & set(b))
                if len(keys) < 2:
                    continue
                d = direction * np.array([a[k] - b[k] for k in keys], dtype=float)  # > 0 = harmful
                se = float(d.std(ddof=1) / np.sqrt(len(d)))
                p = (0.5 if d.mean() == 0 else float(d.mean() <= 0)) if se == 0 else float(
                    student_t.sf(d.mean() / se, len(d) - 1))
                out.append(dict(setting=setting, arm=arm, harm=harm, metric=metric, n=len(keys),
                                diff=float(direction * d.mean()), p_one_sided=p, harm_significant=p < ALPHA))
    return out


def paper_table(rows, setting: str) -> list[dict]:
    """The paper's form (`recast.experiments.study_f_analysis.paper_table`) over stage G's arms."""
    from recast.experiments import study_f_analysis
    from recast.experiments.study_g import ARMS

    return study_f_analysis.paper_table(rows, setting, arms=ARMS)


def _verdict(prim: list[dict], setting: str, arm: str) -> str | None:
    """"win" / "loss" if either endpoint of the arm wins / loses after Holm (a win on one and a loss on the other
    reads "mixed"), "tie" if both tie, None when the arm is not in."""
    v = {r["verdict_holm"] for r in prim if r["setting"] == setting and r["arm"] == arm}
    if not v:
        return None
    if "win" in v and "loss" in v:
        return "mixed"
    return "win" if "win" in v else "loss" if "loss" in v else "tie"


def readings(prim: list[dict], harm_rows: list[dict]) -> list[dict]:
    """The amendment's readings, per setting, each with ``holds`` True / False, or None while an arm it names is not
    in. Written before the runs; the page quotes them as they come."""
    out = []
    for setting in TE_JUDGES:
        gt, rd, r16, live = (_verdict(prim, setting, a) for a in COMPARED)
        te_only = None
        if gt is not None:
            by = {r["metric"]: r["verdict_holm"] for r in prim if r["setting"] == setting and r["arm"] == "recast_gt"}
            harm = any(h["harm_significant"] for h in harm_rows if h["setting"] == setting and h["arm"] == "recast_gt")
            te_only = by.get(ENDPOINTS[1]) == "win" and by.get(ENDPOINTS[0]) == "tie" and harm

        def both(a, b, fa, fb):
            return None if a is None or b is None else fa(a) and fb(b)

        out += [
            dict(setting=setting, reading="recast_gt wins (P2 or TE after Holm) while recast ties: the proposal "
                 "caused stage F's tie", holds=both(gt, rd, lambda v: v == "win", lambda v: v == "tie")),
            dict(setting=setting, reading="recast_r16 wins where recast ties: the profile's Monte-Carlo noise caused "
                 "it", holds=both(r16, rd, lambda v: v == "win", lambda v: v == "tie")),
            dict(setting=setting, reading="recast_gt wins TE only, P2 tied, a harm significant: ReCAST re-allocates "
                 "between the judges rather than improving", holds=te_only),
            dict(setting=setting, reading="recast_gt ties: the digit world cannot test the claim at this size",
                 holds=None if gt is None else gt == "tie"),
            dict(setting=setting, reading="recast_live wins, recast_gt ties: estimating W as the policy moves matters "
                 "more than measuring it once", holds=both(live, gt, lambda v: v == "win", lambda v: v == "tie")),
        ]
    return out


def analyse(rows: list[dict]) -> dict[str, list[dict]]:
    """Every stage-G table: primary, secondary, joint, harms, paper, readings."""
    G = [r for r in rows if r["stage"] == "G"]
    prim, harm_rows = primary(G), harms(G)
    return {"primary": prim, "secondary": secondary(G), "joint": joint(G), "harms": harm_rows,
            "paper": [row for s in TE_JUDGES for row in paper_table(G, s)], "readings": readings(prim, harm_rows)}


def _f(x, digits: int = 4) -> str:
    return "" if x is None else f"{x:+.{digits}f}" if isinstance(x, float) else str(x)


def report(tables: dict[str, list[dict]]) -> str:
    """The results as markdown: the primary family, the readings, joint rates, harms."""
    lines = ["## Stage G: primary family (Holm over 8 tests per setting)", "",
             "| setting | arm − static | endpoint | n | diff [95 % CI] | p | Holm | wins |", "| --- | --- | --- | --- "
             "| --- | --- | --- | --- |"]
    for r in tables["primary"]:
        lines.append(f"| {r['setting']} | {r['arm']} | {r['metric']} | {r['n']} | {_f(r['diff'])} "
                     f"[{_f(r['ci_low'])}, {_f(r['ci_high'])}] | {r['p']:.3g} | {r['verdict_holm']} | "
                     f"{r['wins']}/{r['n']} |")
    lines += ["", "## Readings written before the runs", "", "| setting | reading | holds |", "| --- | --- | --- |"]
    lines += [f"| {r['setting']} | {r['reading']} | {'not yet' if r['holds'] is None else r['holds']} |"
              for r in tables["readings"]]
    lines += ["", "## Joint domination and collapse over the per-sample verdicts", "",
              "| setting | arm | n | dominate | collapse | net [95 % CI] |", "| --- | --- | --- | --- | --- | --- |"]
    lines += [f"| {r['setting']} | {r['arm']} | {r['n']} | {r['dominate']:.3f} | {r['collapse']:.3f} | "
              f"{_f(r['net'], 3)} [{_f(r['net_low'], 3)}, {_f(r['net_high'], 3)}] |" for r in tables["joint"]]
    lines += ["", "## Harms (one-sided, α = 0.05 each, uncorrected)", "", "| setting | arm | harm | diff | p | "
              "significant |", "| --- | --- | --- | --- | --- | --- |"]
    lines += [f"| {r['setting']} | {r['arm']} | {r['harm']} | {_f(r['diff'])} | {r['p_one_sided']:.3g} | "
              f"{r['harm_significant']} |" for r in tables["harms"]]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    import argparse

    from recast.experiments.study_f import ROOT
    from recast.io import read_csv, write_csv

    p = argparse.ArgumentParser(prog="python -m recast.experiments.study_g_analysis", description=__doc__.split("\n")[0])
    p.add_argument("command", choices=("analyse",))
    p.add_argument("--data", default=str(ROOT / "research" / "study" / "data" / "G.csv"))
    p.add_argument("--out", default=str(ROOT / "research" / "study" / "results" / "G"))
    args = p.parse_args(argv)
    if not Path(args.data).is_file():
        print(f"error: {args.data}: no such file; run `python -m recast.experiments.study_g collect` first",
              file=sys.stderr)
        return 2
    rows = [dict(r, seed=int(r["seed"]), iteration=int(r["iteration"]), value=float(r["value"]))
            for r in read_csv(args.data)]
    tables = analyse(rows)
    out = Path(args.out)
    for name, t in tables.items():
        if t:
            write_csv(out / f"{name}.csv", t)
    (out / "report.md").parent.mkdir(parents=True, exist_ok=True)
    (out / "report.md").write_text(report(tables))
    print(report(tables))
    return 0


if __name__ == "__main__":
    sys.exit(main())
