"""How much of the blur that training adds comes from the EMA of the weights? Each uniform-baseline run's EMA policy
and its raw trained weights, re-scored on the same 256 samples against the base model.

    python research/probes/ema_blur_probe.py        # about 3 min on 2 cores; needs the runs named in RUNS (their commands)

The trainer evaluates the EMA of the LoRA weights (decay `ema_decay`, 0.9 at the cpu preset), as DiffusionNFT does.
An average of weights is not an average of images: if the EMA policy's samples are blurrier than the raw weights',
part of the blur the tables report is the evaluation's, not the training's. For each run set (the uniform budget,
seeds 0, 1, 2) `recast.experiments.alone.reevaluate` scores the base model, the EMA and the raw weights on one noise draw; the
table gives the paired change final − base over seeds (mean ± seed-std) and flags WORSE where a judge falls (the
Fréchet distance and defect rates: rise) by more than a seed-std. Writes research/tables/ema_blur_probe.csv.
"""

from __future__ import annotations

import sys

# name -> (setting, out_root, --set overrides): the runs `research/probes/kl_tuning.py`, notebook 05 (the λ-sweep) and
# `research/probes/compose_variants.py` train
RUNS: dict[str, tuple[str, str, dict]] = {
    "compose": ("compose", "runs/kl/1", {"kl_beta": 1.0}),
    "quality": ("quality", "runs/sweep", {}),
    "compose, position_flat": ("compose", "runs/variants/position_flat",
                               {"kl_beta": 1, "rewards": "digit,color,position_flat,size"}),
    "compose, both redesigns": ("compose", "runs/variants/both",
                                {"kl_beta": 1, "rewards": "digit,color,position_flat,size_half_max"}),
}


def main(names: list[str], num_prompts: int = 256) -> list[dict]:
    from recast.experiments.alone import changes_over_seeds, reevaluate
    from recast.io import write_csv
    from recast.experiments.sweep import is_finished, plan_sweep, results_dir

    out = []
    for name in names or list(RUNS):
        setting, root, sets = RUNS[name]
        runs = plan_sweep(settings=(setting,), budgets=("uniform",), methods=("uniform",), seeds=(0, 1, 2),
                          sets=sets or None, out_root=root)
        missing = [str(r.out_dir) for r in runs if not is_finished(r)]
        if missing:
            raise FileNotFoundError(f"unfinished runs for {name!r}: {missing}; train them first: "
                                    f"{' '.join(runs[0].command)}")
        for which in ("ema", "params"):
            rows = reevaluate(runs, num_prompts=num_prompts, which=which)
            for m, c in changes_over_seeds(rows).items():
                out.append({"runs": name, "policy": which, "metric": m, "n": c["n"], "delta": c["delta"],
                            "seed_std": c["seed_std"], "worse_by_more_than_std": c["worse"]})
                print(f"{name:24s} {which:6s} {m:24s} Δ {c['delta']:+9.3f} ± {c['seed_std']:.3f}"
                      f"{'  WORSE' if c['worse'] else ''}", flush=True)
    write_csv(results_dir() / "ema_blur_probe.csv", out)
    return out


if __name__ == "__main__":
    main(sys.argv[1:])
