"""Is a resumed run bit-exact on this device, and is an uninterrupted run reproducible at all?

Run: `python benchmarks/resume_check.py --preset gpu [--iterations 6] [--backends nft,grpo]` (prints JSON;
`--out FILE` also writes it). For each backend three ReCAST runs of the same config and seed are made: two
uninterrupted ones (`straight`, `again`) and one stopped after half the iterations and resumed from its checkpoint
(`split`). `straight` vs `again` tells whether the device computes the run reproducibly; `straight` vs `split` tells
whether resuming continues it exactly. On CPU both are bit-exact (`tests/test_resume.py`); on a GPU the first can fail
where kernels are not deterministic, and then the second is judged against that floor. Evaluation is off (eval_every
0), so only training is compared.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import torch

from recast.config import parse_overrides, preset
from recast.io import write_json
from recast.trainer import Trainer, load_run


def _max_diff(a: Trainer, b: Trainer) -> float:
    """Largest absolute difference over the trained, old-policy and EMA parameters."""
    return max(float((x.detach().float() - y.detach().float()).abs().max()) for name in ("params", "old", "ema")
               for x, y in zip(getattr(a.policy, name), getattr(b.policy, name)))


def _same_logs(a: Path, b: Path) -> bool:
    strip = [[{k: v for k, v in r.items() if not k.startswith("time/")} for r in load_run(p).metrics] for p in (a, b)]
    return strip[0] == strip[1] and load_run(a).weights == load_run(b).weights


def check(cfg, root: Path) -> dict:
    """The three runs of one config under ``root``; returns the comparison."""
    half = max(1, cfg.iterations // 2)
    straight = Trainer(cfg, root / "straight")
    straight.run()
    again = Trainer(cfg, root / "again")
    again.run()
    Trainer(cfg.replace(iterations=half), root / "split").run()
    split = Trainer(cfg, root / "split", resume=True)
    split.run()
    return {"backend": cfg.backend, "iterations": cfg.iterations, "resumed_at": half,
            "reproducible_bit_exact": _max_diff(straight, again) == 0.0 and _same_logs(root / "straight",
                                                                                      root / "again"),
            "reproducible_max_abs_diff": _max_diff(straight, again),
            "resume_bit_exact": _max_diff(straight, split) == 0.0 and _same_logs(root / "straight", root / "split"),
            "resume_max_abs_diff": _max_diff(straight, split)}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="gpu")
    ap.add_argument("--iterations", type=int, default=6)
    ap.add_argument("--backends", default="nft,grpo")
    ap.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE")
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    try:
        sets = parse_overrides(args.set)
    except ValueError as err:
        ap.error(str(err))
    results = []
    with tempfile.TemporaryDirectory(prefix="resume_check_") as tmp:
        for backend in args.backends.split(","):
            cfg = preset(args.preset, method="recast", backend=backend, iterations=args.iterations, eval_every=0,
                         progress=False, **sets)
            results.append(check(cfg, Path(tmp) / backend))
    out = {"preset": args.preset, "set": sets, "device": cfg.device, "torch": torch.__version__,
           "gpu": torch.cuda.get_device_name() if cfg.device.startswith("cuda") else None, "runs": results}
    print(json.dumps(out, indent=2))
    if args.out:
        write_json(args.out, out)
    return out


if __name__ == "__main__":
    main()
