"""The trained LoRA adapter as files a user takes away: diffusers' LoRA format, raw and EMA.

Every checkpoint (and so the end of every run) writes ``<run>/adapters/raw/`` and ``<run>/adapters/ema/``, each a
``pytorch_lora_weights.safetensors`` that stock ``pipe.load_lora_weights(folder)`` reads (the peft config travels in
its metadata, so rank and alpha survive). "raw" is the trained weights, "ema" their moving average (what the run's
evaluations and grids sample). `export_adapter` writes either from any run directory's checkpoint, without loading
the base model.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import torch

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

    targets = sorted({k.split(".lora_")[0].rsplit(".", 1)[-1] if not k.split(".lora_")[0].endswith(".0")
                      else ".".join(k.split(".lora_")[0].rsplit(".", 2)[-2:]) for k in state})
    meta = LoraConfig(r=rank, lora_alpha=alpha, target_modules=targets, init_lora_weights="gaussian").to_dict()
    meta = {k: (sorted(v) if isinstance(v, set) else v) for k, v in meta.items()}
    StableDiffusion3Pipeline.save_lora_weights(str(out_dir), transformer_lora_layers=state,
                                               transformer_lora_adapter_metadata=meta)
    return Path(out_dir)


def _atomic_dir(final: Path, write) -> Path:
    """Write a folder next to `final` and rename it into place, so a crash never leaves half an adapter."""
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=final.parent))
    try:
        write(tmp)
        old = final.with_name(f".{final.name}-old-{os.getpid()}")
        if final.is_symlink():
            final.unlink()
        if final.exists():
            final.rename(old)
        tmp.rename(final)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def write_adapters(policy_state: dict, rank: int, alpha: float, run_dir: str | Path) -> dict[str, Path]:
    """Write ``run_dir/adapters/{raw,ema}`` from a `Policy.state_dict()`; nothing for full fine-tuning."""
    if rank <= 0:
        return {}
    out = {}
    for which, key in WHICH.items():
        state = adapter_state(policy_state["names"], policy_state[key])
        out[which] = _atomic_dir(Path(run_dir) / ADAPTERS / which, lambda d, s=state: save_adapter(s, rank, alpha, d))
    return out


def export_adapter(run_dir: str | Path, out_dir: str | Path, which: str = "ema") -> Path:
    """Write a run's adapter (``which``: "ema" or "raw") to ``out_dir`` from its checkpoint.

    Raises:
        ValueError: an unknown ``which``, or a full fine-tuning run. FileNotFoundError: not a run directory.
        FileExistsError: ``out_dir`` holds files already.
    """
    from recast.io import read_json
    from recast.trainer.checkpoint import load_checkpoint

    if which not in WHICH:
        raise ValueError(f"--which must be one of {sorted(WHICH)}, got {which!r}")
    run_dir, out_dir = Path(run_dir), Path(out_dir)
    if not (run_dir / "config.json").is_file():
        raise FileNotFoundError(f"{run_dir} is not a run directory (no config.json)")
    if out_dir.exists() and any(out_dir.iterdir()):
        raise FileExistsError(f"{out_dir} is not empty; choose an empty or new folder")
    cfg = read_json(run_dir / "config.json")
    rank, alpha = int(cfg.get("lora_rank", 0)), float(cfg.get("lora_alpha", 0.0))
    if rank <= 0:
        raise ValueError(f"{run_dir} is a full fine-tuning run (lora_rank 0): it has no adapter to export")
    policy = load_checkpoint(run_dir)["policy"]
    state = adapter_state(policy["names"], policy[WHICH[which]])
    out_dir.mkdir(parents=True, exist_ok=True)
    return save_adapter(state, rank, alpha, out_dir)
