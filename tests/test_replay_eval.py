"""The replay measurement: the plan (arms, commands, checks before any run) and the aggregation on synthetic run
directories (curves against logged reward queries, paired differences, efficiency ratios, the reward-vs-judge flag)."""

import json
import shlex

import pytest

from recast.experiments import replay_eval as rv
from recast.io import write_json


def _plan(tmp_path, **kw):
    return rv.plan_replay(**{**dict(world="tiny", settings=("compose",), methods=("uniform", "recast_live"),
                                    seeds=(0, 1, 2), preset="ci", out_root=tmp_path), **kw})


def test_plan_pairs_every_run_with_a_replay_arm(tmp_path):
    runs = _plan(tmp_path, replay_share=0.5, priorities={"uniform": "recency"})
    assert [r.method for r in runs] == ["uniform"] * 3 + ["recast_live"] * 3 + ["uniform+replay"] * 3 + \
        ["recast_live+replay"] * 3
    assert len({r.out_dir for r in runs}) == 12
    plain, replayed = runs[0], runs[6]
    a, b = shlex.split(plain.command), shlex.split(replayed.command)
    assert b[b.index("--method") + 1] == "uniform" and b[b.index("--out") + 1] == str(replayed.out_dir)
    assert b[:b.index("--out")] == a[:a.index("--out")]  # same world, setting, budget, seed and preset
    assert "replay_share=0.5" in b and "replay_priority=recency" in b and not any("replay" in x for x in a)
    assert "replay_priority=informativeness" in shlex.split(runs[9].command)  # recast's default


@pytest.mark.parametrize("kw, match", [(dict(priorities={"uniform": "informativeness"}), "only method='recast_live'"),
                                       (dict(priorities={"reward_sum": "advantage"}), "not in the plan"),
                                       (dict(replay_share=0.0), "replay_share must be > 0"),
                                       (dict(replay_share=0.01), "rounds to 0")])
def test_bad_replay_plans_are_refused_before_any_run(tmp_path, kw, match):
    with pytest.raises(ValueError, match=match):
        _plan(tmp_path, **kw)
    assert not any(tmp_path.iterdir())


def _fake(run, evals, queries_per_it=10, iterations=4):
    """A finished run directory: config, metrics with reward_queries (not iterations x batch on purpose), evals."""
    from recast.experiments.sweep import _planned_config

    run.out_dir.mkdir(parents=True)
    planned = _planned_config(run).to_dict()  # the plan's own config, so the run counts as the plan's
    assert planned["iterations"] == iterations
    write_json(run.out_dir / "config.json", {**planned, "_run": {"reward_names": ["a"], "lam": [1.0]}})
    (run.out_dir / "checkpoint.pt").write_bytes(b"")
    (run.out_dir / "metrics.jsonl").write_text("".join(json.dumps(
        {"iteration": i, "reward_queries": queries_per_it * i, "time/total": 1.5}) + "\n"
        for i in range(1, iterations + 1)))
    (run.out_dir / "eval.jsonl").write_text("".join(json.dumps({"iteration": it, **vals}) + "\n"
                                                    for it, vals in zip((0, 2, 4), evals)))


def test_aggregation_on_synthetic_runs(tmp_path):
    runs = _plan(tmp_path)
    for r in runs:
        bump = 0.01 * r.seed
        if r.method in ("uniform", "recast_live"):  # judge 0 -> 0.2 -> 0.4
            ev = [(0.0, 0.5, 1.0), (0.2, 0.6, 1.0), (0.4 + bump, 0.7, 1.0)]
        elif r.method == "uniform+replay":  # reaches 0.4 at iteration 2 (20 queries)
            ev = [(0.0, 0.5, 1.0), (0.4 + bump, 0.7, 1.0), (0.5 + bump, 0.8, 1.0)]
        else:  # recast+replay: more reward, a worse Fréchet distance, never reaches the judge target
            ev = [(0.0, 0.5, 1.0), (0.1, 0.8, 2.0), (0.3 - bump, 0.9 + bump, 3.0 + bump)]
        _fake(r, [{"judge/strict": j, "reward/weighted": w, "judge/fid": f} for j, w, f in ev])
    rows = rv.collect(runs)
    assert len(rows) == 12 and {r["reward_queries"] for r in rows} == {40}
    assert rows[0]["train_s"] == pytest.approx(6.0) and rows[0]["replay_share"] == 0.0
    qc = rv.query_curves(runs)
    assert sorted({r["images"] for r in qc}) == [0, 20, 40]  # from metrics.jsonl, not 8 per iteration
    eff = {e["method"]: e for e in rv.efficiency(qc, "judge/strict")}
    assert eff["uniform+replay"]["ratio"] == pytest.approx(0.5) and eff["uniform+replay"]["gain"] == pytest.approx(2.0)
    assert eff["uniform+replay"]["queries_needed"] == pytest.approx(20.0)
    assert eff["recast_live+replay"]["ratio"] is None and eff["recast_live+replay"]["gain"] is None
    cells = rv.compare_replay(rows)
    assert {(c["method"], c["baseline"]) for c in cells} == {("uniform+replay", "uniform"),
                                                             ("recast_live+replay", "recast_live"), ("recast_live+replay", "uniform")}
    flags = {(f["method"], f["baseline"]): f for f in rv.reward_judge_check(cells)}
    bad = flags[("recast_live+replay", "recast_live")]
    assert bad["reward_up_judge_down"] and bad["rewards_up"] == "reward/weighted"
    assert set(bad["judges_down"].split(";")) == {"judge/strict", "judge/fid"}
    good = flags[("uniform+replay", "uniform")]
    assert not good["reward_up_judge_down"] and good["reward/weighted diff"] == pytest.approx(0.1)


def test_a_flat_baseline_gives_no_gain(tmp_path):
    runs = [r for r in _plan(tmp_path) if r.method.startswith("uniform")]
    for r in runs:
        _fake(r, [{"judge/strict": 0.3}, {"judge/strict": 0.3}, {"judge/strict": 0.2 + 0.1 * r.seed}])
    e = rv.efficiency(rv.query_curves(runs), "judge/strict", methods=("uniform",))[0]
    # the no-replay arm ends where it started, so its start already "reaches" its end: no ratio, no gain
    assert e["ratio"] is None and not e["baseline_improved"] and e["gain"] is None
    assert e["baseline_start"] == pytest.approx(0.3)


def test_runs_without_reward_queries_are_refused(tmp_path):
    run = _plan(tmp_path)[0]
    _fake(run, [{"judge/strict": 0.1}] * 3)
    lines = (run.out_dir / "metrics.jsonl").read_text().replace('"reward_queries"', '"other"')
    (run.out_dir / "metrics.jsonl").write_text(lines)
    with pytest.raises(ValueError, match="no reward_queries"):
        rv.query_curves([run])
