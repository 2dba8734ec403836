"""Figure 02's ground truth for any reward in seconds: record the continuation ends once, score rewards on them.

    python research/probes/timing_cache.py record --seed 0            # ~8 min (2 cores): runs/ends/seed_0.pt, 256 x 8
    python research/probes/timing_cache.py record --seed 1            # figure 02's second batch
    python research/probes/timing_cache.py record --seed 0 --substeps 16 --dir runs/ends_s16_x16   # today's figure 02, 42 min
    python research/probes/timing_cache.py record --shift 1 --dir runs/ends_shift1   # the grid without the time shift
    python research/probes/timing_cache.py record --world runs/base_tile0.4 --num-prompts 64 --substeps 16 --dir runs/t04
    python research/probes/timing_cache.py record --sigmas 1,0.8,0.68,0.62,0.6,0.54,0 --dir runs/ends_feasible  # any grid
    python research/probes/timing_cache.py score digit color position_flat size_half_max sharpness speck_free contrast \
        realism verdict:not_blur verdict:not_speckle --dir runs/ends_shift1 --seeds 0 --csv timing_shift1.csv
    python research/probes/timing_cache.py score sharpness speck_free verdict:not_blur
    python research/probes/timing_cache.py score sharpness --module my_rewards   # my_rewards.sharpness(images, prompts)
    python research/probes/timing_cache.py score sharpness sharpness_steep speck_free speck_free_abs verdict:not_blur \
        verdict:not_speckle --csv timing_candidates.csv      # the committed table (research/rounds/14-stored-ends.md)

`record` draws what notebook 02 draws at its committed size (256 prompts spread over the train prompts, 8
continuations, seed 0 and replicate seed 1), so `score` gives figure 02's D for every registered reward exactly. Its
default of 4 substeps is the figure committed before the settled sub-grid round (and every older table);
`--substeps 16 --dir runs/ends_s16_x16` records today's figure, which notebook 02 then scores through `ends_dir`
(`recast.informativeness.ends`); only the bootstrap bands use their own seed. Names are registered rewards,
``verdict:<judge>`` for a held-out judge's own 0/1 verdict (`recast.worlds.digits.judges.agreement.judge_verdicts`), or
functions of a ``--module`` on the path, for candidates that are not registered yet.
"""

from __future__ import annotations

import argparse
import importlib
from pathlib import Path


def _reward(name: str, module: str | None):
    import torch

    from recast.worlds.digits.judges.agreement import verdict_reward
    from recast.worlds.digits.rewards import get

    if name.startswith("verdict:"):
        return verdict_reward(name.split(":", 1)[1])
    if module is not None and hasattr(mod := importlib.import_module(module), name):
        return getattr(mod, name)
    return get(name)(torch.device("cpu"))


def main(argv: list[str] | None = None) -> list[dict]:
    import torch

    import recast
    from recast.worlds.digits.data import prompt_set
    from recast.informativeness.ends import RolloutEnds, ends_profile, record_ends
    from recast.world import load_world

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    rec = sub.add_parser("record", help="draw and store the ends")
    rec.add_argument("--seed", type=int, default=0)
    rec.add_argument("--num-prompts", type=int, default=256)
    rec.add_argument("--num-rollouts", type=int, default=8)
    rec.add_argument("--substeps", type=int, default=4)
    rec.add_argument("--shift", type=float, default=3.0, help="the grid's time shift (the presets' is 3)")
    rec.add_argument("--sigmas", help="another grid instead of the shifted one: comma-separated, from 1 down to 0")
    rec.add_argument("--x0-substeps", type=int, help="draw the clean batch with these substeps (default --substeps)")
    rec.add_argument("--threads", type=int, default=2)
    rec.add_argument("--world", default="data/digit_base",
                     help="the model folder to draw from (relative paths: under the repository); stored in the meta")
    sc = sub.add_parser("score", help="score rewards on stored ends")
    sc.add_argument("names", nargs="+")
    sc.add_argument("--module", help="import candidate rewards from this module first")
    sc.add_argument("--seeds", default="0,1", help="which recorded batches to score")
    sc.add_argument("--csv", help="also write the rows to this CSV (relative paths: under research/tables)")
    for p in (rec, sc):
        p.add_argument("--dir", default="runs/ends", help="where the ends are stored")
    a = ap.parse_args(argv)
    root = Path(recast.__file__).resolve().parents[1]
    folder = Path(a.dir) if Path(a.dir).is_absolute() else root / a.dir
    if a.cmd == "record":
        torch.set_num_threads(a.threads)
        world_dir = Path(a.world) if Path(a.world).is_absolute() else root / a.world
        if not (world_dir / "world.json").is_file():
            ap.error(f"--world {a.world}: no digit-world model there (world.json missing)")
        world = load_world(f"digits:{world_dir}")
        pool = prompt_set("train")
        prompts = pool[:: max(1, len(pool) // a.num_prompts)][:a.num_prompts]
        sigmas = None if a.sigmas is None else [float(x) for x in a.sigmas.split(",")]
        ends = record_ends(world, prompts, num_rollouts=a.num_rollouts, substeps=a.substeps, shift=a.shift,
                           seed=a.seed, num_steps=6 if sigmas is None else len(sigmas) - 1, sigmas=sigmas,
                           x0_substeps=a.x0_substeps)
        ends.meta["world"] = a.world
        print(ends.save(folder / f"seed_{a.seed}.pt"))
        return []
    batches = {int(s): RolloutEnds.load(folder / f"seed_{int(s)}.pt") for s in a.seeds.split(",")}
    rows = []
    print("| reward | batch | centre of mass [5-95 %] | share in the cleanest third | D(0) | ends from σ_1 vs clean, z |")
    print("|---|---|---|---|---|---|")
    for name in a.names:
        fn = _reward(name, a.module)
        for seed, ends in batches.items():
            prof = ends_profile(ends, fn)
            row = {"name": name, "seed": seed, "com": float(prof["com"][0]), "com_lo": float(prof["com_lo"][0]),
                   "com_hi": float(prof["com_hi"][0]), "cleanest_third_share": float(prof["cleanest_third_share"][0]),
                   "D0": float(prof["D"][0, -1]), "ends_z_first": float(prof["ends_z_first"][0])}
            rows.append(row)
            print(f"| {name} | {seed} | {row['com']:.2f} [{row['com_lo']:.2f}, {row['com_hi']:.2f}] | "
                  f"{row['cleanest_third_share']:.2f} | {row['D0']:.3f} | {row['ends_z_first']:+.1f} |")
    if a.csv:
        from recast.io import write_csv
        from recast.experiments.sweep import results_dir

        write_csv(Path(a.csv) if Path(a.csv).is_absolute() else results_dir() / a.csv, rows)
    return rows


if __name__ == "__main__":
    main()
