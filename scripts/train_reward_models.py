"""Train the digit world's small CNNs deterministically and save them as safetensors.

    python scripts/train_reward_models.py                    # all five nets below
    python scripts/train_reward_models.py --only digit,realism
    python scripts/train_reward_models.py --only realism_canonical,realism_conditional

Outputs (float16 safetensors, tens of KB each):
    data/rewards/digit_cnn.safetensors     digit reward, trained on "base"-split canvases
    data/rewards/realism_cnn.safetensors   realism reward, real vs degraded "base"-split canvases
    data/rewards/realism_canonical_cnn.safetensors   the same on canonical views (glyph centred, side 12 px)
    data/rewards/realism_conditional_cnn.safetensors one logit per prompted size; real glyphs of the other size are fake
    data/judges/judge_features.safetensors judge feature net (FID, diversity, preference), "judge"-split canvases

Single-threaded with fixed seeds, so reruns give the same bytes on the same torch build; prints size and sha256 of
each file for data/README.md. A few minutes on one CPU core.
"""

from __future__ import annotations

import argparse
import hashlib
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default="digit,realism,realism_canonical,realism_conditional,judge",
                        help="comma list of digit | realism | realism_canonical | realism_conditional | judge")
    parser.add_argument("--steps", type=int, default=1500, help="optimisation steps per net")
    parser.add_argument("--seed", type=int, default=0, help="seed of weights and synthetic batches")
    parser.add_argument("--out", type=Path, default=ROOT, help="root under which data/rewards, data/judges go")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)

    from recast.worlds.digits.rewards import nets

    jobs = {
        "digit": (lambda: nets.train_digit_net(args.steps, args.seed, 250),
                  args.out / "data/rewards/digit_cnn.safetensors"),
        "realism": (lambda: nets.train_realism_net(args.steps, args.seed, 250),
                    args.out / "data/rewards/realism_cnn.safetensors"),
        "realism_canonical": (lambda: nets.train_realism_net(args.steps, args.seed, 250, canonical=True),
                              args.out / "data/rewards/realism_canonical_cnn.safetensors"),
        "realism_conditional": (lambda: nets.train_realism_conditional_net(args.steps, args.seed, 250),
                                args.out / "data/rewards/realism_conditional_cnn.safetensors"),
    }
    if "judge" in args.only:
        from recast.worlds.digits.judges import features

        jobs["judge"] = (lambda: features.train_judge_net(args.steps, args.seed, 250),
                         args.out / "data/judges/judge_features.safetensors")
    for name in args.only.split(","):
        make, path = jobs[name]
        t0 = time.time()
        print(f"training {name} ...", flush=True)
        nets.save_net(make(), path)
        blob = path.read_bytes()
        print(f"{path.relative_to(args.out)}  {len(blob)} bytes  sha256 {hashlib.sha256(blob).hexdigest()}  "
              f"({time.time() - t0:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
