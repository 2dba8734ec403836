"""The LoRA targets are the release's: each block's joint attention `attn` (image stream to_q/k/v, to_out.0; text
stream add_q/k/v_proj, to_add_out), never the second, image-only attention `attn2` of SD3.5's dual-attention
(MMDiT-X) blocks (issue 69, item 2; docs/method.md §0)."""

from __future__ import annotations

import torch
from diffusers import SD3Transformer2DModel
from peft import LoraConfig

from recast.trainer.policy import LORA_TARGETS, Policy

RELEASE_TARGETS = {"attn.to_q", "attn.to_k", "attn.to_v", "attn.to_out.0", "attn.add_q_proj", "attn.add_k_proj",
                   "attn.add_v_proj", "attn.to_add_out"}
BARE = ("to_q", "to_k", "to_v", "to_out.0", "add_q_proj", "add_k_proj", "add_v_proj", "to_add_out")  # the old list

# stabilityai/stable-diffusion-3.5-medium's transformer/config.json: 24 blocks of 24 heads x 64, dual attention in
# blocks 0-12, RMS q/k norm (benchmarks/gpu_smoke.py's SD35_MEDIUM)
SD35_MEDIUM = dict(sample_size=128, patch_size=2, in_channels=16, out_channels=16, num_layers=24,
                   attention_head_dim=64, num_attention_heads=24, joint_attention_dim=4096,
                   caption_projection_dim=1536, pooled_projection_dim=2048, pos_embed_max_size=384,
                   dual_attention_layers=tuple(range(13)), qk_norm="rms_norm")
# a tiny SD3 transformer with two dual-attention blocks (of three; the last is context-pre-only, as in SD3)
TINY = dict(sample_size=8, patch_size=2, in_channels=16, out_channels=16, num_layers=3, attention_head_dim=8,
            num_attention_heads=2, joint_attention_dim=32, caption_projection_dim=16, pooled_projection_dim=16,
            pos_embed_max_size=16, dual_attention_layers=(0, 1), qk_norm="rms_norm")


def _adapted(transformer) -> list[str]:
    return [n for n, m in transformer.named_modules() if hasattr(m, "lora_A")]


def test_the_targets_are_the_releases():
    assert set(LORA_TARGETS) == RELEASE_TARGETS and len(LORA_TARGETS) == 8


def test_a_tiny_dual_attention_transformer_adapts_attn_and_never_attn2():
    torch.manual_seed(0)
    pol = Policy(SD3Transformer2DModel(**TINY), lora_rank=4, lora_alpha=8.0)
    adapted = _adapted(pol.transformer)
    assert len(adapted) == 23  # 3 blocks x 8, less the last block's to_add_out (context-pre-only)
    assert not any(".attn2." in n for n in adapted) and all(".attn." in n for n in adapted)
    assert {n.split(".", 2)[2] for n in adapted} == RELEASE_TARGETS
    assert all(".attn." in n and ".attn2." not in n for n in pol.names)  # the trained (and old, EMA) parameters
    mods = dict(pol.transformer.named_modules())
    assert pol.num_trainable == sum(4 * (mods[n].base_layer.in_features + mods[n].base_layer.out_features)
                                    for n in adapted)
    # the bare names matched attn2's to_q/k/v and to_out.0 as suffixes: 4 more layers in each dual-attention block
    old = SD3Transformer2DModel(**TINY)
    old.add_adapter(LoraConfig(r=4, lora_alpha=8.0, target_modules=list(BARE)))
    assert len(_adapted(old)) == 31 and sum(".attn2." in n for n in _adapted(old)) == 8


def test_sd35_medium_adapts_191_layers_with_18_8m_lora_parameters_at_rank_32():
    """SD3.5-Medium's own configuration built on the meta device (no weights allocated): 24 blocks x 8 targets less
    the last block's to_add_out = 191 layers, each 1536 -> 1536, so r(in + out) = 32 x 3072 = 98,304 LoRA
    parameters a layer and 18,776,064 in all (the bare names: 243 layers, 23,887,872, the 13 dual-attention blocks'
    attn2.to_q/k/v/to_out.0 on top)."""
    with torch.device("meta"):
        tr = SD3Transformer2DModel(**SD35_MEDIUM)
        pol = Policy(tr, lora_rank=32, lora_alpha=64.0)
    assert all(p.is_meta for p in tr.parameters())
    adapted = _adapted(tr)
    assert len(adapted) == 191 and not any(".attn2." in n for n in adapted)
    assert sum(n.startswith("transformer_blocks.23.") for n in adapted) == 7  # context-pre-only: no to_add_out
    assert pol.num_trainable == 191 * 32 * (1536 + 1536) == 18_776_064
    with torch.device("meta"):
        old = SD3Transformer2DModel(**SD35_MEDIUM)
        old.add_adapter(LoraConfig(r=32, lora_alpha=64.0, target_modules=list(BARE)))
    assert len(_adapted(old)) == 243 and sum(".attn2." in n for n in _adapted(old)) == 13 * 4
    assert sum(p.numel() for n, p in old.named_parameters() if "lora_" in n) == 23_887_872


def test_the_exported_adapter_names_the_targets_it_adapted(tmp_path):
    """`save_adapter`'s peft metadata names the release's targets, so a stock `load_lora_weights` into a
    dual-attention transformer adapts what was trained and not attn2 as well."""
    import json

    from safetensors import safe_open

    from recast.trainer.adapters import adapter_state, save_adapter

    torch.manual_seed(0)
    pol = Policy(SD3Transformer2DModel(**TINY), lora_rank=4, lora_alpha=8.0)
    state = adapter_state(pol.names, dict(zip(pol.names, pol.params)))
    save_adapter(state, 4, 8.0, tmp_path)
    with safe_open(str(tmp_path / "pytorch_lora_weights.safetensors"), "pt") as f:
        meta = f.metadata()
    config = json.loads(next(v for k, v in meta.items() if "lora_adapter_metadata" in k))
    assert set(config["transformer.target_modules"]) == RELEASE_TARGETS
