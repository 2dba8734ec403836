"""The pre-registered study's machinery (`recast.experiments.study`, research/study/): its plan, its fixed W files and
its analysis, on synthetic rows with known answers."""

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from recast.experiments import study

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
