"""Does the blur judge see blur beside specks? Ground truth on injected defects, then what it changes on base samples.

    python research/probes/blur_judge_probe.py            # about 2 min on 2 cores; writes research/tables/blur_judge_probe.csv

Part 1, ground truth. Train-split canvases rendered from each glyph split, then blurred, speckled and washed out as
stage-4 pretraining injects them (`recast.worlds.digits.corruption.inject_defects` at blur 0.65, speckle 0.35, fade 0.25).
For the blur verdict of the glyph-only round (the steepest step near the glyph of the raw ink map) and for today's
(the same on the ink map with isolated peaks clipped, `recast.worlds.digits.judges.ink.clip_isolated_peaks`) it gives the
recall on blurred canvases with and without specks, the false-alarm rate on sharp ones, and the blur rate among
canvases judged speckled and not: injected independently, those two should match.

Part 2, the base model. ODE samples of `data/digit_base` on train prompts (what training draws): the blur rate by
either verdict, and for each other held-out verdict the blur rate among the samples it passes and fails. A verdict
whose passes are blurrier hands a gradient towards blur to any reward that tracks it, its own oracle included.
"""

from __future__ import annotations

import argparse

import torch


def _glyph_only_blur(images: torch.Tensor) -> torch.Tensor:
    """The blur verdict of the glyph-only round: no peak clipping."""
    from recast.worlds.digits import data
    from recast.worlds.digits.judges.defects import BLUR_MAX_STEP, max_step
    from recast.worlds.digits.judges.ink import split_ink

    I = data.ink_intensity(images.float())
    return max_step(I, split_ink(I)[0]) < BLUR_MAX_STEP


def ground_truth_rows(n: int, seed: int = 0) -> list[dict]:
    from recast.worlds.digits import data
    from recast.worlds.digits.corruption import Corruption, inject_defects
    from recast.worlds.digits.judges.defects import judge_defects

    rows = []
    for split in ("base", "judge"):
        g, cg = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed + 1)
        prompts = data.sample_prompts(n, split="train", generator=g)
        images = data.render([data.parse_prompt(p) for p in prompts], glyph_split=split, generator=g)
        out, applied = inject_defects(images, Corruption(blur=0.65, speckle=0.35, fade=0.25), cg)
        j = judge_defects(out)
        b, s = applied["blur"], applied["speckle"]
        for verdict, blur in (("glyph_only", _glyph_only_blur(out)), ("peak_clipped", j.blur)):
            cells = {"recall_with_specks": blur[b & s], "recall_without_specks": blur[b & ~s],
                     "false_alarm_with_specks": blur[~b & s], "false_alarm_without_specks": blur[~b & ~s],
                     "blur_rate_judged_speckled": blur[j.speckle], "blur_rate_judged_not_speckled": blur[~j.speckle]}
            for metric, x in cells.items():
                rows.append({"part": "ground_truth", "glyphs": split, "verdict": verdict, "metric": metric,
                             "value": x.float().mean().item(), "n": len(x)})
    return rows


def base_sample_rows(n: int, seed: int) -> list[dict]:
    from recast.worlds.digits.audit import sample_world
    from recast.worlds.digits.judges.agreement import judge_verdicts
    from recast.worlds.digits.model import load_world

    images, prompts = sample_world(load_world("data/digit_base"), n=n, split="train", seed=seed)
    images = images.clamp(0, 1)
    v = judge_verdicts(images, prompts)
    blur = ~v["not_blur"]
    rows = [{"part": "base_samples", "glyphs": "-", "verdict": verdict, "metric": "blur_rate",
             "value": x.float().mean().item(), "n": n}
            for verdict, x in (("glyph_only", _glyph_only_blur(images)), ("peak_clipped", blur))]
    for key in ("digit", "color", "position", "size", "strict", "not_speckle", "not_fade"):
        p = v[key]
        for metric, x in ((f"blur_rate_{key}_pass", blur[p]), (f"blur_rate_{key}_fail", blur[~p])):
            rows.append({"part": "base_samples", "glyphs": "-", "verdict": "peak_clipped", "metric": metric,
                         "value": x.float().mean().item(), "n": len(x)})
    return rows


def main(argv: list[str] | None = None) -> list[dict]:
    from recast.io import write_csv

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n-canvases", type=int, default=2048, help="injected canvases per glyph split")
    p.add_argument("--n-samples", type=int, default=1024, help="base-model samples on train prompts")
    p.add_argument("--seed", type=int, default=11, help="the base samples' draw")
    p.add_argument("--out", default="research/tables/blur_judge_probe.csv")
    a = p.parse_args(argv)
    torch.set_num_threads(2)
    rows = ground_truth_rows(a.n_canvases) + base_sample_rows(a.n_samples, a.seed)
    write_csv(a.out, rows)
    print("| part | glyphs | verdict | metric | value | n |\n| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['part']} | {r['glyphs']} | {r['verdict']} | {r['metric']} | {r['value']:.3f} | {r['n']} |")
    return rows


if __name__ == "__main__":
    main()
