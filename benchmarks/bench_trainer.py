"""Per-iteration wall time of the online loop, phase by phase, for ReCAST vs the static baseline (uniform W).

Run: `.venv/bin/python benchmarks/bench_trainer.py [--preset cpu] [--seeds 0,1,2] [--backend nft] [--set FIELD=VALUE]`
(writes benchmarks/results/trainer.json and prints a markdown table).

Both methods run in the same process on the same preset and seed, so they see the same machine. ReCAST's overhead
is reported two ways: the difference of mean iteration times (noisy on a shared machine) and the share of its own
iteration spent in the two phases only it has (informativeness: scoring x0_hat; solver: re-solving W). The reward
columns are the EMA policy's mean training rewards on held-out test prompts, before (iteration 0) and after training.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import tempfile
from pathlib import Path

import torch

from recast.config import parse_overrides, preset
from recast.io import write_json
from recast.trainer import Trainer, load_run
from recast.trainer.metrics import PHASES

METHODS = ("recast", "uniform")


def _summary(run) -> dict:
    """Mean per-phase seconds over iterations (the first is dropped as warm-up when there are more than 2)."""
    recs = run.metrics[1:] if len(run.metrics) > 2 else run.metrics
    out = {p: statistics.mean(r[f"time/{p}"] for r in recs) for p in PHASES}
    out["total"] = statistics.mean(r["time/total"] for r in recs)
    out["train_wall_s"] = sum(r["time/total"] for r in run.metrics)
    base = next((e for e in run.evals if e["iteration"] == 0), None)
    last = run.evals[-1] if run.evals else None
    for tag, rec in (("base", base), ("final", last)):
        if rec is not None:
            out[f"reward_{tag}"] = rec["reward/weighted"]
            out[f"rewards_{tag}"] = {n: rec[f"reward/{n}"] for n in run.reward_names}
            out[f"judge_strict_{tag}"] = rec.get("judge/strict")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="cpu")
    ap.add_argument("--setting", default="compose")
    ap.add_argument("--backend", default="nft")
    ap.add_argument("--seeds", default="0", help="comma-separated seeds")
    ap.add_argument("--iterations", type=int, default=0, help="0 = the preset's")
    ap.add_argument("--world", default="", help="override the preset's world (a saved DigitWorld folder)")
    ap.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                    help="override a TrainConfig field for both methods (repeatable), e.g. --set recast_every=4")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "trainer.json"))
    args = ap.parse_args()
    try:
        sets = parse_overrides(args.set)
    except ValueError as err:
        ap.error(str(err))
    seeds = [int(s) for s in args.seeds.split(",")]
    results = {m: [] for m in METHODS}
    cfg0 = None
    with tempfile.TemporaryDirectory(prefix="bench_trainer_") as tmp:
        for seed in seeds:
            trainers = {}
            for method in METHODS:
                over = dict(method=method, setting=args.setting, backend=args.backend, seed=seed, progress=False)
                if args.iterations:
                    over["iterations"] = args.iterations
                if args.world:
                    over["world"] = args.world
                over.update(sets)
                cfg = preset(args.preset, **over)
                cfg0 = cfg0 or cfg
                trainers[method] = Trainer(cfg, Path(tmp) / f"{method}_{seed}")
                trainers[method].evaluate(grid=False)
            # interleave the methods' iterations so both see the same machine load
            for _ in range(cfg0.iterations):
                for tr in trainers.values():
                    tr.step()
            for method, tr in trainers.items():
                tr.evaluate(grid=False)
                results[method].append({"seed": seed, **_summary(load_run(tr.out))})
    agg = {m: {k: statistics.mean(r[k] for r in rs) for k in (*PHASES, "total", "train_wall_s")}
           for m, rs in results.items()}
    for m, rs in results.items():
        for tag in ("base", "final"):
            vals = [r.get(f"reward_{tag}") for r in rs if r.get(f"reward_{tag}") is not None]
            if vals:
                agg[m][f"reward_{tag}"] = statistics.mean(vals)
    rc, un = agg["recast"], agg["uniform"]
    overhead = {"iteration_time_diff_pct": 100 * (rc["total"] - un["total"]) / un["total"],
                "recast_only_phases_pct": 100 * (rc["informativeness"] + rc["solver"]) / rc["total"]}
    print(f"preset={args.preset} world={cfg0.world} backend={args.backend} B={cfg0.B} T={cfg0.num_steps} "
          f"iterations={cfg0.iterations} seeds={seeds} threads={torch.get_num_threads()} set={sets}\n")
    print("| method | " + " | ".join(PHASES) + " | total s/it | train wall s | reward base | reward final |")
    print("|---" * (len(PHASES) + 5) + "|")
    for m in METHODS:
        a = agg[m]
        print(f"| {m} | " + " | ".join(f"{a[p]:.3f}" for p in PHASES) + f" | {a['total']:.3f} | "
              f"{a['train_wall_s']:.1f} | {a.get('reward_base', float('nan')):.4f} | "
              f"{a.get('reward_final', float('nan')):.4f} |")
    print(f"\nReCAST overhead: {overhead['recast_only_phases_pct']:.2f}% of its iteration in recast-only phases; "
          f"{overhead['iteration_time_diff_pct']:+.2f}% mean iteration time vs uniform (target <= 3%)")
    write_json(args.out, {"preset": args.preset, "set": sets, "config": cfg0.to_dict(), "seeds": seeds,
                          "machine": {"python": platform.python_version(), "torch": torch.__version__,
                                      "threads": torch.get_num_threads(), "cpu": platform.processor()},
                          "aggregate": agg, "overhead": overhead, "runs": results})


if __name__ == "__main__":
    main()
