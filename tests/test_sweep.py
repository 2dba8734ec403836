"""The λ-sweep: the budget grid, the plan, skipping finished runs, aggregation on synthetic run directories, and a
row's command reproducing it exactly."""

import json
import shlex

import numpy as np
import pytest
import torch

from recast.io import write_json
from recast.experiments.sweep import EMPHASIS, budget_grid, is_finished, lambda_grid, plan_sweep, run_sweep
from recast.experiments.sweep_results import collect, compare, curves, efficiency, summarise, training_change, w_timing


def test_budget_grid_is_uniform_plus_one_emphasis_per_reward():
    g = budget_grid(("a", "b", "c", "d"))
    assert list(g) == ["uniform", "a-heavy", "b-heavy", "c-heavy", "d-heavy"]
    assert g["uniform"] == (0.25,) * 4
    assert g["c-heavy"] == pytest.approx((0.15, 0.15, 0.55, 0.15)) and EMPHASIS == 0.55
    assert all(sum(v) == pytest.approx(1.0) for v in g.values())
    with pytest.raises(ValueError, match="two distinct rewards"):
        budget_grid(("a",))


def test_lambda_grid_reads_the_world_settings():
    assert list(lambda_grid("tiny", "compose")) == ["uniform", "digit-heavy", "color-heavy", "position_flat-heavy",
                                                    "size_half_max-heavy", "sharpness-heavy"]
    with pytest.raises(ValueError, match="unknown setting 'nope'"):
        lambda_grid("tiny", "nope")


def test_plan_covers_the_grid_with_one_command_per_run(tmp_path):
    runs = plan_sweep(world="tiny", settings=("compose", "quality"), methods=("recast", "uniform"), seeds=(0, 1, 2),
                      preset="ci", iterations=3, out_root=tmp_path)
    assert len(runs) == (6 + 5) * 2 * 3 and len({r.out_dir for r in runs}) == len(runs)  # compose 6 budgets
    r = runs[7]
    args = shlex.split(r.command)
    assert args[:4] == ["python", "-m", "recast", "train"]
    assert args[args.index("--seed") + 1] == str(r.seed) and args[args.index("--method") + 1] == r.method
    assert [float(x) for x in args[args.index("--lam") + 1].split(",")] == pytest.approx(r.lam)
    assert "num_threads=1" in args and args[args.index("--iterations") + 1] == "3"
    assert r.out_dir == tmp_path / r.setting / r.budget / r.method / f"seed_{r.seed}"


def test_a_reward_list_in_sets_gets_its_own_budget_grid(tmp_path):
    """A reward list replaces the setting's rewards, so λ is built over it: three rewards, uniform = 1/3 each."""
    for rewards in ("digit,color,size_half_max", ("digit", "color", "size_half_max")):
        runs = plan_sweep(world="tiny", settings=("compose",), methods=("uniform",), seeds=(0,), preset="ci",
                          sets={"rewards": rewards}, out_root=tmp_path)
        assert [r.budget for r in runs] == ["uniform", "digit-heavy", "color-heavy", "size_half_max-heavy"]
        args = list(runs[0].args)
        assert runs[0].lam == pytest.approx((1 / 3,) * 3) and "rewards=digit,color,size_half_max" in args
        assert [float(x) for x in args[args.index("--lam") + 1].split(",")] == pytest.approx(runs[0].lam)
    with pytest.raises(ValueError, match="unknown setting"):
        plan_sweep(world="tiny", settings=("nope",), sets={"rewards": "digit,color"}, out_root=tmp_path)


@pytest.mark.parametrize("kw, match", [(dict(methods=("magic",)), "unknown methods"), (dict(seeds=()), "seeds"),
                                       (dict(seeds=(1, 1)), "seeds"), (dict(budgets=("loud",)), "unknown budgets"),
                                       (dict(settings=("nope",)), "unknown setting"),
                                       (dict(preset="huge"), "unknown preset")])
def test_bad_plans_are_refused_before_any_run(kw, match, tmp_path):
    with pytest.raises(ValueError, match=match):
        plan_sweep(**{**dict(world="tiny", settings=("compose",), preset="ci", out_root=tmp_path), **kw})


FAKE_SETS = {"prompts_per_iter": 4}  # the ci preset's groups of 2, so 8 samples per iteration


def _fake_run(run, finals, iterations=4, per_iter=8):
    """A run directory holding what the trainer writes: config, one metrics line per iteration, evals at 0 and end."""
    from recast.experiments.sweep import _planned_config

    run.out_dir.mkdir(parents=True, exist_ok=True)
    planned = _planned_config(run).to_dict()  # the plan's own config, so the run counts as the plan's
    assert planned["iterations"] == iterations and planned["prompts_per_iter"] * planned["group_size"] == per_iter
    write_json(run.out_dir / "config.json", {**planned, "_run": {"reward_names": ["a"], "lam": [1.0]}})
    (run.out_dir / "checkpoint.pt").write_bytes(b"")
    (run.out_dir / "metrics.jsonl").write_text("".join(json.dumps({"iteration": i + 1}) + "\n"
                                                       for i in range(iterations)))
    base = {k: 0.0 for k in finals}
    half = {k: v / 2 for k, v in finals.items()}
    evals = [{"iteration": 0, **base}, {"iteration": iterations // 2, **half}, {"iteration": iterations, **finals}]
    (run.out_dir / "eval.jsonl").write_text("".join(json.dumps(e) + "\n" for e in evals))


def test_aggregation_on_synthetic_runs(tmp_path):
    runs = plan_sweep(world="tiny", settings=("compose",), budgets=("uniform", "digit-heavy"),
                      methods=("recast", "uniform"), seeds=(0, 1, 2), preset="ci", out_root=tmp_path,
                      sets=FAKE_SETS)
    strict = {("recast", 0): 0.5, ("recast", 1): 0.6, ("recast", 2): 0.7,
              ("uniform", 0): 0.4, ("uniform", 1): 0.5, ("uniform", 2): 0.65}
    for r in runs:
        fid = 10.0 if r.method == "recast" else 12.0 + r.seed
        _fake_run(r, {"judge/strict": strict[(r.method, r.seed)], "judge/fid": fid, "reward/a": 0.3})
    killed = runs[0].__class__(**{**runs[0].__dict__, "out_dir": tmp_path / "killed"})
    _fake_run(killed, {"judge/strict": 0.1})
    lines = (killed.out_dir / "metrics.jsonl").read_text().splitlines(keepends=True)
    (killed.out_dir / "metrics.jsonl").write_text("".join(lines[:-1]))  # killed before its last iteration
    assert not is_finished(killed) and collect([killed]) == []
    rows = collect(runs)
    assert len(rows) == len(runs) and all(is_finished(r) for r in runs)
    row = rows[0]
    assert row["images"] == 4 * 8 and row["base:judge/strict"] == 0.0 and row["command"] == runs[0].command
    table = {(t["budget"], t["method"], t["metric"]): t for t in summarise(rows)}
    t = table[("uniform", "recast", "judge/strict")]
    assert t["n"] == 3 and t["mean"] == pytest.approx(0.6) and t["std"] == pytest.approx(0.1)
    cells = {(c["budget"], c["metric"]): c for c in compare(rows, baseline="uniform")}
    s, f, a = cells[("uniform", "judge/strict")], cells[("uniform", "judge/fid")], cells[("uniform", "reward/a")]
    assert s["diff"] == pytest.approx(np.mean([0.1, 0.1, 0.05])) and s["verdict"] == "win"
    assert f["diff"] == pytest.approx(-3.0) and f["verdict"] == "win"  # lower Fréchet distance is better
    assert a["diff"] == 0.0 and a["verdict"] == "tie"
    eff = {e["budget"]: e for e in efficiency(curves(runs), "judge/strict")}
    assert eff["uniform"]["baseline_final"] == pytest.approx(np.mean([0.4, 0.5, 0.65]))
    # recast's mean curve 0, 0.3, 0.6 at 0, 16, 32 images reaches uniform's final 0.5167 at 16 + 16 * 0.2167 / 0.3
    assert eff["uniform"]["ratio"] == pytest.approx((16 + 16 * (0.51667 - 0.3) / 0.3) / 32, rel=1e-3)
    # the interval resamples the 3 seeds both methods ran, paired, and brackets the seed-mean ratio
    assert eff["uniform"]["seeds"] == 3 and eff["uniform"]["ratio_low"] <= eff["uniform"]["ratio"]
    assert eff["uniform"]["ratio_high"] is None or eff["uniform"]["ratio"] <= eff["uniform"]["ratio_high"]


def test_w_timing_reads_the_last_W_of_each_finished_recast_run(tmp_path):
    runs = plan_sweep(world="tiny", settings=("compose",), budgets=("uniform",), methods=("recast", "uniform"),
                      seeds=(0, 1), preset="ci", out_root=tmp_path, sets=FAKE_SETS)
    for r in runs:
        _fake_run(r, {"judge/strict": 0.5})
        cfg = json.loads((r.out_dir / "config.json").read_text())
        cfg["_run"]["reward_names"] = ["early", "late"]
        write_json(r.out_dir / "config.json", cfg)
        Ws = [[[0.25, 0.25, 0.25, 0.25], [0.25, 0.25, 0.25, 0.25]],  # iteration 2: λ/T
              [[0.4, 0.3, 0.2, 0.1 + r.seed * 0.1], [0.1, 0.2, 0.3, 0.4 - r.seed * 0.1]]]  # iteration 4: the last
        (r.out_dir / "weights.jsonl").write_text("".join(json.dumps({"iteration": it, "W": W}) + "\n"
                                                         for it, W in zip((2, 4), Ws)))
    rows = w_timing(runs)
    assert [(r["seed"], r["reward"]) for r in rows] == [(0, "early"), (0, "late"), (1, "early"), (1, "late")]
    assert all(r["iteration"] == 4 for r in rows)  # the last W, and only ReCAST runs
    early = {(r["seed"], r["reward"]): r["early_share"] for r in rows}
    assert early[(0, "early")] == pytest.approx(0.7) and early[(0, "late")] == pytest.approx(0.3)
    assert early[(1, "early")] == pytest.approx(0.7 / 1.1) and early[(1, "late")] == pytest.approx(0.3 / 0.9)
    assert rows[0]["max_deviation"] == pytest.approx(0.6)  # 0.4 / 0.25 - 1 and |0.1 / 0.25 - 1|


@pytest.mark.slow
def test_sweep_runs_skips_finished_and_a_row_command_reproduces_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    runs = plan_sweep(world="tiny", settings=("compose",), budgets=("uniform",), methods=("uniform",), seeds=(3,),
                      preset="ci", iterations=2, sets={"eval_prompts": 2}, out_root="sweep")
    report = run_sweep(runs, jobs=1)
    assert not report.failed, report.failed
    assert len(report.ran) == 1 and collect(runs)
    again = run_sweep(runs, jobs=1)
    assert again.skipped == runs and not again.ran
    first = collect(runs)[0]
    # rerun the row's own command from scratch elsewhere: the numbers must match exactly
    import subprocess
    import sys

    args = shlex.split(first["command"])[4:]
    args[args.index("--out") + 1] = "rerun"
    subprocess.run([sys.executable, "-m", "recast", "train", *args], check=True, capture_output=True)
    rerun = collect([runs[0].__class__(**{**runs[0].__dict__, "out_dir": tmp_path / "rerun"})])[0]
    assert {k: v for k, v in rerun.items() if k != "command"} == {k: v for k, v in first.items() if k != "command"}


def test_training_change_pairs_final_with_base_and_flags_reward_hacking(tmp_path):
    runs = plan_sweep(world="tiny", settings=("compose",), budgets=("uniform",), methods=("recast", "uniform"),
                      seeds=(0, 1, 2), preset="ci", out_root=tmp_path, sets=FAKE_SETS)
    for r in runs:  # _fake_run's base evaluation is 0 for every metric
        hacked = r.method == "uniform"
        strict = (-0.2 if hacked else 0.1) + 0.01 * r.seed
        _fake_run(r, {"reward/weighted": 0.3 + 0.01 * r.seed, "judge/strict": strict, "judge/fid": 5.0 + r.seed})
    out = {(c["method"], c["metric"]): c for c in training_change(collect(runs))}
    w = out[("recast", "reward/weighted")]
    assert w["change"] == pytest.approx(0.31) and w["base"] == 0.0 and w["verdict"] == "better"
    assert out[("recast", "judge/fid")]["verdict"] == "worse"  # the Fréchet distance rose: lower is better
    assert out[("uniform", "judge/strict")]["verdict"] == "worse"
    assert out[("recast", "judge/strict")]["verdict"] == "better"
    assert all(c["reward_up_judge_down"] for c in out.values())  # both lost a judge while the reward rose
    assert out[("uniform", "reward/weighted")]["judges_down"] == "judge/strict;judge/fid"
    assert out[("recast", "reward/weighted")]["judges_down"] == "judge/fid"


def test_compare_and_training_change_floor_a_pass_rate_spread_at_one_prompt():
    """Three seeds that each differ by exactly one prompt in 64 give a zero s.d.; with the rows' eval_prompts the
    interval is at least one step wide, so that is a tie, while the Fréchet distance (continuous) is unaffected."""
    from recast.experiments.sweep_results import compare, training_change

    rows = []
    for seed in range(3):
        for method, extra in (("recast", 1), ("uniform", 0)):
            rows.append({"setting": "compose", "budget": "uniform", "method": method, "seed": seed,
                         "eval_prompts": 64, "judge/strict": (20 + seed + extra) / 64, "base:judge/strict": 0.25,
                         "judge/fid": 10.0 - extra - 0.01 * seed, "base:judge/fid": 20.0,
                         "reward/weighted": 0.5 + 0.1 * extra, "base:reward/weighted": 0.4})
    cells = {c["metric"]: c for c in compare(rows, baseline="uniform")}
    assert cells["judge/strict"]["diff"] == pytest.approx(1 / 64) and cells["judge/strict"]["verdict"] == "tie"
    assert cells["judge/fid"]["verdict"] == "win" and cells["reward/weighted"]["verdict"] == "win"
    bare = {c["metric"]: c for c in compare([{k: v for k, v in r.items() if k != "eval_prompts"} for r in rows],
                                            baseline="uniform")}
    assert bare["judge/strict"]["verdict"] == "win"  # the zero-width interval the floor removes
    # final - base: strict rises by (20 + seed + 1) / 64 - 1/4 = (5 + seed) / 64, a spread of one step: still clear
    change = {(c["method"], c["metric"]): c for c in training_change(rows)}
    assert change[("recast", "judge/strict")]["verdict"] == "better"


@pytest.mark.research
def test_fixed_w_runs_mean_W_keeps_the_marginals(tmp_path):
    """research/probes/fixed_w_runs.py averages ReCAST's applied W over iterations and seeds: the mean of matrices with the
    same row sums (λ) and equal column sums has them too, so `method=fixed` accepts it; bad records are refused."""
    import importlib.util
    import json
    from pathlib import Path

    from recast.solver import solve_weights
    from recast.advantages import validate_W

    spec = importlib.util.spec_from_file_location(
        "fixed_w_runs", Path(__file__).resolve().parents[1] / "research" / "probes" / "fixed_w_runs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    lam = torch.tensor([0.55, 0.15, 0.15, 0.15], dtype=torch.float64)
    gen = torch.Generator().manual_seed(0)
    Ws = [solve_weights(torch.rand(4, 6, generator=gen, dtype=torch.float64), lam, temperature=1.0) for _ in range(5)]
    for i, chunk in enumerate((Ws[:2], Ws[2:])):
        d = tmp_path / f"seed_{i}"
        d.mkdir()
        (d / "weights.jsonl").write_text("".join(json.dumps({"iteration": j + 1, "W": W.tolist()}) + "\n"
                                                 for j, W in enumerate(chunk)))
    mean = np.asarray(mod.mean_W([tmp_path / "seed_0", tmp_path / "seed_1"]))
    assert np.allclose(mean, torch.stack(Ws).mean(0).numpy())
    assert np.allclose(mean.sum(1), lam.numpy()) and np.allclose(mean.sum(0), 1 / 6)
    assert not np.allclose(mean, lam.numpy()[:, None] / 6)  # not the static W: the timing is kept
    validate_W(mean.tolist(), lam, 6)  # accepted as a fixed W
    (tmp_path / "seed_1" / "weights.jsonl").write_text(json.dumps({"W": [[1.0, 0.0]]}) + "\n")
    with pytest.raises(ValueError, match="shapes"):
        mod.mean_W([tmp_path / "seed_0", tmp_path / "seed_1"])
    (tmp_path / "seed_1" / "weights.jsonl").write_text("")
    with pytest.raises(ValueError, match="no W"):
        mod.mean_W([tmp_path / "seed_1"])


@pytest.mark.research
def test_fixed_w_runs_merges_budgets_into_the_committed_tables(tmp_path):
    """research/probes/fixed_w_runs.py adds budgets a few at a time: a later run replaces its own budgets' rows and keeps the
    others, in the order the tables are written in; merging a table's own rows back leaves it byte for byte."""
    import importlib.util
    from pathlib import Path

    from recast.io import read_csv, write_csv

    spec = importlib.util.spec_from_file_location(
        "fixed_w_runs", Path(__file__).resolve().parents[1] / "research" / "probes" / "fixed_w_runs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    rows = [{"budget": b, "method": m, "baseline": base, "diff": i + 0.5}
            for i, (m, base) in enumerate((("fixed", "uniform"), ("fixed", "recast"))) for b in ("a-heavy", "uniform")]
    path = tmp_path / "t.csv"
    write_csv(path, rows)
    before = path.read_bytes()
    mod.write_merged(path, [r for r in rows if r["budget"] == "uniform"], ["uniform"])
    assert path.read_bytes() == before
    new = [{"budget": "b-heavy", "method": m, "baseline": base, "diff": 9.0}
           for m, base in (("fixed", "uniform"), ("fixed", "recast"))]
    mod.write_merged(path, new + [{**rows[1], "diff": 7.0}], ["b-heavy", "uniform"])
    got = [(r["method"], r["baseline"], r["budget"], r["diff"]) for r in read_csv(path)]
    assert got == [("fixed", "uniform", "a-heavy", 0.5), ("fixed", "uniform", "b-heavy", 9.0),
                   ("fixed", "uniform", "uniform", 7.0),  # replaced; the budget's other old row goes
                   ("fixed", "recast", "a-heavy", 1.5), ("fixed", "recast", "b-heavy", 9.0)]
    mod.write_merged(path, [{**rows[1], "diff": 7.0}], ["uniform"], budget_first=True)
    got = [(r["budget"], r["baseline"], r["diff"]) for r in read_csv(path)]
    assert got == [("a-heavy", "recast", 1.5), ("a-heavy", "uniform", 0.5), ("b-heavy", "recast", 9.0),
                   ("b-heavy", "uniform", 9.0), ("uniform", "uniform", 7.0)]
