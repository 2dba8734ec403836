"""Defect judges: near-zero false alarms on real canvases, near-certain detection of each injected defect."""

import pytest
import torch

from recast.worlds.digits import data
from recast.worlds.digits.corruption import DEFECTS
from recast.worlds.digits.judges.defects import defect_report, judge_defects
from recast.worlds.digits.rewards.degrade import degrade


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


def test_clip_isolated_peaks_removes_one_pixel_specks_and_keeps_strokes():
    from recast.worlds.digits.judges.ink import clip_isolated_peaks

    I = torch.zeros(1, 8, 8)
    I[0, 2, 2] = 1.0  # a lone speck: every neighbour is 0
    I[0, 5, 1:5] = 0.9  # a stroke four pixels long
    I[0, 0, 7] = 0.7  # a speck in the corner: the border reads as 0
    out = clip_isolated_peaks(I)
    assert out[0, 2, 2] == 0 and out[0, 0, 7] == 0
    assert torch.equal(out[0, 5], I[0, 5])
    assert (out <= I).all()
    bump = torch.zeros(1, 5, 5)
    bump[0, 2, 2], bump[0, 2, 3] = 1.0, 0.4  # a peak beside a dimmer neighbour drops to that neighbour's level
    assert clip_isolated_peaks(bump)[0, 2, 2].item() == pytest.approx(0.4)


def test_clip_isolated_peaks_keeps_real_glyphs_verdicts(real):
    """On real canvases the clipping moves the steepest glyph step (a clipped stroke tip lowers the glyph's peak,
    which normalises the steps) by at most 0.18 and by nothing in most, and changes no blur verdict."""
    from recast.worlds.digits.judges.defects import BLUR_MAX_STEP, max_step
    from recast.worlds.digits.judges.ink import clip_isolated_peaks, split_ink

    I = data.ink_intensity(real)
    before = max_step(I, split_ink(I)[0])
    smooth = clip_isolated_peaks(I)
    after = max_step(smooth, split_ink(smooth)[0])
    assert (after - before).abs().median() < 1e-6 and (after - before).abs().max() < 0.2
    assert torch.equal(after < BLUR_MAX_STEP, before < BLUR_MAX_STEP)


@pytest.mark.parametrize("glyph_split", ["base", "judge"])
def test_blur_verdict_is_blind_to_specks_where_training_puts_them(glyph_split):
    """Ground truth: canvases blurred and speckled as pretraining injects them (`inject_defects`, specks anywhere on
    the canvas, blur first). A speck within two pixels of a blurred glyph is part of the glyph; until the
    peak-clipping round its one-pixel step hid the blur in about 60 % of these canvases (recall 0.39 with specks, 1.00
    without; `research/probes/blur_judge_probe.py`), so every policy that removed specks was judged blurrier. Now recall
    with specks is within 0.08 of recall without them, specks raise no false alarm, and the two verdicts are nearly
    independent, as injected."""
    from recast.worlds.digits.corruption import Corruption, inject_defects

    g, cg = torch.Generator().manual_seed(0), torch.Generator().manual_seed(1)
    prompts = data.sample_prompts(1024, split="train", generator=g)
    images = data.render([data.parse_prompt(p) for p in prompts], glyph_split=glyph_split, generator=g)
    out, applied = inject_defects(images, Corruption(blur=0.65, speckle=0.35, fade=0.25), cg)
    j = judge_defects(out)
    b, s = applied["blur"], applied["speckle"]
    recall_specks, recall_clean = j.blur[b & s].float().mean(), j.blur[b & ~s].float().mean()
    assert recall_clean > 0.98 and recall_specks > 0.9 and recall_clean - recall_specks < 0.08
    assert j.blur[~b & s].float().mean() < 0.03 and j.blur[~b & ~s].float().mean() < 0.03
    assert (j.blur[j.speckle].float().mean() - j.blur[~j.speckle].float().mean()).abs() < 0.08


@pytest.mark.research
def test_blur_judge_probe_reproduces_its_committed_ground_truth_rows():
    """`research/probes/blur_judge_probe.py`'s ground-truth part (the table of research/rounds/07-peak-clipping.md) from
    its defaults."""
    import csv
    import importlib.util
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("blur_judge_probe", root / "research" / "probes" / "blur_judge_probe.py")
    probe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe)
    with open(root / "research" / "tables" / "blur_judge_probe.csv") as f:
        committed = [r for r in csv.DictReader(f) if r["part"] == "ground_truth"]
    fresh = probe.ground_truth_rows(2048)
    assert len(fresh) == len(committed) == 24
    for got, want in zip(fresh, committed):
        assert (got["glyphs"], got["verdict"], got["metric"], str(got["n"])) == (
            want["glyphs"], want["verdict"], want["metric"], want["n"])
        assert got["value"] == pytest.approx(float(want["value"]), abs=1e-9)
    value = {(r["glyphs"], r["verdict"], r["metric"]): float(r["value"]) for r in committed}
    # the reading of research/rounds/07-peak-clipping.md: the old verdict missed most blur beside specks
    for glyphs in ("base", "judge"):
        assert value[(glyphs, "glyph_only", "recall_with_specks")] < 0.45
        assert value[(glyphs, "peak_clipped", "recall_with_specks")] > 0.9
