"""ReCAST's cost inside a foreign loop: examples/nft_sd3.py with and without its credit, in one process.

Run: `.venv/bin/python benchmarks/bench_foreign_loop.py [--model DIR] [--iterations 4] [--repeats 3]`
(writes benchmarks/results/foreign_loop.json and prints a line).

Both loops run on the same pipeline (the tiny random SD3 one unless --model names a folder), seed and rewards,
alternating, so they share the machine's state; the figure is the ratio of their median wall times per run. What
ReCAST adds there is what a user's loop pays: scoring every trained x̂_0 (a VAE decode and the rewards) and the
credit object's own work (pooling, the estimate, the solver). The repo's trainer, which scores a subset of the x̂_0,
is measured beside it by `bench_trainer.py` (`benchmarks/results/trainer.json`).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))


def main(argv=None) -> dict:
    import nft_sd3

    from recast.io import write_json

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="")
    ap.add_argument("--iterations", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "foreign_loop.json"))
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    model = a.model
    if not model:
        from recast.worlds.sd3.tiny import save_tiny_pipeline

        model = str(save_tiny_pipeline(Path(tempfile.mkdtemp()) / "tiny"))
    times = {"recast": [], "plain": []}
    for _ in range(a.repeats):
        for label in ("plain", "recast"):
            start = time.perf_counter()
            nft_sd3.train(model, rewards=("brightness", "edges"), lam=[0.7, 0.3], plain=label == "plain",
                          iterations=a.iterations, log=lambda r: None)
            times[label].append(time.perf_counter() - start)
    med = {k: statistics.median(v) for k, v in times.items()}
    trainer = ROOT / "benchmarks" / "results" / "trainer.json"
    out = {"loop": "examples/nft_sd3.py", "model": a.model or "tiny random SD3 pipeline (32 px)",
           "iterations": a.iterations, "repeats": a.repeats, "threads": a.threads, "seconds": times,
           "median_s": med, "ratio_recast_to_plain": med["recast"] / med["plain"],
           "trainer_recast_only_phases_pct": json.loads(trainer.read_text())["overhead"]["recast_only_phases_pct"]
           if trainer.is_file() else None,
           "machine": platform.processor() or platform.machine()}
    write_json(Path(a.out), out)
    print(f"ReCAST inside examples/nft_sd3.py: {out['ratio_recast_to_plain']:.3f} x the loop without it "
          f"(median of {a.repeats}); the repo's trainer spends {out['trainer_recast_only_phases_pct']:.2f} % in ReCAST's "
          "own phases")
    return out


if __name__ == "__main__":
    main()
