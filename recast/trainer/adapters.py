"""The trained LoRA adapter as files a user takes away: diffusers' LoRA format, raw and EMA.

Every checkpoint (and so the end of every run) writes ``<run>/adapters/raw/`` and ``<run>/adapters/ema/``, each a
``pytorch_lora_weights.safetensors`` that stock ``pipe.load_lora_weights(folder)`` reads (the peft config travels in
its metadata, so rank and alpha survive). "raw" is the trained weights, "ema" their moving average (what the run's
evaluations and grids sample). `export_adapter` writes either from any run directory's checkpoint, without loading
the base model.
"""

from __future__ import annotations

from pathlib import Path

import torch

from recast.io import atomic_dir

__all__ = ["ADAPTERS", "WHICH", "adapter_state", "save_adapter", "write_adapters", "export_adapter"]

ADAPTERS = "adapters"
WHICH = {"raw": "params", "ema": "ema"}  # adapter name -> the policy state that holds it


def adapter_state(names: list[str], tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """peft parameter names of the trained adapter ("...to_q.lora_A.default.weight") -> diffusers' transformer LoRA
    keys without the adapter name ("...to_q.lora_A.weight"), fp32 on CPU."""
    out = {}
    for n in names:
        if ".lora_" not in n:
            raise ValueError(f"{n} is not a LoRA weight: a full fine-tuning run has no adapter to export")
        out[n.replace(".default.", ".")] = tensors[n].detach().to("cpu", torch.float32).contiguous()
    return out


def save_adapter(state: dict[str, torch.Tensor], rank: int, alpha: float, out_dir: str | Path) -> Path:
    """Write one adapter as ``out_dir/pytorch_lora_weights.safetensors`` with its peft config as metadata."""
    from diffusers import StableDiffusion3Pipeline
    from peft import LoraConfig

    from recast.trainer.policy import LORA_TARGETS

    # each module by the trainer's target it matches ("attn.to_q", peft's suffix rule), else by its whole name: the
    # metadata names what was adapted and no more (a bare "to_q" would also name a dual-attention block's attn2.to_q)
    modules = {k.split(".lora_")[0] for k in state}
    targets = sorted({next((t for t in LORA_TARGETS if m == t or m.endswith("." + t)), m) for m in modules})
    meta = LoraConfig(r=rank, lora_alpha=alpha, target_modules=targets, init_lora_weights="gaussian").to_dict()
    meta = {k: (sorted(v) if isinstance(v, set) else v) for k, v in meta.items()}
    StableDiffusion3Pipeline.save_lora_weights(str(out_dir), transformer_lora_layers=state,
                                               transformer_lora_adapter_metadata=meta)
    return Path(out_dir)


def write_adapters(policy_state: dict, rank: int, alpha: float, run_dir: str | Path) -> dict[str, Path]:
    """Write ``run_dir/adapters/{raw,ema}`` from a `Policy.state_dict()`; nothing for full fine-tuning."""
    if rank <= 0:
        return {}
    out = {}
    for which, key in WHICH.items():
        state = adapter_state(policy_state["names"], policy_state[key])
        out[which] = atomic_dir(Path(run_dir) / ADAPTERS / which, lambda d, s=state: save_adapter(s, rank, alpha, d))
    return out


def export_adapter(run_dir: str | Path, out_dir: str | Path, which: str = "ema") -> Path:
    """Write a run's adapter (``which``: "ema" or "raw") to ``out_dir`` from its checkpoint.

    Rank and alpha are the checkpoint's own (the config it was trained with), and config.json must agree with them
    (`recast.trainer.runfiles.load_trained`): an adapter is never labelled with settings it was not trained with.
    The folder is written beside ``out_dir`` and renamed into place (`recast.io.atomic_dir`).

    Raises:
        ValueError: an unknown ``which``, a full fine-tuning run, a config.json that is not a run's config or
            differs from the checkpoint's. FileNotFoundError: not a run directory, or no checkpoint yet.
        FileExistsError: ``out_dir`` is a file, a link, or a folder that holds files already.
    """
    from recast.trainer.runfiles import load_trained

    if which not in WHICH:
        raise ValueError(f"--which must be one of {sorted(WHICH)}, got {which!r}")
    run_dir, out_dir = Path(run_dir), Path(out_dir)
    if out_dir.is_symlink():
        target = "a dangling symbolic link" if not out_dir.exists() else "a symbolic link"
        raise FileExistsError(f"{out_dir} is {target}; export never writes through a link: choose a new folder")
    if out_dir.exists() and not out_dir.is_dir():
        raise FileExistsError(f"{out_dir} is a file, not a folder; choose an empty or new folder")
    if out_dir.is_dir() and any(out_dir.iterdir()):
        raise FileExistsError(f"{out_dir} is not empty; choose an empty or new folder")
    if not (run_dir / "config.json").is_file():
        raise FileNotFoundError(f"{run_dir} is not a run directory (no config.json)")
    _, ckpt = load_trained(run_dir, "cannot export")
    cfg = ckpt.get("config") or {}
    rank, alpha = cfg.get("lora_rank"), cfg.get("lora_alpha")
    if not isinstance(rank, int) or isinstance(rank, bool) or not isinstance(alpha, (int, float)):
        raise ValueError(f"cannot export {run_dir}: its checkpoint records no LoRA rank and alpha")
    if rank <= 0:
        raise ValueError(f"{run_dir} is a full fine-tuning run (lora_rank 0): it has no adapter to export")
    policy = ckpt["policy"]
    state = adapter_state(policy["names"], policy[WHICH[which]])
    return atomic_dir(out_dir, lambda d: save_adapter(state, rank, float(alpha), d))
