"""The trained policy and its cheap companions: old policy, EMA and frozen reference.

Only the trainable parameters are ever copied. With LoRA (rank > 0) that is the adapter weights: the old policy and
the EMA are two extra copies of them, and the frozen reference is the base model with adapters disabled. With full
fine-tuning (rank 0) every transformer parameter is trainable, and the reference is a copy made only when asked for.
Companions are used by swapping their values into the live parameters for a no-grad forward pass (`Policy.use`).

The companions are copies of the parameters themselves, so they live wherever the parameters do: after the
transformer is sharded over processes (`recast.trainer.sharding`), `Policy.rebind` re-reads the sharded parameters
and remakes the companions from them, split as they are. This is the one implementation of the old policy (an
earlier second one, the old policy as a second peft adapter, was removed from `recast.worlds.sd3.lora`).
"""

from __future__ import annotations

from contextlib import contextmanager

import torch

from recast.trainer.sharding import copy_full_, full_tensor

__all__ = ["LORA_TARGETS", "Policy", "old_decay"]

# SD3 joint-attention projections (image stream and text stream) of each block's `attn`, the release's and
# DiffusionNFT / Flow-GRPO's list. peft matches a list entry as the whole module name or a suffix after a "."
# (`LoraConfig.target_modules`), so "attn.to_q" leaves the second, image-only attention `attn2` of SD3.5's
# dual-attention (MMDiT-X) blocks unadapted; the bare "to_q" used to adapt it too (31 layers for 23 on a tiny
# transformer with two dual-attention blocks; SD3.5-Medium: 191 layers for 243, docs/method.md §0).
LORA_TARGETS = ("attn.to_q", "attn.to_k", "attn.to_v", "attn.to_out.0", "attn.add_q_proj", "attn.add_k_proj",
                "attn.add_v_proj", "attn.to_add_out")


def old_decay(updates: int, rate: float = 0.001, max_decay: float = 0.5) -> float:
    """DiffusionNFT's old-policy decay d = min(rate * updates, max_decay), read with the optimiser updates done so
    far, the one just made included, as the release does: d = 0.001 after the first update, 0.5 from update 500 (its
    0.5 * min(updates / 500, 1) at the defaults)."""
    return min(rate * updates, max_decay)


def _check_decay(decay: float) -> None:
    if not 0.0 <= decay <= 1.0:
        raise ValueError(f"decay must be in [0, 1], got {decay}")


class Policy:
    """Trainable parameters of a transformer plus old-policy, EMA and reference copies.

    Args:
        transformer: the world's diffusers SD3 transformer, digit or SD3.5 (modified in place: LoRA added, base
            frozen; LoRA weights kept in fp32 whatever the base dtype).
        lora_rank: LoRA rank on `LORA_TARGETS`; 0 = full fine-tuning.
        lora_alpha: LoRA alpha.
        seed: seeds the LoRA initialisation (the global RNG is left untouched).
        keep_ref: keep a frozen reference (needed for kl_beta > 0; free with LoRA).
    """

    def __init__(self, transformer: torch.nn.Module, *, lora_rank: int = 8, lora_alpha: float = 16.0, seed: int = 0,
                 keep_ref: bool = False):
        self.transformer = transformer
        self.lora = lora_rank > 0
        if self.lora:
            from peft import LoraConfig

            names = [n for n, _ in transformer.named_modules()]
            targets = [t for t in LORA_TARGETS if any(n == t or n.endswith("." + t) for n in names)]  # peft's rule
            transformer.requires_grad_(False)
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                transformer.add_adapter(LoraConfig(r=lora_rank, lora_alpha=lora_alpha, init_lora_weights="gaussian",
                                                   target_modules=targets))
            for p in transformer.parameters():  # adapters on a bf16/fp16 base (SD3 world) train in fp32
                if p.requires_grad and p.dtype in (torch.float16, torch.bfloat16):
                    p.data = p.data.float()
        else:
            transformer.requires_grad_(True)
        self.keep_ref = keep_ref
        self.rebind()
        if not self.params:
            raise ValueError("no trainable parameters: LoRA found none of its target modules")

    @torch.no_grad()
    def rebind(self) -> None:
        """Read the transformer's trainable parameters again and make the old policy, EMA (and reference) copies of
        them: at construction, and after sharding replaced the parameters (`recast.trainer.sharding`), whose values
        are still the ones the companions held then."""
        named = [(n, p) for n, p in self.transformer.named_parameters() if p.requires_grad]
        self.names = [n for n, _ in named]
        self.params = [p for _, p in named]
        self.old = [p.detach().clone() for p in self.params]
        self.ema = [p.detach().clone() for p in self.params]
        self.ref = [p.detach().clone() for p in self.params] if self.keep_ref and not self.lora else None

    @property
    def num_trainable(self) -> int:
        """Number of trainable scalars."""
        return sum(p.numel() for p in self.params)

    @contextmanager
    def use(self, which: str):
        """Temporarily run the transformer as "old", "ema" or "ref" (no-grad forwards only inside).

        With LoRA the reference is the base model (adapters disabled); otherwise values are swapped in and restored
        bit for bit on exit.
        """
        if which == "ref" and self.lora:
            self.transformer.disable_adapters()
            try:
                yield self.transformer
            finally:
                self.transformer.enable_adapters()
            return
        src = {"old": self.old, "ema": self.ema, "ref": self.ref}.get(which)
        if src is None:
            raise ValueError(f"unknown or unavailable companion {which!r} (ref needs keep_ref=True)")
        backup = [p.detach().clone() for p in self.params]
        with torch.no_grad():
            for p, s in zip(self.params, src):
                p.copy_(s)
        try:
            yield self.transformer
        finally:
            with torch.no_grad():
                for p, b in zip(self.params, backup):
                    p.copy_(b)

    @torch.no_grad()
    def update_old(self, decay: float) -> None:
        """theta_old <- decay * theta_old + (1 - decay) * theta (ValueError for a decay outside [0, 1])."""
        _check_decay(decay)
        for o, p in zip(self.old, self.params):
            o.mul_(decay).add_(p.detach(), alpha=1.0 - decay)

    @torch.no_grad()
    def update_ema(self, decay: float) -> None:
        """ema <- decay * ema + (1 - decay) * theta (ValueError for a decay outside [0, 1])."""
        _check_decay(decay)
        for e, p in zip(self.ema, self.params):
            e.mul_(decay).add_(p.detach(), alpha=1.0 - decay)

    def state_dict(self) -> dict:
        """CPU copies of the trainable parameters, old policy, EMA (and reference for full fine-tuning), whole: on a
        sharded transformer every process must call it (each tensor is gathered)."""
        def pack(ts):
            return None if ts is None else {n: full_tensor(t.detach()).cpu().clone() for n, t in zip(self.names, ts)}

        return {"names": list(self.names), "params": pack(self.params), "old": pack(self.old), "ema": pack(self.ema),
                "ref": pack(self.ref)}

    @torch.no_grad()
    def load_state_dict(self, state: dict) -> None:
        """Restore from `state_dict`; raises ValueError if the parameter names differ (another LoRA config)."""
        if list(state["names"]) != self.names:
            raise ValueError("checkpoint parameters do not match this model (different lora_rank or world?)")
        for key, dst in (("params", self.params), ("old", self.old), ("ema", self.ema), ("ref", self.ref)):
            if dst is None or state.get(key) is None:
                continue
            for n, t in zip(self.names, dst):
                copy_full_(t, state[key][n])  # a sharded tensor takes its own piece
