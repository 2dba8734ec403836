"""Throughput switches of the trainer, each off by default until a GPU measurement says it is faster
(benchmarks/bench_iteration.py; issue 49), and each tested on CPU for the same samples, losses and gradients.

* ``sdpa_backend``: the scaled-dot-product-attention kernels PyTorch may pick ("auto" leaves it to PyTorch; "flash",
  "efficient", "cudnn" or "math" pins one), for every forward pass of the transformer.
* ``lora_merge_rollouts``: rollouts are no-grad passes of the old policy; merging its LoRA into the base weights for
  them saves the adapter's extra matmuls. The base weights of the adapted layers are copied first and restored
  bit for bit afterwards (unmerging by subtraction would let round-off drift into a bf16 base).
* ``compile_blocks``: regional `torch.compile` of each transformer block (one compiled block reused 24 times in
  SD3.5-Medium, so compile time stays small).
"""

from __future__ import annotations

from contextlib import contextmanager, nullcontext

import torch

__all__ = ["SDPA_BACKENDS", "sdpa_context", "merged_lora", "compile_blocks"]

SDPA_BACKENDS = ("auto", "flash", "efficient", "cudnn", "math")


def sdpa_context(backend: str):
    """A context pinning the attention kernel, or a no-op for "auto".

    Raises:
        ValueError: an unknown backend name.
    """
    if backend not in SDPA_BACKENDS:
        raise ValueError(f"config field sdpa_backend: unknown {backend!r}; choose from {SDPA_BACKENDS}")
    if backend == "auto":
        return nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    kernel = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
              "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}[backend]
    return sdpa_kernel([kernel])


def _lora_layers(transformer):
    """The peft LoRA layers of a transformer that carry an active adapter."""
    from peft.tuners.lora import LoraLayer

    return [m for m in transformer.modules() if isinstance(m, LoraLayer) and m.active_adapters]


@contextmanager
@torch.no_grad()
def merged_lora(transformer):
    """Run the transformer with its active LoRA merged into the base weights and the adapters off; on exit the base
    weights are restored from a copy, exactly, and the adapters are back on. For no-grad passes only."""
    layers = _lora_layers(transformer)
    saved = [(m.get_base_layer(), m.get_base_layer().weight.detach().clone()) for m in layers]
    try:
        for m in layers:
            base = m.get_base_layer()
            for name in m.active_adapters:
                if name in m.lora_A:
                    delta = m.get_delta_weight(name)
                    base.weight.add_(delta.to(base.weight.dtype))
        transformer.disable_adapters()
        yield transformer
    finally:
        transformer.enable_adapters()
        for base, weight in saved:
            base.weight.copy_(weight)


def compile_blocks(transformer) -> int:
    """Compile each transformer block in place (`torch.compile` per block); returns how many were compiled."""
    blocks = getattr(transformer, "transformer_blocks", None)
    if blocks is None:
        raise ValueError(f"{type(transformer).__name__} has no transformer_blocks to compile")
    for block in blocks:
        block.compile()
    return len(blocks)
