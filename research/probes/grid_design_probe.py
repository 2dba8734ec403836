"""Probe: is there a 6-step grid on which the designed timing meets the thirds? Every grid on a σ lattice, searched.

    python research/probes/grid_design_probe.py     # ~4 min; needs runs/ends (timing_cache.py record --seed 0 / 1) and
                                            # runs/ends_shift1 (timing_cache.py record --seed 0 --shift 1)

Issue 8 asks for colour and position decided in the noisiest third of the steps (centre of mass of the gains ≤ 1.5
on 6 columns), digit in the middle and sharpness and cleanliness in the cleanest (≥ 3.5). On the presets' grid (SD3's,
shift 3) the order holds but no reward reaches an outer third, and neither shift 1 nor shift 3 meets both thirds.
This asks the question for every grid at once. D_k(σ) depends on the noise level, not on the grid that samples it, and
on any grid the centre of mass is Σ_j (1 − F_k(σ_j)) over the interior points (`recast.informativeness.timing`). So
the normalised ground-truth curves F_k = D_k / D_k(0), pooled from the three stored batches (shift 3 seeds 0 and 1,
shift 1 seed 0: 4 substeps, 256 prompts × 8 continuations each), give the centre of mass on any grid:

- the noise level by which each reward has 10, 50 and 90 % of its D(0), a timing that needs no grid;
- the largest gap F_early − F_late over σ, against the T / (3 (T − 1)) = 0.4 that any 6-step grid needs;
- every grid with 5 distinct interior points on the lattice 0.02, 0.04, …, 0.98 (1.9 million) that meets all five
  bounds, with the curve interpolated in σ (``linear``) or bracketed by monotonicity (``bracket``: kept if any
  non-increasing curve through the measured points meets them, so a grid left out is ruled out by the points alone);
- the same search on 100 bootstrap replicates of the curves (the states resampled in each batch);
- what the base model's samples look like on the presets' grids and on the corners of the feasible set (its lowest
  and highest last and first interior points; 256 test prompts, ODE, seed 0): the judges and the defect rates that
  the rewards are meant to find;
- the prediction checked: the ground truth recorded on that feasible grid itself (``--measured``, by
  ``timing_cache.py record --sigmas 1,0.8,0.68,0.62,0.6,0.54,0 --dir runs/ends_feasible``, 20 min with the CPU
  shared), whose samples come from that grid and are not the pooled batches'.

Writes ``research/tables/grid_design.json``. ``--batches`` pools other stored ends instead, e.g. the 16-substep
continuation of seed 0's batch (research/rounds/11-grid.md "The grid round")::

    python research/probes/grid_design_probe.py --batches runs/ends_s16_x4/seed_0.pt --measured '' --bootstrap 0 \
        --json grid_design_s16.json

Analysis only: nothing is trained and no setting changes.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

DESIGN = {"color": "early", "position_flat": "early", "digit": "mid", "sharpness": "late", "speck_free": "late"}
BATCHES = {"shift 3, seed 0": "runs/ends/seed_0.pt", "shift 3, seed 1": "runs/ends/seed_1.pt",
           "shift 1, seed 0": "runs/ends_shift1/seed_0.pt"}


def _feasible_summary(grids) -> dict:
    if len(grids) == 0:
        return {"count": 0}
    return {"count": int(len(grids)), "first_sigma": [float(grids[:, 0].min()), float(grids[:, 0].max())],
            "last_sigma": [float(grids[:, -1].min()), float(grids[:, -1].max())],
            "widest_span": float((grids[:, 0] - grids[:, -1]).max())}


def _sample_report(world, sigmas, n: int, seed: int) -> dict:
    """Judges and defect rates of the world's ODE samples on this grid (the audit's prompts and noise)."""
    from recast.worlds.digits.audit import sample_world
    from recast.worlds.digits.judges.attributes import judge_report
    from recast.worlds.digits.judges.defects import defect_report

    images, prompts = sample_world(world, n=n, split="test", seed=seed, sigmas=sigmas)
    judges = {k: v for k, v in judge_report(images, prompts).as_dict().items() if k != "n"}
    defects = {f"defect_{k}": v for k, v in defect_report(images).as_dict().items() if k != "n"}
    return {**judges, **defects}


def main(argv: list[str] | None = None) -> dict:
    import numpy as np
    import torch

    import recast
    from recast.worlds.digits.rewards import get
    from recast.worlds.digits.model import load_world
    from recast.informativeness.ends import RolloutEnds, ends_profile
    from recast.informativeness.timing import (
        centre_of_mass_on_grid,
        feasible_grids,
        gap_needed,
        pool_curves,
        third_bounds,
    )
    from recast.sampling import sigma_schedule
    from recast.experiments.sweep import results_dir

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", nargs="+", default=list(BATCHES.values()),
                    help="stored ends whose curves are pooled (default: the three 4-substep batches)")
    ap.add_argument("--bootstrap", type=int, default=100, help="replicates of the search (0 = none)")
    ap.add_argument("--samples", type=int, default=256, help="test prompts for the sample report")
    ap.add_argument("--measured", default="runs/ends_feasible",
                    help="ends recorded on a feasible grid (timing_cache.py record --sigmas ...), scored when present "
                         "('' = none)")
    ap.add_argument("--json", default="grid_design.json")
    a = ap.parse_args(argv)
    root = Path(recast.__file__).resolve().parents[1]
    T, step = 6, 0.02
    names = [*DESIGN, "size_half_max"]  # size has no designed third; its curve is reported
    fns = [get(n)(torch.device("cpu")) for n in names]

    def reward_fn(images, prompts):
        return torch.stack([f(images, prompts).float() for f in fns], 1)

    profiles = {}
    labels = {path: label for label, path in BATCHES.items()}
    for path in a.batches:
        label = labels.get(path, path)
        ends = RolloutEnds.load(root / path)
        profiles[label] = (ends.sigmas.double(), ends_profile(ends, reward_fn, bootstrap=max(a.bootstrap, 1)))
    curve = pool_curves([(s, p["D"]) for s, p in profiles.values()])
    bounds_by_third = third_bounds(T)
    bounds = {names.index(n): bounds_by_third[third] for n, third in DESIGN.items()}
    lattice = np.round(np.arange(step, 1.0 - step / 2, step), 6)
    early = [names.index(n) for n, t in DESIGN.items() if t == "early"]
    late = [names.index(n) for n, t in DESIGN.items() if t == "late"]
    fine = np.round(np.linspace(1.0, 0.0, 501), 6)
    Ff = curve.at(fine)
    gap_pair = Ff[names.index("color")] - Ff[names.index("speck_free")]
    gap_all = Ff[early].min(0) - Ff[late].max(0)
    out = {"sigma": curve.sigma.tolist(), "F": {n: curve.F[k].tolist() for k, n in enumerate(names)},
           "design": DESIGN, "bounds": {n: bounds_by_third[t] for n, t in DESIGN.items()}, "num_steps": T,
           "lattice_step": step, "grids_searched": math.comb(lattice.size, T - 1), "gap_needed": gap_needed(T),
           "gap_color_speck_free": {"max": float(gap_pair.max()), "at_sigma": float(fine[gap_pair.argmax()])},
           "gap_early_late": {"max": float(gap_all.max()), "at_sigma": float(fine[gap_all.argmax()])},
           # grid-free timing: the noise level by which each reward has 10 / 50 / 90 % of its D(0)
           "sigma_decided": {n: {str(q): float(fine[np.argmax(Ff[k] >= q)]) for q in (0.1, 0.5, 0.9)}
                             for k, n in enumerate(names)}}
    found = {}
    for mode in ("linear", "bracket"):
        grids = feasible_grids(curve, lattice, T, bounds, mode=mode)
        found[mode] = grids
        out[f"feasible_{mode}"] = _feasible_summary(grids)
    # the bootstrap: the same search on curves pooled from each batch's resampled states
    boot = []
    for r in range(a.bootstrap):
        curve_r = pool_curves([(s, p["D_boot"][r]) for s, p in profiles.values()])
        boot.append(_feasible_summary(feasible_grids(curve_r, lattice, T, bounds, mode="linear")))
    if boot:
        with_any = [b for b in boot if b["count"] > 0]
        lasts = np.array([b["last_sigma"][0] for b in with_any]) if with_any else np.array([np.nan])
        out["bootstrap"] = {"replicates": a.bootstrap, "with_a_feasible_grid": len(with_any),
                            "count_median": float(np.median([b["count"] for b in boot])),
                            "lowest_last_sigma_5_50_95": [float(np.nanquantile(lasts, q)) for q in (0.05, 0.5, 0.95)],
                            "lowest_last_sigma_min": float(np.nanmin(lasts))}
    # the centre of mass on the presets' grid from the pooled curve, and what the samples look like on each grid
    grids = {"presets (SD3, shift 3)": sigma_schedule(T, 3.0).double().numpy(),
             "presets (SD3, shift 1)": sigma_schedule(T, 1.0).double().numpy()}
    lin = found["linear"]
    if len(lin):  # the corners of the feasible set: its lowest and highest last and first interior points
        picks = {"lowest last point": np.argmin(lin[:, -1]), "highest last point": np.argmax(lin[:, -1]),
                 "lowest first point": np.argmin(lin[:, 0]), "highest first point": np.argmax(lin[:, 0])}
        seen = []
        for label, i in picks.items():
            if not any(np.allclose(lin[i], g) for g in seen):
                seen.append(lin[i])
                grids[f"feasible, {label}"] = np.concatenate([[1.0], lin[i], [0.0]])
    world = load_world(root / "data/digit_base")

    def grid_row(label, s):
        """The pooled curve's prediction on grid s and the base model's samples there."""
        com = centre_of_mass_on_grid(curve.at(s[1:-1]))
        return {"name": label, "sigmas": [round(float(x), 4) for x in s],
                "com": {n: float(com[k]) for k, n in enumerate(names)},
                "meets_thirds": bool(all(lo - 1e-9 <= com[k] <= hi + 1e-9 for k, (lo, hi) in bounds.items())),
                "samples": _sample_report(world, s, a.samples, seed=0)}

    out["grids"] = [grid_row(label, s) for label, s in grids.items()]
    measured = root / a.measured / "seed_0.pt"
    if a.measured and measured.is_file():  # the prediction checked: the ground truth recorded on that grid itself
        ends = RolloutEnds.load(measured)
        prof = ends_profile(ends, reward_fn, bootstrap=200)
        s = ends.sigmas.double().numpy()
        com = {n: float(prof["com"][k]) for k, n in enumerate(names)}
        row = next((r for r in out["grids"] if np.allclose(r["sigmas"], s, atol=1e-4)), None)
        if row is None:
            row = grid_row("measured grid", s)
            out["grids"].append(row)
        row["measured"] = {"com": com, "com_lo": {n: float(prof["com_lo"][k]) for k, n in enumerate(names)},
                           "com_hi": {n: float(prof["com_hi"][k]) for k, n in enumerate(names)},
                           "meets_thirds": bool(all(lo - 1e-9 <= com[names[k]] <= hi + 1e-9
                                                    for k, (lo, hi) in bounds.items())),
                           "meta": ends.meta}
    path = results_dir() / a.json
    path.write_text(json.dumps(out, indent=1) + "\n")

    print("σ by which 10 / 50 / 90 % of D(0) is reached: " + "; ".join(
        f"{n} {v['0.1']:.2f} / {v['0.5']:.2f} / {v['0.9']:.2f}" for n, v in out["sigma_decided"].items()))
    print(f"largest F_color − F_speck_free: {out['gap_color_speck_free']['max']:.3f} at σ = "
          f"{out['gap_color_speck_free']['at_sigma']:.3f}; min over early − max over late: "
          f"{out['gap_early_late']['max']:.3f} at σ = {out['gap_early_late']['at_sigma']:.3f}; a 6-step grid needs "
          f"{out['gap_needed']:.2f}")
    for mode in ("linear", "bracket"):
        f = out[f"feasible_{mode}"]
        print(f"feasible ({mode}): {f['count']:,} of {out['grids_searched']:,}"
              + (f"; first interior σ {f['first_sigma']}, last {f['last_sigma']}" if f["count"] else ""))
    if boot:
        b = out["bootstrap"]
        print(f"bootstrap: {b['with_a_feasible_grid']} of {b['replicates']} replicates have a feasible grid; the lowest "
              f"last interior σ among them: 5/50/95 % {b['lowest_last_sigma_5_50_95']}")
    keys = ["strict", "digit", "color", "position", "size", "defect_blur", "defect_speckle", "defect_fade",
            "defect_clean"]
    print("| grid | σ | " + " | ".join(f"com {n}" for n in names) + " | meets | " + " | ".join(keys) + " |")
    print("|" + "---|" * (3 + len(names) + len(keys)))
    for row in out["grids"]:
        print(f"| {row['name']} | {', '.join(f'{x:g}' for x in row['sigmas'])} | "
              + " | ".join(f"{row['com'][n]:.2f}" for n in names) + f" | {'yes' if row['meets_thirds'] else 'no'} | "
              + " | ".join(f"{row['samples'][k]:.3f}" for k in keys) + " |")
    for row in out["grids"]:
        if "measured" in row:
            m = row["measured"]
            print(f"measured on {row['name']} ({', '.join(f'{x:g}' for x in row['sigmas'])}): "
                  + ", ".join(f"{n} {m['com'][n]:.2f} [{m['com_lo'][n]:.2f}, {m['com_hi'][n]:.2f}]" for n in names)
                  + f"; meets the thirds: {'yes' if m['meets_thirds'] else 'no'}")
    print(path)
    return out


if __name__ == "__main__":
    main()
