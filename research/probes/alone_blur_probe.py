"""Where does the blur of single-reward runs come from: the EMA used for evaluation, or the trained weights?

    python research/probes/alone_blur_probe.py position          # about 1.5 min on 2 cores

For each seed's run under ``runs/alone/<reward>/seed_<s>``: the blur-defect rate (`recast.worlds.digits.judges.defect_report`)
of the base model (adapters off), the EMA policy (what every table evaluates) and the raw trained weights, on the 256
test samples of `recast.experiments.alone.reevaluate` (same prompts and noise for all three). Prints a markdown table.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

import torch


def main(argv: list[str] | None = None) -> list[dict]:
    from recast.experiments.alone import REEVAL_SEED_OFFSET
    from recast.worlds.digits.judges import defect_report
    from recast.experiments.judge_eval import load_policy, sample_test_prompts

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("reward", help="the single reward whose runs to read (runs/alone/<reward>)")
    p.add_argument("--root", default="runs/alone")
    p.add_argument("--seeds", default="0,1,2,3,4")
    p.add_argument("--n", type=int, default=256, help="test samples per policy")
    a = p.parse_args(argv)
    torch.set_num_threads(2)
    rows = []
    for seed in (int(s) for s in a.seeds.split(",")):
        row = {"seed": seed}
        base = load_policy(Path(a.root) / a.reward / f"seed_{seed}", "base")
        for which in ("base", "ema", "params"):  # one loaded run, sampled three ways
            images, _ = sample_test_prompts(replace(base, which=which), a.n, seed=seed + REEVAL_SEED_OFFSET)
            row[which] = defect_report(images).as_dict()["blur"]
        rows.append(row)
    print(f"| {a.reward} alone, seed | blurred: base model | EMA policy | raw trained weights |\n| --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['seed']} | {r['base']:.3f} | {r['ema']:.3f} | {r['params']:.3f} |")
    return rows


if __name__ == "__main__":
    main()
