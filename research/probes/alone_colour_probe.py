"""What does a single-reward run do to colour? The hue the glyphs are drawn in, before and after training.

    python -m recast.experiments.alone --rewards position --seeds 0,1,2,3,4      # the runs (research/rounds/22-each-reward-alone.md)
    python research/probes/alone_colour_probe.py position                    # about 1 min on 2 cores

For each seed's run under ``runs/alone/<reward>/seed_<s>``: ODE samples of the EMA policy (and, for seed 0, of the
base model, its adapters off) on 256 test prompts with the same noise, the share of samples whose ink is drawn in each
palette colour (the colour judge's nearest palette entry, whatever the prompt asked for), and the colour judge's
accuracy per prompted colour. Prints a markdown table, then the reward's own mean on 1,024 base-model samples by
prompted colour (does the reward itself pay more for one colour?).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch


def drawn_colour(images: torch.Tensor) -> torch.Tensor:
    """Index into `recast.worlds.digits.data.COLORS` of the palette colour nearest to each sample's mean ink RGB (the
    colour judge's reading, `recast.worlds.digits.judges.attributes.judge_attributes`)."""
    from recast.worlds.digits.judges.attributes import mask_stats, color_index

    I, mask, _, _ = mask_stats(images)
    return color_index(images, I, mask)


def main(argv: list[str] | None = None) -> list[dict]:
    from recast.worlds.digits import data
    from recast.worlds.digits.judges.attributes import judge_attributes
    from recast.experiments.judge_eval import load_policy, sample_policy

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("reward", help="the single reward whose runs to read (runs/alone/<reward>)")
    p.add_argument("--root", default="runs/alone")
    p.add_argument("--seeds", default="0,1,2,3,4")
    p.add_argument("--n", type=int, default=256, help="test prompts")
    p.add_argument("--world", default="data/digit_base", help="the base model the runs started from")
    p.add_argument("--csv", default="", help="also write the table to this file under research/tables "
                   "(or $RECAST_RESULTS_DIR)")
    a = p.parse_args(argv)
    torch.set_num_threads(2)
    names = list(data.COLORS)
    prompts = data.sample_prompts(a.n, split="test", generator=torch.Generator().manual_seed(0))
    want = torch.tensor([names.index(data.parse_prompt(q).color) for q in prompts])
    rows = []
    for i, seed in enumerate(int(s) for s in a.seeds.split(",")):
        run = Path(a.root) / a.reward / f"seed_{seed}"
        for which in (("base", "ema") if i == 0 else ("ema",)):
            images = sample_policy(load_policy(run, which), prompts, seed=0)
            drawn, ok = drawn_colour(images), judge_attributes(images, prompts).color
            rows.append({"policy": "base model" if which == "base" else f"seed {seed}",
                         **{f"drawn {n}": float((drawn == k).float().mean()) for k, n in enumerate(names)},
                         "colour judge": float(ok.float().mean()),
                         **{f"judge on {n} prompts": float(ok[want == k].float().mean()) for k, n in enumerate(names)}})
    keys = list(rows[0])
    if a.csv:
        from recast.io import write_csv
        from recast.experiments.sweep import results_dir

        write_csv(results_dir() / a.csv, rows)
    print("| " + " | ".join(keys) + " |\n|" + " --- |" * len(keys))
    for r in rows:
        print("| " + " | ".join([r["policy"]] + [f"{r[k]:.2f}" for k in keys[1:]]) + " |")
    # Does the reward itself pay more for one colour? Its mean on base-model samples, by prompted colour.
    from recast.worlds.digits import rewards as R
    from recast.worlds.digits.audit import sample_world
    from recast.worlds.digits.model import load_world

    x, ps = sample_world(load_world(a.world), n=1024, split="train", seed=5)
    score = R.get(a.reward)("cpu")(x, ps)
    asked = torch.tensor([names.index(data.parse_prompt(q).color) for q in ps])
    print(f"\n{a.reward} reward on 1,024 base-model samples, by prompted colour: " +
          ", ".join(f"{n} {float(score[asked == k].mean()):.3f}" for k, n in enumerate(names)))
    return rows


if __name__ == "__main__":
    main()
