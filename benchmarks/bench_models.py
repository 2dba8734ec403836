"""The models a whole-iteration benchmark runs, built from config with random weights (nothing downloads), and FLOP
counting at batch 1.

SD3.5-Medium's transformer (`gpu_smoke.SD35_MEDIUM`) with the trainer's own LoRA (`recast.trainer.policy.Policy`:
r32/α64 on the attention projections, fp32 adapters on a bf16 base, the old policy as a value copy), SD3's VAE
(fp32, as the SD3 world decodes) and stand-ins of the rewards' size: CLIP ViT-H/14 (PickScore, HPSv2) and ViT-L/14
(CLIPScore). GenEval's detector and OCR are not modelled; a shape that trains them scores a ViT-H/14 in their place.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_smoke import SD35_MEDIUM, TINY  # noqa: E402

VAE_SD3 = dict(in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * 4,
               up_block_types=("UpDecoderBlock2D",) * 4, block_out_channels=(128, 256, 512, 512), layers_per_block=2,
               latent_channels=16, norm_num_groups=32, use_quant_conv=False, use_post_quant_conv=False)
VAE_TINY = dict(in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * 2,
                up_block_types=("UpDecoderBlock2D",) * 2, block_out_channels=(8, 16), layers_per_block=1,
                latent_channels=16, norm_num_groups=8, use_quant_conv=False, use_post_quant_conv=False)
CLIPS = {  # (vision tower, text tower, projection); text towers read 77 tokens
    "H14": (dict(image_size=224, patch_size=14, hidden_size=1280, intermediate_size=5120, num_hidden_layers=32,
                 num_attention_heads=16),
            dict(hidden_size=1024, intermediate_size=4096, num_hidden_layers=24, num_attention_heads=16), 1024),
    "L14": (dict(image_size=224, patch_size=14, hidden_size=1024, intermediate_size=4096, num_hidden_layers=24,
                 num_attention_heads=16),
            dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12), 768),
}
CLIP_TINY = (dict(image_size=32, patch_size=8, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                  num_attention_heads=2),
             dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2), 8)
TEXT_LEN, TEXT_LEN_TINY = 77, 16


@dataclass
class Models:
    """Everything a benchmark iteration runs. ``dtype`` is the transformer's and the reward stand-ins'."""

    transformer: torch.nn.Module
    policy: object  # recast.trainer.policy.Policy
    vae: torch.nn.Module
    clips: dict  # architecture name -> CLIPModel
    optimizer: torch.optim.Optimizer
    device: torch.device
    dtype: torch.dtype
    tiny: bool

    @property
    def text_len(self) -> int:
        return TEXT_LEN_TINY if self.tiny else TEXT_LEN


def build(tiny: bool, device: str, archs=("H14", "L14")) -> Models:
    """The transformer with the trainer's LoRA, the VAE, the reward stand-ins and AdamW, with random weights. Full
    size builds on the device directly (2.3 B parameters initialise in seconds there, minutes on a CPU)."""
    from diffusers import AutoencoderKL, SD3Transformer2DModel
    from transformers import CLIPConfig, CLIPModel

    from recast.trainer.policy import Policy

    dev = torch.device(device)
    dtype = torch.bfloat16 if dev.type == "cuda" and not tiny else torch.float32  # "meta": FLOPs only
    torch.manual_seed(0)
    with torch.device(dev):
        tr = SD3Transformer2DModel(**(TINY if tiny else SD35_MEDIUM)).to(dev, dtype)
        rank = 4 if tiny else 32
        policy = Policy(tr, lora_rank=rank, lora_alpha=2.0 * rank, seed=0)
        vae = AutoencoderKL(**(VAE_TINY if tiny else VAE_SD3)).to(dev, torch.float32).eval().requires_grad_(False)
        clips = {}
        for arch in archs:
            vision, text, proj = CLIP_TINY if tiny else CLIPS[arch]
            text = {**text, "vocab_size": 1000, "max_position_embeddings": TEXT_LEN_TINY if tiny else TEXT_LEN}
            clips[arch] = CLIPModel(CLIPConfig(text_config=text, vision_config=vision, projection_dim=proj)).to(
                dev, dtype).eval().requires_grad_(False)
    opt = torch.optim.AdamW(policy.params, lr=3e-4, weight_decay=1e-4, betas=(0.9, 0.999), eps=1e-8)
    return Models(tr, policy, vae, clips, opt, dev, dtype, tiny)


def flops(fn) -> int:
    """FLOPs `fn()` executes, by `torch.utils.flop_counter` (recomputed activations are counted again)."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops()
