"""Single-reward runs: the plan is one CLI command per (reward, seed), and the table's verdicts follow their rule."""

import json

import numpy as np
import pytest

from recast.experiments.alone import MATCHING_JUDGES, REEVAL_SEED_OFFSET, alone_table, plan_alone
from recast.worlds.digits.judges.agreement import MATCHING_VERDICT


def _row(reward, seed, digit, color, fid, train):
    return {"budget": reward, "seed": seed, "judge/digit": digit[1], "base:judge/digit": digit[0],
            "judge/color": color[1], "base:judge/color": color[0], "judge/fid": fid[1], "base:judge/fid": fid[0],
            f"reward/{reward}": train[1], f"base:reward/{reward}": train[0]}


def test_every_reward_with_a_judge_has_matching_judges():
    from recast.worlds.digits.rewards import ORACLE_VERDICTS

    # the realism variants of the realism-size round have no entry in MATCHING_VERDICT, so the audit (and its AUC >= 0.8
    # test) leaves them out: both miss it, and `test_realism_variants_agreement_on_the_audit_draw` checks their values
    variants = {"realism_canonical", "realism_conditional"}
    assert set(MATCHING_JUDGES) == set(MATCHING_VERDICT) | {"placebo"} | set(ORACLE_VERDICTS) | variants
    assert all(MATCHING_JUDGES[v] == MATCHING_JUDGES["realism"] for v in variants)
    assert MATCHING_JUDGES["placebo"] == () and all(MATCHING_JUDGES[r] for r in MATCHING_VERDICT)
    # each oracle is held to the rule of the setting rewards it is the ceiling for: the same matching judges
    for oracle, reward in [("oracle_digit", "digit"), ("oracle_color", "color"), ("oracle_position", "position_flat"),
                           ("oracle_size", "size_half_max"), ("oracle_not_blur", "sharpness"),
                           ("oracle_not_speckle", "speck_free"), ("oracle_not_fade", "contrast")]:
        assert MATCHING_JUDGES[oracle] == MATCHING_JUDGES[reward], oracle


def test_the_placebo_passes_when_it_lowers_no_judge():
    flat = [_row("placebo", s, (0.3, 0.3 + d), (0.5, 0.5 - d), (40, 40 + d), (0.5, 0.5)) for s, d in
            enumerate((0.01, -0.01, 0.0))]
    table = {(r["reward"], r["judge"]): r for r in alone_table(flat)}
    assert not any(r["matching"] for k, r in table.items() if k[1] != "*")
    assert table[("placebo", "*")]["improved"]
    worse = [_row("placebo", s, (0.3, 0.3), (0.5, 0.4 + d), (40, 40), (0.5, 0.5)) for s, d in
             enumerate((0.01, -0.01, 0.0))]  # colour falls by 0.1 +- 0.01
    assert not {(r["reward"], r["judge"]): r for r in alone_table(worse)}[("placebo", "*")]["improved"]


def test_plan_is_one_single_reward_command_per_seed(tmp_path):
    runs = plan_alone(rewards=("digit", "clean"), seeds=(0, 1), out_root=tmp_path)
    assert [(r.budget, r.seed) for r in runs] == [("digit", 0), ("digit", 1), ("clean", 0), ("clean", 1)]
    assert all(r.lam == (1.0,) and r.method == "uniform" for r in runs)
    cmd = runs[2].command
    assert "--rewards clean" in cmd and "--lam 1" in cmd and f"--out {tmp_path / 'clean' / 'seed_0'}" in cmd
    assert "kl_beta" not in cmd  # a reward list keeps the preset's kl_beta


def test_plan_can_set_kl_beta_and_the_command_carries_it(tmp_path):
    from recast.cli import build_parser, config_from_args

    run = plan_alone(rewards=("sharpness",), seeds=(0,), out_root=tmp_path, kl_beta=3)[0]
    assert "--set kl_beta=3.0" in run.command
    assert config_from_args(build_parser().parse_args(["train", *run.args])).kl_beta == 3.0
    assert config_from_args(build_parser().parse_args(["train", *plan_alone(
        rewards=("sharpness",), seeds=(0,), out_root=tmp_path)[0].args])).kl_beta == 1.0


@pytest.mark.parametrize("kwargs, match", [(dict(rewards=("hue",)), "hue"), (dict(rewards=()), "choose from"),
                                           (dict(rewards=("digit",), seeds=(1, 1)), "distinct"),
                                           (dict(rewards=("digit",), preset="huge"), "preset"),
                                           (dict(rewards=("digit",), kl_beta=-1.0), "kl_beta"),
                                           (dict(rewards=("digit",), kl_beta=float("nan")), "kl_beta")])
def test_bad_plans_are_refused(tmp_path, kwargs, match):
    with pytest.raises(ValueError, match=match):
        plan_alone(out_root=tmp_path, **kwargs)


def test_verdicts_follow_the_seed_std_rule():
    # digit alone: its judge rises by 0.1 +- 0.05 (> std) and colour moves by at most its spread -> pass.
    # The Fréchet distance is lower-is-better: a rise of 10 +- 1 is a drop in quality by more than one std.
    rows = [_row("digit", 0, (0.3, 0.35), (0.5, 0.52), (40, 41), (0.2, 0.3)),
            _row("digit", 1, (0.3, 0.45), (0.5, 0.48), (40, 39), (0.2, 0.4)),
            _row("color", 0, (0.3, 0.3), (0.5, 0.6), (40, 49), (0.4, 0.6)),
            _row("color", 1, (0.3, 0.3), (0.5, 0.7), (40, 51), (0.4, 0.7))]
    table = {(r["reward"], r["judge"]): r for r in alone_table(rows)}
    d = table[("digit", "judge/digit")]
    assert d["matching"] and d["delta"] == pytest.approx(0.1) and d["seed_std"] == pytest.approx(0.0707, abs=1e-4)
    assert d["improved"] and not d["worse"]
    assert table[("digit", "*")]["improved"] and table[("digit", "*")]["delta"] == pytest.approx(0.15)
    fid = table[("color", "judge/fid")]
    assert fid["delta"] == pytest.approx(10) and fid["worse"] and not fid["matching"]
    assert table[("color", "judge/color")]["improved"]
    assert not table[("color", "*")]["improved"]  # its matching judge rose, but the Fréchet distance got worse


def test_rule_false_alarm_has_the_closed_form_at_three_seeds_and_matches_a_simulation():
    import numpy as np

    from recast.experiments.alone import change_over_seeds, rule_false_alarm

    # t with 2 degrees of freedom has CDF 1/2 + t / (2 sqrt(2 + t^2)); at t = -sqrt 3: 1/2 - sqrt(3) / (2 sqrt 5)
    p3 = 0.5 - np.sqrt(3) / (2 * np.sqrt(5))
    assert rule_false_alarm(3) == pytest.approx(p3, rel=1e-9)
    assert rule_false_alarm(3, 8) == pytest.approx(1 - (1 - p3) ** 8, rel=1e-9)
    assert rule_false_alarm(5) == pytest.approx(0.0445, abs=5e-4)
    assert rule_false_alarm(2) > rule_false_alarm(3) > rule_false_alarm(5) > rule_false_alarm(10)
    # The same rule, applied by change_over_seeds to simulated null changes, fires at that rate (5 sigma of MC error).
    rng = np.random.default_rng(0)
    for n in (3, 5):
        calls = [change_over_seeds([{"judge/x": d, "base:judge/x": 0.0} for d in rng.normal(size=n)], "judge/x")
                 ["worse"] for _ in range(4000)]
        p = rule_false_alarm(n)
        assert abs(np.mean(calls) - p) < 5 * np.sqrt(p * (1 - p) / 4000), (n, np.mean(calls), p)


def test_eight_clean_rewards_rarely_all_pass_the_rule_at_five_seeds():
    """What the targets table (research/rounds/01-targets.md) reads from `rule_false_alarm`: over 9 judges a reward with
    no true cost fails with probability 0.336 at 5 seeds, so 8 such rewards all pass with probability 0.04; at 10 seeds,
    0.66."""
    from recast.experiments.alone import rule_false_alarm

    assert rule_false_alarm(5, 9) == pytest.approx(0.336, abs=5e-4)
    assert (1 - rule_false_alarm(5, 9)) ** 8 == pytest.approx(0.038, abs=5e-4)
    assert (1 - rule_false_alarm(10, 9)) ** 8 == pytest.approx(0.66, abs=5e-3)


@pytest.mark.parametrize("kwargs", [dict(n_seeds=1), dict(n_seeds=2.5), dict(n_seeds=3, n_judges=0)])
def test_rule_false_alarm_refuses_what_has_no_seed_std(kwargs):
    from recast.experiments.alone import rule_false_alarm

    with pytest.raises(ValueError):
        rule_false_alarm(**kwargs)


def test_a_pass_rates_seed_std_is_at_least_one_prompt():
    from recast.experiments.alone import change_over_seeds

    # strict rises by exactly one prompt in 64 in each of 3 seeds: s.d. 0, floored at 1/64, so not "improved"
    rows = [{"eval_prompts": 64, "judge/strict": (10 + s + 1) / 64, "base:judge/strict": (10 + s) / 64}
            for s in range(3)]
    c = change_over_seeds(rows, "judge/strict")
    assert c["delta"] == pytest.approx(1 / 64) and c["seed_std"] == pytest.approx(1 / 64) and not c["improved"]
    bare = change_over_seeds([{k: v for k, v in r.items() if k != "eval_prompts"} for r in rows], "judge/strict")
    assert bare["seed_std"] == pytest.approx(0.0) and bare["improved"]
    # two prompts in every seed beats the floor
    two = [{**r, "judge/strict": r["judge/strict"] + 1 / 64} for r in rows]
    assert change_over_seeds(two, "judge/strict")["improved"]


def test_changes_over_seeds_covers_every_metric_with_a_base_value_in_order():
    from recast.experiments.alone import change_over_seeds, changes_over_seeds

    rows = [{"seed": s, "judge/fid": 100.0 - s, "base:judge/fid": 120.0, "reward/size_half_max": 0.6 + s / 10,
             "base:reward/size_half_max": 0.5, "judge/diversity": 3.0, "setting": "compose"} for s in range(3)]
    table = changes_over_seeds(rows)
    assert list(table) == ["judge/fid", "reward/size_half_max"]  # diversity has no base value, "seed" is no metric
    assert all(table[m] == change_over_seeds(rows, m) for m in table)
    assert table["judge/fid"]["delta"] == pytest.approx(-21.0) and table["judge/fid"]["improved"]


def test_versus_control_is_the_paired_difference_of_changes_against_the_placebo():
    from scipy.stats import t as student_t

    from recast.experiments.alone import versus_control

    # per seed, colour moves +0.10/+0.12/+0.14 under colour and +0.01/+0.03/-0.01 under the placebo; the Fréchet
    # distance (lower is better) rises by 18/22/20 under colour and by 0 under the placebo
    col = [_row("color", s, (0.3, 0.3), (0.5, 0.5 + c), (40, 40 + f), (0.4, 0.6))
           for s, c, f in [(0, 0.10, 18), (1, 0.12, 22), (2, 0.14, 20)]]
    pla = [_row("placebo", s, (0.3, 0.3), (0.5, 0.5 + c), (40, 40), (0.5, 0.5))
           for s, c in [(0, 0.01), (1, 0.03), (2, -0.01)]]
    vs = {r["judge"]: r for r in versus_control(col + pla)}
    c = vs["judge/color"]
    d = [0.09, 0.09, 0.15]
    half = student_t.ppf(0.975, 2) * np.std(d, ddof=1) / np.sqrt(3)
    assert c["matching"] and c["delta"] == pytest.approx(0.11) and c["verdict"] == "better"
    assert (c["lo"], c["hi"]) == pytest.approx((0.11 - half, 0.11 + half))
    assert vs["judge/fid"]["delta"] == pytest.approx(20) and vs["judge/fid"]["verdict"] == "worse"
    assert vs["judge/digit"]["verdict"] == "tie" and set(vs) == {"judge/digit", "judge/color", "judge/fid"}
    with pytest.raises(ValueError, match="no runs of the control 'placebo'"):
        versus_control(col)
    with pytest.raises(ValueError, match="shares 1 seed"):
        versus_control(col[:1] + pla)


@pytest.mark.slow
def test_reevaluate_pairs_base_and_final_on_more_samples(tmp_path, monkeypatch):
    """Two tiny single-reward runs of one seed: the re-evaluation scores both on the same prompts and noise, so their
    base scores agree exactly, it is deterministic, and its rows feed `alone_table` with the training-time judges."""
    from recast.experiments.alone import reevaluate
    from recast.experiments.sweep import run_sweep
    from recast.experiments.sweep_results import collect

    monkeypatch.chdir(tmp_path)
    runs = plan_alone(rewards=("digit", "color"), seeds=(0,), world="tiny", preset="ci", iterations=2,
                      out_root="alone")
    assert not run_sweep(runs, jobs=1).failed
    rows = reevaluate(runs, num_prompts=6, batch_size=4)
    assert len(rows) == 2 and all(r["eval_prompts"] == 6 for r in rows)
    trained = collect(runs)
    judges = sorted(k for k in trained[0] if k.startswith("judge/"))
    assert sorted(k for k in rows[0] if k.startswith("judge/")) == judges  # same judges, no diversity
    for k in judges:
        assert rows[0][f"base:{k}"] == rows[1][f"base:{k}"]  # one base model, one noise draw: identical
    assert rows[0]["reward/digit"] != rows[0]["base:reward/digit"] or rows[0]["judge/fid"] != rows[0]["base:judge/fid"]
    assert reevaluate(runs, num_prompts=6, batch_size=4) == rows
    # a shared draw: naming the per-seed draw's noise seed reproduces it; another draw scores other samples
    assert reevaluate(runs, num_prompts=6, batch_size=4, noise_seed=REEVAL_SEED_OFFSET) == rows
    other = reevaluate(runs, num_prompts=6, batch_size=4, noise_seed=5)
    assert [r["noise_seed"] for r in rows] == [REEVAL_SEED_OFFSET] * 2 and [r["noise_seed"] for r in other] == [5, 5]
    assert other[0]["base:reward/digit"] != rows[0]["base:reward/digit"]
    table = alone_table(rows)
    assert {r["reward"] for r in table} == {"digit", "color"} and all(r["n"] == 1 for r in table)
    with pytest.raises(ValueError, match="num_prompts"):
        reevaluate(runs, num_prompts=0)
    # per-seed draws: draw 0 is the default draw; draw 1 is another one, shared by both rewards' runs of the seed
    from recast.experiments.alone import DRAW_STRIDE, pool_draws, reevaluate_draw

    d0, d1 = (reevaluate_draw(runs, d, num_prompts=6) for d in (0, 1))
    assert [{k: v for k, v in r.items() if k != "draw"} for r in d0] == reevaluate(runs, num_prompts=6)
    assert [r["noise_seed"] for r in d1] == [REEVAL_SEED_OFFSET + DRAW_STRIDE] * 2 and d1[0]["draw"] == 1
    assert d1[0]["base:judge/fid"] == d1[1]["base:judge/fid"] != d0[0]["base:judge/fid"]
    pooled = pool_draws(d0 + d1)
    assert [r["eval_prompts"] for r in pooled] == [12, 12]
    assert pooled[0]["judge/fid"] == pytest.approx((d0[0]["judge/fid"] + d1[0]["judge/fid"]) / 2, rel=1e-12)
    with pytest.raises(ValueError, match="draw"):
        reevaluate_draw(runs, -1)
    # the raw trained weights instead of their EMA: the same base scores, the final policy's own
    raw = reevaluate(runs, num_prompts=6, batch_size=4, which="params")
    assert [r["policy"] for r in rows] == ["ema", "ema"] and [r["policy"] for r in raw] == ["params", "params"]
    assert all(raw[i][f"base:{k}"] == rows[i][f"base:{k}"] for i in range(2) for k in judges)
    assert any(raw[i][k] != rows[i][k] for i in range(2) for k in judges)
    with pytest.raises(ValueError, match="which"):
        reevaluate(runs, num_prompts=6, which="old")
    # the rewards scored are the ones the run recorded, not whatever its setting names today
    cfg_path = runs[0].out_dir / "config.json"
    cfg = json.loads(cfg_path.read_text())
    assert cfg["_run"]["reward_names"] == ["digit"] and "reward/color" not in rows[0]
    cfg.pop("_run")
    cfg_path.write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="records no reward_names"):
        reevaluate(runs[:1], num_prompts=6)


def test_cli_policy_params_needs_a_reevaluation_and_is_refused_before_any_run(tmp_path, capsys):
    """``--policy params`` scores the raw trained weights, which only a re-evaluation can (the training-time
    evaluations score the EMA): without ``--reeval-prompts`` it is refused before any run is planned or trained."""
    from recast.experiments.alone import main

    with pytest.raises(SystemExit) as err:
        main(["--rewards", "color", "--seeds", "0,1", "--policy", "params", "--out", str(tmp_path / "alone")])
    assert err.value.code == 2 and "--policy params needs --reeval-prompts" in capsys.readouterr().err
    assert not (tmp_path / "alone").exists()
    with pytest.raises(SystemExit):
        main(["--rewards", "color", "--policy", "old"])


def _draw_rows(delta, base):
    """Rows of seeds × draws with judge/blur = base + delta (lower is better) and judge/strict = base − delta."""
    rows = []
    for s in range(delta.shape[0]):
        for d in range(delta.shape[1]):
            rows.append({"seed": s, "noise_seed": 10 + d, "base:judge/defect_blur": base[d],
                         "judge/defect_blur": base[d] + delta[s, d], "base:judge/strict": base[d],
                         "judge/strict": base[d] - delta[s, d]})
    return rows


def test_draw_spread_pools_the_draws_and_reads_each_one():
    """Closed form: Δ[seed, draw] = a_seed + e_draw. Pooled, the draw term averages to its mean; the shared test on
    draw d sees mean(a) + e_d with the seed-std of a; a per-seed combination sees mean(a) + the mean of the e's it
    draws. A rise in blur is a fall in strict: the same numbers, the opposite verdicts."""
    from recast.experiments.alone import draw_spread

    a = np.array([0.01, 0.02, 0.03])
    e = np.array([-0.04, 0.0, 0.04, 0.08])
    base = np.array([0.5, 0.45, 0.4, 0.35])  # the draws whose base looks best rise most: correlation −1
    rows = _draw_rows(a[:, None] + e[None, :], base)
    blur = draw_spread(rows, "judge/defect_blur")
    assert blur["pooled"]["delta"] == pytest.approx(a.mean() + e.mean())
    assert blur["pooled"]["seed_std"] == pytest.approx(a.std(ddof=1))
    assert blur["pooled"]["per_seed"] == pytest.approx(list(a + e.mean()))
    assert blur["pooled"]["worse"] and not blur["pooled"]["improved"]  # +0.04 rise against a seed-std of 0.01
    assert [c["delta"] for c in blur["shared"]] == pytest.approx(list(a.mean() + e))
    assert all(c["seed_std"] == pytest.approx(a.std(ddof=1)) for c in blur["shared"])
    assert [c["worse"] for c in blur["shared"]] == [False, True, True, True]  # −0.02, +0.02, +0.06, +0.10
    # per-seed: seed i on draw (k + i) mod 4
    for k, c in enumerate(blur["per_seed"]):
        d = [a[i] + e[(k + i) % 4] for i in range(3)]
        assert c["delta"] == pytest.approx(np.mean(d))
    assert blur["draw_mean"] == pytest.approx(a.mean() + e.mean()) and blur["draw_sd"] == pytest.approx(e.std(ddof=1))
    assert blur["corr_base"] == pytest.approx(-1.0)
    strict = draw_spread(rows, "judge/strict")
    assert strict["pooled"]["delta"] == pytest.approx(-blur["pooled"]["delta"])
    assert strict["pooled"]["worse"] and [c["worse"] for c in strict["shared"]] == [False, True, True, True]
    # a draw-independent change: every test agrees and the correlation is undefined
    flat = draw_spread(_draw_rows(np.tile(a[:, None], (1, 4)), np.full(4, 0.5)), "judge/defect_blur")
    assert np.isnan(flat["corr_base"]) and flat["draw_sd"] == 0.0
    assert len({c["delta"] for c in flat["shared"] + flat["per_seed"]}) == 1


def test_draw_spread_refuses_an_incomplete_matrix():
    from recast.experiments.alone import draw_spread

    rows = _draw_rows(np.zeros((3, 2)), np.array([0.5, 0.5]))
    with pytest.raises(ValueError, match="missing"):
        draw_spread(rows[:-1], "judge/strict")
    with pytest.raises(ValueError, match="twice"):
        draw_spread(rows + rows[:1], "judge/strict")
    with pytest.raises(ValueError, match=">= 2 draws"):
        draw_spread([r for r in rows if r["noise_seed"] == 10], "judge/strict")


@pytest.mark.research
def test_committed_draw_spreads_give_the_readme_verdicts():
    """The uniform-baseline verdicts that research/rounds/19-lambda-sweep.md ("One 256-sample draw cannot decide") and
    research/rounds/23-kl-tuning.md read from the committed re-scorings (research/probes/draw_spread.py): pooled over 16
    draws quality passes every judge (and fails at kl_beta 1) and compose fails on blur alone; compose with the
    sharpness reward added passes every judge, blur improving; on notebook 06's draw (noise seed 0) both settings fail
    on blur."""
    from pathlib import Path

    from recast.experiments.alone import draw_spread
    from recast.io import read_csv

    results = Path(__file__).resolve().parents[1] / "research" / "tables"

    def verdicts(name):
        rows = read_csv(results / name)
        judges = [k for k in rows[0] if k.startswith("judge/") and f"base:{k}" in rows[0]]
        return {j: draw_spread(rows, j) for j in judges}

    quality, compose = verdicts("draw_spread_quality.csv"), verdicts("draw_spread_compose.csv")
    assert not any(d["pooled"]["worse"] for d in quality.values())
    assert [j for j, d in compose.items() if d["pooled"]["worse"]] == ["judge/defect_blur"]
    assert compose["judge/defect_blur"]["pooled"]["delta"] == pytest.approx(0.022, abs=5e-4)
    assert quality["judge/defect_blur"]["shared"][0]["worse"] and compose["judge/defect_blur"]["shared"][0]["worse"]
    assert quality["judge/defect_blur"]["shared"][0]["delta"] == pytest.approx(0.090, abs=5e-4)
    # quality at kl_beta 1 fails pooled (size, strict), so 2 stays the smallest passing weight
    assert sorted(j for j, d in verdicts("draw_spread_quality_kl1.csv").items() if d["pooled"]["worse"]) == \
        ["judge/size", "judge/strict"]
    sharp = verdicts("draw_spread_compose_with_sharpness.csv")
    assert not any(d["pooled"]["worse"] for d in sharp.values())
    assert sharp["judge/defect_blur"]["pooled"]["improved"]
    assert all(v < 0 for v in sharp["judge/defect_blur"]["pooled"]["per_seed"])


def _committed_alone_table(name: str):
    """The committed single-reward runs ``research/tables/<name>_runs.csv`` and their `alone_table`, checked to be the
    committed table ``<name>.csv`` (the same verdicts, row for row)."""
    from pathlib import Path

    from recast.experiments.alone import alone_table
    from recast.io import read_csv

    results = Path(__file__).resolve().parents[1] / "research" / "tables"
    runs = read_csv(results / f"{name}_runs.csv")
    table = alone_table(runs)
    committed = read_csv(results / f"{name}.csv")
    assert [(r["reward"], r["judge"], r["improved"], r["worse"]) for r in table] == \
        [(r["reward"], r["judge"], r["improved"], r["worse"]) for r in committed]
    return runs, table


def _worse_judges(table: list[dict]) -> dict[str, list[str]]:
    """reward -> the judges an `alone_table` calls worse by more than one seed-std, in table order."""
    worse = {}
    for r in table:
        if r["worse"] and r["judge"] != "*":
            worse.setdefault(r["reward"], []).append(r["judge"])
    return worse


def _verdicts(table: list[dict]) -> dict[str, bool]:
    """reward -> whether it passes the single-reward rule, from an `alone_table`'s summary rows."""
    return {r["reward"]: r["improved"] for r in table if r["judge"] == "*"}


def _vs_placebo(runs: list[dict]) -> dict[tuple[str, str], str]:
    """(reward, judge) -> `versus_control`'s verdict against the placebo's runs at the same seeds."""
    from recast.experiments.alone import versus_control

    return {(r["reward"], r["judge"]): r["verdict"] for r in versus_control(runs, "placebo")}


def _assert_same_runs(runs: list[dict], earlier: str, budgets: tuple[str, ...], skip: tuple[str, ...] = ()) -> None:
    """The rows of ``budgets`` in ``runs`` carry the same judges, base and final, as the committed
    ``research/tables/<earlier>_runs.csv`` at the same seeds, to 1e-8: re-trained runs reproduce the earlier round's.
    Judges named in ``skip`` (``judge/defect_blur``) are left out: a judge that changed since."""
    from pathlib import Path

    from recast.io import read_csv

    older = {(r["budget"], int(r["seed"])): r
             for r in read_csv(Path(__file__).resolve().parents[1] / "research" / "tables" / f"{earlier}_runs.csv")}
    rows = [r for r in runs if r["budget"] in budgets]
    assert {r["budget"] for r in rows} == set(budgets)
    for r in rows:
        for k in (k for k in r if k.startswith(("judge/", "base:judge/")) and k.split(":")[-1] not in skip):
            assert float(r[k]) == pytest.approx(float(older[(r["budget"], int(r["seed"]))][k]), abs=1e-8, rel=0), k


def test_committed_glyph_round_alone_table_gives_the_readme_verdicts():
    """The glyph-only round's single-reward table (research/rounds/22-each-reward-alone.md): recomputed from its
    committed runs it is the committed table; sharpness and clean pass the rule on the glyph-only blur judge, speck_free
    fails on blur alone, which it also loses against the placebo."""

    runs, table = _committed_alone_table("alone_glyph_round_reeval256")
    verdict = _verdicts(table)
    assert verdict == {"speck_free": False, "clean": True, "sharpness": True, "placebo": True}
    assert [r["judge"] for r in table if r["reward"] == "speck_free" and r["worse"] and r["judge"] != "*"] == \
        ["judge/defect_blur"]
    vs = _vs_placebo(runs)
    assert vs[("speck_free", "judge/defect_blur")] == "worse" and vs[("speck_free", "judge/defect_speckle")] == "better"
    assert not [k for k, v in vs.items() if v == "worse" and k[0] in ("clean", "sharpness")]


def test_committed_second_glyph_round_alone_table_gives_the_readme_verdicts():
    """The stored-ends round's single-reward table (research/rounds/22-each-reward-alone.md), the glyph-only blur judge
    on the rewards the first glyph-only table did not re-score: recomputed from its committed runs it is the committed
    table; colour passes; digit fails on blur, position_flat on colour, size_half_max because its judge does not rise by
    a seed-std, speck_free_abs on blur, which it alone also loses against the placebo (with size_half_max)."""

    runs, table = _committed_alone_table("alone_glyph_round2_reeval256")
    verdict = _verdicts(table)
    assert verdict == {"speck_free_abs": False, "digit": False, "color": True, "position_flat": False,
                       "size_half_max": False, "placebo": True}, verdict
    matching_up = {r["reward"]: r["improved"] for r in table if r["matching"] and r["judge"] != "*"}
    worse = _worse_judges(table)
    assert worse == {"digit": ["judge/defect_blur"], "position_flat": ["judge/color"],
                     "speck_free_abs": ["judge/defect_blur"]}, worse
    assert matching_up["color"] and matching_up["digit"] and matching_up["position_flat"]
    assert not matching_up["size_half_max"]
    vs = _vs_placebo(runs)
    assert sorted(k for k, v in vs.items() if v == "worse") == [("size_half_max", "judge/defect_blur"),
                                                                ("speck_free_abs", "judge/defect_blur")]


def test_committed_sharpness_steep_alone_table_is_reward_hacking():
    """sharpness_steep, the late-decided variant (research/rounds/22-each-reward-alone.md): alone it lowers blur, and it
    hacks: the Fréchet distance rises and every attribute judge falls, also against the placebo."""
    from recast.experiments.alone import versus_control

    runs, rows = _committed_alone_table("alone_sharpness_steep_reeval256")
    table = {(r["reward"], r["judge"]): r for r in rows}
    assert table[("sharpness_steep", "judge/defect_blur")]["improved"]
    assert not table[("sharpness_steep", "*")]["improved"]
    worse = sorted(j for (rw, j), r in table.items() if rw == "sharpness_steep" and r["worse"] and j != "*")
    assert worse == ["judge/color", "judge/digit", "judge/fid", "judge/position", "judge/size", "judge/strict"]
    vs = {r["judge"]: r["verdict"] for r in versus_control(runs, "placebo") if r["reward"] == "sharpness_steep"}
    assert vs["judge/fid"] == "worse" and vs["judge/defect_blur"] == "better"


def test_committed_sharpness_steep_hinged_alone_table_fails_with_a_smaller_hack():
    """sharpness_steep with a hinge on the ink mass (research/rounds/13-steep-guard.md): alone it still lowers blur,
    and it still fails, on a hack the hinge shrinks but does not close: the Fréchet distance rises against the
    placebo, and digit, colour and speckle fall by more than a seed-std (ties against the placebo), while the
    position, size and strict judges, which sharpness_steep's erasing took down, stay within one."""
    from recast.experiments.alone import versus_control

    runs, rows = _committed_alone_table("alone_sharpness_steep_hinged_reeval256")
    table = {(r["reward"], r["judge"]): r for r in rows}
    assert table[("sharpness_steep_hinged", "judge/defect_blur")]["improved"]
    assert not table[("sharpness_steep_hinged", "*")]["improved"]
    worse = sorted(j for (rw, j), r in table.items() if rw == "sharpness_steep_hinged" and r["worse"] and j != "*")
    assert worse == ["judge/color", "judge/defect_speckle", "judge/digit", "judge/fid"], worse
    vs = {r["judge"]: r["verdict"] for r in versus_control(runs, "placebo") if r["reward"] == "sharpness_steep_hinged"}
    assert vs["judge/fid"] == "worse" and vs["judge/defect_blur"] == "better"
    assert [j for j, v in vs.items() if v == "worse"] == ["judge/fid"]
    def fid_rise(runs, reward):
        rs = [r for r in runs if r["budget"] == reward]
        return sum(float(r["judge/fid"]) - float(r["base:judge/fid"]) for r in rs) / len(rs)

    unhinged = _committed_alone_table("alone_sharpness_steep_reeval256")[0]
    assert 0 < fid_rise(runs, "sharpness_steep_hinged") < fid_rise(unhinged, "sharpness_steep") / 3


@pytest.mark.research
def test_committed_steep_guard_probe_every_guard_that_closes_the_hack_is_decided_before_the_cleanest_third():
    """research/probes/steep_guard_probe.py's committed grid (research/rounds/13-steep-guard.md): sharpness_steep's own
    row is its stored-ends timing (timing_candidates.csv); it pays the erasing hack, and so does the weakest hinge; the
    registered hinge at 8 is the weakest on the grid that does not; a stronger hinge closes it further and is decided
    earlier; and no guard that closes the hack has its centre of mass in the cleanest third (>= 3.5)."""
    from pathlib import Path

    from recast.worlds.digits.rewards.steep import STEEP_INK_HINGE
    from recast.io import read_csv

    results = Path(__file__).resolve().parents[1] / "research" / "tables"
    rows = {r["guard"]: {k: float(v) for k, v in r.items() if k != "guard"}
            for r in read_csv(results / "steep_guard_probe.csv")}
    timing = {(r["name"], int(r["seed"])): float(r["com"]) for r in read_csv(results / "timing_candidates.csv")}
    for s in (0, 1):
        assert rows["gate (sharpness_steep)"][f"com_{s}"] == pytest.approx(timing[("sharpness_steep", s)], abs=1e-9)
        assert rows["sharpness"][f"com_{s}"] == pytest.approx(timing[("sharpness", s)], abs=1e-9)
    closes = {g: r["hack_0"] < 0 and r["hack_1"] < 0 for g, r in rows.items()}
    assert not closes["gate (sharpness_steep)"] and not closes["hinge 6"]
    assert closes[f"hinge {STEEP_INK_HINGE:g} (sharpness_steep_hinged)"]
    hinges = [rows[g] for g in ("hinge 6", "hinge 8 (sharpness_steep_hinged)", "hinge 10", "hinge 16", "hinge 30")]
    textures = [rows[g] for g in ("texture 0.5", "texture 0.4", "texture 0.3")]
    for family in (hinges, textures):
        for weak, strong in zip(family, family[1:]):
            assert strong["hack_0"] < weak["hack_0"] and strong["com_0"] < weak["com_0"]
    assert all(max(r["com_0"], r["com_1"]) < 3.5 for g, r in rows.items() if closes[g])
    # a guard that reads pixel texture, settled late, lands on the same frontier: the weakest that closes the hack
    # (texture 0.3) is decided within 0.05 of the registered hinge
    assert closes["texture 0.3"] and not closes["texture 0.4"]
    assert abs(rows["texture 0.3"]["com_0"] - rows["hinge 8 (sharpness_steep_hinged)"]["com_0"]) < 0.05
    # the hinged reward's own samples (a thinned, textured glyph) are paid by every guard but the strongest hinge,
    # and by the setting's sharpness too; the one that closes both routes is decided at the mid third's start
    both = [g for g, r in rows.items() if closes[g] and r["hack_hinged_0"] < 0 and r["hack_hinged_1"] < 0]
    assert both == ["hinge 30"] and rows["sharpness"]["hack_hinged_0"] > 0
    assert max(rows["hinge 30"]["com_0"], rows["hinge 30"]["com_1"]) < 2.7


def test_committed_contrast_and_realism_alone_tables_fail_the_rule_and_tie_the_placebo():
    """The quality rewards not re-scored on the glyph-only judge until the steep-guard round
    (research/rounds/22-each-reward-alone.md): contrast lowers the fade rate and raises the Fréchet distance (its second
    matching judge) and lowers colour and size by more than a seed-std; realism lowers the Fréchet distance and fails on
    size alone (by about one seed-std). Against the placebo neither lowers any judge, and both beat it on fade, realism
    also on Fréchet."""

    runs, rows = _committed_alone_table("alone_contrast_realism_reeval256")
    table = {(r["reward"], r["judge"]): r for r in rows}
    assert table[("contrast", "judge/defect_fade")]["improved"] and table[("realism", "judge/fid")]["improved"]
    assert not table[("contrast", "judge/fid")]["improved"]
    worse = {rw: sorted(j for (w, j), r in table.items() if w == rw and r["worse"] and j != "*")
             for rw in ("contrast", "realism", "placebo")}
    assert worse == {"contrast": ["judge/color", "judge/fid", "judge/size"], "realism": ["judge/size"],
                     "placebo": []}, worse
    assert not table[("contrast", "*")]["improved"] and not table[("realism", "*")]["improved"]
    vs = _vs_placebo(runs)
    assert [k for k, v in vs.items() if v == "worse"] == []
    assert vs[("contrast", "judge/defect_fade")] == vs[("realism", "judge/defect_fade")] == "better"
    assert vs[("realism", "judge/fid")] == "better" and vs[("contrast", "judge/fid")] == "tie"


@pytest.mark.research
def test_committed_steep_guard_samples_show_the_two_routes():
    """What the two steep rewards' single-reward policies did to their samples (steep_guard_probe_samples.csv, seeds
    0 and 1): sharpness_steep's collapse the ink to a faint mark below the hinge with more steep steps and more
    pixel texture; with the hinge the ink stays above it, but still falls by more than a third, and the texture
    still rises (research/rounds/13-steep-guard.md)."""
    from pathlib import Path

    from recast.worlds.digits.rewards.steep import STEEP_INK_HINGE
    from recast.io import read_csv

    results = Path(__file__).resolve().parents[1] / "research" / "tables"
    rows = {(r["run"], int(r["seed"]), r["policy"]): r for r in read_csv(results / "steep_guard_probe_samples.csv")}
    for seed in (0, 1):
        b = rows[("sharpness_steep", seed, "base")]
        assert rows[("sharpness_steep_hinged", seed, "base")] == {**b, "run": "sharpness_steep_hinged"}  # same draws
        erased, hinged = rows[("sharpness_steep", seed, "final")], rows[("sharpness_steep_hinged", seed, "final")]
        assert float(erased["ink_mass"]) < STEEP_INK_HINGE < float(hinged["ink_mass"]) < 2 / 3 * float(b["ink_mass"])
        assert float(erased["steep_steps"]) > 2 * float(b["steep_steps"])
        assert float(erased["alternation"]) > float(hinged["alternation"]) > float(b["alternation"])


def test_committed_oracle_table_the_setting_rewards_failures_are_their_oracles_failures():
    """The oracle round (research/rounds/21-oracle-control.md): each held-out verdict trained as its own reward, 5
    seeds, 256 samples, against the placebo. Recomputed from its committed runs it is the committed table. Only the fade
    oracle passes. The colour, digit, size and speckle oracles raise their judges and blur (the digit, colour and
    speckle oracles also against the placebo); the position oracle costs colour (a tie against the placebo), as
    position_flat does; the blur oracle hacks the Fréchet distance and the attribute judges, which the sharpness reward
    does not. The placebo's runs are the stored-ends round's, to 1e-8."""

    runs, table = _committed_alone_table("alone_oracle_reeval256")
    verdict = _verdicts(table)
    assert verdict == {"placebo": True, "oracle_digit": False, "oracle_color": False, "oracle_position": False,
                       "oracle_size": False, "oracle_not_blur": False, "oracle_not_speckle": False,
                       "oracle_not_fade": True}, verdict
    matching_up = {(r["reward"], r["judge"]): r["improved"] for r in table if r["matching"] and r["judge"] != "*"}
    assert all(v for k, v in matching_up.items() if k != ("oracle_not_blur", "judge/fid")
               and k != ("oracle_not_speckle", "judge/fid"))  # every oracle raises its own verdict's judge
    worse = _worse_judges(table)
    assert worse == {"oracle_digit": ["judge/defect_blur"], "oracle_color": ["judge/defect_blur"],
                     "oracle_position": ["judge/color"], "oracle_size": ["judge/defect_blur"],
                     "oracle_not_blur": ["judge/digit", "judge/color", "judge/position", "judge/defect_speckle",
                                         "judge/fid"],
                     "oracle_not_speckle": ["judge/defect_blur"]}, worse
    vs = _vs_placebo(runs)
    assert sorted(k for k, v in vs.items() if v == "worse") == [
        ("oracle_color", "judge/defect_blur"), ("oracle_digit", "judge/defect_blur"),
        ("oracle_not_blur", "judge/color"), ("oracle_not_speckle", "judge/defect_blur")]
    assert vs[("oracle_position", "judge/color")] == "tie" and vs[("oracle_size", "judge/size")] == "tie"
    _assert_same_runs(runs, "alone_glyph_round2_reeval256", ("placebo",))


def test_committed_peak_clipped_alone_table_digit_and_speck_free_pass_once_the_blur_judge_sees_blur_beside_specks():
    """The peak-clipping round (research/rounds/07-peak-clipping.md): the eight setting rewards and the placebo alone, 5
    seeds, 256 samples, scored with the blur judge that clips isolated peaks. Recomputed from its committed runs it is
    the committed table. Every judge but blur equals the glyph-only round's tables to 1e-8 (the runs re-trained to the
    same weights), so only the blur verdict moved. Digit and speck_free now pass: their blur costs were mostly blur the
    old judge could not see beside a speck, and speck_free's that remains is still worse than the placebo's. Colour and
    sharpness still pass; position_flat (colour), size_half_max (its own judge), contrast (Fréchet, colour, size) and
    realism (size) still fail, on judges the fix did not touch."""

    runs, table = _committed_alone_table("alone_clipped_reeval256")
    verdict = _verdicts(table)
    assert verdict == {"digit": True, "color": True, "position_flat": False, "size_half_max": False,
                       "sharpness": True, "speck_free": True, "contrast": False, "realism": False,
                       "placebo": True}, verdict
    assert _worse_judges(table) == {"position_flat": ["judge/color"], "contrast": ["judge/color", "judge/size",
                                    "judge/fid"], "realism": ["judge/size"]}, _worse_judges(table)
    size = next(r for r in table if r["reward"] == "size_half_max" and r["judge"] == "judge/size")
    assert not size["improved"] and 0 < size["delta"] < size["seed_std"]
    vs = _vs_placebo(runs)
    assert sorted(k for k, v in vs.items() if v == "worse") == [("speck_free", "judge/defect_blur")]
    blur = {r["reward"]: r["delta"] for r in table if r["judge"] == "judge/defect_blur"}
    assert blur["digit"] == pytest.approx(0.0234, abs=5e-4) and blur["speck_free"] == pytest.approx(0.0383, abs=5e-4)
    skip = ("judge/defect_blur",)
    _assert_same_runs(runs, "alone_glyph_round2_reeval256", ("digit", "color", "position_flat", "size_half_max",
                                                            "placebo"), skip)
    _assert_same_runs(runs, "alone_glyph_round_reeval256", ("sharpness", "speck_free"), skip)
    _assert_same_runs(runs, "alone_contrast_realism_reeval256", ("contrast", "realism"), skip)
    older = {(r["budget"], int(r["seed"])): float(r["base:judge/defect_blur"])
             for r in _committed_alone_table("alone_glyph_round2_reeval256")[0]}
    moved = [float(r["base:judge/defect_blur"]) - older[(r["budget"], int(r["seed"]))] for r in runs
             if r["budget"] == "digit"]
    assert all(d > 0.03 for d in moved), moved  # the blur verdict itself moved: it now sees blur beside specks


def test_committed_peak_clipped_alone_runs_raise_their_own_training_rewards():
    """Beside the judges (research/rounds/07-peak-clipping.md): on the same 256 samples every setting reward's run
    raised its own training reward by more than two seed-stds, except size_half_max (+0.023 ± 0.017), which rose by
    under two; the placebo's rise (+0.021 ± 0.017) is the null."""
    import statistics

    runs, _ = _committed_alone_table("alone_clipped_reeval256")
    rise = {}
    for budget in {r["budget"] for r in runs}:
        d = [float(r[f"reward/{budget}"]) - float(r[f"base:reward/{budget}"]) for r in runs if r["budget"] == budget]
        rise[budget] = (statistics.mean(d), statistics.stdev(d))
    assert {b for b, (m, sd) in rise.items() if m > 2 * sd} == {
        "digit", "color", "position_flat", "sharpness", "speck_free", "contrast", "realism"}, rise
    assert rise["size_half_max"][0] == pytest.approx(0.023, abs=5e-4)
    assert rise["placebo"][0] == pytest.approx(0.021, abs=5e-4)


def test_committed_peak_clipped_oracle_table_digit_and_speckle_oracles_still_blur():
    """The oracle control re-judged in the peak-clipping round (research/rounds/07-peak-clipping.md): the same runs (the
    blur oracle re-trained, since its reward is the blur verdict), scored with the peak-clipped blur judge. Colour's and
    size's oracles now pass; the digit and speckle oracles still blur, also against the placebo, as the base model's
    blurrier digit and speck-free passes predict; the position oracle still costs colour; the blur oracle no longer
    hacks the Fréchet distance but costs colour and speckle; the fade oracle passes. Every other judge of the runs not
    re-trained equals the glyph-only oracle table to 1e-8."""

    runs, table = _committed_alone_table("alone_oracle_clipped_reeval256")
    verdict = _verdicts(table)
    assert verdict == {"placebo": True, "oracle_digit": False, "oracle_color": True, "oracle_position": False,
                       "oracle_size": True, "oracle_not_blur": False, "oracle_not_speckle": False,
                       "oracle_not_fade": True}, verdict
    assert _worse_judges(table) == {"oracle_digit": ["judge/defect_blur"], "oracle_position": ["judge/color"],
                                    "oracle_not_blur": ["judge/color", "judge/defect_speckle"],
                                    "oracle_not_speckle": ["judge/defect_blur"]}, _worse_judges(table)
    vs = _vs_placebo(runs)
    assert sorted(k for k, v in vs.items() if v == "worse") == [
        ("oracle_digit", "judge/defect_blur"), ("oracle_not_speckle", "judge/defect_blur"),
        ("oracle_size", "judge/defect_blur")]
    fid = next(r for r in table if r["reward"] == "oracle_not_blur" and r["judge"] == "judge/fid")
    assert fid["delta"] < fid["seed_std"] < 400  # glyph-only verdict as reward: +946 ± 819
    _assert_same_runs(runs, "alone_oracle_reeval256", ("oracle_digit", "oracle_color", "oracle_position",
                                                      "oracle_size", "oracle_not_speckle", "oracle_not_fade",
                                                      "placebo"), ("judge/defect_blur",))


def test_committed_peak_clipped_contrast_round_wash_free_passes():
    """The contrast round re-judged in the peak-clipping round (research/rounds/07-peak-clipping.md): the same runs, the
    peak-clipped blur judge. wash_free's blur cost was the old judge's (+0.023 now, a tie against the placebo), so it
    passes: fade and the Fréchet distance up, no other judge worse. contrast and contrast_flat still fail on colour and
    size. Every other judge equals the glyph-only contrast round's to 1e-8."""
    runs, table = _committed_alone_table("alone_contrast_round_clipped_reeval256")
    verdict = _verdicts(table)
    assert verdict == {"contrast": False, "contrast_flat": False, "wash_free": True, "placebo": True}, verdict
    assert _worse_judges(table) == {"contrast": ["judge/color", "judge/size", "judge/fid"],
                                    "contrast_flat": ["judge/color", "judge/size"]}, _worse_judges(table)
    wash = {r["judge"]: r for r in table if r["reward"] == "wash_free"}
    assert wash["judge/defect_fade"]["improved"] and wash["judge/fid"]["improved"]
    assert wash["judge/defect_blur"]["delta"] == pytest.approx(0.0234, abs=5e-4)
    _assert_same_runs(runs, "alone_contrast_round_reeval256", ("contrast", "contrast_flat", "wash_free", "placebo"),
                      ("judge/defect_blur",))


def test_committed_contrast_round_each_redesign_removes_a_cost_and_wash_free_still_blurs():
    """The contrast round (research/rounds/21-oracle-control.md): contrast, whose oracle passes, fails on the Fréchet
    distance, colour and size; contrast_flat (a flat top on the ink level) keeps the colour and size costs and gains
    Fréchet distance; wash_free (no ink level) loses neither and gains the most Fréchet distance, and fails on blur by
    more than a seed-std, a tie against the placebo. contrast's and the placebo's runs are the steep-guard round's."""

    runs, table = _committed_alone_table("alone_contrast_round_reeval256")
    t = {(r["reward"], r["judge"]): r for r in table}
    assert {r["reward"]: r["improved"] for r in table if r["judge"] == "*"} == {
        "contrast": False, "contrast_flat": False, "wash_free": False, "placebo": True}
    worse = _worse_judges(table)
    assert worse == {"contrast": ["judge/color", "judge/size", "judge/fid"],
                     "contrast_flat": ["judge/color", "judge/size"], "wash_free": ["judge/defect_blur"]}, worse
    for reward in ("contrast", "contrast_flat", "wash_free"):
        assert t[(reward, "judge/defect_fade")]["improved"]
        assert t[(reward, "*")]["delta"] > 2 * t[(reward, "*")]["seed_std"] > 0  # its own training reward rose
    assert t[("wash_free", "judge/fid")]["delta"] < t[("contrast_flat", "judge/fid")]["delta"] < 0 < \
        t[("contrast", "judge/fid")]["delta"]
    vs = _vs_placebo(runs)
    assert not [k for k, v in vs.items() if v == "worse"]
    assert vs[("wash_free", "judge/defect_blur")] == "tie" and vs[("wash_free", "judge/fid")] == "better"
    _assert_same_runs(runs, "alone_contrast_realism_reeval256", ("contrast", "placebo"))


@pytest.mark.research
def test_committed_contrast_probe_every_contrast_variant_grows_the_glyph_and_the_fade_oracle_does_not():
    """`research/probes/contrast_probe.py`'s committed table (research/rounds/21-oracle-control.md), seeds 0-2, base ->
    final: every contrast variant clears the background and grows the glyph (inked pixels up by more than half, the side
    past a large glyph's 12 px for contrast and contrast_flat), in the order of how much it pays for ink level; the fade
    oracle clears the background as much and leaves the glyph's size and level as they were."""
    from pathlib import Path

    from recast.io import read_csv

    rows = read_csv(Path(__file__).resolve().parents[1] / "research" / "tables" / "contrast_probe.csv")

    def mean(reward, policy, key):
        sel = [float(r[key]) for r in rows if r["reward"] == reward and r["policy"] == policy]
        assert len(sel) == 3
        return sum(sel) / 3

    base = {k: mean("placebo", "base", k) for k in ("inked_pixels", "side", "level", "background")}
    for reward in ("contrast", "contrast_flat", "wash_free", "oracle_not_fade"):
        assert mean(reward, "base", "inked_pixels") == pytest.approx(base["inked_pixels"], abs=1e-9)  # same noise
        assert mean(reward, "final", "background") < base["background"] / 5
    grown = [mean(r, "final", "inked_pixels") for r in ("contrast", "contrast_flat", "wash_free")]
    assert grown[0] > grown[1] > grown[2] > 1.5 * base["inked_pixels"]
    assert mean("contrast", "final", "side") > 12 and mean("contrast_flat", "final", "side") > 12
    assert mean("oracle_not_fade", "final", "inked_pixels") < 1.1 * base["inked_pixels"]
    assert mean("oracle_not_fade", "final", "side") < base["side"] + 0.5
    assert mean("oracle_not_fade", "final", "level") < base["level"] + 0.06 < mean("wash_free", "final", "level")


def test_committed_oracle_params_table_the_blur_costs_are_not_the_emas():
    """The oracle and contrast rounds' runs re-scored on their raw trained weights
    (research/rounds/21-oracle-control.md; the EMA is evaluation-only, so these are the same runs as compose evaluates
    them): the blur costs of the digit, colour and speckle oracles and of wash_free stay, each also against the placebo;
    the size oracle passes; the placebo itself fails, on digit, one of the rule's false alarms (0.34 over 9 judges)."""

    runs, table = _committed_alone_table("alone_oracle_params_reeval256")
    assert {r["policy"] for r in runs} == {"params"}
    verdict = _verdicts(table)
    assert [k for k, v in verdict.items() if v] == ["oracle_size", "oracle_not_fade"], verdict
    t = {(r["reward"], r["judge"]): r for r in table}
    for reward in ("oracle_digit", "oracle_color", "oracle_not_speckle", "wash_free"):
        assert t[(reward, "judge/defect_blur")]["worse"], reward
    assert [j for (rw, j), r in t.items() if rw == "placebo" and r["worse"] and j != "*"] == ["judge/digit"]
    vs = _vs_placebo(runs)
    assert sorted(k for k, v in vs.items() if v == "worse") == [
        ("oracle_color", "judge/defect_blur"), ("oracle_digit", "judge/defect_blur"),
        ("oracle_not_blur", "judge/color"), ("oracle_not_blur", "judge/digit"),
        ("oracle_not_speckle", "judge/defect_blur"), ("wash_free", "judge/defect_blur")]


def test_probe_args_and_base_and_final_samples_refuse_a_missing_run_before_sampling(tmp_path):
    """The sample probes' shared command line (`probe_args`) and sampler (`base_and_final_samples`): seeds parse to
    ints, the defaults are seeds 0-2 and 128 prompts, and a run directory that does not exist is named at once."""
    from recast.experiments.alone import base_and_final_samples, probe_args

    a = probe_args("probe", ["contrast", "placebo", "--seeds", "3,4", "--root", str(tmp_path)])
    assert a.rewards == ["contrast", "placebo"] and a.seeds == (3, 4) and a.num_prompts == 128
    assert probe_args("probe", ["x"]).seeds == (0, 1, 2)
    with pytest.raises(FileNotFoundError, match="no config.json"):
        next(base_and_final_samples(["contrast"], (0,), root=tmp_path))


def test_pool_draws_averages_each_run_over_its_draws_and_refuses_uneven_or_repeated_draws():
    from recast.experiments.alone import change_over_seeds, pool_draws

    def row(budget, seed, draw, v):
        return {"setting": "alone", "budget": budget, "method": "uniform", "seed": seed, "eval_prompts": 256,
                "noise_seed": 20_011 + seed + 1000 * draw, "draw": draw, "command": "c",
                "judge/color": v, "base:judge/color": 0.5, "reward/color": 2 * v, "base:reward/color": 0.25}

    rows = [row(b, s, d, 0.25 + 0.125 * d + 0.01 * s) for b in ("color", "placebo") for s in (0, 1, 2)
            for d in (0, 1)]
    pooled = pool_draws(rows)
    assert len(pooled) == 6 and all(r["eval_prompts"] == 512 and r["draws"] == 2 for r in pooled)
    assert all("noise_seed" not in r and "draw" not in r for r in pooled)
    first = next(r for r in pooled if r["budget"] == "color" and r["seed"] == 1)
    assert first["judge/color"] == pytest.approx(0.25 + 0.0625 + 0.01) and first["reward/color"] == \
        pytest.approx(2 * (0.25 + 0.0625 + 0.01)) and first["base:judge/color"] == 0.5
    # the pooled rows are what the table reads: the same change as averaging the changes by hand
    c = change_over_seeds([r for r in pooled if r["budget"] == "color"], "judge/color")
    assert c["delta"] == pytest.approx(0.25 + 0.0625 + 0.01 - 0.5) and c["n"] == 3
    # a CSV's union header gives a run empty cells for other runs' rewards: they are dropped, not averaged
    holes = [{**r, "reward/digit": None, "base:reward/digit": None} for r in rows]
    assert pool_draws(holes) == pooled
    with pytest.raises(ValueError, match="different numbers of draws"):
        pool_draws(rows[:-1])
    with pytest.raises(ValueError, match="one draw twice"):
        pool_draws([r if r["draw"] == 0 else {**r, "noise_seed": r["noise_seed"] - 1000} for r in rows])


@pytest.mark.research
def test_committed_pooled_single_reward_table_on_512_samples():
    """The wash-free round's single-reward table on two per-seed draws of 256 pooled (`research/probes/alone_draws.py`): its
    first draw is the committed tables' rows, the table follows from the committed rows, and near-threshold verdicts
    move with the draw. size_half_max now passes (size +0.021 ± 0.018); wash_free fails on size (−0.015 ± 0.015), the
    placebo's own size move (−0.016), a tie against it; position_flat (colour) and realism (size) still fail."""
    from pathlib import Path

    from recast.experiments.alone import alone_table, pool_draws, versus_control
    from recast.io import read_csv

    results = Path(__file__).resolve().parents[1] / "research" / "tables"
    rows = read_csv(results / "alone_clipped_pooled512_runs.csv")
    first = {(r["budget"], r["seed"]): r for name in ("alone_clipped_reeval256", "alone_contrast_round_clipped_reeval256")
             for r in read_csv(results / f"{name}_runs.csv")}
    for r in (r for r in rows if r["draw"] == 0):
        assert r["judge/fid"] == first[(r["budget"], r["seed"])]["judge/fid"]
    assert {r["draw"] for r in rows} == {0, 1} and len(rows) == 2 * 9 * 5
    pooled = pool_draws(rows)
    table = alone_table(pooled)
    committed = read_csv(results / "alone_clipped_pooled512.csv")
    assert [(r["reward"], r["judge"]) for r in committed] == [(r["reward"], r["judge"]) for r in table]
    assert [r["delta"] for r in committed] == pytest.approx([r["delta"] for r in table], rel=1e-9)
    assert _verdicts(table) == {"digit": True, "color": True, "position_flat": False, "size_half_max": True,
                                "sharpness": True, "speck_free": True, "wash_free": False, "realism": False,
                                "placebo": True}
    worse = {r["reward"]: [] for r in table}
    for r in table:
        if r["judge"] != "*" and r["worse"]:
            worse[r["reward"]].append(r["judge"])
    assert {k: v for k, v in worse.items() if v} == {"position_flat": ["judge/color"], "wash_free": ["judge/size"],
                                                     "realism": ["judge/size"]}
    vs = {(r["reward"], r["judge"]): r["verdict"] for r in versus_control(pooled, "placebo")}
    assert [k for k, v in vs.items() if v == "worse"] == [("speck_free", "judge/defect_blur")]
    assert vs[("wash_free", "judge/size")] == vs[("realism", "judge/size")] == "tie"


def test_committed_realism_variants_alone_tables_give_the_readme_verdicts():
    """The realism-size round (research/rounds/05-realism-size.md): realism alone fails on size; its size-blind view
    (realism_canonical) fails worse (strict, colour and size) and loses the Fréchet gain; the size-conditional realism
    passes the rule (Fréchet −814 ± 146, every other judge within its seed-std) and against the placebo lowers the
    Fréchet distance and the fade defect and raises position, with no judge worse. Both tables recompute from their
    committed runs, and their realism and placebo runs are the peak-clipping round's."""
    runs, table = _committed_alone_table("alone_realism_canonical_reeval256")
    assert _verdicts(table) == {"realism": False, "realism_canonical": False, "placebo": True}
    assert _worse_judges(table) == {"realism": ["judge/size"],
                                    "realism_canonical": ["judge/strict", "judge/color", "judge/size"]}
    delta = {(r["reward"], r["judge"]): (r["delta"], r["seed_std"]) for r in table}
    assert delta[("realism_canonical", "judge/fid")][0] > 0 > delta[("realism", "judge/fid")][0]
    vs = _vs_placebo(runs)
    assert {k for k, v in vs.items() if v != "tie"} == {("realism", "judge/defect_fade"), ("realism", "judge/fid"),
                                                       ("realism_canonical", "judge/defect_fade")}
    _assert_same_runs(runs, "alone_clipped_reeval256", ("realism", "placebo"))

    runs, table = _committed_alone_table("alone_realism_conditional_reeval256")
    assert _verdicts(table) == {"realism_conditional": True, "placebo": True}
    assert _worse_judges(table) == {}
    d, s = next((r["delta"], r["seed_std"]) for r in table if (r["reward"], r["judge"]) ==
                ("realism_conditional", "judge/fid"))
    assert d == pytest.approx(-814.4, abs=0.1) and s == pytest.approx(145.6, abs=0.1)
    size = next(r for r in table if (r["reward"], r["judge"]) == ("realism_conditional", "judge/size"))
    assert abs(size["delta"]) < size["seed_std"]
    vs = _vs_placebo(runs)
    assert {k: v for k, v in vs.items() if v != "tie"} == {
        ("realism_conditional", "judge/position"): "better", ("realism_conditional", "judge/defect_fade"): "better",
        ("realism_conditional", "judge/fid"): "better"}
    _assert_same_runs(runs, "alone_clipped_reeval256", ("placebo",))


@pytest.mark.research
def test_committed_realism_size_probe_every_realism_grows_the_glyphs_the_centred_one_least():
    """`research/probes/realism_size_probe.py`'s committed table (research/rounds/05-realism-size.md), 5 seeds, 128 test
    samples, base -> final: realism draws small prompts' glyphs at a large glyph's side (7.9 -> 12.3 px) and flips the
    size judge from small to large prompts; the size-blind view grows them further; the size-conditional realism
    grows them less but still past 10 px, trading small prompts' size for large prompts' (its flat size judge is an
    average of the two); centred on the base model (the centred-realism round) it grows them least, 7.9 -> 10.3 px,
    and still trades (-0.25 on small prompts, +0.20 on large); the placebo leaves the side where it was."""
    from pathlib import Path
    from statistics import mean

    from recast.io import read_csv

    rows = read_csv(Path(__file__).resolve().parents[1] / "research" / "tables" / "realism_size_probe.csv")

    def m(reward, policy, key):
        sel = [float(r[key]) for r in rows if r["reward"] == reward and r["policy"] == policy]
        assert len(sel) == 5
        return mean(sel)

    rewards = ("realism", "realism_canonical", "realism_conditional", "realism_centred", "placebo")
    for key in ("side_small", "side_large", "size_judge_small"):  # one base model, the same noise for every run
        assert len({round(m(rw, "base", key), 9) for rw in rewards}) == 1
    base = {k: m("placebo", "base", k) for k in ("side_small", "size_judge_small", "size_judge_large")}
    assert 7.5 < base["side_small"] < 8.5
    small = {rw: m(rw, "final", "side_small") for rw in rewards}
    assert small["realism_canonical"] > small["realism"] > 12 > small["realism_conditional"] > \
        small["realism_centred"] > 10
    assert abs(small["placebo"] - base["side_small"]) < 0.5
    for rw in ("realism", "realism_canonical", "realism_conditional", "realism_centred"):
        lost = m(rw, "final", "size_judge_small") - base["size_judge_small"]
        gained = m(rw, "final", "size_judge_large") - base["size_judge_large"]
        assert lost < -0.2 and gained > 0.15, rw
    assert m("realism_conditional", "final", "size_judge_small") > 2 * m("realism", "final", "size_judge_small")
    moves = {rw: tuple(round(m(rw, "final", f"size_judge_{z}") - base[f"size_judge_{z}"], 2)
                       for z in ("small", "large")) for rw in ("realism", "realism_conditional", "realism_centred")}
    assert moves == {"realism": (-0.50, 0.35), "realism_conditional": (-0.32, 0.27), "realism_centred": (-0.25, 0.20)}
    # centred, the small prompts' reward carries signal: it rises from the base as the large prompts' does, where the
    # uncentred conditional reward of small prompts stays near 0 under every policy
    small_reward = {p: m("realism_centred", p, "realism_centred_small") for p in ("base", "final")}
    assert small_reward["final"] - small_reward["base"] > 0.2
    assert max(m(rw, p, "realism_conditional_small") for rw in rewards for p in ("base", "final")) < 0.02


@pytest.mark.research
def test_committed_realism_conditional_pooled_table_on_512_samples_still_passes():
    """realism_conditional on a second per-seed draw of 256 pooled with the first (`research/probes/alone_draws.py`): it
    still passes the rule (Fréchet −830 ± 116, size −0.011 ± 0.019), and the placebo's second draw is the
    wash-free round's pooled table's, row for row."""
    from pathlib import Path

    from recast.io import read_csv

    results = Path(__file__).resolve().parents[1] / "research" / "tables"
    rows, table = _committed_pooled_table("alone_realism_conditional_pooled512")
    assert _verdicts(table) == {"realism_conditional": True, "placebo": True} and _worse_judges(table) == {}
    fid = next(r for r in table if (r["reward"], r["judge"]) == ("realism_conditional", "judge/fid"))
    assert fid["delta"] == pytest.approx(-830.1, abs=0.1)
    earlier = {(r["budget"], r["seed"], r["draw"]): r for r in read_csv(results / "alone_clipped_pooled512_runs.csv")}
    for r in (r for r in rows if r["budget"] == "placebo"):
        old = earlier[(r["budget"], r["seed"], r["draw"])]
        for k in (k for k in r if k.startswith(("judge/", "base:judge/"))):
            assert float(r[k]) == pytest.approx(float(old[k]), abs=1e-8, rel=0), k


@pytest.mark.research
def test_realism_size_probe_measures_real_canvases_at_their_true_sides():
    """`research/probes/realism_size_probe.py`'s measure on real canvases: small glyphs 8 px and large 12 px (the judges'
    box), the size judge passes both, hardly any is blurred, and every realism reward scores them above 0.6."""
    import torch
    from helpers import load_script

    from recast.worlds.digits import data

    probe = load_script("realism_size_probe")
    specs = [data.PromptSpec(d, c, p, s) for d in data.DIGITS for c in ("red", "green") for p in data.POSITIONS
             for s in data.SIZES]
    row = probe.measure(data.render(specs, generator=torch.Generator().manual_seed(2)), [s.text for s in specs])
    assert row["side_small"] == pytest.approx(8.0, abs=0.05) and row["side_large"] == pytest.approx(12.0, abs=0.05)
    assert row["size_judge_small"] > 0.95 and row["size_judge_large"] > 0.95 and row["blur"] < 0.05
    assert row["inked_pixels_large"] > 1.5 * row["inked_pixels_small"]
    for name in ("realism", "realism_canonical", "realism_conditional", "realism_centred"):
        assert row[f"{name}_small"] > 0.6 and row[f"{name}_large"] > 0.6, name


def test_committed_realism_centred_alone_tables_pass_on_256_and_512_samples():
    """The centred-realism round (research/rounds/04-centred-realism.md): the size-conditional realism with each size
    head centred on the base model passes the single-reward rule on 256 samples per policy (Fréchet −763 ± 110, size
    +0.011 ± 0.028) and on a second draw pooled with the first (Fréchet −770 ± 105, size +0.008 ± 0.017); every judge's
    mean moves the right way on both; against the placebo it lowers the Fréchet distance, the fade and the speckle
    defect and costs nothing. The tables recompute from their committed runs; realism's and the placebo's runs are the
    peak-clipping round's."""
    lower_is_better = lambda j: j == "judge/fid" or j.startswith("judge/defect_")  # noqa: E731
    runs, table = _committed_alone_table("alone_realism_centred_reeval256")
    assert _verdicts(table) == {"realism": False, "realism_centred": True, "placebo": True}
    assert _worse_judges(table) == {"realism": ["judge/size"]}
    delta = {r["judge"]: (r["delta"], r["seed_std"]) for r in table if r["reward"] == "realism_centred"}
    assert delta["judge/fid"] == pytest.approx((-762.9, 109.8), abs=0.1)
    assert delta["judge/size"] == pytest.approx((0.011, 0.028), abs=0.001)
    assert all((d < 0) == lower_is_better(j) for j, (d, _) in delta.items() if j.startswith("judge/"))
    vs = _vs_placebo(runs)
    assert {k: v for k, v in vs.items() if v != "tie" and k[0] == "realism_centred"} == {
        ("realism_centred", "judge/defect_speckle"): "better", ("realism_centred", "judge/defect_fade"): "better",
        ("realism_centred", "judge/fid"): "better"}
    _assert_same_runs(runs, "alone_clipped_reeval256", ("realism", "placebo"))

    _, pooled = _committed_pooled_table("alone_realism_centred_pooled512")
    assert _verdicts(pooled) == {"realism_centred": True, "placebo": True} and _worse_judges(pooled) == {}
    delta = {r["judge"]: (r["delta"], r["seed_std"]) for r in pooled if r["reward"] == "realism_centred"}
    assert delta["judge/fid"] == pytest.approx((-769.8, 105.3), abs=0.1)
    assert delta["judge/size"] == pytest.approx((0.008, 0.017), abs=0.001)
    assert all((d < 0) == lower_is_better(j) for j, (d, _) in delta.items() if j.startswith("judge/"))


def _committed_pooled_table(name: str):
    """The committed rows ``research/tables/<name>_runs.csv`` of one reward and the placebo on two pooled draws
    (`research/probes/alone_draws.py`, 5 seeds) and their pooled `alone_table`, checked to give the committed
    ``<name>.csv``'s changes."""
    from pathlib import Path

    from recast.experiments.alone import alone_table, pool_draws
    from recast.io import read_csv

    results = Path(__file__).resolve().parents[1] / "research" / "tables"
    rows = read_csv(results / f"{name}_runs.csv")
    assert {r["draw"] for r in rows} == {0, 1} and len(rows) == 2 * 2 * 5
    table = alone_table(pool_draws(rows))
    assert [r["delta"] for r in read_csv(results / f"{name}.csv")] == pytest.approx([r["delta"] for r in table],
                                                                                     rel=1e-9)
    return rows, table
