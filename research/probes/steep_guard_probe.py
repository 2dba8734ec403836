"""Probe: can a guard stop sharpness_steep's erasing hack and keep it decided late? A grid of guards, scored three ways.

    python research/probes/steep_guard_probe.py      # ~2-3 min; needs runs/ends (research/probes/timing_cache.py record --seed 0 / 1)
                                             # and runs/alone/sharpness_steep{,_hinged} (python -m recast.experiments.alone)

Trained alone, sharpness_steep hacks (research/rounds/22-each-reward-alone.md "Each reward alone"): its policy erases
the glyph to a faint mark whose few steps are steep relative to the mark's own low peak. Each guard below is
sharpness_steep's slope (`recast.worlds.digits.rewards.steep.steep_slope`) times a gate on the ink mass, or read against
a floored peak:

- ``gate``: the soft gate ``1 - exp(-sum J / 2)`` (sharpness_steep itself, and sharpness for reference);
- ``hinge m``: ``min(1, sum J / m)``, a linear hinge that binds on the faintest base samples;
- ``floor f``: the slope read against ``max(peak, f)``, with the soft gate;
- ``texture a``: the soft gate times ``min(1, (1 - alternation) / (1 - a))``, which reads pixel texture
  (`alternation`, below) instead of the ink mass: full marks up to an alternation of ``a``, falling linearly to 0 at a
  checkerboard. The erased marks are textured (alternation 0.57-0.60 against 0.27 at the base), and texture is a fine
  detail, so this asks whether a guard that reads something settled late keeps the reward late.

For each it reports when it is decided (the ground truth on figure 02's two stored batches: centre of mass of the
gains on the 6-step grid, 0..5, and the share of gains in the cleanest third, `recast.informativeness.ends`), how
well it agrees with the blur verdict on the audit's 256 base samples (AUC), what a 0.75 px blur costs it there, and
the hack: its mean on the final policy's samples of sharpness_steep's single-reward runs (seeds 0 and 1, 128 test
prompts each, EMA weights) minus its mean on the base model's samples with the same noise. A guard closes the hack
when that difference is negative. ``hack_hinged`` is the same difference on sharpness_steep_hinged's own runs, the
second route (a thinned, textured glyph above the hinge). Writes ``research/tables/steep_guard_probe.csv``.

It also describes what each single-reward run in ``--sample-runs`` did to its samples (the same draws: seeds 0 and 1,
base against final; ``research/tables/steep_guard_probe_samples.csv``): the median ink mass and peak, the median count
of steep glyph steps (a soft count of speck-masked steps of at least half the peak, `steep_steps`) and the median share
of the horizontal step mass that reverses sign at the next pixel (`alternation`, 0 on a smooth glyph edge, 1 on a
checkerboard). Analysis only.
"""

from __future__ import annotations

import argparse
import functools
from dataclasses import replace
from pathlib import Path

# (name, hinge mass or None for the soft gate, peak floor, texture threshold or None); sharpness is the setting's
# reward, for reference
GUARDS: tuple[tuple[str, float | None, float, float | None], ...] = (
    ("gate (sharpness_steep)", None, 0.0, None),
    ("hinge 6", 6.0, 0.0, None), ("hinge 8 (sharpness_steep_hinged)", 8.0, 0.0, None), ("hinge 10", 10.0, 0.0, None),
    ("hinge 16", 16.0, 0.0, None), ("hinge 30", 30.0, 0.0, None),
    ("floor 0.3", None, 0.3, None), ("floor 0.4", None, 0.4, None), ("floor 0.5", None, 0.5, None),
    ("texture 0.3", None, 0.0, 0.3), ("texture 0.4", None, 0.0, 0.4), ("texture 0.5", None, 0.0, 0.5),
    ("hinge 8 + texture 0.4", 8.0, 0.0, 0.4),
)


def guarded(hinge: float | None, peak_floor: float, texture: float | None = None):
    """The guarded steep reward ``(images, prompts) -> (B,)`` for one row of `GUARDS`
    (`recast.worlds.digits.rewards.steep.steep_score`, times the texture gate when ``texture`` is given)."""
    from recast.worlds.digits.rewards.digit import above_background
    from recast.worlds.digits.rewards.steep import steep_score

    score = functools.partial(steep_score, hinge=hinge, peak_floor=peak_floor)
    if texture is None:
        return score

    def textured(images, prompts):
        gate = ((1.0 - alternation(above_background(images))) / (1.0 - texture)).clamp(0.0, 1.0)
        return (score(images, prompts) * gate).float()

    return textured


def steep_steps(J):
    """Soft count ``(B,)`` of the speck-masked glyph steps (`recast.worlds.digits.rewards.specks.glyph_steps`) of at least
    half the canvas' peak ink (a sigmoid of width 0.05 around 0.5): how much of the glyph's edge is steep."""
    import torch

    from recast.worlds.digits.rewards.specks import glyph_steps

    gy, gx, keep = glyph_steps(J)
    peak = (J * keep).amax((1, 2)) + 1e-6
    return sum(torch.sigmoid((g / peak[:, None, None] - 0.5) / 0.05).sum((1, 2)) for g in (gy, gx))


def alternation(J):
    """``(B,)`` share of the horizontal step mass ``sum |d|`` whose step reverses sign at the next pixel: 0 on a
    monotone edge, 1 on a checkerboard, so it reads pixel-level texture inside the glyph."""
    d = J[:, :, 1:] - J[:, :, :-1]
    flips = ((d[:, :, 1:] * d[:, :, :-1]) < 0).float() * d[:, :, 1:].abs()
    return flips.sum((1, 2)) / d.abs().sum((1, 2)).clamp_min(1e-6)


def main(argv: list[str] | None = None) -> list[dict]:
    import torch
    from sklearn.metrics import roc_auc_score

    import recast
    from recast.worlds.digits.audit import sample_world
    from recast.worlds.digits.judges.agreement import judge_verdicts
    from recast.worlds.digits.rewards import get
    from recast.worlds.digits.rewards.degrade import gaussian_blur
    from recast.worlds.digits.rewards.digit import above_background
    from recast.informativeness.ends import RolloutEnds, ends_profile
    from recast.io import write_csv
    from recast.experiments.judge_eval import load_policy, sample_test_prompts
    from recast.experiments.sweep import results_dir
    from recast.worlds.digits.model import load_world

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ends", default="runs/ends")
    ap.add_argument("--hack-runs", default="runs/alone/sharpness_steep")
    ap.add_argument("--hinged-runs", default="runs/alone/sharpness_steep_hinged",
                    help="the second route's runs (hack_hinged)")
    ap.add_argument("--csv", default="steep_guard_probe.csv")
    ap.add_argument("--sample-runs", default="sharpness_steep,sharpness_steep_hinged",
                    help="single-reward runs under runs/alone whose samples to describe")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    root = Path(recast.__file__).resolve().parents[1]
    batches = {s: RolloutEnds.load(f"{root}/{a.ends}/seed_{s}.pt") for s in (0, 1)}
    images, prompts = sample_world(load_world(f"{root}/data/digit_base"), n=256, split="test", num_steps=10, seed=0)
    not_blur = judge_verdicts(images.clamp(0, 1), prompts)["not_blur"].numpy().astype(int)
    blurred = gaussian_blur(images, 0.75)

    @functools.cache
    def draws(run_dir):
        out = {}
        for seed in (0, 1):
            base = load_policy(f"{root}/{run_dir}/seed_{seed}", "base")
            out[seed] = {tag: sample_test_prompts(pol, 128, seed=seed + 1000, batch_size=64)
                         for tag, pol in (("base", base), ("final", replace(base, which="ema")))}
        return out

    hack = {"hack": draws(a.hack_runs), "hack_hinged": draws(a.hinged_runs)}
    rewards = [("sharpness", get("sharpness")(torch.device("cpu")))]
    rewards += [(name, guarded(h, f, t)) for name, h, f, t in GUARDS]
    rows = []
    print("| guard | centre of mass, batch 0 / 1 | cleanest-third share | AUC vs not blurred | blur 0.75 px | "
          "hack: final - base, seeds 0 / 1 | the hinged route, seeds 0 / 1 |")
    print("|---|---|---|---|---|---|---|")
    for name, fn in rewards:
        prof = {s: ends_profile(ends, fn) for s, ends in batches.items()}
        r = fn(images, prompts).double()
        d_hack = {f"{route}_{s}": (fn(*d[s]["final"]).double().mean() - fn(*d[s]["base"]).double().mean()).item()
                  for route, d in hack.items() for s in d}
        row = {"guard": name, **{f"com_{s}": float(p["com"][0]) for s, p in prof.items()},
               **{f"cleanest_third_share_{s}": float(p["cleanest_third_share"][0]) for s, p in prof.items()},
               "auc_not_blur": float(roc_auc_score(not_blur, r.numpy())),
               "blur_075": float((fn(blurred, prompts).double() - r).mean()), "base_mean": float(r.mean()),
               **d_hack}
        rows.append(row)
        print(f"| {name} | {row['com_0']:.2f} / {row['com_1']:.2f} | {row['cleanest_third_share_0']:.2f} / "
              f"{row['cleanest_third_share_1']:.2f} | {row['auc_not_blur']:.3f} | {row['blur_075']:+.3f} | "
              f"{row['hack_0']:+.3f} / {row['hack_1']:+.3f} | {row['hack_hinged_0']:+.3f} / "
              f"{row['hack_hinged_1']:+.3f} |", flush=True)
    write_csv(results_dir() / a.csv, rows)
    described = []
    print("\n| run | seed | policy | ink mass | peak | steep steps | alternation |\n|---|---|---|---|---|---|---|")
    for run in a.sample_runs.split(","):
        for seed, tags in draws(str(Path("runs/alone") / run)).items():
            for tag, (imgs, _) in tags.items():
                J = above_background(imgs)
                d = {"run": run, "seed": seed, "policy": tag, "ink_mass": float(J.sum((1, 2)).median()),
                     "peak": float(J.amax((1, 2)).median()), "steep_steps": float(steep_steps(J).median()),
                     "alternation": float(alternation(J).median())}
                described.append(d)
                print(f"| {run} | {seed} | {tag} | {d['ink_mass']:.1f} | {d['peak']:.3f} | {d['steep_steps']:.2f} | "
                      f"{d['alternation']:.3f} |", flush=True)
    write_csv(results_dir() / a.csv.replace(".csv", "_samples.csv"), described)
    return rows


if __name__ == "__main__":
    main()
