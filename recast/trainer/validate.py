"""Bad input caught before any compute, each error saying what to fix."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from recast.config import BACKENDS, METHODS, STD_SCOPES, TrainConfig, resolve_rewards
from recast.trainer.advantages import normalise_budgets, validate_W
from recast.trainer.checkpoint import CHECKPOINT, check_resume_config

__all__ = ["RUN_FILES", "validate"]

RUN_FILES = ("metrics.jsonl", "weights.jsonl", "eval.jsonl", CHECKPOINT)


def _need(ok: bool, msg: str) -> None:
    if not ok:
        raise ValueError(msg)


def validate(cfg: TrainConfig, out_dir: str | Path, *, resume: bool = False,
             overwrite: bool = False) -> tuple[tuple[str, ...], torch.Tensor]:
    """Check a config and its run directory; returns (reward names, normalised budgets λ (K,) float64).

    Raises:
        ValueError: unknown method / backend / setting / reward, bad λ, a group size that does not divide the
            batch, a bad fixed W, out-of-range numbers, or a resume whose config differs from the saved one.
        FileNotFoundError: missing world (base model / pipeline folder), or nothing to resume from.
        FileExistsError: `out_dir` already holds a run and neither resume nor overwrite was asked for.
        PermissionError: `out_dir` is not writable.
    """
    _need(cfg.method in METHODS, f"unknown method {cfg.method!r}; choose one of {METHODS}")
    _need(cfg.backend in BACKENDS, f"unknown backend {cfg.backend!r}; choose one of {BACKENDS}")
    _need(cfg.std_scope in STD_SCOPES, f"unknown std_scope {cfg.std_scope!r}; choose one of {STD_SCOPES}")
    names = resolve_rewards(cfg)
    lam = normalise_budgets(cfg.lam, len(names))
    G, B = cfg.group_size, cfg.B
    _need(G >= 2, f"group_size must be >= 2 (advantages compare samples of one prompt), got {G}")
    _need(B % G == 0, f"group_size={G} does not divide the batch size {B}: set batch_size to a multiple of {G}")
    _need(cfg.num_steps >= (2 if cfg.backend == "grpo" else 1),
          f"num_steps must be >= 1 (>= 2 for grpo: the last step is deterministic), got {cfg.num_steps}")
    if cfg.method == "fixed":
        _need(len(cfg.fixed_W) > 0, "method='fixed' needs fixed_W, a (K, T) matrix with rows lam and equal columns")
        validate_W(cfg.fixed_W, lam, cfg.num_steps)
    for name, ok in [("nft_beta > 0", cfg.nft_beta > 0), ("adv_clip_max > 0", cfg.adv_clip_max > 0),
                     ("kl_beta >= 0", cfg.kl_beta >= 0), ("0 <= ema_decay < 1", 0 <= cfg.ema_decay < 1),
                     ("0 <= old_decay_max < 1", 0 <= cfg.old_decay_max < 1), ("old_decay_rate >= 0",
                     cfg.old_decay_rate >= 0), ("lr > 0", cfg.lr > 0), ("grad_accum >= 1", cfg.grad_accum >= 1),
                     ("recast_every >= 1", cfg.recast_every >= 1), ("temperature > 0", cfg.temperature > 0),
                     ("0 <= uniform_mix <= 1", 0 <= cfg.uniform_mix <= 1), ("alpha > 0", cfg.alpha > 0),
                     ("0 <= tracker_ema < 1", 0 <= cfg.tracker_ema < 1), ("iterations >= 1", cfg.iterations >= 1),
                     ("train_columns >= 0", cfg.train_columns >= 0), ("lora_rank >= 0", cfg.lora_rank >= 0),
                     ("clip_range >= 0", cfg.clip_range >= 0)]:
        _need(ok, f"config out of range: need {name}")
    if cfg.method == "recast":
        _need(cfg.informativeness_subset >= 2, "informativeness_subset must be >= 2 for method='recast'")
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / f".write-probe-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as err:
        raise PermissionError(f"out_dir {out} is not writable ({err.strerror}); choose another --out") from None
    if resume:
        if not (out / CHECKPOINT).is_file():
            raise FileNotFoundError(f"cannot resume: no checkpoint at {out / CHECKPOINT}")
        check_resume_config(out, cfg.to_dict())
    elif not overwrite and any((out / f).exists() for f in RUN_FILES):
        raise FileExistsError(f"{out} already holds a run: pass resume=True (--resume) to continue it or "
                              "overwrite=True (--overwrite) to start over")
    return names, lam
