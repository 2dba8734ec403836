"""The study's fixed W files: ReCAST's W from the base model's ground-truth profile, and its time-reversed placebo.

    python research/study/make_w.py          # writes research/study/w/<setting>_<budget>_{fixed_gt,placebo}.json

The ground truth is figure 02's rollout estimate at 16 substeps (research/tables/informativeness_base_256_s16.json),
its two 256-sample batches' gains averaged, on the `cpu` preset's grid (6 steps, shift 3). W is `solve_weights` of
those gains at the run's budgets with the trainer's default temperature and floor. The placebo reverses W's columns:
the same marginals (rows λ, equal columns) and the same entries, so the same departure from λ/T, with the timing
reversed.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
BUDGETS = {("compose", "default"), ("quality", "default"), ("compose", "color-heavy"), ("compose", "sharpness-heavy"),
           ("quality", "uniform"), ("quality", "realism_centred-heavy")}


def ground_truth_gains() -> tuple[list[str], torch.Tensor]:
    d = json.loads((ROOT / "research/tables/informativeness_base_256_s16.json").read_text())
    names = d["rollout"]["reward_names"]
    g = (torch.tensor(d["rollout"]["gains"], dtype=torch.float64)
         + torch.tensor(d["replicate"]["rollout"]["gains"], dtype=torch.float64)) / 2
    return names, g.clamp_min(0)


def budgets(setting: str, budget: str) -> tuple[list[str], tuple[float, ...]]:
    from recast.config import preset, resolve_budgets, resolve_rewards
    from recast.experiments.sweep import lambda_grid

    cfg = preset("cpu", setting=setting)
    names = list(resolve_rewards(cfg))
    if budget == "default":
        return names, tuple(resolve_budgets(cfg) or [1.0 / len(names)] * len(names))
    return names, lambda_grid("data/digit_base", setting)[budget]


def main() -> None:
    from recast.config import TrainConfig
    from recast.solver import solve_weights

    all_names, gains = ground_truth_gains()
    out = Path(__file__).parent / "w"
    out.mkdir(exist_ok=True)
    for setting, budget in sorted(BUDGETS):
        names, lam = budgets(setting, budget)
        g = gains[[all_names.index(n) for n in names]]
        lam_t = torch.tensor(lam, dtype=torch.float64)
        W = solve_weights(g, lam_t / lam_t.sum(), temperature=TrainConfig.temperature, floor=TrainConfig.floor)
        for arm, w in (("fixed_gt", W), ("placebo", W.flip(1))):
            (out / f"{setting}_{budget}_{arm}.json").write_text(json.dumps(
                {"reward_names": names, "lam": list(lam), "W": w.tolist(), "source": __doc__.splitlines()[0]},
                indent=1) + "\n")
            print(setting, budget, arm, [round(sum(r[: 3]) / sum(r), 3) for r in w.tolist()])


if __name__ == "__main__":
    main()
