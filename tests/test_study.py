"""The pre-registered study's machinery (`recast.experiments.study`, research/study/): its plan, its fixed W files and
its analysis, on synthetic rows with known answers."""

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from recast.experiments import study
from helpers import assert_rows_match

ROOT = Path(__file__).resolve().parents[1]


def test_every_stage_plans_seeded_commands_with_one_thread():
    n = {s: len(study.plan_stage(s)) for s in study.STAGES}
    assert n == {"A": 140, "B": 40, "C": 10, "D": 120, "E": 20}
    runs = study.plan_stage("A")
    assert all("num_threads=1" in r.args for r in runs)
    assert {r.seed for r in runs} == set(range(10))
    fixed = [r for r in runs if r.method in ("fixed_gt", "placebo")]
    assert fixed and all((ROOT / r.args[r.args.index("--fixed-w") + 1]).is_file() for r in fixed)
    assert all("--setting" not in r.args for r in study.plan_stage("C"))
    with pytest.raises(ValueError, match="unknown stage"):
        study.plan_stage("Z")


def test_committed_w_files_keep_the_marginals_and_the_placebo_reverses_time():
    from recast.advantages import normalise_budgets, validate_W

    for path in sorted((ROOT / "research/study/w").glob("*_fixed_gt.json")):
        gt = json.loads(path.read_text())
        pl = json.loads(path.with_name(path.name.replace("fixed_gt", "placebo")).read_text())
        W, P = torch.tensor(gt["W"], dtype=torch.float64), torch.tensor(pl["W"], dtype=torch.float64)
        lam = normalise_budgets(gt["lam"], len(gt["lam"]))
        validate_W(W, lam, W.shape[1])
        validate_W(P, lam, W.shape[1])
        assert torch.equal(P, W.flip(1)) and gt["reward_names"] == pl["reward_names"]
        assert float((W - lam[:, None] / W.shape[1]).abs().max()) > 0.01  # a real departure from λ/T


def _rows(diffs, metric="judge/color", setting="compose", arm="recast", base="uniform"):
    rows = []
    for s, d in enumerate(diffs):
        for a, v in ((arm, 0.5 + d), (base, 0.5)):
            rows.append(dict(stage="A", setting=setting, budget="default", arm=a, seed=s, iteration=30, images=960,
                             metric=metric, value=v))
    return rows


def test_paired_table_gives_the_t_interval_and_holm_over_its_family():
    from scipy.stats import t

    d = [0.02, 0.04, 0.03, 0.05, 0.01]
    tab = study.paired_table(_rows(d), setting="compose", budget="default", metrics=["judge/color"], arm="recast",
                             baselines=["uniform"])
    (r,) = tab
    se = np.std(d, ddof=1) / math.sqrt(5)
    assert r["diff"] == pytest.approx(0.03) and r["ci_high"] - r["diff"] == pytest.approx(t.ppf(0.975, 4) * se)
    assert r["verdict_95"] == r["verdict_holm"] == "win"
    fid = study.paired_table(_rows(d, metric="judge/fid"), setting="compose", budget="default",
                             metrics=["judge/fid"], arm="recast", baselines=["uniform"])
    assert fid[0]["verdict_holm"] == "loss"  # a higher Fréchet distance is worse


def test_tost_closed_form():
    d = np.array([0.01, -0.01, 0.02, 0.0, -0.02, 0.01])
    r = study.tost(d, margin=0.05)
    assert r["equivalent"] and r["p"] < 0.05
    assert not study.tost(d + 0.05, margin=0.05)["equivalent"]


def test_auc_and_images_to_reach():
    curve = [(0, 0.0), (10, 1.0), (20, 1.0)]
    assert study.auc(curve) == pytest.approx(0.75)
    assert study.images_to_reach(curve, 0.5) == pytest.approx(5.0)
    assert study.images_to_reach(curve, 2.0) == math.inf
    assert study.images_to_reach([(0, 10.0), (10, 0.0)], 5.0, higher_is_better=False) == pytest.approx(5.0)


def test_analyse_reads_every_stage_from_long_rows():
    rows = []
    for arm in study.ARMS:
        for s in range(4):
            for it in (0, 15, 30):
                v = 0.5 + 0.01 * it / 30 * (2 if arm == "recast" else 1) + 0.001 * s
                rows.append(dict(stage="A", setting="compose", budget="default", arm=arm, seed=s, iteration=it,
                                 images=32 * it, metric="judge/color", value=v))
    tables = study.analyse(rows)
    assert len(tables["primary"]) == 6 and {r["baseline"] for r in tables["primary"]} == set(study.ARMS) - {"recast"}
    assert tables["tost"][0]["comparison"] == "fixed_gt - recast"
    (eff,) = tables["efficiency"]
    assert eff["auc_advantage"] > 0 and eff["recast_reached"] == 4


def test_report_renders_every_table_the_analysis_has():
    rows = []
    for arm in study.ARMS:
        for s in range(4):
            for it in (0, 15, 30):
                v = 0.5 + 0.01 * it / 30 * (2 if arm == "recast" else 1) + 0.002 * s * (arm == "recast")
                rows.append(dict(stage="A", setting="compose", budget="default", arm=arm, seed=s, iteration=it,
                                 images=32 * it, metric="judge/color", value=v))
    text = study.report(study.analyse(rows), {"A"})
    assert "### Primary" in text and "| compose | color | uniform | 4 |" in text
    assert "### Fixed against live W" in text and "### Sample efficiency" in text
    assert "### GRPO" not in text  # no stage B in the data: no table


def _curve_rows(setting="compose", metric="judge/color", ema=0.0):
    """Every arm over 4 seeds and 3 evaluations; ReCAST's judge rises twice as fast, the weighted reward rises for all."""
    rows = []
    for arm in study.ARMS:
        for s in range(4):
            for it in (0, 15, 30):
                v = 0.5 + 0.01 * it / 30 * (2 if arm == "recast" else 1) + 0.001 * s
                for m, val in ((metric, v), ("reward/weighted", 0.1 + 0.01 * it + 0.001 * s)):
                    rows.append(dict(stage="A", setting=setting, budget="default", arm=arm, seed=s, iteration=it,
                                     images=32 * it, metric=m, value=val))
            rows.append(dict(stage="A", setting=setting, budget="default", arm=arm, seed=s, iteration=30, images=0,
                             metric="config/ema_decay", value=ema))
            rows.append(dict(stage="A", setting=setting, budget="default", arm=arm, seed=s, iteration=30, images=0,
                             metric="time/train_s", value=100.0 + s))
            for q, val in (("reward_queries", 960.0), ("reward_queries_proxy", 2880.0 * (arm == "recast"))):
                rows.append(dict(stage="A", setting=setting, budget="default", arm=arm, seed=s, iteration=30, images=0,
                                 metric=f"queries/{q}", value=val))
    return rows


def test_reward_hacking_is_flagged_only_where_a_judge_falls_while_the_reward_rises():
    rows = _curve_rows()
    for r in rows:  # uniform's judge now falls over training while its reward still rises
        if r["arm"] == "uniform" and r["metric"] == "judge/color":
            r["value"] = 0.5 - 0.01 * r["iteration"] / 30 - 0.0005 * r["seed"] * r["iteration"] / 30
    tab = study.analyse(rows)["hacking"]
    flagged = {(r["arm"], r["metric"]) for r in tab if r["hacked"]}
    assert flagged == {("uniform", "judge/color")}
    (u,) = [r for r in tab if r["arm"] == "uniform"]
    assert u["diff"] < 0 and u["ci_high"] < 0 and u["reward_ci_low"] > 0
    # a lower-is-better judge that rises is worse too
    fid = _curve_rows(metric="judge/fid")
    assert {r["arm"] for r in study.analyse(fid)["hacking"] if r["hacked"]} == set(study.ARMS)
    assert "### Reward hacking" in study.report(study.analyse(rows), {"A"})


def test_training_time_and_queries_per_arm():
    tab = study.analyse(_curve_rows())["time"]
    assert len(tab) == len(study.ARMS)
    rec = next(r for r in tab if r["arm"] == "recast")
    assert rec["runs"] == 4 and rec["mean_s"] == pytest.approx(101.5) and rec["total_s"] == pytest.approx(406)
    assert rec["reward_queries_proxy"] == 2880 and next(r for r in tab if r["arm"] == "uniform")[
        "reward_queries_proxy"] == 0
    assert "hours on the trainer's clock" in study.report(study.analyse(_curve_rows()), {"A"})


def test_figures_name_the_weights_they_evaluate(tmp_path, monkeypatch):
    rows = _curve_rows() + _curve_rows(setting="quality", metric="judge/fid", ema=0.9)
    assert study._policy(rows, "quality") == "EMA of the weights, decay 0.9"
    assert study._policy(rows, "compose") == "the trained weights"
    assert study._policy([], "compose") == "weights not recorded"
    titles = []
    import matplotlib.axes

    orig = matplotlib.axes.Axes.set_title
    monkeypatch.setattr(matplotlib.axes.Axes, "set_title", lambda self, t, *a, **k: (titles.append(t),
                                                                                       orig(self, t, *a, **k))[1])
    paths = study.figures(rows, study.analyse(rows), tmp_path)
    assert [p.name for p in paths] == ["study_primary.png", "study_curves.png"] and all(p.stat().st_size for p in paths)
    assert any("compose" in t and "trained weights" in t for t in titles)
    assert any("quality" in t and "EMA" in t for t in titles)
    assert not any("compose" in t and "EMA" in t for t in titles)


def test_collect_reads_a_finished_run_and_skips_an_unfinished_one(tmp_path):
    from recast.config import preset
    from recast.experiments.sweep import SweepRun
    from recast.trainer import train

    done, half = tmp_path / "done", tmp_path / "half"
    train(preset("ci", iterations=2, eval_every=1, eval_prompts=2), done)
    train(preset("ci", iterations=1, eval_every=1, eval_prompts=2), half)
    cfg = json.loads((half / "config.json").read_text())
    cfg["iterations"] = 2  # planned for 2, stopped after 1
    (half / "config.json").write_text(json.dumps(cfg))
    runs = [SweepRun("compose", "default", (), "recast", 0, done, ()), SweepRun("compose", "default", (), "recast", 1,
                                                                                 half, ())]
    rows = study.collect(runs, "A")
    assert {r["seed"] for r in rows} == {0}
    evals = sorted({r["iteration"] for r in rows if r["metric"].startswith("judge/")})
    c = json.loads((done / "config.json").read_text())
    B = int(c["prompts_per_iter"]) * int(c["group_size"])
    assert evals == [0, 1, 2] and all(r["images"] == r["iteration"] * B for r in rows if r["metric"].startswith("judge/"))
    metrics = {r["metric"] for r in rows}
    assert {"time/train_s", "config/ema_decay", "queries/reward_queries", "W/max_rel_departure"} <= metrics
    # each reward's early share of W (the collection bug of stage A: the reward names came from a key load_run drops)
    names = json.loads((done / "config.json").read_text())["_run"]["reward_names"]
    assert {f"W/early_share/{n}" for n in names} <= metrics
    W = np.asarray(json.loads((done / "metrics.jsonl").read_text().splitlines()[-1])["W"])
    dep = next(r["value"] for r in rows if r["metric"] == "W/max_rel_departure")
    assert dep == pytest.approx(float(np.abs(W / (W.sum(1, keepdims=True) / W.shape[1]) - 1).max()))


def _committed_rows():
    rows = study.stage_rows(ROOT / "research/study/data")
    assert {r["stage"] for r in rows} <= set(study.STAGES)  # F.csv is stage F's own analysis's
    return rows


def test_the_committed_results_rederive_from_the_committed_per_seed_data():
    """research/study/results/*.csv are `analyse` of research/study/data/*.csv, and every table on the results page is
    `report` of them: nothing on the page is typed by hand."""
    from recast.io import read_csv

    rows = _committed_rows()
    assert rows, "the study's per-seed data is committed"
    tables = study.analyse(rows)
    results = ROOT / "research/study/results"
    assert {p.stem for p in results.glob("*.csv")} == {k for k, v in tables.items() if v}
    for name, table in tables.items():
        if not table:
            continue
        assert_rows_match(read_csv(results / f"{name}.csv"), table, name)
    page = (ROOT / "research/study/README.md").read_text()
    block = page.split("<!-- report -->\n", 1)[1].split("<!-- /report -->", 1)[0]
    assert block == study.report(tables, {r["stage"] for r in rows})


def test_budget_pooling_needs_two_budgets_and_averages_per_seed():
    one = _rows([0.02, 0.04, 0.03, 0.05])
    assert study.analyse(one)["pooled"] == []
    two = one + [dict(r, budget="color-heavy") for r in _rows([0.0, 0.02, 0.01, 0.03])]
    (r,) = [x for x in study.analyse(two)["pooled"] if x["baseline"] == "uniform"]
    assert r["budgets"] == 2 and r["diff"] == pytest.approx(0.025) and r["n"] == 4
