"""The demo compares methods on equal terms: same seeds, same base model, one summary row per method and metric."""

import json

import pytest

from recast.experiments.demo import efficiency, paired, run_demo
from recast.stats import images_to_reach
from recast.trainer.metrics import load_run


@pytest.mark.slow
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
    """baseline -> {"win": metrics, "loss": metrics} of the committed 5-seed demo's paired table
    (``research/tables/demo5_<setting>_paired.csv``; ``quality_realism``: the quality demo before the centred-realism
    round)."""
    from pathlib import Path

    from recast.io import read_csv

    rows = read_csv(Path(__file__).resolve().parents[1] / "research" / "tables" / f"demo5_{setting}_paired.csv")
    out: dict[str, dict[str, set[str]]] = {}
    for r in rows:
        assert r["method"] == "recast" and int(r["n"]) == 5
        out.setdefault(r["baseline"], {"win": set(), "loss": set()})
        if r["verdict"] in ("win", "loss"):
            out[r["baseline"]][r["verdict"]].add(r["metric"])
    return out


def test_committed_5_seed_demos_give_the_readme_verdicts():
    """The results of research/rounds/18-what-the-tables-say.md, from the committed paired tables of the 5-seed demos.
    Compose (re-judged in the peak-clipping round): ReCAST beats uniform on the colour and position judges and loses
    none; against reward_sum it wins blur and loses fade. Quality (re-trained in the centred-realism round,
    realism_centred in realism's place): ReCAST ties uniform on every judge and reward; reward_sum beats ReCAST on the
    Fréchet distance and the position judge. Before that round (wash_free and realism; `demo5_quality_realism`) ReCAST
    beat uniform on the Fréchet distance and tied every other judge, and reward_sum beat ReCAST on the Fréchet
    distance."""
    compose, quality = _calls("compose"), _calls("quality_realism")
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
    quality = _calls("quality")
    assert quality["uniform"] == {"win": set(), "loss": set()}
    assert quality["reward_sum"]["win"] == {"reward/sharpness"}
    assert quality["reward_sum"]["loss"] == {"judge/fid", "judge/position", "reward/wash_free",
                                             "reward/realism_centred"}


@pytest.mark.research
@pytest.mark.parametrize("setting,fid_share", [("compose", 0.5), ("quality", 0.55), ("quality_realism", 0.5)])
def test_committed_5_seed_demos_meet_the_uniform_baseline_target(setting, fid_share):
    """Issue 8's training target on the committed 5-seed demos: under uniform weighting every training reward rises,
    every held-out judge rises or moves the wrong way by no more than its seed-std, and the Fréchet distance grows by
    no more than 25 %. Here it falls: by more than half in compose and in quality before the centred-realism round
    (``quality_realism``), by 46 % in quality now (to at most ``fid_share`` of the base's)."""
    from pathlib import Path

    d = json.loads((Path(__file__).resolve().parents[1] / "research" / "tables" / f"demo5_{setting}.json").read_text())
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
    assert fid["final_mean"] <= fid_share * fid["base_mean"] < 1.25 * fid["base_mean"], fid


@pytest.mark.slow
def test_rescore_pairs_methods_on_shared_draws_and_pools_them(tmp_path, monkeypatch):
    """`rescore` re-samples every demo run on shared per-seed draws: both methods of a seed see the same noise, so
    their base models score identically; `rescore_paired` and `rescore_changes` average each run over its draws
    before pairing by seed, and a method against itself is a zero-width tie."""
    from recast.experiments.alone import REEVAL_SEED_OFFSET
    from recast.experiments.demo import RESCORE_DRAW_STRIDE, demo_runs, rescore, rescore_changes, rescore_paired

    monkeypatch.setenv("RECAST_FIGURES_DIR", str(tmp_path / "figs"))
    out = tmp_path / "demo"
    with pytest.raises(FileNotFoundError, match="no demo runs"):
        rescore(out)
    run_demo(out, preset_name="ci", methods=("recast", "uniform"), seeds=(0, 1), iterations=1, workers=1,
             figure_name="demo_rescore_test")
    assert {m: [p.name for p in ps] for m, ps in demo_runs(out).items()} == \
        {"recast": ["seed_0", "seed_1"], "uniform": ["seed_0", "seed_1"]}
    for bad, match in (({"draws": 0}, "draws"), ({"num_prompts": 0}, "num_prompts"), ({"which": "best"}, "which")):
        with pytest.raises(ValueError, match=match):
            rescore(out, **bad)
    rows = rescore(out, num_prompts=4, draws=2)
    assert len(rows) == 2 * 2 * 2
    by = {(r["method"], r["seed"], r["draw"]): r for r in rows}
    for (m, s, d), r in by.items():
        assert r["noise_seed"] == REEVAL_SEED_OFFSET + s + d * RESCORE_DRAW_STRIDE and r["eval_prompts"] == 4
        other = by[("uniform" if m == "recast" else "recast", s, d)]
        for k in (k for k in r if k.startswith("base:")):
            assert r[k] == pytest.approx(other[k], abs=1e-9), k  # same base model, same noise
    assert by[("recast", 0, 0)]["base:judge/fid"] != by[("recast", 0, 1)]["base:judge/fid"]  # two draws differ

    pool = lambda m, s, k: (by[(m, s, 0)][k] + by[(m, s, 1)][k]) / 2  # noqa: E731
    paired_rows = {r["metric"]: r for r in rescore_paired(rows)}
    assert set(paired_rows) == {k for k in rows[0] if k.startswith(("judge/", "reward/"))}
    for k, r in paired_rows.items():
        want = sum(pool("recast", s, k) - pool("uniform", s, k) for s in (0, 1)) / 2
        assert r["diff"] == pytest.approx(want, abs=1e-12) and r["samples"] == 8 and r["n"] == 2
        assert r["ci_low"] <= r["diff"] <= r["ci_high"]
    changes = {(r["method"], r["metric"]): r for r in rescore_changes(rows)}
    for (m, k), r in changes.items():
        deltas = [pool(m, s, k) - pool(m, s, f"base:{k}") for s in (0, 1)]
        assert r["delta_mean"] == pytest.approx(sum(deltas) / 2, abs=1e-12)
        assert r["delta_std"] == pytest.approx(abs(deltas[0] - deltas[1]) / 2 ** 0.5, abs=1e-12)
    twin = rows + [{**r, "method": "twin"} for r in rows if r["method"] == "recast"]
    assert all(r["diff"] == 0 and r["verdict"] == "tie" for r in rescore_paired(twin) if r["baseline"] == "twin")
    with pytest.raises(ValueError, match="different numbers of draws"):
        rescore_paired([r for r in rows if not (r["method"] == "uniform" and r["seed"] == 1 and r["draw"] == 1)])


@pytest.mark.research
def test_committed_quality_realism_rescore_reproduces_and_confirms_the_frechet_win():
    """The wash-free round's 5-seed quality demo (realism in the setting, before the centred-realism round; re-scored
    as `demo5_quality_rescore`, renamed `demo5_quality_realism_rescore`) on 2 draws of 256 samples per policy: the
    committed paired and change tables follow from its committed rows, and they keep the demo's one judge call against
    uniform, the Fréchet distance, with every other judge a tie. Against reward_sum ReCAST wins size and blur and loses
    speckle, fade and the Fréchet distance; under uniform no judge moves the wrong way by more than a seed-std."""
    from helpers import load_script

    from recast.experiments.demo import rescore_changes, rescore_paired

    rows = _committed_rescore("demo5_quality_realism_rescore")
    assert len(rows) == 3 * 5 * 2 and {r["eval_prompts"] for r in rows} == {256}
    calls = {}
    for r in rescore_paired(rows):
        if r["metric"].startswith("judge/") and r["verdict"] != "tie":
            calls.setdefault(r["baseline"], {}).setdefault(r["verdict"], set()).add(r["metric"])
    assert calls == {"uniform": {"win": {"judge/fid"}},
                     "reward_sum": {"win": {"judge/size", "judge/defect_blur"},
                                    "loss": {"judge/defect_speckle", "judge/defect_fade", "judge/fid"}}}, calls
    assert not [r for r in rescore_changes(rows) if r["method"] == "uniform" and r["worse"]]
    table = load_script("demo_rescore").report(rows)
    assert "| judge/fid | +127.871 [+43.241, +212.502] loss | -34.335 [-66.216, -2.454] win |" in table


def _fake_rescore_rows(shift: float = 0.0, draws=(0, 1)) -> list[dict]:
    rows = []
    for m in ("recast", "uniform"):
        for s in (0, 1, 2):
            for d in draws:
                v = 0.1 * s + 0.01 * d + (0.05 if m == "recast" else 0.0)
                rows.append({"method": m, "seed": s, "draw": d, "eval_prompts": 256, "judge/fid": 100 * v + shift,
                             "base:judge/fid": 200.0, "judge/color": v, "base:judge/color": 0.5,
                             "reward/color": v, "base:reward/color": 0.4})
    return rows


def test_rescore_compare_pairs_two_demos_by_method_and_seed_on_their_common_draws():
    from recast.experiments.demo import rescore_compare

    rows = _fake_rescore_rows()
    assert all(r["diff"] == 0 and r["verdict"] == "tie" for r in rescore_compare(rows, rows))
    out = {(r["method"], r["metric"]): r for r in rescore_compare(_fake_rescore_rows(shift=-30.0), rows)}
    assert set(out) == {(m, k) for m in ("recast", "uniform") for k in ("judge/fid", "judge/color")}  # judges only
    assert out[("uniform", "judge/fid")]["diff"] == pytest.approx(-30.0) and out[("uniform", "judge/fid")]["n"] == 3
    assert out[("recast", "judge/color")]["diff"] == pytest.approx(0.0, abs=1e-12)
    # only the draws both have are read: draw 1 of `rows` is left out against a one-draw re-score
    one = _fake_rescore_rows(draws=(0,))
    assert all(r["samples"] == 256 and r["diff"] == pytest.approx(0.0, abs=1e-12) for r in rescore_compare(rows, one))
    with pytest.raises(ValueError, match="share no"):
        rescore_compare(rows, [{**r, "seed": r["seed"] + 10} for r in rows])


@pytest.mark.research
def test_committed_quality_rescores_with_contrast_and_with_wash_free():
    """The wash-free round (research/rounds/06-wash-free.md), from committed re-scores at the same noise seeds (draw 0,
    256 samples per policy and seed). With contrast too, ReCAST beats uniform on the Fréchet distance (the demo's 64
    samples did not resolve it). Swapping contrast for wash_free lowers the fade defect under every method and raises
    the Fréchet distance under every method; every other judge ties."""
    from pathlib import Path

    from recast.experiments.demo import rescore_changes, rescore_compare, rescore_paired
    from recast.io import read_csv

    results = Path(__file__).resolve().parents[1] / "research" / "tables"
    contrast = read_csv(results / "demo5_quality_contrast_rescore.csv")
    wash = read_csv(results / "demo5_quality_realism_rescore.csv")
    assert len(contrast) == 15 and {r["draw"] for r in contrast} == {0}
    for name, fn in (("paired", rescore_paired), ("changes", rescore_changes)):
        committed = read_csv(results / f"demo5_quality_contrast_rescore_{name}.csv")
        assert [r["diff" if name == "paired" else "delta_mean"] for r in committed] == \
            pytest.approx([r["diff" if name == "paired" else "delta_mean"] for r in fn(contrast)], rel=1e-9)
    fid = {r["baseline"]: r for r in rescore_paired(contrast) if r["metric"] == "judge/fid"}
    assert fid["uniform"]["verdict"] == "win" and fid["reward_sum"]["verdict"] == "loss"
    vs = rescore_compare(wash, contrast)
    committed = read_csv(results / "demo5_quality_realism_rescore_vs_demo5_quality_contrast_rescore.csv")
    assert [r["diff"] for r in committed] == pytest.approx([r["diff"] for r in vs], rel=1e-9)
    calls = {(r["method"], r["metric"]): r["verdict"] for r in vs if r["verdict"] != "tie"}
    assert calls == {(m, k): v for m in ("recast", "uniform", "reward_sum")
                     for k, v in (("judge/defect_fade", "win"), ("judge/fid", "loss"))}, calls


@pytest.mark.research
def test_committed_quality_rescore_with_realism_centred_and_its_swap():
    """The centred-realism round's 5-seed quality demo re-scored on draw 0 (256 samples per policy and seed, the
    same noise as draw 0 of the realism-era re-score): the committed tables follow from their rows. ReCAST ties
    uniform on every judge but size (+0.006, a win) and the Fréchet distance ties (-11 [-53, +31]); against
    reward_sum it wins size and loses digit, position, speckle, fade and the Fréchet distance; under uniform no judge
    moves the wrong way by more than a seed-std. Against the realism-era policies on the same noise, the swap raises
    the Fréchet distance under every method and lowers fade under uniform and reward_sum; every other judge ties."""
    from pathlib import Path

    from recast.experiments.demo import rescore_changes, rescore_compare, rescore_paired
    from recast.io import read_csv

    results = Path(__file__).resolve().parents[1] / "research" / "tables"
    rows = _committed_rescore("demo5_quality_rescore")
    assert len(rows) == 3 * 5 and {r["draw"] for r in rows} == {0} and {r["eval_prompts"] for r in rows} == {256}
    calls = {}
    for r in rescore_paired(rows):
        if r["metric"].startswith("judge/") and r["verdict"] != "tie":
            calls.setdefault(r["baseline"], {}).setdefault(r["verdict"], set()).add(r["metric"])
    assert calls == {"uniform": {"win": {"judge/size"}},
                     "reward_sum": {"win": {"judge/size"},
                                    "loss": {"judge/digit", "judge/position", "judge/defect_speckle",
                                             "judge/defect_fade", "judge/fid"}}}, calls
    fid = next(r for r in rescore_paired(rows) if (r["baseline"], r["metric"]) == ("uniform", "judge/fid"))
    assert fid["diff"] == pytest.approx(-10.92, abs=0.01)
    assert not [r for r in rescore_changes(rows) if r["method"] == "uniform" and r["worse"]]
    vs = rescore_compare(rows, read_csv(results / "demo5_quality_realism_rescore.csv"))
    committed = read_csv(results / "demo5_quality_rescore_vs_demo5_quality_realism_rescore.csv")
    assert [r["diff"] for r in committed] == pytest.approx([r["diff"] for r in vs], rel=1e-9)
    calls = {(r["method"], r["metric"]): r["verdict"] for r in vs if r["verdict"] != "tie"}
    assert calls == {("recast", "judge/fid"): "loss", ("uniform", "judge/fid"): "loss",
                     ("reward_sum", "judge/fid"): "loss", ("uniform", "judge/defect_fade"): "win",
                     ("reward_sum", "judge/defect_fade"): "win"}, calls
    fid = {r["method"]: r["diff"] for r in vs if r["metric"] == "judge/fid"}
    assert fid == pytest.approx({"recast": 154.1, "uniform": 129.2, "reward_sum": 54.6}, abs=0.1)


def _committed_rescore(name: str) -> list[dict]:
    """The committed rows ``research/tables/<name>.csv`` of `research/probes/demo_rescore.py`, checked to give its committed
    ``<name>_paired.csv`` and ``<name>_changes.csv`` field for field."""
    from pathlib import Path

    from recast.experiments.demo import rescore_changes, rescore_paired
    from recast.io import read_csv

    results = Path(__file__).resolve().parents[1] / "research" / "tables"
    rows = read_csv(results / f"{name}.csv")
    for table, fn in (("paired", rescore_paired), ("changes", rescore_changes)):
        committed = read_csv(results / f"{name}_{table}.csv")
        fresh = fn(rows)
        assert len(fresh) == len(committed)
        for a, b in zip(fresh, committed):
            assert a.keys() == b.keys()
            for k in a:
                assert a[k] == (pytest.approx(b[k], rel=1e-9, abs=1e-12) if isinstance(a[k], float) else b[k]), k
    return rows


def test_committed_compose_rescore_on_512_samples():
    """The 5-seed compose demo re-scored on 2 draws of 256 samples per policy and seed (`research/probes/demo_rescore.py`,
    the centred-realism round): the committed tables follow from their rows. ReCAST's colour win over uniform holds
    (+0.067), its position win does not (a tie), strict becomes a small win and size a small loss (-0.024 [-0.048,
    -0.000]); against reward_sum it wins blur and loses speckle and fade; under uniform no judge moves the wrong way
    by more than a seed-std."""
    from recast.experiments.demo import rescore_changes, rescore_paired

    rows = _committed_rescore("demo5_compose_rescore")
    assert len(rows) == 3 * 5 * 2 and {r["draw"] for r in rows} == {0, 1} and {r["eval_prompts"] for r in rows} == {256}
    paired = rescore_paired(rows)
    calls = {}
    for r in paired:
        if r["metric"].startswith("judge/") and r["verdict"] != "tie":
            calls.setdefault(r["baseline"], {}).setdefault(r["verdict"], set()).add(r["metric"])
    assert calls == {"uniform": {"win": {"judge/strict", "judge/color"}, "loss": {"judge/size"}},
                     "reward_sum": {"win": {"judge/defect_blur"},
                                    "loss": {"judge/defect_speckle", "judge/defect_fade"}}}, calls
    colour = next(r for r in paired if (r["baseline"], r["metric"]) == ("uniform", "judge/color"))
    assert colour["diff"] == pytest.approx(0.067, abs=5e-4)
    assert not [r for r in rescore_changes(rows) if r["method"] == "uniform" and r["worse"]]
