"""One whole ReCAST iteration at SD3.5-Medium size, phase by phase, in images per second per GPU (random weights).

    python benchmarks/bench_iteration.py                     # SD3.5-Medium size, 512 px, bf16; needs CUDA
    python benchmarks/bench_iteration.py --set sdpa=flash --set merge=1 --set compile=1   # with the speed-ups
    python benchmarks/bench_iteration.py --tiny --device cpu # tiny models, for the tests

Phases, as the trainer runs them with the `sd35` preset (6 prompts x 24 images per GPU, 10 steps, 9 trained):
1. rollouts: the 10-step ODE of the old policy (no grad), in micro-batches;
2. VAE decoding of the clean samples;
3. x̂_0 and reward scoring: the informativeness subset's one-step predictions at the 9 trained steps, decoded and
   scored, and the clean samples scored, by a stand-in of PickScore's size (CLIP ViT-H/14, random weights);
4. ReCAST's informativeness: `recast.credit.Credit.observe` on those rewards (pooling, estimate, solver);
5. the NFT update: old-policy forward, trained forward, loss, backward, AdamW, over every (sample, column) pair.

MFU counts the FLOPs each phase executes (`torch.utils.flop_counter` on one micro-batch, scaled): for LoRA the
backward pass computes input gradients through the frozen layers but no weight gradients for them, so a training
step is about 2x its forward pass, not the 3x of full fine-tuning; the conventional "6N" count would overstate the
work, and is reported beside it for comparison only. Peak: the GPU's dense bf16 rate (H200: 989 TFLOP/s).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from contextlib import nullcontext
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_smoke import PEAK_BF16_TFLOPS, SD35_MEDIUM, TEXT_TOKENS, TINY  # noqa: E402

VAE_SD3 = dict(in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * 4,
               up_block_types=("UpDecoderBlock2D",) * 4, block_out_channels=(128, 256, 512, 512), layers_per_block=2,
               latent_channels=16, norm_num_groups=32, use_quant_conv=False, use_post_quant_conv=False)
VAE_TINY = dict(in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * 2,
                up_block_types=("UpDecoderBlock2D",) * 2, block_out_channels=(8, 16), layers_per_block=1,
                latent_channels=16, norm_num_groups=8, use_quant_conv=False, use_post_quant_conv=False)
CLIP_H14 = dict(vision=dict(image_size=224, patch_size=14, hidden_size=1280, intermediate_size=5120,
                            num_hidden_layers=32, num_attention_heads=16),
                text=dict(hidden_size=1024, intermediate_size=4096, num_hidden_layers=24, num_attention_heads=16,
                          max_position_embeddings=77), projection_dim=1024)
CLIP_TINY = dict(vision=dict(image_size=32, patch_size=8, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                             num_attention_heads=2),
                 text=dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                           max_position_embeddings=16), projection_dim=8)


def _timed(fn, device):
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    out = fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return out, time.perf_counter() - start


def _flops(fn) -> int:
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops()


def build(tiny: bool, device, dtype):
    """The transformer with LoRA (trained + old adapters), the VAE and the reward stand-in, random weights."""
    from diffusers import AutoencoderKL, SD3Transformer2DModel
    from transformers import CLIPConfig, CLIPModel

    from recast.worlds.sd3 import lora as L

    torch.manual_seed(0)
    tr = SD3Transformer2DModel(**(TINY if tiny else SD35_MEDIUM)).to(device, dtype)
    L.add_lora(tr, rank=4 if tiny else 32, alpha=8.0 if tiny else 64.0)
    vae = AutoencoderKL(**(VAE_TINY if tiny else VAE_SD3)).to(device, torch.float32).eval().requires_grad_(False)
    c = CLIP_TINY if tiny else CLIP_H14
    clip = CLIPModel(CLIPConfig(text_config={**c["text"], "vocab_size": 1000}, vision_config=c["vision"],
                                projection_dim=c["projection_dim"])).to(device, dtype).eval().requires_grad_(False)
    return tr, vae, clip


def run(tiny: bool, device: str, images: int, micro: int, steps: int, trained: int, subset: int, *, sdpa: str = "auto",
        merge: bool = False, compile_: bool = False, checkpointing: bool = False) -> dict:
    from recast.credit import Credit
    from recast.sampling import PromptEmbeds, predict_velocity
    from recast.trainer.losses import nft_loss
    from recast.trainer.speed import compile_blocks, merged_lora, sdpa_context
    from recast.worlds.sd3 import lora as L

    dev = torch.device(device)
    dtype = torch.float32 if tiny or dev.type == "cpu" else torch.bfloat16
    tr, vae, clip = build(tiny, dev, dtype)
    if checkpointing:
        tr.enable_gradient_checkpointing()
    if compile_:
        compile_blocks(tr)
    cfg = tr.config
    side = cfg.sample_size if tiny else 64
    latent = (cfg.in_channels, side, side)
    tokens = 16 if tiny else TEXT_TOKENS
    hidden = torch.randn(micro, tokens, cfg.joint_attention_dim, device=dev, dtype=dtype)
    pooled = torch.randn(micro, cfg.pooled_projection_dim, device=dev, dtype=dtype)
    emb = PromptEmbeds(hidden, pooled)
    params = L.lora_params(tr)
    opt = torch.optim.AdamW(params, lr=1e-4)
    sigmas = torch.linspace(1, 0, steps + 1)
    clip_side = clip.config.vision_config.image_size
    times, flops = {}, {}

    def forward(x, s):
        return predict_velocity(tr, x, s, emb)

    def rollout():
        with torch.no_grad(), sdpa_context(sdpa), L.use_adapter(tr, L.OLD):
            with merged_lora(tr) if merge else nullcontext():
                out = []
                for _ in range(images // micro):
                    x = torch.randn(micro, *latent, device=dev, dtype=dtype)
                    for j in range(steps):
                        x = x + (sigmas[j + 1] - sigmas[j]) * forward(x, float(sigmas[j]))
                    out.append(x)
        return torch.cat(out)

    def decode(z):
        with torch.no_grad():
            return torch.cat([vae.decode(z[i:i + micro].float()).sample for i in range(0, len(z), micro)])

    def score(img):
        with torch.no_grad():
            x = torch.nn.functional.interpolate(img, size=(clip_side, clip_side)).to(dtype)
            ids = torch.randint(0, 1000, (len(img), 16 if tiny else 77), device=dev)
            out = clip(input_ids=ids, pixel_values=x)
            return out.logits_per_image.diagonal().float()

    def update():
        opt.zero_grad(set_to_none=True)
        for _ in range(images * trained // micro):
            x0 = torch.randn(micro, *latent, device=dev, dtype=dtype)
            eps = torch.randn_like(x0)
            s = float(sigmas[torch.randint(0, steps, ()).item()])
            x_s = (1 - s) * x0 + s * eps
            with sdpa_context(sdpa):
                with torch.no_grad(), L.use_adapter(tr, L.OLD):
                    v_old = forward(x_s, s).float()
                v = forward(x_s, s).float()
                loss = nft_loss(v, v_old, (eps - x0).float(), torch.full((micro,), 0.6, device=dev)).loss
            loss.backward()
        opt.step()

    x0, times["rollout"] = _timed(rollout, dev)
    imgs, times["decode"] = _timed(lambda: decode(x0), dev)
    n_proxy = subset * trained

    def proxies():
        hats = torch.randn(n_proxy, *latent, device=dev, dtype=dtype)
        return score(decode(hats)), score(imgs)

    (r_hat, r_clean), times["score"] = _timed(proxies, dev)
    credit = Credit(["reward", "reward_2"], steps, min_pairs=8)
    groups = [i // 24 for i in range(images)] if images % 24 == 0 else list(range(images))

    def informativeness():
        R = torch.stack([r_clean, r_clean.roll(1)]).cpu()
        credit.normalise(R, groups)
        sample = torch.arange(subset).repeat_interleave(trained)
        column = torch.arange(trained).repeat(subset) + (steps - trained)
        credit.observe(sample, column, torch.stack([r_hat, r_hat.roll(1)]).cpu())

    _, times["informativeness"] = _timed(informativeness, dev)
    _, times["update"] = _timed(update, dev)
    one_fwd = _flops(lambda: forward(torch.randn(micro, *latent, device=dev, dtype=dtype), 0.5))

    def one_train_step():
        x = torch.randn(micro, *latent, device=dev, dtype=dtype)
        forward(x, 0.5).float().pow(2).mean().backward()

    one_train = _flops(one_train_step)
    flops["rollout"] = one_fwd * steps * (images // micro)
    flops["update"] = (one_fwd + one_train) * (images * trained // micro)  # old-policy forward + trained fwd/bwd
    total = sum(times.values())
    out = {"tiny": tiny, "device": device, "images": images, "micro_batch": micro, "steps": steps, "trained": trained,
           "informativeness_subset": subset, "switches": {"sdpa": sdpa, "merge": merge, "compile": compile_,
                                                          "checkpointing": checkpointing},
           "seconds": times, "images_per_s": {k: images / v for k, v in times.items()},
           "iteration_images_per_s": images / total, "recast_share": times["informativeness"] / total,
           "flops_executed": flops, "train_step_over_forward": one_train / one_fwd,
           "machine": platform.processor() or platform.machine()}
    if dev.type == "cuda":
        name = torch.cuda.get_device_name(dev)
        peak = next((v for k, v in PEAK_BF16_TFLOPS.items() if k in name), None)
        out["gpu"] = name
        if peak:
            out["mfu"] = {k: flops[k] / times[k] / (peak * 1e12) for k in flops}
            out["mfu_6N_convention_update"] = 3 * one_fwd * (images * trained // micro) / times["update"] / (peak * 1e12)
    return out


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--images", type=int, default=144, help="images per GPU per iteration (sd35: 6 x 24)")
    ap.add_argument("--micro", type=int, default=8)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--trained", type=int, default=9)
    ap.add_argument("--subset", type=int, default=32)
    ap.add_argument("--set", action="append", default=[], help="sdpa=NAME merge=1 compile=1 checkpointing=1")
    ap.add_argument("--out", default="")
    a = ap.parse_args(argv)
    sw = dict(s.split("=", 1) for s in a.set)
    res = run(a.tiny, a.device, a.images, a.micro, a.steps, a.trained, a.subset, sdpa=sw.get("sdpa", "auto"),
              merge=sw.get("merge") == "1", compile_=sw.get("compile") == "1",
              checkpointing=sw.get("checkpointing") == "1")
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(res, indent=1) + "\n")
    print(json.dumps({k: res[k] for k in ("images_per_s", "iteration_images_per_s", "recast_share")}, indent=1))
    return res


if __name__ == "__main__":
    main()
