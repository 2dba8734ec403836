"""Does a reward pay for blur? Each reward on base-model samples before and after a small Gaussian blur.

    python research/probes/blur_pays_probe.py            # about 1 min on 2 cores

A reward that scores a blurred sample higher than the sample itself gives training a gradient towards blur, whatever
property it is meant to measure. On the 256 test samples of `recast.experiments.alone.reevaluate` from the base model, each image
is blurred at σ = 0.5, 0.75 and 1 px (`recast.worlds.digits.rewards.degrade.gaussian_blur`); for each reward the table gives
the mean change of the reward and the share of samples whose reward rises, beside the blur judge's rate and the size
judge's pass rate. Size is also split by the prompted size: blur dims a glyph's outer rows below the ink threshold
that both the size reward and the size judge use, so it shrinks the measured side. A candidate size reward that
thresholds at half of each canvas's peak (`size_half_max`, compose's size reward since the blur round) is scored
beside it, with both rewards' agreement
AUC with the size judge. Prints markdown.
"""

from __future__ import annotations

import argparse

import torch


def main(argv: list[str] | None = None) -> list[dict]:
    from recast.experiments.alone import REEVAL_SEED_OFFSET
    from recast.worlds.digits import data
    from recast.worlds.digits import rewards as R
    from recast.worlds.digits.judges import defect_report
    from recast.worlds.digits.judges.attributes import judge_attributes
    from recast.worlds.digits.rewards.degrade import gaussian_blur
    from recast.experiments.judge_eval import load_policy, sample_test_prompts

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run", default="runs/alone/placebo/seed_0", help="any run of the base model; its base is used")
    p.add_argument("--n", type=int, default=256, help="test samples")
    p.add_argument("--sigmas", default="0.5,0.75,1.0")
    a = p.parse_args(argv)
    torch.set_num_threads(2)
    images, prompts = sample_test_prompts(load_policy(a.run, "base"), a.n, seed=REEVAL_SEED_OFFSET)
    names = [n for n in R.names() if n != "placebo"]
    fns = {n: R.get(n)("cpu") for n in names}
    before = {n: fn(images, prompts) for n, fn in fns.items()}
    large = torch.tensor([data.parse_prompt(t).size == "large" for t in prompts])
    rows = []
    for s in (0.0, *(float(x) for x in a.sigmas.split(","))):
        blurred = gaussian_blur(images, s) if s > 0 else images
        size_ok = judge_attributes(blurred, prompts).size.float()
        row = {"sigma": s, "blur_judge": defect_report(blurred).as_dict()["blur"],
               "size_judge_large": float(size_ok[large].mean()), "size_judge_small": float(size_ok[~large].mean())}
        for n, fn in fns.items() if s > 0 else ():
            d = fn(blurred, prompts) - before[n]
            row[n] = (float(d.mean()), float((d > 0).float().mean()))
            if n == "size":
                row["size_large"] = (float(d[large].mean()), float((d[large] > 0).float().mean()))
                row["size_small"] = (float(d[~large].mean()), float((d[~large] > 0).float().mean()))
        rows.append(row)
    from recast.worlds.digits.judges.agreement import reward_judge_agreement

    cols = [*names[:4], "size_large", "size_small", *names[4:]]
    auc = {k: reward_judge_agreement(images, prompts, {"size": before[k]})["size"].auc
           for k in ("size", "size_half_max")}
    print(f"agreement AUC with the size judge on these samples: size {auc['size']:.3f}, "
          f"size_half_max {auc['size_half_max']:.3f}")
    print(f"base samples: {a.n}; change of each reward under the blur (share of samples whose reward rises)\n")
    print("| blur σ (px) | blur judge | size judge, large prompts | size judge, small prompts | " + " | ".join(cols)
          + " |")
    print("|---" * (len(cols) + 4) + "|")
    for r in rows:
        cells = " | ".join("" if r["sigma"] == 0 else f"{r[c][0]:+.3f} ({100 * r[c][1]:.0f} % up)" for c in cols)
        print(f"| {r['sigma']:.2f} | {r['blur_judge']:.3f} | {r['size_judge_large']:.3f} | {r['size_judge_small']:.3f}"
              f" | {cells} |")
    return rows


if __name__ == "__main__":
    main()
