"""Where ReCAST's informativeness phase spends its time: scoring the x̂_0 proxies vs the tracker's estimate.

Run: `python benchmarks/profile_informativeness.py --preset gpu [--iterations 12] [--set FIELD=VALUE ...]`
(prints a JSON object; `--out FILE` also writes it). One ReCAST run; the first two iterations are warm-up. On CUDA
every timed region ends with a synchronisation, so GPU work is charged to the region that queued it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

from recast.config import parse_overrides, preset
from recast.io import write_json
from recast.trainer import Trainer
from recast.trainer import loop as L


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="cpu")
    ap.add_argument("--setting", default="compose")
    ap.add_argument("--iterations", type=int, default=12)
    ap.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE")
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    try:
        sets = parse_overrides(args.set)
    except ValueError as err:
        ap.error(str(err))
    cfg = preset(args.preset, setting=args.setting, method="recast_live", iterations=args.iterations, progress=False,
                 eval_every=0, **sets)
    cuda = cfg.device.startswith("cuda")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    parts: dict[str, list[float]] = {"score_proxies": [], "tracker_add": [], "n_proxies": []}
    score = L.Trainer.score

    def timed_score(self, x0, prompts):
        sync()
        t0 = time.perf_counter()
        out = score(self, x0, prompts)
        sync()
        if x0.shape[0] != self.cfg.B:  # the proxies (the fresh samples are scored in the "rewards" phase)
            parts["score_proxies"].append(time.perf_counter() - t0)
            parts["n_proxies"].append(x0.shape[0])
        return out

    with tempfile.TemporaryDirectory(prefix="profile_info_") as tmp:
        tr = Trainer(cfg, Path(tmp) / "run")
        tr.score = timed_score.__get__(tr)
        add = tr.tracker.add

        def timed_add(*a, **k):
            t0 = time.perf_counter()
            out = add(*a, **k)
            parts["tracker_add"].append(time.perf_counter() - t0)
            return out

        tr.tracker.add = timed_add
        recs = [tr.step() for _ in range(cfg.iterations)]
    recs, skip = recs[2:], 2
    mean = {k: statistics.mean(v[skip:]) for k, v in parts.items() if len(v) > skip}
    result = {"preset": args.preset, "set": sets, "device": torch.cuda.get_device_name() if cuda else "cpu",
              "B": cfg.B, "T": cfg.num_steps, "iterations_timed": len(recs),
              "iteration_s": statistics.mean(r["time/total"] for r in recs),
              "informativeness_s": statistics.mean(r["time/informativeness"] for r in recs),
              "solver_s": statistics.mean(r["time/solver"] for r in recs),
              "score_proxies_s": mean.get("score_proxies"), "tracker_add_s": mean.get("tracker_add"),
              "proxies_per_iteration": mean.get("n_proxies")}
    result["recast_only_pct"] = 100 * (result["informativeness_s"] + result["solver_s"]) / result["iteration_s"]
    print(json.dumps(result, indent=2))
    if args.out:
        write_json(args.out, result)
    return result


if __name__ == "__main__":
    main()
