"""Throughput switches of the trainer, each off by default until a GPU measurement says it is faster
(benchmarks/throughput.py; issues 49 and 62), and each tested on CPU for the same samples, losses and gradients.

* ``sdpa_backend``: the scaled-dot-product-attention kernels PyTorch may pick ("auto" leaves it to PyTorch; "flash",
  "efficient", "cudnn" or "math" pins one), for every forward pass of the transformer.
* ``lora_merge_rollouts``: rollouts are no-grad passes of the old policy; merging its LoRA into the base weights for
  them saves the adapter's extra matmuls. The base weights of the adapted layers are copied first and restored
  bit for bit afterwards (unmerging by subtraction would let round-off drift into a bf16 base).
* ``lora_merged_old``: a standing copy of the adapted layers' base weights with the old policy's LoRA merged in,
  refreshed after each old-policy update and swapped in (a pointer swap, no copy) for every old-policy pass: the
  rollouts and the NFT update's v_old. Costs one copy of the adapted weights (1.2 GB in bf16 at SD3.5-Medium).
* ``lora_bf16``: peft copies each LoRA layer's input to fp32 (the adapter's dtype) before autocast copies it back to
  bf16 for the matmul; both copies round-trip exactly, so skipping them changes no bit and saves two passes over
  the activations per adapted layer. The fp32 master weights and the optimiser stay as they are.
* ``recompute_blocks``: activation recompute for the first n transformer blocks only, so a micro-batch that does
  not fit without recompute need not pay a full recompute (-1 leaves the world's own setting).
* ``compile_blocks``: regional `torch.compile` of each transformer block. Every block runs the same code object, and
  dynamo keeps at most `recompile_limit` graphs per code object (8 by default) before it silently runs every further
  variant eagerly. A run needs one graph per block kind (dual attention, plain, the context-pre-only last block) for
  each grad mode, adapters on or off, autocast on or off, static or dynamic batch: the limit is raised to that bound.

`apply_switches(cfg, transformer, policy)` applies the build-time ones in a safe order and returns the policy the loop
should use (the merged-copy wrapper when ``lora_merged_old`` is on).
"""

from __future__ import annotations

from contextlib import contextmanager, nullcontext

import torch

__all__ = ["SDPA_BACKENDS", "VARIANTS_PER_KIND", "sdpa_context", "merged_lora", "compile_blocks", "block_kinds",
           "recompile_limit", "recompute_blocks", "lora_bf16", "MergedOld", "check_switches", "apply_switches"]

SDPA_BACKENDS = ("auto", "flash", "efficient", "cudnn", "math")
# graph variants one block kind can need: grad on/off x adapters on/off x autocast on/off x static/dynamic batch
VARIANTS_PER_KIND = 16


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


def _lora_layers(transformer, active_only: bool = True):
    """The peft LoRA layers of a transformer (those with an active adapter, unless ``active_only`` is False)."""
    from peft.tuners.lora import LoraLayer

    return [m for m in transformer.modules() if isinstance(m, LoraLayer) and (m.active_adapters or not active_only)]


def _delta(layer) -> torch.Tensor | None:
    """The summed weight delta of a LoRA layer's active adapters (fp32 when the adapters are), or None."""
    deltas = [layer.get_delta_weight(a) for a in layer.active_adapters if a in layer.lora_A]
    return sum(deltas) if deltas else None


@contextmanager
@torch.no_grad()
def merged_lora(transformer):
    """Run the transformer with its active LoRA merged into the base weights and the adapters off; on exit the base
    weights are restored from a copy, exactly, and the adapters are back on. For no-grad passes only. Layers whose
    adapters are already off (a `MergedOld` pass) are left alone, so nothing is merged twice."""
    layers = [m for m in _lora_layers(transformer) if not m.disable_adapters]
    saved = [(m.get_base_layer(), m.get_base_layer().weight.detach().clone()) for m in layers]
    try:
        for m in layers:
            base, delta = m.get_base_layer(), _delta(m)
            if delta is not None:
                base.weight.add_(delta.to(base.weight.dtype))
        transformer.disable_adapters()
        yield transformer
    finally:
        transformer.enable_adapters()
        for base, weight in saved:
            base.weight.copy_(weight)


def _blocks(transformer):
    blocks = getattr(transformer, "transformer_blocks", None)
    if blocks is None:
        raise ValueError(f"{type(transformer).__name__} has no transformer_blocks")
    return list(blocks)


def block_kinds(transformer) -> int:
    """How many kinds of block the transformer holds, as dynamo tells them apart (class, dual attention, whether the
    block only reads the context stream): 3 in SD3.5-Medium, 2 in the tiny SD3 world."""
    return len({(type(b), bool(getattr(b, "use_dual_attention", False)), bool(getattr(b, "context_pre_only", False)))
                for b in _blocks(transformer)})


def recompile_limit() -> int:
    """dynamo's graphs-per-code-object limit in force (`recompile_limit`, `cache_size_limit` before torch 2.7)."""
    cfg = torch._dynamo.config
    return getattr(cfg, "recompile_limit", None) or cfg.cache_size_limit


def _raise_recompile_limit(need: int) -> None:
    cfg = torch._dynamo.config
    name = "recompile_limit" if hasattr(cfg, "recompile_limit") else "cache_size_limit"
    setattr(cfg, name, max(getattr(cfg, name), need))
    if hasattr(cfg, "accumulated_recompile_limit"):
        cfg.accumulated_recompile_limit = max(cfg.accumulated_recompile_limit, 4 * need)


def compile_blocks(transformer, backend="inductor") -> int:
    """Compile each transformer block in place (`torch.compile` per block, regional compile) and raise dynamo's
    recompile limit to ``VARIANTS_PER_KIND`` graphs per block kind, so no variant falls back to eager; returns how
    many blocks were compiled. Blocks compiled already are left as they are.

    Args:
        transformer: a diffusers SD3 transformer (anything with ``transformer_blocks``).
        backend: torch.compile's backend ("inductor"; tests use "eager" or a counter).
    """
    blocks = _blocks(transformer)
    _raise_recompile_limit(VARIANTS_PER_KIND * block_kinds(transformer))
    for block in blocks:
        if getattr(block, "_compiled_call_impl", None) is None:
            block.compile(backend=backend)
    return len(blocks)


def recompute_blocks(transformer, n: int) -> int:
    """Recompute in the backward pass the activations of the first n transformer blocks only (n = all blocks is
    full gradient checkpointing, 0 none); returns n.

    Raises:
        ValueError: n outside 0..number of blocks (names the config field).
    """
    blocks = _blocks(transformer)
    if not 0 <= n <= len(blocks):
        raise ValueError(f"config field recompute_blocks: {n} is outside 0..{len(blocks)} (the transformer's blocks; "
                         "-1 keeps the world's gradient_checkpointing setting)")
    if n == 0:
        transformer.disable_gradient_checkpointing()
        return 0
    chosen = {id(b) for b in blocks[:n]}

    def checkpointed(block, *args):
        if id(block) in chosen:
            return torch.utils.checkpoint.checkpoint(block.__call__, *args, use_reentrant=False)
        return block(*args)

    transformer.enable_gradient_checkpointing(gradient_checkpointing_func=checkpointed)
    return n


def lora_bf16(transformer, on: bool = True) -> int:
    """Let every LoRA layer take its input in the dtype it arrives in (bf16 under autocast) instead of copying it to
    the adapter's fp32 first (``on=False`` restores peft's copy); returns how many layers it set. Needs autocast or
    adapters in the base's dtype."""
    layers = _lora_layers(transformer, active_only=False)
    for m in layers:
        m.cast_input_dtype_enabled = not on
    return len(layers)


class MergedOld:
    """The trainer's `Policy`, whose old-policy passes run on a merged copy of the weights.

    The copy holds, for every adapted layer, base weight + the old policy's LoRA delta, rounded once to the base's
    dtype. ``use("old")`` swaps it in (pointer swaps) with the adapters off, and swaps back on exit; every other use
    and attribute is the wrapped policy's. `update_old` and `load_state_dict` refresh the copy.

    Raises:
        ValueError: a policy without LoRA (names the config field).
    """

    def __init__(self, policy):
        if not getattr(policy, "lora", False):
            raise ValueError("config field lora_merged_old: needs LoRA (lora_rank > 0); a full fine-tuning run has no "
                             "adapter to merge")
        self._policy = policy
        self._bases = [m.get_base_layer() for m in _lora_layers(policy.transformer)]
        self._layers = _lora_layers(policy.transformer)
        self._merged = [b.weight.detach().clone() for b in self._bases]
        self.refresh()

    def __getattr__(self, name):
        if "_policy" not in self.__dict__:  # during construction or unpickling
            raise AttributeError(name)
        return getattr(self.__dict__["_policy"], name)

    @torch.no_grad()
    def refresh(self) -> None:
        """Recompute the merged copy from the base weights and the old policy's adapter values."""
        with self._policy.use("old"):
            for layer, base, w in zip(self._layers, self._bases, self._merged):
                delta = _delta(layer)
                w.copy_(base.weight.float() + delta.float() if delta is not None else base.weight)

    def _swap(self) -> None:
        for i, base in enumerate(self._bases):
            base.weight.data, self._merged[i] = self._merged[i], base.weight.data

    @contextmanager
    def use(self, which: str):
        """As `Policy.use`; "old" runs the merged copy with the adapters off (no-grad passes only)."""
        if which != "old":
            with self._policy.use(which) as tr:
                yield tr
            return
        tr = self._policy.transformer
        self._swap()
        tr.disable_adapters()
        try:
            yield tr
        finally:
            tr.enable_adapters()
            self._swap()

    def update_old(self, decay: float) -> None:
        """`Policy.update_old`, then the merged copy is refreshed."""
        self._policy.update_old(decay)
        self.refresh()

    def load_state_dict(self, state: dict) -> None:
        """`Policy.load_state_dict`, then the merged copy is refreshed."""
        self._policy.load_state_dict(state)
        self.refresh()


def check_switches(cfg) -> None:
    """Refuse a switch combination that cannot run, naming the config field, before any compute.

    Raises:
        ValueError: an unknown sdpa backend; a LoRA switch without LoRA; ``lora_bf16`` without bf16/fp16 autocast;
            both merge switches; ``recompute_blocks`` below -1.
    """
    sdpa_context(cfg.sdpa_backend)
    for name in ("lora_merge_rollouts", "lora_merged_old", "lora_bf16"):
        if getattr(cfg, name) and cfg.lora_rank <= 0:
            raise ValueError(f"config field {name}: needs LoRA (lora_rank > 0); a full fine-tuning run has no adapter")
    if cfg.lora_bf16 and cfg.mixed_precision not in ("bf16", "fp16"):
        raise ValueError(f"config field lora_bf16: needs mixed_precision bf16 or fp16 (LoRA's matmuls then run under "
                         f"autocast), got {cfg.mixed_precision!r}")
    if cfg.lora_merge_rollouts and cfg.lora_merged_old:
        raise ValueError("config fields lora_merge_rollouts and lora_merged_old: pick one (the merged copy already "
                         "serves the rollouts)")
    if not isinstance(cfg.recompute_blocks, int) or cfg.recompute_blocks < -1:
        raise ValueError(f"config field recompute_blocks: {cfg.recompute_blocks!r} must be an int >= -1 (-1 keeps the "
                         "world's gradient_checkpointing setting)")


def apply_switches(cfg, transformer, policy, *, backend="inductor"):
    """Apply the build-time switches to the transformer (recompute, LoRA input casting, compile last) and return the
    policy the loop should use: a `MergedOld` around ``policy`` when ``lora_merged_old`` is on, else ``policy``.
    Applying them twice changes nothing more."""
    check_switches(cfg)
    if cfg.recompute_blocks >= 0:
        recompute_blocks(transformer, cfg.recompute_blocks)
    if cfg.lora_bf16:
        lora_bf16(transformer)
    if cfg.lora_merged_old and not isinstance(policy, MergedOld):
        policy = MergedOld(policy)
    if cfg.compile_blocks:
        compile_blocks(transformer, backend=backend)
    return policy
