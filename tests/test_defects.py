"""Defect judges: near-zero false alarms on real canvases, near-certain detection of each injected defect."""

import pytest
import torch

from recast.digits import data
from recast.digits.corruption import DEFECTS
from recast.digits.judges.defects import defect_report, judge_defects
from recast.digits.rewards.degrade import degrade


@pytest.fixture(scope="module")
def real():
    return data.sample_batch(300, split="test", glyph_split="judge", generator=torch.Generator().manual_seed(7))[0]


def test_real_canvases_are_clean(real):
    r = defect_report(real)
    assert r.speckle == 0 and r.fade == 0 and r.blur < 0.03 and r.clean > 0.97 and r.n == 300


@pytest.mark.parametrize("defect", list(DEFECTS))
def test_each_defect_is_detected_at_its_weakest_and_no_other_fires(defect, real):
    kind, lo, _ = DEFECTS[defect]
    out = degrade(real, kind, torch.full((len(real),), lo), torch.Generator().manual_seed(8))
    j = judge_defects(out)
    assert getattr(j, defect).float().mean() > 0.9
    for other in set(DEFECTS) - {defect}:
        assert getattr(j, other).float().mean() < 0.05


def test_empty_canvas_is_blurred_not_speckled():
    j = judge_defects(torch.zeros(2, 3, data.CANVAS, data.CANVAS))
    assert j.blur.all() and not j.speckle.any() and not j.fade.any()


def test_two_far_specks_make_a_speckled_canvas_one_does_not(real):
    x = real[:1].clone()
    x[..., 0, 23] = 1.0  # corners: the glyph sits in one quadrant, so at least three corners are far from it
    assert not judge_defects(x).speckle.any()
    x[..., 23, 0] = 1.0
    x[..., 0, 0] = 1.0
    x[..., 23, 23] = 1.0
    assert judge_defects(x).speckle.all()


def test_bad_shape_is_refused():
    with pytest.raises(ValueError, match=r"\(B, 3, H, W\)"):
        judge_defects(torch.zeros(3, 24, 24))


def test_blur_is_judged_on_the_glyph_so_specks_do_not_hide_it(real):
    """Stray specks are steep steps of their own: the blur verdict reads only steps within a pixel of the glyph, so a
    blurred glyph with sharp specks is still blurred (until the glyph-only round it was not), and specks on a sharp
    glyph do not make it blurred either."""
    kind, lo, _ = DEFECTS["blur"]
    blurred = degrade(real[:64], kind, torch.full((64,), lo), torch.Generator().manual_seed(9))
    corners = [(0, 0), (0, 23), (23, 0), (23, 23)]  # at least three lie far from a glyph in one quadrant
    sharp = real[:64].clone()
    for x in (blurred, sharp):
        for r, c in corners:
            x[..., r, c] = 1.0
    j_blurred, j_sharp = judge_defects(blurred), judge_defects(sharp)
    assert j_blurred.speckle.all() and j_blurred.blur.float().mean() > 0.9
    assert j_sharp.speckle.all() and j_sharp.blur.float().mean() < 0.05
