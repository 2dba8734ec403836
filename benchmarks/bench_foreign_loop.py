"""ReCAST's cost inside a foreign loop: examples/nft_sd3.py with and without its credit, in one process.

Run: `.venv/bin/python benchmarks/bench_foreign_loop.py [--model DIR] [--iterations 4] [--repeats 5]`
(writes benchmarks/results/foreign_loop.json and prints a line).

Three loops run on the same pipeline (the tiny random SD3 one unless --model names a folder), seed and rewards,
interleaved, so they share the machine's state; the figures are ratios of median wall times per run to the loop
without ReCAST (the static baseline, computed by the loop itself):
* ``table``: the paper's ReCAST from a weight table: `normalise` and `signal` only, no x̂_0 scored (the table is made
  from a synthetic profile for the example's rewards on the pipeline's grid: its values do not change the cost);
* ``live``: our first reading, which scores every trained x̂_0 (a VAE decode and the rewards) and pools, estimates
  and solves. The repo's trainer is measured beside it by `bench_trainer.py` (`benchmarks/results/trainer.json`).
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
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "foreign_loop.json"))
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    model = a.model
    if not model:
        from recast.worlds.sd3.tiny import save_tiny_pipeline

        model = str(save_tiny_pipeline(Path(tempfile.mkdtemp()) / "tiny"))
    table = _table(model, Path(tempfile.mkdtemp()) / "table.npz")
    modes = {"plain": dict(plain=True, lam=[0.7, 0.3]), "table": dict(table=table), "live": dict(live=True, lam=[0.7, 0.3])}
    times = {k: [] for k in modes}
    for _ in range(a.repeats):
        for label, kw in modes.items():
            start = time.perf_counter()
            nft_sd3.train(model, rewards=("brightness", "edges"), iterations=a.iterations, log=lambda r: None, **kw)
            times[label].append(time.perf_counter() - start)
    med = {k: statistics.median(v) for k, v in times.items()}
    own = _credit_seconds(table)  # ReCAST's own calls per iteration, timed alone (immune to the machine's load)
    trainer = ROOT / "benchmarks" / "results" / "trainer.json"
    out = {"loop": "examples/nft_sd3.py", "model": a.model or "tiny random SD3 pipeline (32 px)",
           "iterations": a.iterations, "repeats": a.repeats, "threads": a.threads, "seconds": times,
           "median_s": med, "ratio_table_to_plain": med["table"] / med["plain"],
           "ratio_live_to_plain": med["live"] / med["plain"],
           "table_credit_s_per_iteration": own,
           "table_credit_share_of_plain_iteration": own / (med["plain"] / a.iterations),
           "trainer_recast_only_phases_pct": json.loads(trainer.read_text())["overhead"]["recast_only_phases_pct"]
           if trainer.is_file() else None,
           "machine": platform.processor() or platform.machine()}
    write_json(Path(a.out), out)
    print(f"ReCAST inside examples/nft_sd3.py (median of {a.repeats}): from a weight table "
          f"{out['ratio_table_to_plain']:.3f} x the loop without it, live (x̂_0 scored) {out['ratio_live_to_plain']:.3f} x;"
          f" the table's own calls take {own * 1e3:.2f} ms an iteration, "
          f"{100 * out['table_credit_share_of_plain_iteration']:.3f} % of the plain loop's iteration")
    return out


def _credit_seconds(table: str, B: int = 16, G: int = 4, repeats: int = 200) -> float:
    """Seconds per iteration of what the table-based loop adds: `normalise` and each trained column's `signal`."""
    from recast.credit import Credit

    credit = Credit.from_table(table)
    R = torch.rand(credit.K, B, generator=torch.Generator().manual_seed(0))
    groups = [i // G for i in range(B)]
    idx = torch.arange(B)
    start = time.perf_counter()
    for _ in range(repeats):
        credit.normalise(R, groups)
        for j in range(credit.T):
            credit.signal(idx, sigma=credit.sigmas[j].expand(B))
    return (time.perf_counter() - start) / repeats


def _table(model: str, path: Path) -> str:
    """A weight table for the example's two rewards on the pipeline's grid (a synthetic profile: cost, not values)."""
    import numpy as np
    from diffusers import FlowMatchEulerDiscreteScheduler

    from recast.archives import DensityProfile, save_table, table_from_profile

    sched = FlowMatchEulerDiscreteScheduler.from_pretrained(model, subfolder="scheduler")
    sched.set_timesteps(6)
    rng = np.random.default_rng(0)
    prof = DensityProfile(sched.sigmas.double().numpy(), {n: rng.gamma(4.0, 0.25, (16, 6)) for n in ("brightness", "edges")})
    save_table(table_from_profile(prof, [0.7, 0.3]), path)
    return str(path)


if __name__ == "__main__":
    main()
