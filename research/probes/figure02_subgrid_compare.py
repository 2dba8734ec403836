"""Figure 02 at 16 substeps against figure 02 at 4: what the settled sub-grid changes, on two batches each.

    for s in 0 1; do python research/probes/timing_cache.py record --seed $s --substeps 16 --dir runs/ends_s16_x16; done
    papermill notebooks/02_informativeness.ipynb /tmp/02.ipynb -p num_prompts 256 -p num_rollouts 8 \
        -p substeps 16 -p bootstrap 200 -p num_threads 2 -p ends_dir runs/ends_s16_x16 \
        -p out_dir runs/02_informativeness_256_s16
    cp runs/02_informativeness_256_s16/informativeness.json research/tables/informativeness_base_256_s16.json
    python research/probes/figure02_subgrid_compare.py --new research/tables/informativeness_base_256_s16_contrast.json

The committed comparison (`research/tables/informativeness_s4_vs_s16.csv`) was made in the settled sub-grid round, when
quality trained contrast; that figure is kept as `informativeness_base_256_s16_contrast.json` (the default of
``--new``). Figure 02 itself was re-drawn from the same stored ends in the realism-size round, with wash_free in
contrast's place (`informativeness_base_256_s16.json`).

The sub-grid round found that 16 ancestral substeps per grid step are fine enough for the attribute rewards (32
moves them by ≤ 0.04 columns), that 4 decides them 0.15-0.40 columns early, and that a 4-substep clean batch
continued with 16 substeps is not reproduced by its ends for the texture scores: two samplers mixed. Figure 02 is
therefore re-drawn with 16 substeps for both the clean batch and the continuations (`-p substeps 16`, both
batches), which is one sampler throughout. This script sets it beside the committed 4-substep figure
(`research/tables/informativeness_base_256.json`), per reward and batch: the ground truth's centre of mass, tweedie's
and its lag, tweedie's Spearman ρ against each, the two ground truths' ρ with each other (the most any estimator
can show at this sample size), and the ground truth's consistency checks (`estimate_profiles`: dp_z, the largest
excess of D(σ) over D(0) in bootstrap s.d.; ends_z, the continuation ends' mean p against the clean batch's;
ode_z, the clean batch's raw rewards against the T-step ODE's from the same noise). Analysis only.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

BATCHES = ("b1", "b2")


def batch_rows(d: dict) -> dict[str, dict]:
    """{batch: {"rollout": profile, "tweedie": profile, "rho": [K]}} of a notebook-02 JSON, both batches."""
    rep = d["replicate"]
    return {"b1": {"rollout": d["rollout"], "tweedie": d["tweedie"], "rho": d["spearman_gains"]},
            "b2": {"rollout": rep["rollout"], "tweedie": rep["tweedie"], "rho": rep["spearman_gains"]}}


def compare(old: dict, new: dict) -> list[dict]:
    """One row per reward: the 4- and 16-substep figure's readings side by side (see the module docstring)."""
    import torch

    from recast.informativeness import gains_centre_of_mass

    for d, what in ((old, "old"), (new, "new")):
        if d.get("replicate") is None:
            raise ValueError(f"the {what} figure has no second batch (run notebook 02 with replicate_seed >= 0)")
    names = old["rollout"]["reward_names"]
    if new["rollout"]["reward_names"] != names or old["rollout"]["sigmas"] != new["rollout"]["sigmas"]:
        raise ValueError("the two figures must score the same rewards on the same grid")
    com = {}
    for tag, d in (("s4", old), ("s16", new)):
        for b, x in batch_rows(d).items():
            for est in ("rollout", "tweedie"):
                com[tag, b, est] = gains_centre_of_mass(torch.tensor(x[est]["gains"])).tolist()
    rows = []
    for k, name in enumerate(names):
        row = {"reward": name}
        for tag, d in (("s4", old), ("s16", new)):
            bs = batch_rows(d)
            for b in BATCHES:
                row[f"com_gt_{tag}_{b}"] = com[tag, b, "rollout"][k]
                row[f"com_tweedie_{tag}_{b}"] = com[tag, b, "tweedie"][k]
                row[f"lag_tweedie_{tag}_{b}"] = com[tag, b, "tweedie"][k] - com[tag, b, "rollout"][k]
                row[f"rho_tweedie_{tag}_{b}"] = bs[b]["rho"][k]
                for check in ("dp_z", "ends_z", "ode_z"):
                    row[f"{check}_{tag}_{b}"] = bs[b]["rollout"]["checks"][check][k]
            row[f"rho_gt_b1_b2_{tag}"] = d["replicate"]["spearman_ground_truth_seeds"][k]
            row[f"D0_gt_{tag}_b1"] = d["rollout"]["D"][k][-1]
            row[f"noise_share_tweedie_{tag}_b1"] = d["tweedie"]["noise_share"][k]
        for b in BATCHES:
            row[f"d_com_gt_s16_s4_{b}"] = row[f"com_gt_s16_{b}"] - row[f"com_gt_s4_{b}"]
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> list[dict]:
    import recast
    from recast.io import write_csv
    from recast.experiments.sweep import results_dir

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", default="research/tables/informativeness_base_256.json")
    ap.add_argument("--new", default="research/tables/informativeness_base_256_s16_contrast.json")
    ap.add_argument("--csv", default="informativeness_s4_vs_s16.csv")
    a = ap.parse_args(argv)
    root = Path(recast.__file__).resolve().parents[1]
    old, new = (json.loads((root / p).read_text()) for p in (a.old, a.new))
    rows = compare(old, new)
    print("| reward | ground truth's centre of mass, 4 → 16 substeps (batch 1 / 2) | tweedie's, 16 | its lag, 4 → 16 | "
          "tweedie ρ, 4 → 16 | ground truth vs ground truth, 4 → 16 | ends z, 16 | ODE z, 16 |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    f = lambda r, key, fmt="{:.2f}": " / ".join(fmt.format(r[f"{key}_{b}"]) for b in BATCHES)  # noqa: E731
    for r in rows:
        print(f"| {r['reward']} | {f(r, 'com_gt_s4')} → {f(r, 'com_gt_s16')} | {f(r, 'com_tweedie_s16')} | "
              f"{f(r, 'lag_tweedie_s4', '{:+.2f}')} → {f(r, 'lag_tweedie_s16', '{:+.2f}')} | "
              f"{f(r, 'rho_tweedie_s4', '{:+.2f}')} → {f(r, 'rho_tweedie_s16', '{:+.2f}')} | "
              f"{r['rho_gt_b1_b2_s4']:+.2f} → {r['rho_gt_b1_b2_s16']:+.2f} | {f(r, 'ends_z_s16', '{:+.1f}')} | "
              f"{f(r, 'ode_z_s16', '{:+.1f}')} |")
    write_csv(results_dir() / a.csv, rows)
    return rows


if __name__ == "__main__":
    main()
