"""The demo compares methods on equal terms: same seeds, same base model, one summary row per method and metric."""

import json

import pytest

from recast.demo import run_demo


def test_demo_same_seeds_same_base_and_writes_summary(tmp_path, monkeypatch):
    monkeypatch.setenv("RECAST_FIGURES_DIR", str(tmp_path / "figs"))
    result = run_demo(tmp_path / "demo", preset_name="ci", seeds=(0, 1), iterations=2, workers=1,
                      figure_name="demo_test")
    assert set(result.runs) == {"recast", "uniform"} and all(len(v) == 2 for v in result.runs.values())
    rows = json.loads((tmp_path / "demo" / "results.json").read_text())["rows"]
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


def test_demo_rejects_bad_method_before_training(tmp_path):
    with pytest.raises(ValueError, match="method"):
        run_demo(tmp_path / "demo", preset_name="ci", methods=("recast", "nonsense"), seeds=(0,), workers=1)
    assert not list((tmp_path).rglob("metrics.jsonl"))
