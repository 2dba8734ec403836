"""The paper's evaluation (recast.experiments.paper_eval, paper_scoring): budgets, run identification and pairing on
fake run folders, the table's and the pairwise summary's closed forms, the per-checkpoint cache, and end to end on
tiny real runs: the digit world's `ci` preset and, on the SD3 path, the tiny pipeline with the pairwise VLM judge
against a stub endpoint on 127.0.0.1."""

import json
import math
import shutil

import pytest
import torch

from recast.experiments.paper_eval import (RELEASE_SCALES, find_runs, identify, markdown, matched_pairs,
                                           paper_budgets, paper_table, pairwise_summary)
from recast.experiments.paper_scoring import ScoreCache, base_key, evaluate_paper, main


def test_paper_budgets_are_the_five_of_the_page():
    grid = paper_budgets(("clipscore", "hpsv2", "pickscore", "ocr"))
    assert grid == {"equal": (1, 1, 1, 1), "clipscore-x2": (2, 1, 1, 1), "hpsv2-x2": (1, 2, 1, 1),
                    "pickscore-x2": (1, 1, 2, 1), "ocr-x2": (1, 1, 1, 2)}
    with pytest.raises(ValueError, match="two distinct"):
        paper_budgets(("a", "a"))


def _fake_run(folder, *, method="recast", seed=0, lam=(), rewards=("clipscore", "hpsv2", "pickscore", "ocr"),
              setting="composition", world="sd3-tiny"):
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"world": world, "setting": setting, "rewards": list(rewards),
                                                    "lam": list(lam), "method": method, "seed": seed}))
    (folder / "checkpoint.pt").write_bytes(f"{folder.name}".encode())
    return folder


def test_identify_reads_setting_budget_role_and_seed(tmp_path):
    r = identify(_fake_run(tmp_path / "a", lam=(0.4, 0.2, 0.2, 0.2), seed=2))
    assert (r.setting, r.budget, r.role, r.seed) == ("clipscore+hpsv2+pickscore+ocr", "clipscore-x2", "recast", 2)
    assert r.lam == pytest.approx((0.4, 0.2, 0.2, 0.2))
    assert identify(_fake_run(tmp_path / "b", method="uniform")) is None
    assert identify(tmp_path / "b", static="uniform").role == "static"
    assert identify(_fake_run(tmp_path / "c", lam=(3, 1, 1, 1))).budget == "lam=0.5,0.1667,0.1667,0.1667"
    assert identify(_fake_run(tmp_path / "d")).budget == "equal"  # no lam: equal budgets
    s = identify(_fake_run(tmp_path / "e", rewards=(), setting="stage_geneval"))
    assert (s.setting, s.rewards) == ("stage_geneval", ("clipscore", "hpsv2", "pickscore", "geneval"))
    (tmp_path / "a" / "checkpoint.pt").unlink()
    with pytest.raises(FileNotFoundError, match="no checkpoint.pt"):
        identify(tmp_path / "a")
    with pytest.raises(ValueError, match="do not fit its rewards"):
        identify(_fake_run(tmp_path / "f", lam=(1, 1)))
    with pytest.raises(ValueError, match="setting 'nope'"):
        identify(_fake_run(tmp_path / "g", rewards=(), setting="nope"))


def test_matched_pairs_and_runs_left_alone(tmp_path):
    runs = [_fake_run(tmp_path / f"{m}{s}{b}", method=m, seed=s, lam=lam)
            for m in ("recast", "static") for s in (0, 1) for b, lam in (("e", ()), ("c", (2, 1, 1, 1)))]
    runs.append(_fake_run(tmp_path / "extra", seed=7))
    assert find_runs([tmp_path]) == sorted(runs)
    pairs, alone = matched_pairs([identify(r) for r in runs])
    (setting, got), = pairs.items()
    assert [(a.budget, a.seed, a.role, b.role) for a, b in got] == [
        ("clipscore-x2", 0, "recast", "static"), ("clipscore-x2", 1, "recast", "static"),
        ("equal", 0, "recast", "static"), ("equal", 1, "recast", "static")]
    assert [a.run_dir.name for a in alone] == ["extra"]
    _fake_run(tmp_path / "twin", seed=7)
    with pytest.raises(ValueError, match="two recast runs .* seed 7"):
        matched_pairs([identify(tmp_path / "extra"), identify(tmp_path / "twin")])
    with pytest.raises(FileNotFoundError, match="no such run folder"):
        find_runs([tmp_path / "absent"])


def test_paper_table_closed_form():
    scores = {"r1": {"pickscore": 26.0, "ocr": 0.5, "hps3": 9.0}, "s1": {"pickscore": 13.0, "ocr": 0.7, "hps3": 8.0},
              "r2": {"pickscore": 20.0, "ocr": 0.4, "hps3": math.nan}, "s2": {"pickscore": 20.0, "ocr": 0.2, "hps3": 7.0}}
    base = {"pickscore": 10.0, "ocr": 0.1, "hps3": 5.0}
    t = {r["metric"]: r for r in paper_table([("r1", "s1"), ("r2", "s2")], scores, base, ("pickscore", "ocr"),
                                             ("hps3",))}
    assert [r for r in t] == ["pickscore", "ocr", "aggregate", "hps3"] and RELEASE_SCALES["pickscore"] == 1 / 26
    assert (t["pickscore"]["static"], t["pickscore"]["recast"], t["pickscore"]["wins"], t["pickscore"]["ties"]) == \
        (16.5, 23.0, 1, 1)
    assert t["ocr"]["wins_of"] == "1/2" and t["ocr"]["base"] == 0.1
    assert t["aggregate"]["recast"] == pytest.approx((1 + 0.5 + 20 / 26 + 0.4) / 2)  # PickScore at the release's /26
    assert t["aggregate"]["wins"] == 2 and t["aggregate"]["base"] == pytest.approx(10 / 26 + 0.1)
    assert (t["hps3"]["pairs"], t["hps3"]["recast"], t["hps3"]["wins_of"]) == (1, 9.0, "1/1")  # a NaN pair drops out
    text = markdown("s", list(t.values()))
    assert text.count("\n| ") == 6 and "| 1/2 |" in text  # header, rule and 4 rows


def test_pairwise_summary_closed_form():
    s = pairwise_summary([(1, 1), (1, -1), (0, 0), (None, 1), (None, None), (-1, -1)])
    assert (s.wins, s.losses, s.ties, s.abstained) == (4, 3, 2, 3)
    assert s.win_rate == pytest.approx(5 / 9) and s.ci_low < s.win_rate < s.ci_high
    assert (s.pairs, s.pair_wins, s.pair_losses, s.pair_ties) == (5, 2, 1, 2) and s.pair_win_share == 0.4
    assert s.position_agreement == 0.75
    # the headline is the mean over fully judged pairs of each pair's average verdict mapped to [0, 1]
    pairs = [(1, 1), (1, -1), (0, 0), (-1, -1), (1, 0)]
    assert pairwise_summary(pairs).win_rate == pytest.approx(sum((2 + a + b) / 4 for a, b in pairs) / len(pairs))
    with pytest.raises(ValueError, match="verdicts"):
        pairwise_summary([(2, 1)])


def test_score_cache_round_trip_and_damaged_files(tmp_path):
    cache = ScoreCache(tmp_path)
    path = cache.save("ab" * 32, "rank:jpeg", "f" * 64, {"mean": 1.5, "n": 3})
    assert path.parent.name == "ab" * 8 and path.name == "rank_jpeg.ffffffffffff.json"
    assert cache.load("ab" * 32, "rank:jpeg", "f" * 64)["mean"] == 1.5
    assert cache.load("ab" * 32, "rank:jpeg", "e" * 64) is None  # another spec
    pair = cache.save(f"pair-{'1' * 64}-{'2' * 64}", "pairwise", "f" * 64, {"verdicts": []})
    assert pair.parent.name == f"pair-{'1' * 16}-{'2' * 16}"  # two pairs sharing a run do not collide
    path.write_text("{broken")
    assert cache.load("ab" * 32, "rank:jpeg", "f" * 64) is None


# ---- tiny real runs ---------------------------------------------------------------------------------------------

def _train(out, *, world="tiny", method, seed, lam, rewards, **kw):
    from recast.config import preset
    from recast.trainer import Trainer

    cfg = preset("ci", world=world, rewards=rewards, method=method, seed=seed, lam=lam, iterations=1,
                 eval_prompts=2, **kw)
    Trainer(cfg, out).run()
    return out


@pytest.fixture(scope="module")
def digit_runs(tmp_path_factory):
    """Two budgets x two seeds x (recast, uniform as the static stand-in) on the tiny digit world, one iteration."""
    root = tmp_path_factory.mktemp("digit_runs")
    for budget, lam in (("equal", (1.0, 1.0)), ("color-x2", (2.0, 1.0))):
        for seed in (0, 1):
            for method in ("recast", "uniform"):
                _train(root / budget / method / f"seed_{seed}", method=method, seed=seed, lam=lam,
                       rewards=("color", "speck_free"))
    return root


def test_end_to_end_on_the_digit_world_and_the_cache(digit_runs, tmp_path):
    from recast.experiments.judge_eval import load_policy, sample_policy

    kw = dict(static="uniform", num_prompts=6, judges=("clean",), pairwise_prompts=4)
    r = evaluate_paper([digit_runs], out=tmp_path / "eval", **kw)
    (setting, v), = r.settings.items()
    # the tiny world's base weights depend on the seed: two bases, each scored once
    assert setting == "color+speck_free" and len(v["pairs"]) == 4 and len(v["bases"]) == 2
    assert (r.sampled, r.scored) == (10, 30)
    assert [row["metric"] for row in v["table"]] == ["color", "speck_free", "aggregate", "clean"]
    assert all(row["pairs"] == 4 for row in v["table"]) and r.judged == 4
    assert v["pairwise"].wins + v["pairwise"].losses + v["pairwise"].ties + v["pairwise"].abstained == 4 * 4 * 2
    # an independent score: a fresh load of one run, sampled and scored directly, equals what the shared world gave
    run = digit_runs / "color-x2" / "recast" / "seed_1"
    p = load_policy(run)
    prompts = [p.world.prompts("test")[i % len(p.world.prompts("test"))] for i in range(6)]
    images = sample_policy(p, prompts, seed=0)
    for name in ("color", "clean"):
        assert v["runs"][str(run)][name] == pytest.approx(float(p.world.reward(name, "cpu")(images, prompts).mean()),
                                                          abs=1e-6)
    base = load_policy(run, which="base")
    assert v["bases"][base_key(run)]["color"] == pytest.approx(float(base.world.reward("color", "cpu")(
        sample_policy(base, prompts, seed=0), prompts).mean()), abs=1e-6)
    assert v["base"]["color"] == pytest.approx(sum(b["color"] for b in v["bases"].values()) / 2)  # one per seed
    files = {f.name for f in (tmp_path / "eval").iterdir()}
    assert {"paper_eval.json", f"paper_{setting}.csv", f"paper_{setting}.md", "cache"} <= files
    # a rerun reads everything from the cache; a new judge scores only that judge; a changed checkpoint only its run
    again = evaluate_paper([digit_runs], out=tmp_path / "eval", **kw)
    assert (again.sampled, again.scored, again.judged) == (0, 0, 0) and again.settings[setting]["table"] == v["table"]
    more = evaluate_paper([digit_runs], out=tmp_path / "eval", **{**kw, "judges": ("clean", "contrast")})
    assert (more.sampled, more.scored, more.judged) == (10, 10, 0)
    # a checkpoint replaced by another run's is refused with the reason before anything is sampled
    own = (run / "checkpoint.pt").read_bytes()
    shutil.copy(digit_runs / "equal" / "recast" / "seed_1" / "checkpoint.pt", run / "checkpoint.pt")
    with pytest.raises(ValueError, match="is not the checkpoint of the run.*lam"):
        evaluate_paper([digit_runs], out=tmp_path / "eval", **kw)
    (run / "checkpoint.pt").write_bytes(own)
    # new weights in a run: only that run is sampled and scored, and its pair judged again
    from recast.trainer.checkpoint import load_checkpoint, save_checkpoint

    state = load_checkpoint(run)
    for t in state["policy"]["ema"].values():
        t.add_(0.05)
    save_checkpoint(run, state)
    retrained = evaluate_paper([digit_runs], out=tmp_path / "eval", **kw)
    assert (retrained.sampled, retrained.scored, retrained.judged) == (2, 3, 1)


def test_a_judge_that_always_abstains_leaves_its_row_empty(digit_runs, tmp_path, monkeypatch):
    from recast.experiments import paper_scoring

    real = paper_scoring._Setting.score

    def score(self, name, images):  # "contrast" abstains on every image, as a VLM judge that cannot be parsed would
        return {"mean": math.nan, "n": 0, "abstained": len(images)} if name == "contrast" else real(self, name, images)

    monkeypatch.setattr(paper_scoring._Setting, "score", score)
    for _ in range(2):  # scored, then read back from the cache (where NaN is stored as null)
        r = evaluate_paper([digit_runs / "equal"], out=tmp_path, static="uniform", num_prompts=2,
                           judges=("contrast",), pairwise=False)
    row = r.settings["color+speck_free"]["table"][-1]
    assert row["metric"] == "contrast" and row["pairs"] == 0 and math.isnan(row["recast"]) and r.sampled == 0
    assert "| *contrast* | — | — | — | 0/0 |" in r.markdown()


def test_cli_writes_the_tables_and_refuses_bad_input(digit_runs, tmp_path, capsys):
    assert main([str(digit_runs / "equal"), "--out", str(tmp_path / "o"), "--static-method", "uniform",
                 "--num-prompts", "2", "--judges", "clean", "--no-pairwise"]) == 0
    out = capsys.readouterr().out
    assert "wins/2" in out and (tmp_path / "o" / "paper_color+speck_free.csv").is_file()
    assert main([str(digit_runs / "equal"), "--out", str(tmp_path / "o")]) == 2  # no "static" runs
    assert "no matched recast/static pair" in capsys.readouterr().err
    assert main([str(tmp_path / "none"), "--out", str(tmp_path / "o")]) == 2
    assert main([str(digit_runs), "--out", str(tmp_path / "o"), "--vlm-model", "m"]) == 2


def test_sd3_path_with_the_pairwise_vlm_judge_in_both_positions(tmp_path, monkeypatch):
    """A recast_live / static pair on the tiny SD3 pipeline (no density-ratio profile is committed for it, so the live
    variant stands in for ReCAST), a model-free judge, and the pairwise VLM judge against a stub
    endpoint that prefers the brighter image: every pair is shown once in each order, and the two verdicts, mapped
    back to "ReCAST vs static", agree."""
    from test_vlm_judge import _Endpoint

    for var in ("http_proxy", "https_proxy", "all_proxy", "no_proxy"):
        monkeypatch.delenv(var, raising=False)
        monkeypatch.delenv(var.upper(), raising=False)
    ep = _Endpoint()
    try:
        for method in ("recast_live", "static"):
            _train(tmp_path / "runs" / method, world="sd3-tiny", method=method, seed=0, lam=(1.0, 1.0),
                   rewards=("jpeg", "colour_entropy"), num_steps=3)
        vlm = {"vlm_judge": {"endpoint": ep.url, "model": "stub", "retries": 0}}
        r = evaluate_paper([tmp_path / "runs"], out=tmp_path / "eval", recast="recast_live", num_prompts=3,
                           judges=("dark_fraction",), world_settings=vlm)
        v = r.settings["jpeg+colour_entropy"]
        assert [row["metric"] for row in v["table"]] == ["jpeg", "colour_entropy", "aggregate", "dark_fraction"]
        images = [[c["image_url"]["url"] for c in body["messages"][0]["content"] if c["type"] == "image_url"]
                  for *_, body in ep.requests]
        assert len(images) == 6 and all(images[i] == images[i + 3][::-1] for i in range(3))  # both orders, per pair
        pw = v["pairwise"]
        assert pw.wins + pw.losses + pw.ties + pw.abstained == 6 and pw.position_agreement == 1.0
        again = evaluate_paper([tmp_path / "runs"], out=tmp_path / "eval", recast="recast_live", num_prompts=3,
                               judges=("dark_fraction",), world_settings=vlm)
        assert (again.sampled, again.judged, len(ep.requests)) == (0, 0, 6)  # cached: no new request
    finally:
        ep.stop.set()
        ep.shutdown()
        ep.server_close()
