"""The benchmark helpers run on the ci preset and report consistent numbers; the GPU check script parses."""

import importlib.util
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _module(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_profile_informativeness_splits_the_phase_and_follows_the_subset(tmp_path):
    prof = _module("profile_informativeness")
    full = prof.main(["--preset", "ci", "--iterations", "4", "--out", str(tmp_path / "p.json")])
    sub = prof.main(["--preset", "ci", "--iterations", "4", "--set", "informativeness_subset=2",
                     "--set", "recast_every=2"])
    assert (tmp_path / "p.json").is_file() and full["iterations_timed"] == 2
    T = full["T"]
    assert full["proxies_per_iteration"] == full["B"] * (T - 1)  # every sample's x̂_0 at every interior row
    assert sub["proxies_per_iteration"] == 2 * (T - 1)
    assert sub["set"] == {"informativeness_subset": 2, "recast_every": 2}
    for r in (full, sub):
        assert 0 < r["score_proxies_s"] and 0 < r["tracker_add_s"] <= r["informativeness_s"] < r["iteration_s"]
        assert r["recast_only_pct"] == pytest.approx(100 * (r["informativeness_s"] + r["solver_s"]) / r["iteration_s"])


def test_gpu_check_script_parses():
    assert subprocess.run(["bash", "-n", str(ROOT / "benchmarks" / "gpu_check.sh")]).returncode == 0


def test_resume_check_finds_resume_exact_and_tells_runs_apart(tmp_path):
    from recast.config import preset
    from recast.trainer import Trainer

    rc = _module("resume_check")
    cfg = preset("ci", method="recast", iterations=2, eval_every=0, rewards=("color", "size"))
    r = rc.check(cfg, tmp_path / "a")
    assert r["reproducible_bit_exact"] and r["resume_bit_exact"] and r["resumed_at"] == 1
    assert r["reproducible_max_abs_diff"] == r["resume_max_abs_diff"] == 0.0
    a, b = Trainer(cfg, tmp_path / "s0"), Trainer(cfg.replace(seed=1), tmp_path / "s1")
    a.run(), b.run()
    assert rc._max_diff(a, b) > 0  # the comparison can fail
    assert not rc._same_logs(tmp_path / "s0", tmp_path / "s1")


@pytest.mark.slow
def test_continuation_proxy_cost_prices_every_setting_and_the_committed_ones_exceed_the_budget(tmp_path):
    """`benchmarks/continuation_proxy_cost.py` runs (one rollout count, one sub-grid) and reports each continuation
    setting against the trainer's sampling phase; in the committed measurement every setting that could debias a
    Monte-Carlo value (M ≥ 2) costs more than the 3 % of an iteration that ReCAST's own phases may take, so the
    remedy for tweedie's lag is out of the issue's budget (benchmarks/README.md)."""
    import json

    bench = _module("continuation_proxy_cost")
    got = bench.main(["--repeats", "1", "--rollouts", "2", "--substeps", "1", "--out", str(tmp_path / "c.json")])
    assert json.loads((tmp_path / "c.json").read_text()) == json.loads(json.dumps(got))
    (row,) = got["continuations"]
    assert (row["rollouts"], row["substeps"]) == (2, 1) and row["seconds_per_iteration"] > 0
    assert row["vs_sampling"] == pytest.approx(row["seconds_per_iteration"] / got["sampling_s"])
    assert row["pct_of_uniform_iteration"] == pytest.approx(100 * row["vs_sampling"] *
                                                            got["sampling_share_of_uniform_iteration"])
    committed = json.loads((ROOT / "benchmarks/results/continuation_proxy_cost.json").read_text())
    rows = [r for r in committed["continuations"] if r["rollouts"] >= 2]
    assert rows and min(r["pct_of_uniform_iteration"] for r in rows) > 3.0


@pytest.mark.slow
def test_foreign_loop_benchmark_times_the_three_loops_and_writes_the_ratios(tmp_path):
    import json

    bench = _module("bench_foreign_loop")
    out = bench.main(["--iterations", "1", "--repeats", "1", "--out", str(tmp_path / "f.json")])
    saved = json.loads((tmp_path / "f.json").read_text())
    for mode in ("table", "live"):
        assert saved[f"ratio_{mode}_to_plain"] == pytest.approx(out["median_s"][mode] / out["median_s"]["plain"])
        assert saved[f"ratio_{mode}_to_plain"] > 0
    assert len(saved["seconds"]["table"]) == len(saved["seconds"]["plain"]) == len(saved["seconds"]["live"]) == 1


@pytest.mark.slow
@pytest.mark.parametrize("switches", [[], ["sdpa=math", "merge=1"]])
def test_whole_iteration_benchmark_times_every_phase_on_tiny_models(tmp_path, switches):
    import json

    bench = _module("bench_iteration")
    args = ["--tiny", "--device", "cpu", "--images", "8", "--micro", "4", "--steps", "3", "--trained", "2", "--subset",
            "2", "--out", str(tmp_path / "it.json")]
    res = bench.main(args + [x for s in switches for x in ("--set", s)])
    saved = json.loads((tmp_path / "it.json").read_text())
    assert set(saved["seconds"]) == {"rollout", "decode", "score", "informativeness", "update"}
    assert all(v > 0 for v in saved["seconds"].values()) and 0 < saved["recast_share"] < 1
    # a LoRA step executes about twice its forward pass (input gradients, no weight gradients of frozen layers)
    assert 1.5 < res["train_step_over_forward"] < 3.1
