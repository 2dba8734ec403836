"""Stage F of the pre-registered study (`recast.experiments.study_f`, `study_f_analysis`; research/study/
preregistration.md, "Amendment: stage F"): its plan is the amendment's design, its committed weight tables follow
from the committed profiles, a finished run's record and its collection round-trip, `run` skips recorded runs, the
analysis gives known answers on synthetic rows, and the committed stage-F data, tables and page block re-derive from
the committed records."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from recast.experiments import study_f
from recast.experiments import study_f_analysis as fa
from helpers import assert_rows_match

ROOT = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------------------------------------------------ plan
def test_the_plan_is_the_amendments_design_in_priority_order():
    runs = study_f.plan()
    assert len(runs) == 165  # (6 + 5 budgets) x 3 seeds x 5 arms
    assert {s: len(study_f.budgets(s)) for s in study_f.SETTINGS} == {"compose": 6, "quality": 5}
    for setting in study_f.SETTINGS:  # equal budgets, then each reward doubled in turn
        b = study_f.budgets(setting)
        assert b["equal"] == (1.0,) * len(study_f.rewards(setting))
        assert sorted(sum(lam) for n, lam in b.items() if n != "equal") == [len(b)] * (len(b) - 1)
    arms = [r.method for r in runs]
    assert arms[:66] == ["static", "recast"] * 33  # the primary pair first, matched run by run
    assert arms[66:] == ["recast_self"] * 33 + ["recast_live"] * 33 + ["reading"] * 33
    for r in runs:
        assert r.seed in study_f.SEEDS and "--preset paper" in r.command and "eval_every=3" in r.command
        assert f"--setting {r.setting}" in r.command and f"--seed {r.seed}" in r.command
        if r.method in ("recast", "recast_self"):
            table = r.args[r.args.index("--weight-file") + 1]
            assert (ROOT / table).is_file() and f"/{'self' if r.method == 'recast_self' else 'renderings'}/" in table
    pairs = {}
    for r in runs[:66]:
        pairs.setdefault((r.setting, r.budget, r.seed), []).append(r.args[r.args.index("--lam") + 1])
    assert len(pairs) == 33 and all(len(set(v)) == 1 and len(v) == 2 for v in pairs.values())  # same λ per pair


def test_the_sensitivity_check_and_the_null_are_planned_as_pre_registered():
    from recast.config import preset

    sens = study_f.sensitivity_plan()
    assert len(sens) == 12 and [r.method for r in sens[:2]] == ["recast_kl2", "reading_kl2"]  # matched pairs
    main = {(r.setting, r.method, r.seed): r for r in study_f.plan() if r.budget == "equal"}
    for r in sens:
        base = main[(r.setting, study_f.SENSITIVITY[r.method], r.seed)]
        kl = preset("paper", setting=r.setting).kl_beta
        assert study_f.KL_BETA[r.setting] == kl and r.budget == "equal"
        assert r.args == (*base.args[:base.args.index("--out") + 1], str(r.out_dir),
                          *base.args[base.args.index("--out") + 2:], "--set", f"kl_beta={2 * kl:g}")
    assert {r.setting for r in study_f.sensitivity_plan(["quality"])} == {"quality"}
    null = study_f.null_plan()
    live = study_f.plan(arms=("recast_live",))[0]
    assert [r.seed for r in null] == list(range(10)) and {r.method for r in null} == {"null_live"}
    for r in null:
        a = r.args
        assert a[a.index("--rewards") + 1] == "color_jitter_a,color_jitter_b" and "--setting" not in a
        assert a[a.index("--method") + 1] == "recast_live" and a[a.index("--lam") + 1] == "1,1"
        assert a[-len(study_f.ARMS["recast_live"][1]):] == live.args[-len(study_f.ARMS["recast_live"][1]):]
        assert "eval_every=0" in a and "--preset" in a and a[a.index("--preset") + 1] == "paper"
    assert study_f.record_path(null[0], Path("R")) == Path("R/null/colour-twice/null_live/seed_0.json")


def test_rel_departure_is_the_cellwise_departure_from_lambda_over_t():
    assert study_f.rel_departure(None) is None
    assert study_f.rel_departure(np.full((3, 4), 0.25 / 3)) == (0.0, 0.0)
    mx, rms = study_f.rel_departure([[0.3, 0.1], [0.2, 0.4]])  # rows 0.4, 0.6: W_kt T / λ_k - 1 = ±1/2, ∓1/3
    assert mx == pytest.approx(0.5) and rms == pytest.approx(np.sqrt((2 * 0.25 + 2 / 9) / 4))


def _fake_records(root: Path, arms, spread: dict | None = None, settings=study_f.SETTINGS):
    """Empty records of every planned run of ``arms``; ``spread``: (setting, arm) -> its signal sd."""
    from recast.io import write_json

    for r in study_f.plan(arms=arms):
        if r.setting in settings:
            sd = (spread or {}).get((r.setting, r.method), 0.1)
            write_json(study_f.record_path(r, root), {"trainer_commit": "ab" * 20, "signal_sd": [sd, sd, None]})


def test_the_sensitivity_check_is_due_only_where_the_spreads_differ_by_more_than_1_25(tmp_path):
    assert study_f.sensitivity_due(tmp_path) == {}
    _fake_records(tmp_path, ("recast",), {("compose", "recast"): 0.1, ("quality", "recast"): 0.1})
    _fake_records(tmp_path, ("reading",), {("compose", "reading"): 0.13, ("quality", "reading"): 0.125},
                  settings=("compose",))
    due = study_f.sensitivity_due(tmp_path)
    assert set(due) == {"compose"} and due["compose"]["ratio"] == pytest.approx(1.3) and due["compose"]["due"]
    _fake_records(tmp_path, ("reading",), {("quality", "reading"): 0.125}, settings=("quality",))
    due = study_f.sensitivity_due(tmp_path)
    assert due["quality"]["ratio"] == pytest.approx(1.25) and not due["quality"]["due"]  # 1.25 is not "more than"
    assert "recast_kl2" not in study_f.complete_arms(tmp_path)
    from recast.io import write_json

    for r in study_f.sensitivity_plan(["compose"]):
        write_json(study_f.record_path(r, tmp_path), {"trainer_commit": "ab" * 20, "signal_sd": [0.1]})
    assert {"recast_kl2", "reading_kl2"} <= set(study_f.complete_arms(tmp_path))
    assert "null_live" not in study_f.complete_arms(tmp_path)
    for r in study_f.null_plan():
        write_json(study_f.record_path(r, tmp_path), {"trainer_commit": "ab" * 20, "signal_sd": [0.1]})
    assert study_f.complete_arms(tmp_path)[-1] == "null_live"


def test_run_trains_the_arms_then_the_due_sensitivity_runs_then_the_null(tmp_path, monkeypatch, capsys):
    from recast.experiments.sweep import SweepReport

    _fake_records(tmp_path, ("static", "recast", "recast_self", "recast_live"))
    spreads = {("compose", "reading"): 0.5, ("quality", "reading"): 0.11}
    _fake_records(tmp_path, ("reading",), spreads)  # compose 5x apart: due; quality 1.1x: not
    for p in tmp_path.glob("*/equal/reading/seed_2.json"):
        p.unlink()  # the last two reading runs are still to train
    seen = []
    monkeypatch.setattr(study_f, "record", lambda run, commit: {
        "trainer_commit": commit, "signal_sd": [spreads.get((run.setting, run.method), 0.1)]})
    monkeypatch.setattr(study_f, "run_sweep", lambda batch, jobs: (seen.extend(batch), SweepReport([], [], {}, 0.0,
                                                                                                   []))[1])
    monkeypatch.setattr(study_f, "_head", lambda checkout: "ab" * 20)
    for r in study_f.plan() + study_f.sensitivity_plan() + study_f.null_plan():  # every run "finishes"
        (tmp_path / "runs" / r.out_dir).mkdir(parents=True, exist_ok=True)
        (tmp_path / "runs" / r.out_dir / "eval.jsonl").write_text("")
    monkeypatch.chdir(tmp_path / "runs")
    assert study_f.run(records=tmp_path, chunk=3) == 0
    assert [(r.setting, r.method) for r in seen[:2]] == [("compose", "reading"), ("quality", "reading")]
    assert [(r.setting, r.method) for r in seen[2:8]] == [("compose", "recast_kl2"), ("compose", "reading_kl2")] * 3
    assert [r.method for r in seen[8:]] == ["null_live"] * 10
    out = capsys.readouterr().out
    assert "sensitivity check, compose: mean signal spread recast 0.1, reading 0.5: ratio 5.00, due" in out
    assert "sensitivity check, quality: mean signal spread recast 0.1, reading 0.11: ratio 1.10, not due" in out
    seen.clear()
    assert study_f.run(records=tmp_path) == 0 and seen == []  # all recorded: nothing trains again


def _git(cwd, *args):
    import subprocess

    subprocess.run(["git", "-C", str(cwd), "-c", "user.name=t", "-c", "user.email=t@t", *args], check=True,
                   capture_output=True)


def test_run_trains_in_the_named_trainer_checkout_and_refuses_an_unfit_one(tmp_path, monkeypatch, capsys):
    """--trainer: the children run in that checkout (their cwd, first on their path), the records name its commit;
    a folder that is not a clean checkout of a recast package is refused before any compute."""
    import os
    import subprocess

    from recast.experiments.sweep import SweepReport

    assert "not a checkout" in study_f.check_trainer(tmp_path)
    co = tmp_path / "trainer"
    (co / "recast").mkdir(parents=True)
    (co / "recast" / "__init__.py").write_text("")
    assert "not a git checkout" in study_f.check_trainer(co)
    _git(co, "init", "-q")
    _git(co, "add", "recast")
    _git(co, "commit", "-q", "-m", "trainer")
    assert study_f.check_trainer(co) is None
    (co / "recast" / "__init__.py").write_text("x = 1\n")
    assert "uncommitted changes" in study_f.check_trainer(co)
    monkeypatch.setattr(study_f, "run_sweep", lambda *a, **k: pytest.fail("trained in an unfit checkout"))
    assert study_f.run(records=tmp_path / "rec", trainer=co) == 2
    assert "--trainer:" in capsys.readouterr().err and "uncommitted changes" in study_f.check_trainer(co)
    _git(co, "commit", "-q", "-am", "clean again")
    head = subprocess.run(["git", "-C", str(co), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    run = study_f.plan()[0]
    where = []

    def fake_sweep(batch, jobs):
        where.append((os.getcwd(), os.environ.get("PYTHONPATH")))
        (Path(batch[0].out_dir)).mkdir(parents=True)
        (Path(batch[0].out_dir) / "eval.jsonl").write_text("")
        return SweepReport([], [], {}, 0.0, [])

    monkeypatch.setattr(study_f, "plan", lambda **kw: [run])
    monkeypatch.setattr(study_f, "run_sweep", fake_sweep)
    monkeypatch.setattr(study_f, "record", lambda r, commit: {"trainer_commit": commit})
    monkeypatch.setenv("PYTHONPATH", "before")
    cwd = os.getcwd()
    assert study_f.run(records=tmp_path / "rec", trainer=co, arms=tuple(study_f.ARMS)) == 0
    assert where == [(str(co.resolve()), str(co.resolve()))] and (co / run.out_dir / "eval.jsonl").is_file()
    assert os.getcwd() == cwd and os.environ["PYTHONPATH"] == "before"  # the driver's own state restored
    assert study_f.trainer_commits(tmp_path / "rec") == {head}


def test_the_committed_tables_follow_from_the_committed_profiles(tmp_path, monkeypatch):
    from recast.archives import load_table

    committed = {p.relative_to(study_f.STAGE_DIR / "tables") for p in (study_f.STAGE_DIR / "tables").rglob("*.npz")}
    monkeypatch.setattr(study_f, "STAGE_DIR", tmp_path)
    made = study_f.make_tables()
    assert {p.relative_to(tmp_path / "tables") for p in made} == committed and len(made) == 2 * (6 + 5)
    for p in made:
        new, old = load_table(p), load_table(ROOT / "research/study/F/tables" / p.relative_to(tmp_path / "tables"))
        assert new.reward_names == old.reward_names
        np.testing.assert_allclose(new.W, old.W, rtol=0, atol=1e-12)
        np.testing.assert_allclose(new.W.sum(1) / new.W.sum(), new.budgets / new.budgets.sum(), atol=1e-9)


# ------------------------------------------------------------------------------------------- records and collect
@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A tiny finished run of the static arm, as `run` finds one."""
    from recast.cli import main
    from recast.experiments.sweep import SweepRun

    out = tmp_path_factory.mktemp("f") / "compose" / "equal" / "static" / "seed_0"
    args = ("--preset", "ci", "--setting", "compose", "--method", "static", "--seed", "0", "--out", str(out),
            "--set", "iterations=2", "--set", "eval_every=1", "--set", "eval_prompts=4")
    assert main(["train", *args]) == 0
    lam = (1.0,) * len(study_f.rewards("compose"))
    return SweepRun("compose", "equal", lam, "static", 0, out, args)


def test_a_record_holds_what_the_tables_read_and_collects_to_long_rows(finished, tmp_path):
    from recast.io import read_jsonl, write_json

    rec = study_f.record(finished, "abc123")
    evals = read_jsonl(finished.out_dir / "eval.jsonl")
    metrics = read_jsonl(finished.out_dir / "metrics.jsonl")
    assert rec["trainer_commit"] == "abc123" and rec["evals"] == evals and len(rec["signal_sd"]) == len(metrics) == 2
    assert rec["command"] == finished.command and len(rec["config_sha256"]) == 64
    assert rec["reward_queries"] == metrics[-1]["reward_queries"]
    assert len(json.dumps(rec)) < 20_000  # a few KB
    again = study_f.record(finished, "abc123")
    assert again["config_sha256"] == rec["config_sha256"]  # the hash is of the config, not of the moment
    write_json(study_f.record_path(finished, tmp_path), rec)
    rows = study_f.collect(tmp_path)
    assert study_f.collect(tmp_path, arms=("recast",)) == [] and study_f.collect(tmp_path, arms=("static",)) == rows
    per = rec["images_per_iteration"]
    evaluated = [(e["iteration"], m, float(v)) for e in evals for m, v in e.items() if m.startswith(("judge/",
                                                                                                    "reward/"))]
    got = [(r["iteration"], r["metric"], r["value"]) for r in rows if r["images"] or r["iteration"] == 0]
    assert sorted(got) == sorted(evaluated) and all(r["images"] == r["iteration"] * per for r in rows
                                                    if r["metric"].startswith(("judge/", "reward/")))
    extra = {r["metric"]: r["value"] for r in rows if not r["metric"].startswith(("judge/", "reward/"))}
    assert extra["signal/sd_mean"] == pytest.approx(np.mean(rec["signal_sd"]))
    assert extra["time/train_s"] == rec["train_s"] and extra["queries/reward_queries"] == rec["reward_queries"]
    assert {(r["setting"], r["budget"], r["arm"], r["seed"], r["stage"]) for r in rows} == {
        ("compose", "equal", "static", 0, "F")}


def test_run_trains_only_what_has_no_record_and_records_each_finished_run(finished, tmp_path, monkeypatch):
    from recast.experiments.sweep import SweepReport, SweepRun
    from recast.io import write_json

    other = SweepRun("compose", "equal", finished.lam, "recast", 0, tmp_path / "never", ("--seed", "0"))
    done = SweepRun("quality", "equal", (1.0,) * 4, "static", 1, tmp_path / "done", ("--seed", "1"))
    write_json(study_f.record_path(done, tmp_path / "rec"), {"already": True})
    monkeypatch.setattr(study_f, "plan", lambda **kw: [finished, other, done])
    seen = []

    def fake_sweep(batch, jobs):
        seen.append([r.method for r in batch])
        return SweepReport([], [], {str(other.out_dir): "boom"} if other in batch else {}, 0.0, [])

    monkeypatch.setattr(study_f, "run_sweep", fake_sweep)
    assert study_f.run(records=tmp_path / "rec", chunk=1, arms=tuple(study_f.ARMS)) == 1  # one failed: exit 1
    assert seen == [["static"], ["recast"]]  # the recorded run is not trained again
    assert study_f.record_path(finished, tmp_path / "rec").is_file()
    assert not study_f.record_path(other, tmp_path / "rec").exists()
    assert json.loads(study_f.record_path(done, tmp_path / "rec").read_text()) == {"already": True}


def test_run_refuses_a_checkout_other_than_the_records_trainer_before_any_compute(tmp_path, monkeypatch, capsys):
    from recast.io import write_json

    run = study_f.plan()[0]
    write_json(study_f.record_path(run, tmp_path / "rec"), {"trainer_commit": "0" * 40})
    assert study_f.trainer_commits(tmp_path / "rec") == {"0" * 40}
    monkeypatch.setattr(study_f, "run_sweep", lambda *a, **k: pytest.fail("trained on another trainer commit"))
    assert study_f.run(records=tmp_path / "rec") == 2
    err = capsys.readouterr().err
    assert "trained on 0000000000" in err and "git worktree add --detach ../studyF 0000000000" in err
    assert "--trainer ../studyF" in err
    monkeypatch.setattr(study_f, "plan", lambda **kw: [])  # allowed with --new-trainer (nothing left to train here)
    assert study_f.run(records=tmp_path / "rec", new_trainer=True, arms=tuple(study_f.ARMS)) == 0


# ---------------------------------------------------------------------------------------- analysis, known answers
def _rows(values: dict, *, setting="compose", iteration=30, metric="judge/color"):
    """values: arm -> [value per (budget, seed)] over budgets equal / a-x2 and seeds 0, 1."""
    keys = [("equal", 0), ("equal", 1), ("a-x2", 0), ("a-x2", 1)]
    return [dict(stage="F", setting=setting, budget=b, arm=arm, seed=s, iteration=iteration, images=iteration * 32,
                 metric=metric, value=float(v)) for arm, vs in values.items() for (b, s), v in zip(keys, vs)]


def test_endpoint_is_the_composite_for_p1_and_the_weighted_reward_for_p2():
    rows = _rows({"static": [0.5, 0.6, 0.7, 0.8], "recast": [0.9, 0.6, 0.7, 0.8]})
    rows += _rows({"recast": [1.0, 2.0, 3.0, 4.0]}, metric="reward/weighted")
    assert fa.endpoint(rows, "compose", "recast", "P1 judge composite") == fa.composite(rows, "compose", "recast")
    assert fa.endpoint(rows, "compose", "recast", "P2 reward/weighted") == {
        ("a-x2", 0): 3.0, ("a-x2", 1): 4.0, ("equal", 0): 1.0, ("equal", 1): 2.0}
    with pytest.raises(ValueError, match="unknown endpoint 'P3'"):
        fa.endpoint(rows, "compose", "recast", "P3")


def test_paired_differences_give_the_t_interval_and_wins():
    from scipy.stats import t

    a = {("e", 0): 1.0, ("e", 1): 2.0, ("x", 0): 4.0, ("x", 1): 3.5, ("y", 9): 100.0}
    b = {("e", 0): 0.5, ("e", 1): 2.5, ("x", 0): 3.0, ("x", 1): 3.0}
    r = fa.paired(a, b, metric="m")
    d = np.array([0.5, -0.5, 1.0, 0.5])
    half = t.ppf(0.975, 3) * d.std(ddof=1) / 2
    assert (r["n"], r["wins"]) == (4, 3) and r["diff"] == pytest.approx(d.mean())
    assert (r["ci_low"], r["ci_high"]) == (pytest.approx(d.mean() - half), pytest.approx(d.mean() + half))
    assert fa.paired(a, b, metric="m", better_up=False)["wins"] == 1
    assert fa.paired({("e", 0): 1.0}, b, metric="m") is None  # one pair: no interval


def test_finals_read_the_last_evaluation_and_the_composite_is_the_signed_z_against_static():
    rows = _rows({"static": [1, 2, 3, 4], "recast": [2, 3, 4, 5]}, iteration=0)
    rows += _rows({"static": [1, 2, 3, 4], "recast": [3, 3, 3, 3]})
    rows += _rows({"static": [10, 20, 30, 40], "recast": [40, 40, 40, 40]}, metric="judge/fid")
    assert fa.finals(rows, "compose", "recast", "judge/color") == {("equal", 0): 3.0, ("equal", 1): 3.0,
                                                                   ("a-x2", 0): 3.0, ("a-x2", 1): 3.0}
    assert fa.finals(rows, "compose", "recast", "judge/color", iteration=0)[("a-x2", 1)] == 5.0
    sd_c, sd_f = np.std([1, 2, 3, 4], ddof=1), np.std([10, 20, 30, 40], ddof=1)
    want = np.mean([(3 - 2.5) / sd_c, -(40 - 25) / sd_f])  # a higher Fréchet distance is worse
    comp = fa.composite(rows, "compose", "recast")
    assert set(comp) == {("equal", 0), ("equal", 1), ("a-x2", 0), ("a-x2", 1)}
    assert all(v == pytest.approx(want) for v in comp.values())
    assert sum(fa.composite(rows, "compose", "static").values()) == pytest.approx(0.0, abs=1e-12)


def test_analyse_holds_holm_over_each_family_and_the_papers_table_counts_wins():
    rows = []
    for metric, static, recast in (("judge/color", [0.5, 0.5, 0.5, 0.5], [0.61, 0.62, 0.60, 0.63]),
                                   ("judge/fid", [100, 110, 90, 100], [101, 109, 91, 99]),
                                   ("reward/weighted", [1.0, 1.1, 0.9, 1.0], [1.2, 1.35, 1.1, 1.2])):
        rows += _rows({"static": static, "recast": recast}, metric=metric)
        rows += _rows({"static": [0.1] * 4, "recast": [0.1] * 4}, metric=metric, iteration=0)
    rows += _rows({"static": [0.3] * 4, "recast": [0.3] * 4}, metric="signal/sd_mean")
    tables = fa.analyse(rows)
    sec = {r["metric"]: r for r in tables["secondary"]}
    assert sec["judge/color"]["verdict_holm"] == "win" and sec["judge/color"]["wins"] == 4
    assert sec["judge/fid"]["verdict_holm"] == "tie" and sec["judge/fid"]["wins"] == 2
    from recast.stats import holm

    ps = [sec[m]["p"] for m in sorted(sec)]
    assert [sec[m]["verdict_holm"] != "tie" for m in sorted(sec)] == list(holm(ps))
    prim = {r["metric"]: r for r in tables["primary"]}
    assert set(prim) == {"P1 judge composite", "P2 reward/weighted"} and prim["P2 reward/weighted"]["wins"] == 4
    paper = {r["metric"]: r for r in tables["paper"]}
    assert list(paper)[-1] == "judge/fid" and list(paper)[0] == "reward/weighted"  # rewards, the sum, then judges
    assert paper["judge/color"]["recast_wins"] == "4/4" and paper["judge/fid"]["recast_wins"] == "2/4"
    assert paper["judge/color"]["base"] == pytest.approx(0.1) and paper["judge/color"]["static"] == pytest.approx(0.5)
    assert tables["spread"] == [dict(setting="compose", arm="recast", runs=4, signal_sd=pytest.approx(0.3)),
                                dict(setting="compose", arm="static", runs=4, signal_sd=pytest.approx(0.3))]
    assert tables["tost"] == []  # no recast_live runs yet: nothing to compare, nothing invented
    text = fa.report(tables)
    assert "### The paper's table, compose" in text and "| judge/color | 0.1 | 0.5 | 0.615 | 4/4 |" in text


def test_the_papers_claim_holds_only_with_a_p1_win_and_no_judge_wholly_worse():
    def sec(metric, lo, hi, up=True, holm="tie"):
        return dict(setting="compose", arm="recast", baseline="static", metric=metric, ci_low=lo, ci_high=hi,
                    better_up=up, verdict_holm=holm, n=4, diff=(lo + hi) / 2, wins=2)

    p1 = dict(setting="compose", arm="recast", baseline="static", metric="P1 judge composite", verdict_holm="win",
              n=4, diff=0.3, ci_low=0.1, ci_high=0.5, wins=4)
    good = {"primary": [p1], "secondary": [sec("judge/color", 0.01, 0.05, holm="win"), sec("judge/fid", -3, 2, False)]}
    c, = fa.paper_claim(good)
    assert c["holds"] and c["better"] == ["color"] and c["worse"] == [] and c["holm_better"] == ["color"]
    bad = {"primary": [p1], "secondary": good["secondary"] + [sec("judge/fid", 1, 4, False)]}  # Fréchet distance up
    c, = fa.paper_claim(bad)
    assert not c["holds"] and c["worse"] == ["fid"] and c["holm_worse"] == []
    tie = {"primary": [dict(p1, verdict_holm="tie")], "secondary": good["secondary"]}
    assert not fa.paper_claim(tie)[0]["holds"]
    assert fa.paper_claim({"primary": [dict(p1, arm="recast_live")], "secondary": []}) == []  # only recast − static
    text = fa.report(dict(bad, paper=[], tost=[], spread=[], sensitivity=[], null=[]))
    assert "**compose: the paper's claim does not hold here.**" in text and "wholly on the worse side for fid" in text


def test_the_sensitivity_table_sets_the_kl2_pair_beside_recast_minus_reading():
    rows = []
    for metric, st, rc, rd, rc2, rd2 in (("judge/color", [0.5] * 4, [0.6, 0.61, 0.62, 0.63], [0.5, 0.5, 0.5, 0.52],
                                          [0.4, 0.45], [0.5, 0.49]),
                                         ("reward/weighted", [1.0] * 4, [1.1, 1.2, 1.0, 1.1], [1.0, 1.1, 1.05, 1.0],
                                          [1.2, 1.0], [1.0, 1.1])):
        rows += _rows({"static": [s + 0.01 * i for i, s in enumerate(st)], "recast": rc, "reading": rd},
                      metric=metric)
        rows += [r for r in _rows({"recast_kl2": rc2 * 2, "reading_kl2": rd2 * 2}, metric=metric)
                 if r["budget"] == "equal"]
    tables = fa.analyse(rows)
    sens = {r["metric"]: r for r in tables["sensitivity"]}
    assert set(sens) == {"P1 judge composite", "P2 reward/weighted"}
    p2 = sens["P2 reward/weighted"]
    base = next(r for r in tables["primary"] if r["arm"] == "recast" and r["baseline"] == "reading"
                and r["metric"] == "P2 reward/weighted")
    assert (p2["diff"], p2["n"], p2["verdict_holm"]) == (base["diff"], 4, base["verdict_holm"])
    assert p2["equal_n"] == 2 and p2["equal_diff"] == pytest.approx(np.mean([0.1, 0.1]))
    assert p2["kl2_n"] == 2 and p2["kl2_diff"] == pytest.approx(np.mean([0.2, -0.1]))
    assert p2["sign_same"] and p2["decision_same"] == (p2["kl2_verdict_holm"] == base["verdict_holm"])
    p1 = sens["P1 judge composite"]
    assert p1["kl2_diff"] < 0 < p1["diff"] and not p1["sign_same"]  # colour falls at 2x kl_beta: the sign flips
    assert "### kl_beta sensitivity, recast − reading" in fa.report(tables)
    assert fa.analyse([r for r in rows if "kl2" not in r["arm"]])["sensitivity"] == []  # not run: no row


def test_the_scale_matched_table_pairs_recast_kl2_with_reading_at_the_equal_budget():
    """Deviation F.2 (exploratory): `recast_kl2 − reading` over the equal budget's seeds, with each arm's effective
    scale = its equal-budget mean signal spread / the kl_beta it trained at (closed form on synthetic records)."""
    kl = study_f.KL_BETA["compose"]
    rows = _rows({"static": [0.5, 0.51, 0.52, 0.53], "reading": [0.5, 0.6, 0.9, 0.9]})
    rows += [r for r in _rows({"recast_kl2": [0.7, 0.7, 0.0, 0.0]}) if r["budget"] == "equal"]
    rows += _rows({"reading": [1.0, 1.2, 9.0, 9.0]}, metric="reward/weighted")
    rows += [r for r in _rows({"recast_kl2": [1.3, 1.2, 0, 0]}, metric="reward/weighted") if r["budget"] == "equal"]
    rows += _rows({"reading": [0.05, 0.07, 1.0, 1.0]}, metric="signal/sd_mean")  # equal budget: mean 0.06
    rows += [r for r in _rows({"recast_kl2": [0.1, 0.1, 0, 0]}, metric="signal/sd_mean") if r["budget"] == "equal"]
    assert fa.effective_scale(rows, "compose", "reading") == pytest.approx(0.06 / kl)
    assert fa.effective_scale(rows, "compose", "recast_kl2") == pytest.approx(0.1 / (2 * kl))
    assert np.isnan(fa.effective_scale(rows, "compose", "recast"))
    got = {r["metric"]: r for r in fa.analyse(rows)["scale_matched"]}
    assert set(got) == {"P1 judge composite", "P2 reward/weighted"}
    p2 = got["P2 reward/weighted"]
    assert (p2["n"], p2["wins"]) == (2, 1) and p2["diff"] == pytest.approx(np.mean([0.3, 0.0]))  # the x2 budget unused
    assert p2["scale_ratio"] == pytest.approx((0.1 / 2) / 0.06) and p2["baseline"] == "reading"
    st = np.array([0.5, 0.51, 0.52, 0.53])  # P1: one judge, z against the static runs
    z = lambda v: (v - st.mean()) / st.std(ddof=1)
    assert got["P1 judge composite"]["diff"] == pytest.approx(np.mean([z(0.7) - z(0.5), z(0.7) - z(0.6)]))
    assert "Exploratory, after the results were read" in fa.report(fa.analyse(rows))
    assert fa.analyse([r for r in rows if r["arm"] != "recast_kl2"])["scale_matched"] == []


def test_the_null_table_reads_the_departures_against_the_nulls_95th_percentile():
    null = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0]
    rows = [dict(stage="F", setting="null", budget="colour-twice", arm="null_live", seed=i, iteration=30, images=0,
                 metric="W/max_rel_departure", value=v) for i, v in enumerate(null)]
    live = {("equal", 0): 0.5, ("equal", 1): 1.5, ("a-x2", 0): 2.0, ("a-x2", 1): 0.05}
    rows += [dict(stage="F", setting="compose", budget=b, arm="recast_live", seed=sd, iteration=30, images=0,
                  metric="W/max_rel_departure", value=v) for (b, sd), v in live.items()]
    got = {r["runs"]: r for r in fa.analyse(rows)["null"]}
    assert list(got) == ["null: colour twice", "recast_live compose, all budgets", "recast_live compose, equal budget"]
    assert got["null: colour twice"]["mean"] == pytest.approx(0.55) and got["null: colour twice"]["n"] == 10
    assert got["null: colour twice"]["sd"] == pytest.approx(np.std(null, ddof=1))
    q95 = np.quantile(null, 0.95)  # 0.955
    assert got["recast_live compose, all budgets"]["above_null_q95"] == pytest.approx(2 / 4)
    assert got["recast_live compose, equal budget"]["above_null_q95"] == pytest.approx(1 / 2) and q95 < 1.5
    assert got["recast_live compose, all budgets"]["max"] == 2.0
    assert "### W's departure from λ/T: the real-trainer null" in fa.report(fa.analyse(rows))
    assert fa.analyse(rows[10:])["null"] == []  # no null runs: nothing to read the departures against


def test_nothing_is_read_before_the_primary_pair_is_in_and_unfinished_arms_are_listed(finished, tmp_path):
    """The amendment: nothing of stage F is read until the static/recast pair is complete; then only the arms whose
    runs are all in are read, and the page lists the rest with the command that continues them."""
    from recast.io import write_json

    rows = _rows({"static": [1, 2, 3, 4], "recast": [2, 3, 4, 5], "recast_live": [0, 0, 0, 0]})
    with pytest.raises(ValueError, match="66 of the static/recast runs have no record yet"):
        fa.readable(rows, tmp_path)
    for r in study_f.plan(arms=("static", "recast")):
        write_json(study_f.record_path(r, tmp_path), {})
    write_json(study_f.record_path(study_f.plan(arms=("recast_live",))[0], tmp_path), {"trainer_commit": "ab" * 20})
    assert study_f.complete_arms(tmp_path) == ("static", "recast")
    assert {r["arm"] for r in fa.readable(rows, tmp_path)} == {"static", "recast"}  # recast_live: 1 of 33, unread
    block = fa.page_block(fa.analyse(fa.readable(rows, tmp_path)), tmp_path)
    assert ("Not yet run, so not read: `recast_self`, `recast_live`, `reading`, the kl_beta sensitivity check "
            "(`recast_kl2`, `reading_kl2`, decided once `recast` and `reading` are in), W's null for recast_live "
            "(`null_live`);") in block
    assert ("`python -m recast.experiments.study_f run --jobs 2 --commit --trainer ../studyF` (`git worktree add "
            "--detach ../studyF ababababab` makes that checkout of their trainer commit) continues them") in block
    assert block.startswith(fa.report(fa.analyse(fa.readable(rows, tmp_path))))


# ------------------------------------------------------------------------------------------------------- figures
def test_mean_W_averages_the_final_W_over_seeds_and_figures_follow_the_complete_arms(tmp_path):
    from recast.experiments import study_f_figures as ff
    from recast.io import write_json

    lam = study_f.budgets("compose")["equal"]
    K, T = len(lam), 6
    for seed, shift in ((0, 0.01), (1, -0.01), (2, 0.0)):
        W = np.full((K, T), 1 / (K * T))
        W[0, 0] += shift
        W[0, 1] -= shift
        write_json(tmp_path / "compose" / "equal" / "recast_live" / f"seed_{seed}.json", {"W": W.tolist()})
    W, n = ff.mean_W(tmp_path, "compose", "equal", "recast_live")
    assert n == 3 and np.allclose(W, 1 / (K * T))  # the shifts cancel
    assert ff.mean_W(tmp_path, "compose", "equal", "reading") is None
    with pytest.raises(ValueError, match="unknown source 'nope'"):
        ff.plot_W("nope")
    with pytest.raises(ValueError, match="no recast_live record holds a W for compose/digit-x2"):
        ff.plot_W("recast_live", tmp_path)
    assert list(ff.figure_names(("static", "recast"))) == ["study_f_primary", "study_f_tables",
                                                           "study_f_tables_self"]
    assert ff.figure_names(("static", "recast", "reading"))["study_f_W_reading"] == "reading"


def test_the_figures_draw_every_budget_and_write_png_and_pdf(tmp_path):
    import matplotlib.pyplot as plt

    from recast.experiments import study_f_figures as ff

    fig = ff.plot_W("self")
    titled = [ax.get_title() for ax in fig.axes if ax.get_title()]
    assert len(titled) == 6 + 5 and "quality: equal" in titled and "compose: size_half_max-x2" in titled
    plt.close(fig)
    rows = _rows({"static": [1, 2, 3, 4], "recast": [2, 3, 4, 6]})
    rows += _rows({"static": [1, 2, 3, 4], "recast": [2, 3, 4, 6]}, metric="reward/weighted")
    paths = ff.figures(fa.analyse(rows), tmp_path / "fig", records=tmp_path / "none")
    assert sorted(p.name for p in paths) == sorted(f"{n}.{e}" for n in ("study_f_primary", "study_f_tables",
                                                                         "study_f_tables_self") for e in ("png", "pdf"))
    assert all(p.stat().st_size > 1000 for p in paths)


# ------------------------------------------------------------------------------------- the committed stage F data
def test_the_committed_stage_f_tables_rederive_from_the_committed_records():
    """research/study/data/F.csv is `collect` of the committed records; research/study/results/F/*.csv is `analyse`
    of its readable rows; the page's stage-F block is `page_block` of those tables: no stage-F number is typed by
    hand. Before the primary pair is in, nothing is read: no results, the page says the stage is in progress."""
    from recast.experiments.study import _read
    from recast.io import read_csv

    records = sorted(study_f.RECORDS.glob("*/*/*/seed_*.json"))
    commits = {json.loads(p.read_text())["trainer_commit"] for p in records}
    assert len(commits) <= 1, f"stage F trains on one commit of the trainer, records name {commits}"
    data, results = ROOT / "research/study/data/F.csv", ROOT / "research/study/results/F"
    page = (ROOT / "research/study/README.md").read_text()
    block = page.split("<!-- report:F -->\n", 1)[1].split("<!-- /report:F -->", 1)[0]
    if data.is_file():
        committed, fresh = _read(data), study_f.collect(arms=study_f.complete_arms())
        assert len(committed) == len(fresh)
        for want, got in zip(committed, fresh):
            assert {k: want[k] for k in got if k != "value"} == {k: got[k] for k in got if k != "value"}
            assert want["value"] == pytest.approx(got["value"], rel=1e-12)
    if study_f.missing(("static", "recast")):
        assert not results.exists() and block.startswith("*In progress")
        return
    assert data.is_file(), "the primary pair is in but not collected: python -m recast.experiments.study_f collect"
    tables = fa.analyse(fa.readable(committed))
    assert {p.stem for p in results.glob("*.csv")} == {k for k, v in tables.items() if v}
    for name, table in tables.items():
        if not table:
            continue
        assert_rows_match(read_csv(results / f"{name}.csv"), table, name)
    assert block == fa.page_block(tables)
    import re

    linked = re.findall(r"\]\((figures/[^)]+\.png)\)", block)
    assert linked and all((ROOT / "research/study" / f).is_file() for f in linked), \
        "python -m recast.experiments.study_f_analysis figures --figures research/study/figures"
