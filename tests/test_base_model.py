"""The committed base model leaves room to learn on every attribute and defect, and every reward agrees with its judge.

One audit (`recast.worlds.digits.audit.audit_world`: 256 test prompts, ODE, 10 steps, seed 0) of `data/digit_base` is
shared by the tests. The draw is seeded, so the numbers are fixed on a given torch build; the bands are the issue's, and
the audit table of research/rounds/25-base-model.md shows how far inside them the committed model sits.
"""

import math

import pytest

from recast.worlds.digits.audit import BANDS, audit_world, out_of_band
from recast.worlds.digits.judges.agreement import MATCHING_VERDICT
from recast.worlds.digits.model import load_world

AGREEMENT_MIN = 0.8  # ROC AUC of each reward against its matching judge on base-model samples


@pytest.fixture(scope="module")
def audit():
    return audit_world(load_world("data/digit_base"), n=256, split="test", num_steps=10, seed=0)


@pytest.mark.slow
@pytest.mark.parametrize("metric", list(BANDS))
def test_base_model_sits_inside_every_band(audit, metric):
    lo, hi = BANDS[metric]
    assert lo <= audit.judges[metric] <= hi, f"{metric} = {audit.judges[metric]:.3f} outside [{lo}, {hi}]"


def test_out_of_band_is_empty_and_names_what_falls_out(audit):
    assert out_of_band(audit) == {}
    moved = type(audit)({**audit.judges, "color": 0.95}, audit.agreement, audit.rewards, audit.n, audit.split,
                        audit.num_steps, audit.shift, audit.seed)
    assert out_of_band(moved) == {"color": 0.95}


# Realism was a known miss until the peak-clipping round: AUC 0.798 against the defect-free verdict (0.757 before the
# glyph-only round). The reward did not change; the blur verdict did. It missed about 60 % of the canvases that were
# both blurred and speckled (a speck beside the glyph read as a sharp edge), so many defective samples counted as
# defect-free (`tests/test_defects.py`, ground truth on injected defects). With the verdict fixed realism agrees at
# 0.834. `python research/probes/realism_probe.py` measured, under the old verdict, the CNN blindness that kept it low.


@pytest.mark.parametrize("reward", list(MATCHING_VERDICT))
def test_every_reward_varies_on_base_samples_well_above_the_silencing_floor(audit, reward):
    """A reward whose batch std sits under the trainer's floor is silenced (p = 0.5) and teaches nothing; realism was,
    at temperature 1 (its CNN is confident that every base sample is fake)."""
    from recast.config import preset

    floor = preset("cpu").reward_std_floor  # as a fraction of the reward's range, [0, 1] for every digit reward
    assert audit.reward_std[reward] >= 2 * floor, f"{reward}: std {audit.reward_std[reward]:.4f} vs floor {floor}"


@pytest.mark.parametrize("reward", list(MATCHING_VERDICT))
def test_every_reward_ranks_its_judges_pass_and_fail_samples_apart(audit, reward):
    auc = audit.agreement[reward]
    assert not math.isnan(auc), f"{reward}: its judge passes or fails every base sample, so there is nothing to rank"
    assert auc >= AGREEMENT_MIN, f"{reward}: AUC {auc:.3f} < {AGREEMENT_MIN} against judge {MATCHING_VERDICT[reward]!r}"


@pytest.mark.slow
def test_realism_variants_agreement_on_the_audit_draw():
    """The realism-size round's candidates on the audit's own draw (256 test prompts, ODE, 10 steps, seed 0), as
    research/rounds/05-realism-size.md and research/rounds/04-centred-realism.md report them: against the defect-free
    verdict realism ranks at 0.834, its size-blind view at 0.760 and the size-conditional realism at 0.745, both under
    the 0.8 target; against "defect-free and the right size", what the conditional reward claims to measure, 0.789,
    0.756 and 0.799. The conditional realism with each size head centred on the base model (the centred-realism round)
    ranks at 0.812 and 0.852. No candidate is in a setting."""
    from sklearn.metrics import roc_auc_score

    from recast.worlds.digits import rewards as R
    from recast.worlds.digits.audit import sample_world
    from recast.worlds.digits.judges.agreement import judge_verdicts

    images, prompts = sample_world(load_world("data/digit_base"), n=256, split="test", num_steps=10, seed=0)
    v = judge_verdicts(images, prompts)
    want = {"realism": (0.834, 0.789), "realism_canonical": (0.760, 0.756), "realism_conditional": (0.745, 0.799),
            "realism_centred": (0.812, 0.852)}
    for name, (free, free_and_size) in want.items():
        r = R.get(name)("cpu")(images, prompts).numpy()
        assert roc_auc_score(v["defect_free"].numpy(), r) == pytest.approx(free, abs=0.0015), name
        assert roc_auc_score((v["defect_free"] & v["size"]).numpy(), r) == pytest.approx(free_and_size, abs=0.0015)
