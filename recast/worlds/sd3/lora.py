"""LoRA on the SD3 transformer through peft: the trained adapter, the old policy as a second adapter, and I/O.

DiffusionNFT keeps the old policy as a second LoRA adapter on the same base weights (copying 2.5 B parameters is no
option). Here the trained adapter is peft's "default" and the old policy is "old"; both have the same config, and
`decay_old` updates old <- d * old + (1 - d) * default in place, tensor by tensor. Only "default" ever requires grad.

Adapters are saved with diffusers' own `StableDiffusion3Pipeline.save_lora_weights` (peft config in the safetensors
metadata, so alpha survives), which stock `pipe.load_lora_weights(dir)` reads back.
"""

from __future__ import annotations

import warnings
from contextlib import contextmanager
from pathlib import Path

import torch

__all__ = ["SD3_LORA_TARGETS", "TRAINED", "OLD", "add_lora", "lora_params", "use_adapter", "decay_old",
           "copy_adapter", "save_lora", "LORA_WEIGHT_NAME"]

# Projections of diffusers' SD3 `Attention` (joint blocks: image stream to_*, text stream add_*_proj / to_add_out;
# SD3.5's dual-attention `attn2` has only the to_* ones), as DiffusionNFT and Flow-GRPO target.
SD3_LORA_TARGETS = ("to_q", "to_k", "to_v", "to_out.0", "add_q_proj", "add_k_proj", "add_v_proj", "to_add_out")
TRAINED, OLD = "default", "old"
LORA_WEIGHT_NAME = "pytorch_lora_weights.safetensors"  # diffusers' default file name


def _targets(transformer, targets) -> list[str]:
    """The requested target names that exist in this transformer (peft errors on absent ones)."""
    names = {n for n, _ in transformer.named_modules()}
    present = [t for t in targets if any(n == t or n.endswith("." + t) for n in names)]
    if not present:
        raise ValueError(f"none of the LoRA targets {targets} is a module of {type(transformer).__name__}")
    return present


def add_lora(transformer, *, rank: int = 32, alpha: float = 64.0, targets=SD3_LORA_TARGETS, seed: int = 0,
             with_old: bool = True) -> None:
    """Freeze the transformer and add the trained LoRA ("default") and, optionally, the old policy ("old").

    Args:
        transformer: a diffusers `SD3Transformer2DModel` (modified in place).
        rank, alpha: LoRA rank r and alpha (scale alpha / r); DiffusionNFT uses r32 / alpha64.
        targets: module-name suffixes to adapt (`SD3_LORA_TARGETS`); absent ones are skipped.
        seed: seeds the adapter initialisation (global RNG untouched). peft initialises B = 0, so the policy starts
            at the base model; "old" starts as an exact copy of "default".
        with_old: add the "old" adapter.

    Both adapters are kept in float32 even when the base is bf16/fp16 (peft casts activations): the trained one for
    the optimiser, the old one because `decay_old` averages into it every epoch.
    """
    from diffusers.training_utils import cast_training_params
    from peft import LoraConfig

    if rank < 1:
        raise ValueError(f"LoRA rank must be >= 1, got {rank} (use full fine-tuning instead)")
    config = LoraConfig(r=rank, lora_alpha=alpha, init_lora_weights="gaussian",
                        target_modules=_targets(transformer, targets))
    transformer.requires_grad_(False)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        transformer.add_adapter(config, adapter_name=TRAINED)
        if with_old:
            with warnings.catch_warnings():  # peft warns that a second adapter is unusual; here it is the point
                warnings.filterwarnings("ignore", message=".*multiple adapters.*")
                transformer.add_adapter(config, adapter_name=OLD)
    if with_old:
        copy_adapter(transformer, TRAINED, OLD)
    _activate(transformer, TRAINED)
    cast_training_params(transformer, dtype=torch.float32)
    for p in lora_params(transformer, OLD):  # the old policy is averaged in place: keep it in fp32 too
        p.data = p.data.float()


def _adapter_tensors(transformer, name: str) -> dict[str, torch.nn.Parameter]:
    """LoRA parameters of one adapter, keyed by their name with the adapter part removed."""
    tag = f".{name}."
    return {n.replace(tag, "."): p for n, p in transformer.named_parameters() if tag in n and "lora_" in n}


def lora_params(transformer, name: str = TRAINED) -> list[torch.nn.Parameter]:
    """The parameters of adapter `name` (the optimiser's for "default")."""
    return list(_adapter_tensors(transformer, name).values())


def _activate(transformer, name: str) -> None:
    """Make `name` the active adapter; only "default" ever requires grad."""
    from peft.tuners.tuners_utils import set_adapter

    set_adapter(transformer, name, inference_mode=name != TRAINED)
    for p in lora_params(transformer, TRAINED):
        p.requires_grad_(True)
    for other in {OLD} - {TRAINED}:
        for p in _adapter_tensors(transformer, other).values():
            p.requires_grad_(False)


@contextmanager
def use_adapter(transformer, name: str):
    """Run the transformer with adapter `name` active ("old"), or with adapters disabled (None: the base model).

    Run forwards under `torch.no_grad()` inside; on exit "default" is active again, with requires_grad restored, so
    switching to "old" between a differentiable forward of "default" and its backward is safe (tested).
    """
    if name is None:
        transformer.disable_adapters()
        try:
            yield transformer
        finally:
            transformer.enable_adapters()
        return
    _activate(transformer, name)
    try:
        yield transformer
    finally:
        _activate(transformer, TRAINED)


@torch.no_grad()
def copy_adapter(transformer, src: str, dst: str) -> None:
    """dst <- src, tensor by tensor."""
    decay_old(transformer, 0.0, trained=src, old=dst)


@torch.no_grad()
def decay_old(transformer, decay: float, *, trained: str = TRAINED, old: str = OLD) -> None:
    """old <- decay * old + (1 - decay) * trained over the adapter tensors (in place).

    Raises:
        ValueError: decay outside [0, 1], or the two adapters do not have the same tensors.
    """
    if not 0.0 <= decay <= 1.0:
        raise ValueError(f"decay must be in [0, 1], got {decay}")
    src, dst = _adapter_tensors(transformer, trained), _adapter_tensors(transformer, old)
    if set(src) != set(dst) or not src:
        raise ValueError(f"adapters {trained!r} and {old!r} differ (or are missing); add both with add_lora")
    for key, d in dst.items():
        d.mul_(decay).add_(src[key].to(d.dtype), alpha=1.0 - decay)


def save_lora(transformer, path: str | Path, adapter: str = TRAINED) -> Path:
    """Write one adapter as `path/pytorch_lora_weights.safetensors`, readable by `pipe.load_lora_weights(path)`; the
    folder is written beside `path` and renamed into place (`recast.io.atomic_dir`), replacing what it held."""
    from diffusers import StableDiffusion3Pipeline
    from peft.utils import get_peft_model_state_dict

    from recast.io import atomic_dir

    state = get_peft_model_state_dict(transformer, adapter_name=adapter)
    state = {k: v.detach().to("cpu", torch.float32).contiguous() for k, v in state.items()}
    meta = transformer.peft_config[adapter].to_dict()
    return atomic_dir(Path(path), lambda d: StableDiffusion3Pipeline.save_lora_weights(
        str(d), transformer_lora_layers=state, transformer_lora_adapter_metadata=meta))
