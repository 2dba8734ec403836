"""Why does a position reward trained alone collapse the policy onto yellow? Placement by drawn colour.

    python research/probes/position_colour_probe.py            # about 5 min on one core
    python research/probes/position_colour_probe.py --world research/worlds/probe_equal_energy \
        --out research/tables/position_colour_probe_equal_energy.csv     # the palette probe's world, its own palette

research/rounds/22-each-reward-alone.md showed that position trained alone draws most glyphs yellow (position_flat and
the position oracle pay the same colour cost), and that the reward's mean by *prompted* colour is flat. This probe asks
the question by *drawn* colour, where a policy's choice lies, in two parts:

- **The model** (``model`` rows): ODE samples of the committed base model (10 steps, shift 3; 4,096 train prompts,
  seed 5), grouped by the colour the colour judge reads in the final sample. Per group: its share, the position
  judge, the position_flat and position rewards, the other attribute judges, and the step at which each sample's
  quadrant is settled (the first of the 10 steps from which the Tweedie prediction x̂_0's ink centroid stays in the
  final sample's quadrant), with the standard errors of the position judge and of the mean settled step.
- **The measurement** (``real`` rows): 4,096 real canvases of train prompts, each glyph drawn once in each of the four
  colours with the same placement, the same injected defects (the base model's stage-4 rates) and the same pixel
  noise. Only the hue differs, so any gap between colours here is the judge's or the reward's, not the model's.

Both parts use the palette of ``--world`` (`recast.worlds.digits.model.load_world` sets it;
research/rounds/02-palette.md).

Writes ``research/tables/position_colour_probe.csv`` (one row per part and colour) and prints it as markdown.
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

import torch

NOISE_STD: float = 0.05  # pixel noise added to the real canvases, about a base sample's background noise
DEFECT_RATES = dict(blur=0.65, speckle=0.35, fade=0.25)  # stage 4's injection rates (data/README.md)


def quadrant(images: torch.Tensor) -> torch.Tensor:
    """The position judge's reading of each canvas (`recast.worlds.digits.judges.attributes.position_index`): the index into
    `data.POSITIONS` of the region centre nearest the glyph mask's centroid; -1 where there is no ink."""
    from recast.worlds.digits.judges.attributes import mask_stats, position_index

    _, mask, count, _ = mask_stats(images)
    return torch.where(count > 0, position_index(mask, count), -1)


def settled_step(x0_hats: list[torch.Tensor]) -> torch.Tensor:
    """Per sample, the first step j (0..T-1) from which the quadrant of every later x̂_0 equals the final one's; T
    where even the last prediction differs."""
    q = torch.stack([quadrant(x) for x in x0_hats])  # (T, B)
    agree = q == q[-1]
    T = len(q)
    # the last run of agreement: scan from the end
    step = torch.full((q.shape[1],), T)
    ok = torch.ones(q.shape[1], dtype=torch.bool)
    for j in range(T - 1, -1, -1):
        ok &= agree[j]
        step = torch.where(ok, torch.full_like(step, j), step)
    return step


def _scores(images: torch.Tensor, prompts: list[str]) -> dict[str, torch.Tensor]:
    from recast.worlds.digits import rewards as R
    from recast.worlds.digits.judges.attributes import judge_attributes

    j = judge_attributes(images, prompts)
    return {"position judge": j.position.float(), "colour judge": j.color.float(), "digit judge": j.digit.float(),
            "size judge": j.size.float(),
            "position_flat": R.get("position_flat")("cpu")(images, prompts),
            "position": R.get("position")("cpu")(images, prompts)}


def model_rows(world_dir: str, n: int, seed: int) -> list[dict]:
    """The ``model`` rows: base samples grouped by the colour drawn."""
    from alone_colour_probe import drawn_colour
    from recast.worlds.digits import data
    from recast.worlds.digits.model import load_world
    from recast.sampling import sample_ode, sigma_schedule

    world = load_world(world_dir)
    gen = torch.Generator().manual_seed(seed)
    prompts = data.sample_prompts(n, split="train", generator=gen)
    sigmas = sigma_schedule(10, 3.0)
    images, hats = [], []
    for i in range(0, n, 128):
        out = sample_ode(world.transformer, world.encode_prompts(prompts[i:i + 128]), sigmas,
                         shape=world.sample_shape, generator=gen)
        images.append(world.decode(out.x0).cpu())
        hats.append(torch.stack([world.decode(h).cpu() for h in out.x0_hats]))
    images, hats = torch.cat(images), torch.cat(hats, 1)
    drawn, scores = drawn_colour(images), _scores(images, prompts)
    scores["settled step"] = settled_step(list(hats)).float()
    return [{"part": "model", "colour": name, "share": float((drawn == k).float().mean()),
             **{key: float(v[drawn == k].mean()) for key, v in scores.items()},
             "position judge s.e.": _binomial_se(scores["position judge"][drawn == k]),
             "settled step s.e.": _mean_se(scores["settled step"][drawn == k])}
            for k, name in enumerate(data.COLORS)]


def _mean_se(v: torch.Tensor) -> float:
    """Standard error of a mean (NaN for fewer than two values)."""
    return float(v.std() / len(v) ** 0.5) if len(v) > 1 else float("nan")


def _binomial_se(v: torch.Tensor) -> float:
    """Standard error of a pass rate."""
    p = float(v.mean())
    return (p * (1 - p) / max(len(v), 1)) ** 0.5


def real_rows(n: int, seed: int) -> list[dict]:
    """The ``real`` rows: the same glyphs, placements, defects and noise in each colour."""
    from recast.worlds.digits import data
    from recast.worlds.digits.corruption import Corruption, inject_defects

    prompts = data.sample_prompts(n, split="train", generator=torch.Generator().manual_seed(seed))
    rows = []
    specs = [data.parse_prompt(p) for p in prompts]
    for name in data.COLORS:
        recoloured = [data.PromptSpec(s.digit, name, s.position, s.size) for s in specs]
        texts = [s.text for s in recoloured]
        images = data.render(recoloured, generator=torch.Generator().manual_seed(seed + 1))
        images, _ = inject_defects(images, Corruption(**DEFECT_RATES), torch.Generator().manual_seed(seed + 2))
        noise = torch.randn(images.shape, generator=torch.Generator().manual_seed(seed + 3))
        images = (images + NOISE_STD * noise).clamp(0, 1)
        scores = _scores(images, texts)
        rows.append({"part": "real", "colour": name, "share": 0.25,
                     **{key: float(v.mean()) for key, v in scores.items()}, "settled step": float("nan"),
                     "position judge s.e.": _binomial_se(scores["position judge"]), "settled step s.e.": float("nan")})
    return rows


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--world", default="data/digit_base")
    p.add_argument("--n", type=int, default=4096, help="base samples and real canvases")
    p.add_argument("--seed", type=int, default=5)
    p.add_argument("--out", default="research/tables/position_colour_probe.csv")
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    rows = model_rows(a.world, a.n, a.seed) + real_rows(a.n, a.seed)
    keys = list(rows[0])
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        with open(a.out, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=keys)
            w.writeheader()
            w.writerows(rows)
    print("| " + " | ".join(keys) + " |\n|" + " --- |" * len(keys))
    for r in rows:
        print("| " + " | ".join([r["part"], r["colour"]] + [f"{r[k]:.3f}" for k in keys[2:]]) + " |")
    return rows


if __name__ == "__main__":
    main()
