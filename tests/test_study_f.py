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
    assert study_f.run(records=tmp_path / "rec", chunk=1) == 1  # one failed run: exit 1, the others recorded
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
    monkeypatch.setattr(study_f, "plan", lambda **kw: [])  # allowed with --new-trainer (nothing left to train here)
    assert study_f.run(records=tmp_path / "rec", new_trainer=True) == 0


# ---------------------------------------------------------------------------------------- analysis, known answers
def _rows(values: dict, *, setting="compose", iteration=30, metric="judge/color"):
    """values: arm -> [value per (budget, seed)] over budgets equal / a-x2 and seeds 0, 1."""
    keys = [("equal", 0), ("equal", 1), ("a-x2", 0), ("a-x2", 1)]
    return [dict(stage="F", setting=setting, budget=b, arm=arm, seed=s, iteration=iteration, images=iteration * 32,
                 metric=metric, value=float(v)) for arm, vs in values.items() for (b, s), v in zip(keys, vs)]


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
    assert "Not yet run, so not read: `recast_self`, `recast_live`, `reading`;" in block
    assert "run from a checkout of their trainer commit ababababab, continues them" in block
    assert block.startswith(fa.report(fa.analyse(fa.readable(rows, tmp_path))))


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
