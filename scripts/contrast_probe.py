"""Probe: what do the contrast variants and the fade oracle change in their samples? Glyph statistics, base vs final.

    python scripts/contrast_probe.py contrast_flat wash_free oracle_not_fade placebo   # runs/alone/<reward>/seed_0..2

For each run of `python -m recast.alone` it samples the base model (adapters off) and the final EMA policy on 128
test prompts with the same noise (as `scripts/alone_samples_probe.py`), and prints and writes to
data/results/contrast_probe.csv: contrast's three factors (`recast.digits.rewards.digit._contrast_terms`: the
I^2-weighted ink level and saturation, the darker half's mean), the canvas' peak ink, the judges' inked pixel count
and glyph side (`recast.digits.judges.attributes._mask_stats`), and the colour, size, blur and fade verdicts.
Analysis only (README "The oracle control").
"""

from __future__ import annotations

import argparse
from dataclasses import replace


def main(argv: list[str] | None = None) -> list[dict]:
    import torch

    from recast.digits import data
    from recast.digits.judges.attributes import _mask_stats, _side, judge_attributes
    from recast.digits.judges.defects import judge_defects
    from recast.digits.rewards.digit import _contrast_terms
    from recast.io import write_csv
    from recast.judge_eval import load_policy, sample_test_prompts
    from recast.sweep import results_dir

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rewards", nargs="+")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--root", default="runs/alone")
    ap.add_argument("--num-prompts", type=int, default=128)
    a = ap.parse_args(argv)
    torch.set_num_threads(2)
    rows = []
    for reward in a.rewards:
        for seed in (int(s) for s in a.seeds.split(",")):
            base = load_policy(f"{a.root}/{reward}/seed_{seed}", "base")
            for policy, loaded in (("base", base), ("final", replace(base, which="ema"))):
                images, prompts = sample_test_prompts(loaded, a.num_prompts, seed=seed + 1000, batch_size=64)
                images = images.clamp(0, 1)
                level, sat, background = _contrast_terms(images)
                _, _, count, box = _mask_stats(images)
                j, d = judge_attributes(images, prompts), judge_defects(images)
                row = {"reward": reward, "seed": seed, "policy": policy, "level": level.mean().item(),
                       "saturation": sat.mean().item(), "background": background.mean().item(),
                       "peak": data.ink_intensity(images).flatten(1).amax(1).mean().item(),
                       "inked_pixels": count.float().mean().item(), "side": _side(box).mean().item(),
                       "color": j.color.float().mean().item(), "size": j.size.float().mean().item(),
                       "blur": d.blur.float().mean().item(), "fade": d.fade.float().mean().item()}
                rows.append(row)
                print(" ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()),
                      flush=True)
    write_csv(results_dir() / "contrast_probe.csv", rows)
    return rows


if __name__ == "__main__":
    main()
