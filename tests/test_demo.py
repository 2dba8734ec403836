"""The demo compares methods on equal terms: same seeds, same base model, one summary row per method and metric."""

import json

import pytest

from recast.demo import efficiency, paired, run_demo
from recast.stats import images_to_reach
from recast.trainer.metrics import load_run


def test_demo_same_seeds_same_base_and_writes_summary(tmp_path, monkeypatch):
    monkeypatch.setenv("RECAST_FIGURES_DIR", str(tmp_path / "figs"))
    result = run_demo(tmp_path / "demo", preset_name="ci", methods=("recast", "uniform"), seeds=(0, 1), iterations=2,
                      workers=1, figure_name="demo_test")
    assert set(result.runs) == {"recast", "uniform"} and all(len(v) == 2 for v in result.runs.values())
    saved = json.loads((tmp_path / "demo" / "results.json").read_text())
    assert saved["lam"] == pytest.approx([0.2] * 5)  # the budgets the runs trained with, resolved and normalised
    rows = saved["rows"]
    by = {(r["method"], r["metric"]): r for r in rows}
    # Both methods start from the same base model with the same eval noise: identical base scores.
    for metric in ("reward/weighted", "reward/color", "judge/strict"):
        assert by[("recast", metric)]["base_mean"] == pytest.approx(by[("uniform", metric)]["base_mean"], abs=1e-12)
        assert by[("recast", metric)]["seeds"] == 2
        r = by[("recast", metric)]
        assert r["delta_mean"] == pytest.approx(r["final_mean"] - r["base_mean"], abs=1e-12)
    assert (tmp_path / "figs" / "demo_test.png").is_file() and (tmp_path / "figs" / "demo_test.pdf").is_file()
    assert (tmp_path / "demo" / "results.csv").read_text().startswith("method,metric,seeds")
    assert "| recast | reward/weighted |" in result.markdown()

    # Paired differences: seed s of ReCAST against seed s of uniform, every final eval metric.
    finals = {m: [load_run(p).evals[-1] for p in paths] for m, paths in result.runs.items()}
    pairs = {r["metric"]: r for r in result.paired if r["baseline"] == "uniform"}
    assert set(pairs) == {k for k in finals["recast"][0] if k != "iteration"}
    for metric, r in pairs.items():
        want = sum(a[metric] - b[metric] for a, b in zip(finals["recast"], finals["uniform"])) / 2
        assert r["diff"] == pytest.approx(want, abs=1e-12) and r["n"] == 2
        assert r["ci_low"] <= r["diff"] <= r["ci_high"]
        if metric.startswith("judge/") and metric != "judge/fid":  # pass rates over the ci preset's 4 prompts
            half = 12.706204736174707 * (1 / 4) / 2 ** 0.5  # t_{0.975, 1} * one prompt / sqrt(2 seeds)
            assert r["ci_high"] - r["ci_low"] >= 2 * half - 1e-9, (metric, r)
    assert "| uniform | judge/strict |" in result.markdown()
    # A method against itself: zero difference, a tie, and it reaches its own final value within its own budget.
    same = {"recast": result.runs["recast"], "uniform": result.runs["recast"]}
    assert all(r["diff"] == 0 and r["verdict"] == "tie" for r in paired(same))
    for r in efficiency(same):
        if not r["baseline_improved"]:  # no target worth reaching: no ratio
            assert r["ratio"] is None
            continue
        run = load_run(result.runs["recast"][0])
        its = [e["iteration"] for e in run.evals]
        curve = [sum(load_run(p).evals[i][r["metric"]] for p in result.runs["recast"]) / 2 for i in range(len(its))]
        higher = not r["metric"].startswith(("judge/fid", "judge/defect_"))
        reach = images_to_reach([i * 4 for i in its], curve, curve[-1], higher_is_better=higher)
        assert r["ratio"] == pytest.approx(reach / (its[-1] * 4)) and 0 < r["ratio"] <= 1
        assert r["seeds"] == 2 and r["ratio_low"] <= r["ratio"]  # paired seed bootstrap around it


def test_demo_rejects_bad_method_before_training(tmp_path):
    with pytest.raises(ValueError, match="method"):
        run_demo(tmp_path / "demo", preset_name="ci", methods=("recast", "nonsense"), seeds=(0,), workers=1)
    assert not list((tmp_path).rglob("metrics.jsonl"))


def _calls(setting: str) -> dict[str, dict[str, set[str]]]:
    """baseline -> {"win": metrics, "loss": metrics} of the committed 5-seed demo's paired table."""
    from pathlib import Path

    from recast.io import read_csv

    rows = read_csv(Path(__file__).resolve().parents[1] / "data" / "results" / f"demo5_{setting}_paired.csv")
    out: dict[str, dict[str, set[str]]] = {}
    for r in rows:
        assert r["method"] == "recast" and int(r["n"]) == 5
        out.setdefault(r["baseline"], {"win": set(), "loss": set()})
        if r["verdict"] in ("win", "loss"):
            out[r["baseline"]][r["verdict"]].add(r["metric"])
    return out


def test_committed_5_seed_demos_give_the_readme_verdicts():
    """The README's results ("What the tables say"), from the committed paired tables of the 5-seed demos. Compose
    (re-judged in the peak-clipping round): ReCAST beats uniform on the colour and position judges and loses none;
    against reward_sum it wins blur and loses fade. Quality (re-trained in the wash-free round, wash_free in
    contrast's place): ReCAST beats uniform on the Fréchet distance and ties every other judge; reward_sum beats
    ReCAST on the Fréchet distance."""
    compose, quality = _calls("compose"), _calls("quality")
    judges = lambda ms: {m for m in ms if m.startswith("judge/")}  # noqa: E731
    assert judges(compose["uniform"]["win"]) == {"judge/color", "judge/position"}
    assert compose["uniform"]["win"] - judges(compose["uniform"]["win"]) == \
        {"reward/weighted", "reward/color", "reward/position_flat"}
    assert not compose["uniform"]["loss"]
    assert judges(compose["reward_sum"]["win"]) == {"judge/defect_blur"}
    assert judges(compose["reward_sum"]["loss"]) == {"judge/defect_fade"}
    assert quality["uniform"]["win"] == {"judge/fid", "reward/weighted", "reward/sharpness", "reward/speck_free",
                                         "reward/realism"}
    assert not quality["uniform"]["loss"]
    assert quality["reward_sum"]["win"] == {"reward/sharpness"}
    assert quality["reward_sum"]["loss"] == {"judge/fid", "reward/speck_free", "reward/realism"}


@pytest.mark.parametrize("setting", ["compose", "quality"])
def test_committed_5_seed_demos_meet_the_uniform_baseline_target(setting):
    """Issue 8's training target on the committed 5-seed demos: under uniform weighting every training reward rises,
    every held-out judge rises or moves the wrong way by no more than its seed-std, and the Fréchet distance grows by
    no more than 25 % (here it falls by more than half in both settings)."""
    from pathlib import Path

    d = json.loads((Path(__file__).resolve().parents[1] / "data" / "results" / f"demo5_{setting}.json").read_text())
    rows = {r["metric"]: r for r in d["rows"] if r["method"] == "uniform"}
    assert all(r["seeds"] == 5 for r in rows.values())
    lower_is_better = lambda m: m == "judge/fid" or m.startswith("judge/defect_")  # noqa: E731
    for metric, r in rows.items():
        gain = -r["delta_mean"] if lower_is_better(metric) else r["delta_mean"]
        if metric.startswith("reward/"):
            assert gain > 0, (metric, r)
        else:
            assert gain >= -r["delta_std"], (metric, r)
    fid = rows["judge/fid"]
    assert fid["final_mean"] <= 0.5 * fid["base_mean"], fid
