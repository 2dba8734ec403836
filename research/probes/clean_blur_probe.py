"""How to count specks so that a blur does not pay: the design grid behind `clean_mass`.

    python research/probes/clean_blur_probe.py            # about 30 s on 2 cores

``clean`` pays for blur: it counts bright pixels off the glyph, and a blurred speck's peak falls below that level. A
count of the ink mass in 3x3 windows off the glyph (`recast.worlds.digits.rewards.digit.speck_mass`) keeps a blurred speck.
The speckle judge, though, also reads pixels above a level, so the mass count agrees less with it. For each way to
count, on two sets of base-model samples, this prints the agreement AUC of the whole clean reward (the count swapped
in) with the speckle judge, and the mean change of the reward when every sample is blurred at σ = 0.5, 0.75, 1 px:
- the audit's samples (`recast.worlds.digits.audit`: 256 test prompts, 10 ODE steps), where `tests/test_base_model.py`
  asks for an AUC of at least 0.8;
- the 256 samples of `recast.experiments.alone.reevaluate` (6 steps, the cpu preset's training sampler), what training sees.

The counts: ``pixel`` (clean's own), ``mass`` at window levels 0.4 / 0.6 / 0.8 and glyph gaps of 2 / 3 px, and the
mean and the maximum of ``pixel`` and a mass count. `clean_mass` is the mean with level 0.6 and gap 3: the one whose
audit AUC clears 0.8 by the largest margin among the counts that pay nothing for a blur on the training samples.
Prints markdown.
"""

from __future__ import annotations

import argparse

import torch


def main(argv: list[str] | None = None) -> list[dict]:
    from recast.experiments.alone import REEVAL_SEED_OFFSET
    from recast.worlds.digits.audit import sample_world
    from recast.worlds.digits.judges.agreement import reward_judge_agreement
    from recast.worlds.digits.rewards import digit as D
    from recast.worlds.digits.rewards.degrade import gaussian_blur
    from recast.worlds.digits.model import load_world
    from recast.experiments.judge_eval import load_policy, sample_test_prompts

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run", default="runs/alone/placebo/seed_0", help="any run of the base model; its base is used")
    p.add_argument("--world", default="data/digit_base")
    a = p.parse_args(argv)
    torch.set_num_threads(2)
    samples = {"audit (10 steps)": sample_world(load_world(a.world), n=256, split="test", num_steps=10, shift=3.0,
                                                seed=0),
               "training sampler (6 steps)": sample_test_prompts(load_policy(a.run, "base"), 256,
                                                                 seed=REEVAL_SEED_OFFSET)}

    def reward(count):  # clean's score with the speck count swapped
        return lambda x: D._clean_score(x, count(x), D.stray_ink(x)[1])

    def pixel(x):
        return D.stray_ink(x)[0]

    counts = {"pixel (clean)": pixel}
    for gap in (2, 3):
        for level in (0.4, 0.6, 0.8):
            counts[f"mass, level {level}, gap {gap}"] = lambda x, lv=level, g=gap: D.speck_mass(x, lv, g)
    for gap in (2, 3):
        for level in (0.6, 0.8):
            m = lambda x, lv=level, g=gap: D.speck_mass(x, lv, g)  # noqa: E731
            counts[f"mean of pixel and mass {level}, gap {gap}"] = lambda x, m=m: 0.5 * (pixel(x) + m(x))
            counts[f"max of pixel and mass {level}, gap {gap}"] = lambda x, m=m: torch.maximum(pixel(x), m(x))
    rows = []
    for name, count in counts.items():
        fn = reward(count)
        row = {"count": name}
        for where, (images, prompts) in samples.items():
            r = fn(images)
            row[f"{where} AUC"] = reward_judge_agreement(images, prompts, {"clean": r})["clean"].auc
            row[f"{where} blur"] = [float((fn(gaussian_blur(images, s)) - r).mean()) for s in (0.5, 0.75, 1.0)]
        rows.append(row)
    wheres = list(samples)
    print("| speck count | " + " | ".join(f"{w}: AUC | {w}: reward Δ under blur σ 0.5 / 0.75 / 1" for w in wheres)
          + " |")
    print("|---" * (1 + 2 * len(wheres)) + "|")
    for r in rows:
        cells = " | ".join(f"{r[f'{w} AUC']:.3f} | " + " / ".join(f"{d:+.3f}" for d in r[f"{w} blur"]) for w in wheres)
        print(f"| {r['count']} | {cells} |")
    return rows


if __name__ == "__main__":
    main()
