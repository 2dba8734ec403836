"""A trained LoRA adapter of the SD3 transformer written where a stock pipeline reads it.

The trainer's adapter and its companions (old policy, EMA) live in `recast.trainer.policy.Policy`, the one
implementation of the old policy: copies of the trainable parameters, so they survive sharding over processes
(`recast.trainer.sharding`). An earlier second implementation here, the old policy as a second peft adapter, is
gone. This module keeps the file format: adapters are saved with diffusers' own
`StableDiffusion3Pipeline.save_lora_weights` (peft config in the safetensors metadata, so alpha survives), which
stock `pipe.load_lora_weights(dir)` reads back.
"""

from __future__ import annotations

from pathlib import Path

import torch

__all__ = ["TRAINED", "save_lora", "LORA_WEIGHT_NAME"]

TRAINED = "default"  # peft's name of the adapter `Policy` adds
LORA_WEIGHT_NAME = "pytorch_lora_weights.safetensors"  # diffusers' default file name


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
