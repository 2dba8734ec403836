"""The sweep tables of research/rounds/19-lambda-sweep.md: read back from the CSVs the notebooks write, counted and
formatted exactly."""

import pytest

from recast.io import read_csv, write_csv
from recast.experiments.sweep_results import compare
from recast.experiments.sweep_report import (efficiency_table, fixed_w_report, hacking_table, paired_table, report,
                                 rescore_report, summarise_w_timing, tally_table, w_timing_table, win_rate_table)


def _rows():
    # two seeds per method in one cell: recast beats uniform on strict every seed (+0.1, +0.2), loses on the
    # Fréchet distance (+10, +30: higher is worse), and ties on the reward (+0.1, -0.1)
    out = []
    for seed, (s_r, s_u, f_r, f_u, a_r, a_u) in enumerate([(0.6, 0.5, 110.0, 100.0, 0.5, 0.4),
                                                           (0.7, 0.5, 130.0, 100.0, 0.4, 0.5)]):
        out.append({"setting": "compose", "budget": "uniform", "method": "recast", "seed": seed,
                    "judge/strict": s_r, "judge/fid": f_r, "reward/a": a_r})
        out.append({"setting": "compose", "budget": "uniform", "method": "uniform", "seed": seed,
                    "judge/strict": s_u, "judge/fid": f_u, "reward/a": a_u})
    return out


def test_csv_round_trip_parses_numbers_booleans_and_missing_values(tmp_path):
    write_csv(tmp_path / "x.csv", [{"a": 1, "b": 0.25, "c": None, "d": True, "e": "uniform"}])
    assert read_csv(tmp_path / "x.csv") == [{"a": 1, "b": 0.25, "c": None, "d": True, "e": "uniform"}]


def test_tally_and_paired_tables_count_and_mark_each_verdict():
    paired = compare(_rows(), baseline="uniform")
    verdicts = {c["metric"]: c["verdict"] for c in paired}
    # the paired t interval of two differences (0.1, 0.2) has half-width t_{0.975,1} * 0.0707 = 0.449: a tie
    assert verdicts == {"judge/strict": "tie", "judge/fid": "tie", "reward/a": "tie"}
    lines = tally_table(paired).splitlines()
    assert lines[2] == "| uniform | compose | 0 / 2 / 0 | 0 / 1 / 0 | 0.1 of 2, 0.1 of 1 |"
    marked = [dict(c, verdict="win") if c["metric"] == "judge/strict" else
              dict(c, verdict="loss") if c["metric"] == "judge/fid" else c for c in paired]
    assert tally_table(marked).splitlines()[2] == "| uniform | compose | 1 / 0 / 1 | 0 / 1 / 0 | 0.1 of 2, 0.1 of 1 |"
    table = paired_table(marked, "uniform", "judge/").splitlines()
    assert table[0] == "| setting / budget | strict | fid |"
    assert table[2] == "| compose / uniform | +0.150 **W** | +20.0 *L* |"
    assert paired_table(marked, "uniform", "reward/").splitlines()[2] == "| compose / uniform | +0.000 |"
    judges_only = tally_table(marked, rewards=False).splitlines()
    assert judges_only[:3] == ["| baseline | setting | judges: win / tie / loss | calls expected by chance (judges; 5% "
                               "of cells) |", "|---|---|---|---|", "| uniform | compose | 1 / 0 / 1 | 0.1 of 2 |"]


def test_rescore_report_tabulates_notebook_06s_files_and_needs_all_three(tmp_path):
    """A re-score has no training rewards: the tally counts judges only, reward rows in the compare file are left
    out, and a missing file is an error rather than a silently shorter report."""
    marked = [dict(c, verdict="win") if c["metric"] == "judge/strict" else c
              for c in compare(_rows(), baseline="uniform")]
    write_csv(tmp_path / "j_compare.csv", marked)
    with pytest.raises(FileNotFoundError):
        rescore_report(tmp_path, "j")
    write_csv(tmp_path / "j_change.csv", [
        {"setting": "compose", "budget": "uniform", "method": m, "metric": k, "change": c, "verdict": v}
        for m, k, c, v in (("recast", "judge/strict", 0.1, "better"), ("recast", "judge/fid", 5.0, "unchanged"),
                           ("uniform", "judge/defect_blur", 0.05, "worse"), ("uniform", "judge/fid", 20.0, "worse"))])
    write_csv(tmp_path / "j.csv", [
        {"setting": "compose", "budget": "uniform", "baseline": "uniform", "wins": 30, "ties": 10, "losses": 24,
         "win_rate": 0.546875, "ci_low": 0.43, "ci_high": 0.66, "seed_rates": "0.6 0.7 0.8", "seed_ci_low": 0.4516,
         "seed_ci_high": 0.9484, "verdict": "tie"}])
    text = rescore_report(tmp_path, "j")
    assert "| uniform | compose | 1 / 1 / 0 | 0.1 of 2 |" in text
    assert "| compose / uniform | +0.150 **W** | +20.0 |" in text and "reward/a" not in text and "| a |" not in text
    assert "| compose / uniform | recast | none |" in text
    assert "| compose / uniform | uniform | defect_blur +0.050, fid +20.0 |" in text
    assert "| compose / uniform | 30 / 10 / 24 | 0.55 [0.43, 0.66] | 0.70 [0.45, 0.95] |" in text


def test_fixed_w_report_groups_by_comparison_and_needs_a_setting_with_all_three_files(tmp_path):
    """research/probes/fixed_w_runs.py's three CSVs per setting: each (method, baseline) pair is one comparison in the tally
    (judges and training rewards apart) and has its own paired judge table; a setting missing a file is left out,
    and none complete is an error."""
    paired = compare(_rows(), baseline="uniform")
    judge = [dict(c, method="fixed", verdict="win" if c["metric"] == "judge/strict" else c["verdict"])
             for c in paired if c["metric"].startswith("judge/")]
    judge += [dict(c, method="recast", baseline="uniform", verdict="loss" if c["metric"] == "judge/fid" else "tie")
              for c in paired if c["metric"].startswith("judge/")]
    write_csv(tmp_path / "fx_compose_compare.csv", judge + [dict(paired[-1], method="fixed")])  # a reward row: skipped
    write_csv(tmp_path / "fx_compose_rewards.csv", [dict(c, method="fixed", verdict="win")
                                                    for c in paired if c["metric"].startswith("reward/")])
    with pytest.raises(FileNotFoundError):
        fixed_w_report(tmp_path, "fx")
    write_csv(tmp_path / "fx_compose.csv", [
        {"setting": "compose", "budget": "uniform", "method": "fixed", "baseline": "uniform", "wins": 40, "ties": 4,
         "losses": 20, "win_rate": 0.65625, "ci_low": 0.54, "ci_high": 0.76, "seed_rates": "0.6 0.7",
         "seed_ci_low": 0.0147, "seed_ci_high": 1.2853, "verdict": "tie"}])
    write_csv(tmp_path / "fx_quality_rewards.csv", [])  # quality has no judge files: not reported
    text = fixed_w_report(tmp_path, "fx")
    assert "| comparison | setting | judges: win / tie / loss | training rewards: win / tie / loss |" in text
    assert "| fixed W − uniform | compose | 1 / 1 / 0 | 1 / 0 / 0 | 0.1 of 2, 0.1 of 1 |" in text
    assert "| ReCAST − uniform | compose | 0 / 1 / 1 | 0 / 0 / 0 | 0.1 of 2, 0.0 of 0 |" in text
    assert "Held-out judges, fixed W − uniform (compose" in text and "| compose / uniform | +0.150 **W** | +20.0 |" in text
    assert "Held-out judges, ReCAST − uniform (compose" in text and "| compose / uniform | +0.150 | +20.0 *L* |" in text
    assert "| compose / uniform | 40 / 4 / 20 | 0.66 [0.54, 0.76] | 0.65 [0.01, 1.29] |" in text
    assert "quality" not in text


def test_efficiency_and_win_rate_tables_say_what_was_not_reached(tmp_path):
    eff = [{"setting": "compose", "budget": "uniform", "baseline": "uniform", "metric": "judge/strict", "ratio": 0.5,
            "baseline_improved": True},
           {"setting": "compose", "budget": "uniform", "baseline": "uniform", "metric": "reward/weighted",
            "ratio": None, "baseline_improved": True},
           {"setting": "quality", "budget": "uniform", "baseline": "uniform", "metric": "judge/strict",
            "ratio": None, "baseline_improved": False}]
    lines = efficiency_table(eff).splitlines()
    assert lines[0] == "| setting / budget | strict vs uniform | weighted vs uniform |"
    assert lines[2:] == ["| compose / uniform | 0.50 | not reached |",
                         "| quality / uniform | baseline did not improve | – |"]
    heavy = [dict(e, budget="a-heavy") for e in eff[:2]]  # listed first, shown after its setting's uniform row
    assert [l.split(" | ")[0] for l in efficiency_table(heavy + eff).splitlines()[2:]] == [
        "| compose / uniform", "| compose / a-heavy", "| quality / uniform"]
    wins = [{"setting": "compose", "budget": "uniform", "baseline": "uniform", "wins": 30, "ties": 10, "losses": 24,
             "win_rate": 0.546875, "ci_low": 0.43, "ci_high": 0.66, "seed_rates": "0.6 0.7 0.8",
             "seed_ci_low": 0.4516, "seed_ci_high": 0.9484, "verdict": "tie"}]
    row = "| compose / uniform | 30 / 10 / 24 | 0.55 [0.43, 0.66] | 0.70 [0.45, 0.95] |"
    assert win_rate_table(wins).splitlines()[2] == row
    assert win_rate_table([dict(wins[0], verdict="win")]).splitlines()[2] == row[:-2] + " **W** |"

    write_csv(tmp_path / "s_paired.csv", compare(_rows(), baseline="uniform"))
    write_csv(tmp_path / "s_efficiency.csv", eff)
    text = report(tmp_path, "s", judge="j")  # no j.csv: the pairwise section is left out, not invented
    assert "Pairwise judge" not in text and "| compose / uniform | 0.50 | not reached |" in text
    write_csv(tmp_path / "j.csv", wins)
    assert row in report(tmp_path, "s", judge="j")
    with pytest.raises(FileNotFoundError):
        report(tmp_path, "missing")


def test_w_timing_summary_marks_a_side_only_when_every_seed_agrees():
    rows = [{"setting": "timing", "budget": "uniform", "seed": s, "reward": k, "early_share": v, "max_deviation": d}
            for s, (c, n, d) in enumerate([(0.61, 0.45, 0.5), (0.63, 0.52, 0.6), (0.65, 0.41, 0.4)])
            for k, v in (("color", c), ("clean", n))]
    summary = summarise_w_timing(rows)
    color, clean = summary
    assert color["early_shares"] == "0.610 0.630 0.650" and color["early_share_mean"] == pytest.approx(0.63)
    assert color["max_deviation_mean"] == pytest.approx(0.5) and color["same_side"] and not clean["same_side"]
    lines = w_timing_table(summary).splitlines()
    assert lines == ["| timing / budget | color | clean |", "|---|---|---|",
                     "| uniform | 0.610, 0.630, 0.650 **early** | 0.450, 0.520, 0.410 |"]
    late = summarise_w_timing([dict(r, early_share=1 - r["early_share"]) for r in rows if r["reward"] == "color"])
    assert w_timing_table(late).splitlines()[2] == "| uniform | 0.390, 0.370, 0.350 **late** |"
    # inside the noise band a consistent side is not timing: 0.61 is within 0.5 ± 0.12
    assert not summarise_w_timing(rows, null=0.12)[0]["same_side"]
    assert summarise_w_timing(rows, null=0.1)[0]["same_side"]


def test_hacking_table_lists_the_judges_that_fell_while_the_reward_rose():
    def row(method, metric, change, verdict, flag, down=""):
        return {"setting": "quality", "budget": "uniform", "method": method, "metric": metric, "change": change,
                "verdict": verdict, "reward_up_judge_down": flag, "judges_down": down}

    change = [row("recast", "reward/weighted", 0.2, "better", True, "judge/strict;judge/fid"),
              row("recast", "judge/strict", -0.05, "worse", True, "judge/strict;judge/fid"),
              row("recast", "judge/fid", 120.0, "worse", True, "judge/strict;judge/fid"),
              row("uniform", "reward/weighted", 0.01, "unchanged", False),
              row("uniform", "judge/strict", -0.1, "worse", False)]
    assert hacking_table(change).splitlines()[2:] == [
        "| quality / uniform | recast | +0.200 (better) | strict -0.050, fid +120.0 |",
        "| quality / uniform | uniform | +0.010 (unchanged) | none |"]
