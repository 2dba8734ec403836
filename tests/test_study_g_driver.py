"""Stage G's driver and analysis (`recast.experiments.study_g`, `study_g_analysis`; research/study/preregistration.md,
"Amendment: stage G"), committed before its first run: the plan is the amendment's design in its priority order,
`recast_r16` is dropped when its profile fails the check, a record's per-sample verdicts are the final evaluation's
own judges, the joint rates and every table give known answers, and `run` keeps the one-trainer-commit rule."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from recast.experiments import study_f, study_g
from recast.experiments import study_g_analysis as ga

ROOT = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------------------------------------------------ plan
def test_the_plan_is_the_amendments_design_in_priority_order():
    runs = study_g.plan()
    assert len(runs) == 225  # (6 + 3 budgets) x 5 seeds x 5 arms
    assert {s: len(study_f.budgets(s)) for s in study_g.SETTINGS} == {"compose": 6, "timing": 3}
    assert study_f.rewards("timing") == ("color", "speck_free")
    first = runs[:90]  # static and recast_gt, every seed, setting and budget, as matched pairs
    assert {r.method for r in first} == {"static", "recast_gt"}
    assert all((a.setting, a.budget, a.seed, a.method, b.method) == (b.setting, b.budget, b.seed, "static",
                                                                      "recast_gt") for a, b in zip(first[::2],
                                                                                                   first[1::2]))
    assert [r.method for r in runs[90:]] == ["recast"] * 45 + ["recast_r16"] * 45 + ["recast_live"] * 45
    assert [r.seed for r in first[::18]] == [0, 1, 2, 3, 4]
    for r in runs:
        assert r.args[:2] == ("--preset", "paper") and "--set" in r.args and "num_threads=1" in r.args
        assert "eval_every=3" in r.args and "eval_prompts=256" in r.args
        assert r.args[r.args.index("--setting") + 1] == r.setting
        assert r.args[r.args.index("--lam") + 1] == ",".join(f"{x:g}" for x in study_f.budgets(r.setting)[r.budget])
        method = r.args[r.args.index("--method") + 1]
        assert method == study_g.METHODS[r.method][0]
        if method == "recast":  # every table-driven arm names its own committed table
            table = ROOT / r.args[r.args.index("--weight-file") + 1]
            assert table == study_g.table_path(r.method, r.setting, r.budget) and table.is_file()
        else:
            assert "--weight-file" not in r.args
    gt = next(r for r in runs if r.method == "recast_gt" and r.setting == "timing")
    assert "research/study/G/tables/gt/timing_equal.npz" in gt.command
    compose_recast = next(r for r in runs if r.method == "recast" and r.setting == "compose")
    assert "research/study/F/tables/renderings/compose_equal.npz" in compose_recast.command  # stage F's, as committed
    live = next(r for r in runs if r.method == "recast_live")
    assert "--aggregation pre --set kernel=exp" in live.command
    assert len({r.out_dir for r in runs}) == 225 and all(str(r.out_dir).startswith("runs/study/G/") for r in runs)


def test_recast_r16_is_planned_only_while_its_profile_passes_the_check(monkeypatch):
    assert study_g.r16_usable() and "recast_r16" in study_g.planned_arms()  # the committed M = 16 profile passes
    key = str(study_g.R16_PROFILE.relative_to(ROOT))
    monkeypatch.setattr(study_g, "profile_findings", lambda: {key: ["reward 'digit', column 2: ..."]})
    assert not study_g.r16_usable() and study_g.planned_arms() == ("static", "recast_gt", "recast", "recast_live")
    assert len(study_g.plan()) == 180 and not any(r.method == "recast_r16" for r in study_g.plan())
    monkeypatch.setattr(study_g, "profile_findings", lambda: {})  # no profile at all: dropped too
    assert not study_g.r16_usable()


def test_list_marks_recorded_runs_done_and_says_when_r16_is_dropped(tmp_path, monkeypatch, capsys):
    from recast.io import write_json

    first = study_g.plan()[0]
    write_json(study_g.record_path(first, tmp_path), {"trainer_commit": "a" * 40})
    assert study_g.main(["list", "--records", str(tmp_path), "--arms", "static"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 45 and lines[0] == "done  " + first.command and all(x.startswith("todo  ") for x in lines[1:])
    monkeypatch.setattr(study_g, "r16_usable", lambda: False)
    assert study_g.main(["list", "--arms", "recast_r16"]) == 0
    assert "recast_r16 is dropped" in capsys.readouterr().out
    assert study_g.main(["list", "--arms", "recst"]) == 2 and "unknown arms ['recst']" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------------- joint rates
def test_joint_rates_count_pareto_domination_per_sample():
    a = {"x": "1100", "y": "0110"}
    b = {"x": "1000", "y": "0111"}
    # sample 0: level (1,0)=(1,0); 1: a (1,1) > b (0,1); 2: level; 3: b (0,1) > a (0,0)
    assert study_g.joint_rates(a, b) == (0.25, 0.25)
    assert study_g.joint_rates(b, a) == (0.25, 0.25)
    c = {"x": "1111", "y": "1111"}
    assert study_g.joint_rates(c, b) == (1.0, 0.0) and study_g.joint_rates(b, c) == (0.0, 1.0)  # b fails one on each
    assert study_g.joint_rates(c, c) == (0.0, 0.0)
    mixed = {"x": "10", "y": "01"}
    assert study_g.joint_rates(mixed, {"x": "01", "y": "10"}) == (0.0, 0.0)  # better on one, worse on another
    with pytest.raises(ValueError, match="same verdicts over the same samples"):
        study_g.joint_rates(a, {"x": "110", "y": "011"})
    with pytest.raises(ValueError, match="same verdicts"):
        study_g.joint_rates(a, {"x": "1100", "z": "0110"})


def _record(setting, budget, arm, seed, verdicts, commit="c" * 40):
    ev = {"iteration": 30, "reward/weighted": 0.5, "judge/color": 0.5}
    return {"format": "recast-study-record/1", "stage": "G", "setting": setting, "budget": budget, "arm": arm,
            "seed": seed, "lam": [1.0, 1.0], "command": "", "trainer_commit": commit, "config_sha256": "0" * 64,
            "reward_names": ["color", "speck_free"], "images_per_iteration": 64,
            "evals": [dict(ev, iteration=0), ev], "W": None, "signal_sd": [0.1], "reward_queries": 10,
            "reward_queries_proxy": None, "train_s": 1.0, "verdicts": verdicts}


def test_collect_adds_the_joint_rates_against_the_matched_static_run(tmp_path):
    from recast.io import write_json

    st = {"color": "1000", "not_speckle": "0111"}
    gt = {"color": "1100", "not_speckle": "0110"}
    write_json(tmp_path / "timing/equal/static/seed_0.json", _record("timing", "equal", "static", 0, st))
    write_json(tmp_path / "timing/equal/recast_gt/seed_0.json", _record("timing", "equal", "recast_gt", 0, gt))
    write_json(tmp_path / "timing/equal/recast_gt/seed_1.json", _record("timing", "equal", "recast_gt", 1, gt))
    rows = study_g.collect(tmp_path)
    joint = {(r["seed"], r["metric"]): r["value"] for r in rows if r["metric"].startswith("joint/")}
    assert joint == {(0, "joint/dominate"): 0.25, (0, "joint/collapse"): 0.25}  # seed 1 has no static to match
    assert {r["stage"] for r in rows} == {"G"}
    assert not any(r["metric"].startswith("joint/") for r in study_g.collect(tmp_path, arms=("recast_gt",)))


# ---------------------------------------------------------------------------------------------------------- run
def test_run_refuses_a_trainer_other_than_the_records_before_any_compute(tmp_path, monkeypatch, capsys):
    from recast.io import write_json

    run = study_g.plan()[0]
    write_json(study_g.record_path(run, tmp_path / "rec"), {"trainer_commit": "0" * 40})
    monkeypatch.setattr(study_f, "run_sweep", lambda *a, **k: pytest.fail("trained on another trainer commit"))
    assert study_g.run(records=tmp_path / "rec") == 2
    err = capsys.readouterr().err
    assert "stage G's records were trained on 0000000000" in err and "--trainer ../studyG" in err


def test_run_trains_what_has_no_record_and_writes_stage_g_records(tmp_path, monkeypatch):
    from recast.experiments.sweep import SweepReport

    plan = study_g.plan()[:3]
    monkeypatch.setattr(study_g, "plan", lambda **kw: plan)
    monkeypatch.setattr(study_g, "record", lambda r, commit: {"trainer_commit": commit, "arm": r.method})
    monkeypatch.setattr(study_f, "_head", lambda checkout: "ab" * 20)
    seen = []
    monkeypatch.setattr(study_f, "run_sweep", lambda batch, jobs: (seen.append([r.method for r in batch]),
                                                                    SweepReport([], [], {}, 0.0, []))[1])
    for r in plan:
        (tmp_path / "runs" / r.out_dir).mkdir(parents=True)
        (tmp_path / "runs" / r.out_dir / "eval.jsonl").write_text("")
    monkeypatch.chdir(tmp_path / "runs")
    assert study_g.run(records=tmp_path / "rec", chunk=2) == 0
    assert seen == [["static", "recast_gt"], ["static"]]
    assert all(json.loads(study_g.record_path(r, tmp_path / "rec").read_text()) == {"trainer_commit": "ab" * 20,
                                                                                    "arm": r.method} for r in plan)
    seen.clear()
    assert study_g.run(records=tmp_path / "rec") == 0 and seen == []


@pytest.mark.slow
def test_a_records_verdicts_are_its_final_evaluations_judges_on_the_same_samples(tmp_path):
    from recast.cli import main
    from recast.experiments.sweep import SweepRun
    from recast.io import read_jsonl

    out = tmp_path / "timing" / "equal" / "recast_gt" / "seed_0"
    args = ("--preset", "paper", "--world", "data/digit_base", "--setting", "timing", "--method", "recast",
            "--weight-file", str(ROOT / "research/study/G/tables/gt/timing_equal.npz"), "--lam", "1,1", "--seed", "0",
            "--out", str(out), "--set", "iterations=2", "--set", "eval_every=1", "--set", "eval_prompts=32",
            "--set", "num_threads=1")
    assert main(["train", *args]) == 0
    rec = study_g.record(SweepRun("timing", "equal", (1.0, 1.0), "recast_gt", 0, out, args), "d" * 40)
    final = read_jsonl(out / "eval.jsonl")[-1]
    v = rec["verdicts"]
    assert set(v) == set(study_g.VERDICTS) and {len(s) for s in v.values()} == {32}
    share = {k: s.count("1") / 32 for k, s in v.items()}
    for k in ("digit", "color", "position", "size"):
        assert share[k] == pytest.approx(final[f"judge/{k}"])
    for k in ("blur", "speckle", "fade"):
        assert share[f"not_{k}"] == pytest.approx(1 - final[f"judge/defect_{k}"])
    assert rec["stage"] == "G" and rec["trainer_commit"] == "d" * 40 and len(json.dumps(rec)) < 20_000


# ------------------------------------------------------------------------------------------ analysis, known answers
KEYS = [(b, s) for b in ("equal", "color-x2") for s in range(5)]


def _rows(setting: str, arm: str, metric: str, values) -> list[dict]:
    return [dict(stage="G", setting=setting, budget=b, arm=arm, seed=s, iteration=30, images=30 * 64, metric=metric,
                 value=float(v)) for (b, s), v in zip(KEYS, values)]


def _world(shift_te: float, shift_p2: float = 0.0, *, noise: float = 0.01, seed: int = 0, arms=ga.COMPARED):
    """Timing-setting rows: static plus each arm, where recast_gt adds ``shift_te`` to colour and removes it from
    speckle (TE + shift_te) and ``shift_p2`` to the weighted reward; other arms equal static up to noise."""
    rng = np.random.default_rng(seed)
    rows = []
    base = {m: rng.uniform(0.3, 0.6, len(KEYS)) for m in ("judge/color", "judge/defect_speckle", "reward/weighted",
                                                            "judge/diversity", "judge/fid", "judge/digit")}
    for arm in ("static", *arms):
        te = shift_te if arm == "recast_gt" else 0.0
        p2 = shift_p2 if arm == "recast_gt" else 0.0
        for m, v in base.items():
            add = {"judge/color": te, "judge/defect_speckle": -te, "reward/weighted": p2}.get(m, 0.0)
            rows += _rows("timing", arm, m, v + add + (0 if arm == "static" else rng.normal(0, noise, len(KEYS))))
    return rows


def test_the_timing_endpoint_is_half_colour_minus_the_late_defect():
    rows = _rows("compose", "static", "judge/color", [0.8] * 10) + _rows("compose", "static", "judge/defect_blur",
                                                                         [0.2] * 10)
    rows += _rows("compose", "static", "judge/defect_speckle", [0.9] * 10)  # not compose's late defect
    assert ga.timing_endpoint(rows, "compose", "static") == {k: pytest.approx(0.3) for k in KEYS}
    with pytest.raises(ValueError, match="unknown endpoint"):
        ga.endpoint(rows, "compose", "static", "P1")


def test_the_primary_family_holds_holm_over_eight_tests_per_setting():
    prim = ga.primary(_world(0.05))
    assert len(prim) == 8 and {(r["arm"], r["metric"]) for r in prim} == {(a, m) for a in ga.COMPARED
                                                                           for m in ga.ENDPOINTS}
    by = {(r["arm"], r["metric"]): r for r in prim}
    te = by[("recast_gt", "TE timing endpoint")]
    assert te["diff"] == pytest.approx(0.05, abs=0.01) and te["verdict_holm"] == "win" and te["wins"] == 10
    assert by[("recast_gt", "P2 reward/weighted")]["verdict_holm"] == "tie"
    assert all(r["verdict_holm"] == "tie" for r in prim if r["arm"] != "recast_gt")
    # Holm over the eight: each verdict is "win" exactly where the step-down rule keeps its p
    ps = sorted(r["p"] for r in prim)
    kept = next((i for i, p in enumerate(ps) if p > 0.05 / (8 - i)), 8)
    assert sum(r["verdict_holm"] != "tie" for r in prim) == kept
    assert ga.primary(_world(0.05, arms=())) == []  # static alone: nothing to compare


def test_the_readings_follow_the_primary_verdicts_and_wait_for_missing_arms():
    res = ga.analyse(_world(0.05))
    hold = {r["reading"].split(":")[0]: r["holds"] for r in res["readings"] if r["setting"] == "timing"}
    assert hold["recast_gt wins (P2 or TE after Holm) while recast ties"] is True
    assert hold["recast_r16 wins where recast ties"] is False
    assert hold["recast_gt ties"] is False
    assert hold["recast_gt wins TE only, P2 tied, a harm significant"] is False  # no harm in this world
    assert all(r["holds"] is None for r in res["readings"] if r["setting"] == "compose")  # no compose runs
    partial = ga.analyse(_world(0.0, arms=("recast_gt",)))
    hold = {r["reading"].split(":")[0]: r["holds"] for r in partial["readings"] if r["setting"] == "timing"}
    assert hold["recast_gt ties"] is True and hold["recast_gt wins (P2 or TE after Holm) while recast ties"] is None


def test_harms_are_one_sided_in_the_harmful_direction():
    rows = _world(0.0, noise=0.0)  # every arm equals static, but
    for r in rows:  # recast_gt: diversity down by 0.05, Fréchet distance down (better) by 0.05
        if r["arm"] == "recast_gt" and r["metric"] in ("judge/diversity", "judge/fid"):
            r["value"] -= 0.05
    h = {(r["arm"], r["harm"]): r for r in ga.harms(rows)}
    assert h[("recast_gt", "diversity lower")]["harm_significant"] and h[("recast_gt", "diversity lower")][
        "diff"] == pytest.approx(-0.05)
    assert h[("recast_gt", "Fréchet distance higher")]["p_one_sided"] > 0.99  # better is not a harm
    assert not h[("recast", "diversity lower")]["harm_significant"]
    assert len(h) == 8


def test_joint_rates_secondary_and_paper_table_on_known_rows():
    rows = _world(0.05)
    rows += _rows("timing", "recast_gt", "joint/dominate", [0.2] * 5 + [0.3] * 5)
    rows += _rows("timing", "recast_gt", "joint/collapse", [0.1] * 10)
    j = ga.joint(rows)
    assert len(j) == 1 and j[0]["n"] == 10 and j[0]["dominate"] == pytest.approx(0.25)
    assert j[0]["net"] == pytest.approx(0.15) and j[0]["net_low"] < 0.15 < j[0]["net_high"]
    sec = ga.secondary(rows)
    colour = next(r for r in sec if r["arm"] == "recast_gt" and r["metric"] == "judge/color")
    speck = next(r for r in sec if r["arm"] == "recast_gt" and r["metric"] == "judge/defect_speckle")
    assert colour["verdict_holm"] == "win" and speck["verdict_holm"] == "win" and not speck["better_up"]
    assert {r["family"] for r in sec} == {"P1", "judges"}
    rows += _rows("timing", "static", "judge/color", [0.4] * 10)
    for r in rows:
        if r["metric"] == "judge/color" and r["arm"] == "static" and r["value"] == 0.4:
            r["iteration"] = 0
    paper = {r["metric"]: r for r in ga.paper_table(rows, "timing")}
    assert paper["judge/color"]["base"] == pytest.approx(0.4) and paper["judge/color"]["recast_gt_wins"] == "10/10"
    text = ga.report(ga.analyse(rows))
    assert "| timing | recast_gt | TE timing endpoint | 10 |" in text and "| win |" in text


def test_analyse_cli_refuses_without_data_and_writes_the_tables(tmp_path, capsys):
    from recast.io import write_csv

    assert ga.main(["analyse", "--data", str(tmp_path / "G.csv"), "--out", str(tmp_path / "out")]) == 2
    assert "study_g collect" in capsys.readouterr().err
    write_csv(tmp_path / "G.csv", _world(0.05))
    assert ga.main(["analyse", "--data", str(tmp_path / "G.csv"), "--out", str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / "primary.csv").is_file() and (tmp_path / "out" / "report.md").is_file()
