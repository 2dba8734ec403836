"""Stage G (research/study/preregistration.md, "Amendment: stage G"): its committed tables follow from their recipes,
and the world check it rests on re-derives."""

from __future__ import annotations

import json

import numpy as np
import pytest

from recast.archives import load_table
from recast.checks import compare_tables
from recast.experiments import study_g
from recast.experiments.study_f import budgets, rewards
from recast.offline import paper_weights

pytestmark = pytest.mark.research


def test_every_committed_table_is_its_recipe(tmp_path, monkeypatch):
    committed = {p: load_table(p) for p in (study_g.STAGE_DIR / "tables").rglob("*.npz")}
    monkeypatch.setattr(study_g, "STAGE_DIR", tmp_path)
    made = study_g.make_tables()
    assert len(made) == len(committed) >= 9 + 3  # every (setting, budget) of recast_gt, timing's renderings tables
    for path in made:
        again, kept = load_table(path), committed[study_g.ROOT / "research/study/G" / path.relative_to(tmp_path)]
        np.testing.assert_array_equal(again.TW, kept.TW)
        assert again.reward_names == kept.reward_names


@pytest.mark.parametrize("setting", study_g.SETTINGS)
def test_ground_truth_tables_are_the_papers_kernel_of_the_rollout_gains(setting):
    names, sigmas, D = study_g.gt_divergences()
    D = D[[names.index(n) for n in rewards(setting)]]
    for budget, lam in budgets(setting).items():
        t = load_table(study_g.table_path("recast_gt", setting, budget))
        want = paper_weights(np.maximum(np.diff(D, axis=1), 0), list(lam))
        np.testing.assert_allclose(t.W, want, atol=1e-7)
        np.testing.assert_allclose(t.W.sum(0), 1 / t.num_steps, atol=1e-5)
        np.testing.assert_allclose(t.sigmas, sigmas, atol=1e-6)


def test_the_audits_numbers_re_derive():
    """The issue's audit: the renderings table's departure from lambda/T points +0.27 along the ground truth's."""
    cmp = compare_tables(load_table(study_g.table_path("recast", "compose", "equal")),
                         load_table(study_g.table_path("recast_gt", "compose", "equal")))
    assert cmp.cosine == pytest.approx(0.274, abs=0.001)
    assert cmp.centre_of_mass["color"][1] == pytest.approx(2.04, abs=0.01)


def test_the_world_check_before_the_runs():
    d = json.loads((study_g.STAGE_DIR / "spreads.json").read_text())["settings"]
    sd = d["compose"]["raw_within_group_sd"]
    assert sd["sharpness"] < min(v for k, v in sd.items() if k != "sharpness") / 5  # what the amendment rests on
    assert max(d["compose"]["share_per_step"]["sharpness"]) < 0.05
    t = d["timing"]["raw_within_group_sd"]
    assert 0.5 < t["color"] / t["speck_free"] < 2  # comparable: the positive control can act on both rows


def test_the_committed_m4_profile_is_flagged_by_the_stage_check():
    findings = study_g.profile_findings()
    assert [m.split(":")[0] for m in findings["data/profiles/digit_base_renderings_T6.npz"]] == [
        "reward 'digit', column 2 (the step sigma 0.819 -> 0.668)"]


def test_the_world_check_re_derives(tmp_path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("measure_spreads", study_g.STAGE_DIR / "measure_spreads.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    again = mod.main(tmp_path / "spreads.json")
    kept = json.loads((study_g.STAGE_DIR / "spreads.json").read_text())
    assert again["settings"].keys() == kept["settings"].keys()
    for setting, v in kept["settings"].items():
        for key in ("raw_within_group_sd", "share_static", "share_per_step"):
            a, b = again["settings"][setting][key], v[key]
            np.testing.assert_allclose(np.array(list(a.values()), dtype=float), np.array(list(b.values()), dtype=float),
                                       atol=2e-4)


def test_the_m16_profile_passes_the_check_and_is_what_data_readme_says():
    import hashlib

    findings = study_g.profile_findings()
    assert findings["data/profiles/digit_base_renderings_M16_T6.npz"] == []
    digest = hashlib.sha256(study_g.R16_PROFILE.read_bytes()).hexdigest()
    assert digest in (study_g.ROOT / "data/README.md").read_text()
    for setting, cos_m4, cos_gt in (("compose", 0.946, 0.152), ("timing", 0.976, 0.552)):
        r16 = load_table(study_g.table_path("recast_r16", setting, "equal"))
        assert compare_tables(r16, load_table(study_g.table_path("recast", setting, "equal"))).cosine == \
            pytest.approx(cos_m4, abs=0.001)
        assert compare_tables(r16, load_table(study_g.table_path("recast_gt", setting, "equal"))).cosine == \
            pytest.approx(cos_gt, abs=0.001)
