"""One whole training iteration at SD3.5-Medium size, phase by phase, in images per second per GPU (random weights),
for a named shape and a set of throughput switches (`recast.trainer.speed`).

    python benchmarks/bench_iteration.py --shape sd35                       # today's sd35 preset; needs CUDA
    python benchmarks/bench_iteration.py --shape recipe --set sdpa=cudnn --set merged_old=1
    python benchmarks/bench_iteration.py --tiny --device cpu                # tiny models, for the tests
    benchmarks/throughput.py runs the GPU check's plan (both shapes, every switch) in one process.

Shapes, per GPU and iteration (one optimiser update each):
* ``sd35``: the `sd35` preset as it trains today: 6 prompts x 24 images, 10 steps with 9 trained, rollouts of the
  whole batch at once, update micro-batches of 8 (grad_accum 16), no recompute, no KL, four rewards (composition),
  live ReCAST: x̂_0 of 32 samples at the 9 trained steps decoded and scored, a re-solve every 4th iteration.
* ``recipe``: the ReCAST release's recipe on one GPU (RECAST.md §0): 6 sampling batches of 24 images (one prompt
  each), Euler at 25 steps with 24 trained per image, train batch 24 with full recompute, TF32, KL to the base (a
  reference pass per micro-batch), x0-space loss with nft_beta 0.1, 77 + 128 text tokens, three rewards (stage 1),
  a fixed weight table (ReCAST's phase is the signal only: no x̂_0 is scored).

Phases: rollout (Euler steps of the old policy, no grad), decode (VAE, fp32), reward (the stand-ins on the clean
images), recast_score (x̂_0 decoded and scored; live ReCAST only), recast (`recast.credit.Credit`: normalisation,
the signal of every trained pair through W, the live estimate), update (old-policy, reference and trained passes,
NFT loss and backward per micro-batch; then clipping, AdamW and the old-policy update once).

Honest numbers:
* Each phase first runs one untimed unit (CUDA context, library handles, kernel choice, compilation), then times
  ``sample`` units (0: all) and scales their mean by the units in an iteration. A unit is a fixed amount of work (one
  Euler step of a rollout batch, one decode batch, one update micro-batch), so the scaling is exact up to noise. The
  first unit's excess over the mean is reported per phase; with ``compile`` it is the compile time, reported on its
  own and kept out of the iteration.
* Everything the trainer runs in bf16 runs under the same autocast, with the LoRA adapters in fp32 as `Policy`
  keeps them and the old policy swapped in as the trainer swaps it.
* MFU counts model FLOPs: the passes the method needs (old policy, reference, trained forward and backward, LoRA
  unmerged), counted by `torch.utils.flop_counter` at batch 1 without recompute. HFU counts what executes,
  recomputed activations included. Peak: the GPU's dense bf16 rate (H100/H200: 989 TFLOP/s).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_models import Models, build, flops  # noqa: E402
from gpu_smoke import PEAK_BF16_TFLOPS  # noqa: E402
from iteration_phases import one_item_passes, phases  # noqa: E402

PHASES = ("rollout", "decode", "reward", "recast_score", "recast", "update")


@dataclass(frozen=True)
class Shape:
    """One iteration's geometry per GPU."""

    name: str
    images: int  # images per iteration (one optimiser update)
    group: int  # images per prompt
    rollout_batch: int  # images per rollout forward pass
    steps: int  # Euler steps per image
    trained: int  # steps trained per image
    micro: int  # (image, step) examples per update forward/backward pass
    recompute: int  # blocks whose activations are recomputed in backward (0 none, -1 all)
    kl: bool  # a reference (adapters off) pass per micro-batch, for kl_beta > 0
    nft_beta: float  # NFT strength
    nft_norm: str  # the loss's adaptive normalisation
    text_tokens: int  # conditioning tokens (77 CLIP + the T5 length)
    rewards: tuple  # (name, stand-in architecture) per reward
    proxies: int  # samples whose x̂_0 is scored at each trained step (live ReCAST); 0 = a fixed weight table
    tf32: bool  # TF32 for fp32 matmuls (the VAE's attention and linears; its convolutions use TF32 by default)
    decode_batch: int = 24  # images per VAE decode and reward call
    live: tuple = (16, 96, 64, 4)  # window, min_pairs, bootstrap, recast_every of the live estimate


SHAPES = {
    "sd35": Shape("sd35", 144, 24, 144, 10, 9, 8, 0, False, 1.0, "velocity", 77 + 256,
                  (("geneval", "H14"), ("ocr", "H14"), ("pickscore", "H14"), ("clipscore", "L14")), 32, False),
    "recipe": Shape("recipe", 144, 24, 24, 25, 24, 24, -1, True, 0.1, "x0", 77 + 128,
                    (("clipscore", "L14"), ("hpsv2", "H14"), ("pickscore", "H14")), 0, True),
}


def tiny_shape(shape: Shape) -> Shape:
    """The shape at CPU size (8 images in groups of 4, a few steps), same structure."""
    live = shape.proxies > 0
    return replace(shape, images=8, group=4, rollout_batch=8 if shape.rollout_batch == shape.images else 4,
                   steps=3 if live else 5, trained=2 if live else 4, micro=4, text_tokens=16,
                   proxies=2 if live else 0, decode_batch=4, live=(2, 2, 4, 2))


@dataclass(frozen=True)
class Switches:
    """The throughput switches a variant runs with (None: the shape's own setting)."""

    sdpa: str = "auto"  # recast.trainer.speed.SDPA_BACKENDS
    lora_bf16: bool = False
    merged_old: bool = False  # a merged copy for the old-policy passes (rollouts and v_old)
    merge_rollouts: bool = False  # merge the old LoRA for each rollout (the older switch)
    recompute: int | None = None  # blocks recomputed (0 none, -1 all)
    micro: int | None = None  # update micro-batch
    compile: bool = False  # regional compile (irreversible in a process: run it last)
    tf32: bool | None = None

    @classmethod
    def parse(cls, items) -> "Switches":
        """From "key=value" strings (booleans as 1/0); raises SystemExit naming an unknown key or a bad value."""
        kw = {}
        for item in items:
            key, _, value = item.partition("=")
            if key not in cls.__dataclass_fields__:
                known = sorted(cls.__dataclass_fields__)
                raise SystemExit(f"--set {item}: unknown switch {key!r}; choose from {known}")
            try:
                kw[key] = value if key == "sdpa" else int(value) if key in ("recompute", "micro") else \
                    {"1": True, "0": False, "true": True, "false": False}[value.lower()]
            except (KeyError, ValueError):
                raise SystemExit(f"--set {item}: bad value for {key}") from None
        return cls(**kw)


def run(m: Models, shape: Shape, sw: Switches = Switches(), sample: int = 3, compile_backend="inductor",
        flop_cache: dict | None = None) -> dict:
    """Time one iteration of ``shape`` with switches ``sw`` on the models ``m``; returns the phases, rates, MFU."""
    from recast.trainer import speed

    micro = sw.micro or shape.micro
    if shape.images % shape.rollout_batch or shape.images % shape.decode_batch or shape.images % shape.group:
        raise ValueError(f"shape {shape.name}: images ({shape.images}) must be a multiple of the rollout batch, the "
                         "decode batch and the group")
    if (shape.images * shape.trained) % micro:
        raise ValueError(f"shape {shape.name}: micro-batch {micro} must divide images x trained steps")
    n_blocks = len(m.transformer.transformer_blocks)
    recompute = shape.recompute if sw.recompute is None else sw.recompute
    recompute = n_blocks if recompute < 0 else recompute
    tf32 = shape.tf32 if sw.tf32 is None else sw.tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    dev, cuda = m.device, m.device.type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats(dev)
    flop_cache = {} if flop_cache is None else flop_cache
    key = (shape.name, shape.text_tokens, shape.kl, recompute)
    if key not in flop_cache:
        with torch.compiler.set_stance("force_eager"):
            flop_cache[key] = _flops_per_item(m, shape, recompute)
    speed.recompute_blocks(m.transformer, recompute)
    speed.lora_bf16(m.transformer, on=sw.lora_bf16)
    policy = speed.MergedOld(m.policy) if sw.merged_old else m.policy
    compile_s0 = time.perf_counter()
    if sw.compile:  # a variant past dynamo's recompile limit would run eagerly: make that an error instead
        torch._dynamo.config.fail_on_recompile_limit_hit = True
        speed.compile_blocks(m.transformer, backend=compile_backend)
    wall0 = time.perf_counter()
    try:
        out = phases(m, shape, sw, policy, micro, sample, dev)
    except (torch.OutOfMemoryError, torch._dynamo.exc.FailOnRecompileLimitHit) as err:
        m.optimizer.zero_grad(set_to_none=True)
        if cuda:
            torch.cuda.empty_cache()
        what = "out of memory" if isinstance(err, torch.OutOfMemoryError) else "compile fell back to eager"
        return {"shape": asdict(shape), "switches": asdict(sw), "error": f"{what}: {str(err)[:200]}"}
    finally:
        del policy
    fl = flop_cache[key]
    per = {"rollout": ("fwd", shape.images * shape.steps), "decode": ("decode", shape.images),
           "reward": ("reward", shape.images), "recast_score": ("proxy", shape.proxies * shape.trained),
           "update": ("update", shape.images * shape.trained)}
    res = {"shape": asdict(shape), "switches": asdict(sw), "micro": micro, "recompute_blocks": recompute,
           "tf32": tf32, "phases": out, "model_flops": {}, "hardware_flops": {}}
    for ph, (what, n) in per.items():
        res["model_flops"][ph] = fl[what] * n
        res["hardware_flops"][ph] = fl[what + "_hw" if what == "update" else what] * n
    total = sum(p["seconds"] for p in out.values())
    res.update(iteration_s=total, images_per_s=shape.images / total,
               recast_share=(out["recast"]["seconds"] + out["recast_score"]["seconds"]) / total,
               recast_signal_share=out["recast"]["seconds"] / total,
               first_call_excess_s=sum(p["first_call_excess_s"] for p in out.values()),
               wall_s=time.perf_counter() - compile_s0, switch_setup_s=wall0 - compile_s0,
               compiled_graphs=int(torch._dynamo.utils.counters["stats"]["unique_graphs"]))
    res["compile_s"] = res["first_call_excess_s"] if sw.compile else None
    for p, v in out.items():
        v["images_per_s"] = shape.images / v["seconds"] if v["seconds"] else None
    if cuda:
        res["peak_memory_gib"] = torch.cuda.max_memory_allocated(dev) / 2**30
        name = torch.cuda.get_device_name(dev)
        peak = next((v for k, v in PEAK_BF16_TFLOPS.items() if k in name), None)
        res["gpu"], res["peak_tflops"] = name, peak
        if peak:
            for key, fl_kind in (("mfu", "model_flops"), ("hfu", "hardware_flops")):
                res[key] = {p: res[fl_kind][p] / out[p]["seconds"] / (peak * 1e12) for p in per if out[p]["seconds"]}
    return res


def _flops_per_item(m: Models, shape: Shape, recompute: int) -> dict:
    """FLOPs per image (forward, decode, reward, x̂_0 proxy) and per update example (model: no recompute; _hw: with
    ``recompute`` blocks recomputed), counted at batch 1."""
    from recast.trainer import speed

    passes = one_item_passes(m, shape)
    out = {k: flops(fn) for k, fn in passes.items() if k != "update"}
    speed.recompute_blocks(m.transformer, 0)
    out["update"] = flops(passes["update"])
    speed.recompute_blocks(m.transformer, recompute)
    out["update_hw"] = flops(passes["update"]) if recompute else out["update"]
    out["proxy"] = out["decode"] + out["reward"]
    m.optimizer.zero_grad(set_to_none=True)
    return out


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="sd35", choices=sorted(SHAPES))
    ap.add_argument("--tiny", action="store_true", help="tiny models and shape (CPU, tests)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--sample", type=int, default=3, help="timed units per phase after the warm-up (0: all)")
    ap.add_argument("--set", action="append", default=[], help="a switch, key=value (see Switches)")
    ap.add_argument("--compile-backend", default="inductor")
    ap.add_argument("--out", default="")
    a = ap.parse_args(argv)
    shape = tiny_shape(SHAPES[a.shape]) if a.tiny else SHAPES[a.shape]
    m = build(a.tiny, a.device, archs=sorted({arch for _, arch in shape.rewards}))
    res = run(m, shape, Switches.parse(a.set), a.sample, a.compile_backend)
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(res, indent=1) + "\n")
    print(json.dumps({k: res.get(k) for k in ("images_per_s", "recast_share", "mfu", "hfu", "error")}, indent=1))
    return res


if __name__ == "__main__":
    main()
