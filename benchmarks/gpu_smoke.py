"""GPU smoke test: NFT training steps of an SD3.5-Medium-sized transformer with LoRA at 512 px in bf16.

Builds `SD3Transformer2DModel` from SD3.5-Medium's config with random weights (nothing downloads), adds the trainer's
`Policy` (LoRA r32/alpha64 on the attention projections, the old policy and EMA as copies of the adapter; the
results in benchmarks/results/gpu/ predate it and held the old policy as a second peft adapter), and times full NFT
steps on 64x64x16 latents (512 px): old-policy forward (no grad), trained forward, DiffusionNFT loss
(`recast.trainer.losses.nft_loss`), backward, AdamW step, old-policy decay. Conditioning is random with SD3's shapes
(333 tokens x 4096, pooled 2048), so the text encoders and VAE are not part of the timing. Reports images/s, peak
memory and model FLOP utilisation (FLOPs of one step counted by `torch.utils.flop_counter`, over the GPU's dense
bf16 peak).

    python benchmarks/gpu_smoke.py                       # full size; needs CUDA
    python benchmarks/gpu_smoke.py --tiny --device cpu   # a tiny transformer, for tests
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import sys
import time
from pathlib import Path

import torch

# SD3.5-Medium's transformer (diffusers `SD3Transformer2DModel` config of stabilityai/stable-diffusion-3.5-medium):
# 24 joint blocks of 24 heads x 64, patch 2, 16 latent channels, dual attention in blocks 0-12, RMS q/k norm.
SD35_MEDIUM = dict(sample_size=128, patch_size=2, in_channels=16, out_channels=16, num_layers=24,
                   attention_head_dim=64, num_attention_heads=24, joint_attention_dim=4096,
                   caption_projection_dim=1536, pooled_projection_dim=2048, pos_embed_max_size=384,
                   dual_attention_layers=tuple(range(13)), qk_norm="rms_norm")
TINY = dict(sample_size=8, patch_size=2, in_channels=16, out_channels=16, num_layers=2, attention_head_dim=8,
            num_attention_heads=2, joint_attention_dim=32, caption_projection_dim=16, pooled_projection_dim=16,
            pos_embed_max_size=16, dual_attention_layers=(0,), qk_norm="rms_norm")
TEXT_TOKENS = 77 + 256  # CLIP tokens + T5 tokens, as SD3's pipeline concatenates them
PEAK_BF16_TFLOPS = {"H200": 989.0, "H100": 989.0, "A100": 312.0, "L40S": 362.0, "A10": 125.0, "4090": 165.0}


def _peak_tflops(device: torch.device, override: float | None) -> float | None:
    if override:
        return override
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((v for k, v in PEAK_BF16_TFLOPS.items() if k in name), None)


def _step(policy, optimizer, batch, nft_beta: float = 1.0):
    """One NFT step of the trainer's `Policy` on a batch (x0, eps, sigma, hidden, pooled, p); returns the loss."""
    from recast.sampling import PromptEmbeds, predict_velocity
    from recast.trainer.losses import nft_loss

    x0, eps, sigma, hidden, pooled, p = batch
    embeds = PromptEmbeds(hidden, pooled)
    s = sigma.view(-1, 1, 1, 1)
    x_sigma, u = (1 - s) * x0 + s * eps, eps - x0
    with policy.use("old") as old, torch.no_grad():
        v_old = predict_velocity(old, x_sigma, sigma, embeds)
    v = predict_velocity(policy.transformer, x_sigma, sigma, embeds)
    loss = nft_loss(v.float(), v_old.float(), u.float(), p, nft_beta=nft_beta).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    policy.update_old(0.5)
    return float(loss.detach())


def run(args) -> dict:
    from diffusers import SD3Transformer2DModel

    from recast.trainer.policy import Policy

    device = torch.device(args.device)
    if not args.tiny and device.type != "cuda":
        raise SystemExit("gpu_smoke: the full SD3.5-Medium size needs a CUDA GPU (2.5 B parameters); "
                         "use --tiny to run a tiny transformer on CPU")
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.dtype]
    config = TINY if args.tiny else SD35_MEDIUM
    latent = config["sample_size"] if args.tiny else args.resolution // 8
    torch.manual_seed(0)
    transformer = SD3Transformer2DModel(**config).to(device, dtype)
    if args.grad_ckpt:
        transformer.enable_gradient_checkpointing()
    policy = Policy(transformer, lora_rank=args.lora_rank, lora_alpha=2.0 * args.lora_rank)
    params = policy.params
    optimizer = torch.optim.AdamW(params, lr=3e-4)
    B, gen = args.batch, torch.Generator(device="cpu").manual_seed(0)

    def batch():
        def r(*shape):
            return torch.randn(shape, generator=gen).to(device, dtype)

        return (r(B, 16, latent, latent), r(B, 16, latent, latent), torch.rand(B, generator=gen).to(device, dtype),
                r(B, TEXT_TOKENS if not args.tiny else 8, config["joint_attention_dim"]),
                r(B, config["pooled_projection_dim"]), torch.rand(B, generator=gen).to(device))

    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter:  # also the warm-up step
        _step(policy, optimizer, batch())
    flops_per_step = counter.get_total_flops()
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    batches = [batch() for _ in range(args.steps)]
    sync()
    t0 = time.perf_counter()
    losses = [_step(policy, optimizer, b) for b in batches]
    sync()
    seconds = time.perf_counter() - t0
    peak = _peak_tflops(device, args.peak_tflops)
    achieved = flops_per_step * args.steps / seconds
    return {
        "size": "tiny" if args.tiny else "sd3.5-medium",
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
        "dtype": args.dtype, "resolution": None if args.tiny else args.resolution, "latent": latent,
        "batch": B, "steps": args.steps, "lora_rank": args.lora_rank, "grad_ckpt": args.grad_ckpt,
        "params_total": sum(p.numel() for p in transformer.parameters()),
        "params_trainable": sum(p.numel() for p in params),
        "seconds": seconds, "images_per_s": B * args.steps / seconds,
        "tflops_per_step": flops_per_step / 1e12, "achieved_tflops": achieved / 1e12,
        "mfu": achieved / (peak * 1e12) if peak else None, "peak_tflops_assumed": peak,
        "peak_memory_gib": (torch.cuda.max_memory_allocated(device) if device.type == "cuda"
                            else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024) / 2**30,
        "losses_finite": all(map(lambda v: v == v and abs(v) != float("inf"), losses)),
        "torch": torch.__version__,
    }


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tiny", action="store_true", help="a tiny transformer (for tests on CPU)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", default="bf16", choices=["bf16", "fp16", "fp32"])
    p.add_argument("--resolution", type=int, default=512, help="pixels; latents are resolution / 8")
    p.add_argument("--batch", type=int, default=8, help="images per training step")
    p.add_argument("--steps", type=int, default=10, help="timed steps (after one warm-up step)")
    p.add_argument("--lora-rank", type=int, default=32, help="LoRA rank; alpha = 2 * rank")
    p.add_argument("--grad-ckpt", action="store_true", help="gradient checkpointing in the transformer")
    p.add_argument("--peak-tflops", type=float, help="dense peak of the device, for MFU (auto for known GPUs)")
    p.add_argument("--out", help="write the result as JSON here")
    return p


def main(argv=None) -> dict:
    args = build_parser().parse_args(argv)
    if args.batch < 1 or args.steps < 1 or args.resolution % 16:
        raise SystemExit("gpu_smoke: need --batch >= 1, --steps >= 1 and --resolution a multiple of 16")
    result = run(args)
    print(json.dumps(result, indent=2))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
