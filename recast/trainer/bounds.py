"""Upper bounds on the numeric fields whose absurd values pass the range checks and only fail mid-run, where the
failure is blamed on something else (a reward returning NaN, a learning rate, the allocator).

`check_bounds` runs in `recast.trainer.validate.validate_config`, after the types and ranges, so the error names the
field before anything is built. Each bound is far outside any setting in use and is stated with what breaks beyond it.
"""

from __future__ import annotations

import torch

__all__ = ["MAX_SHIFT", "MAX_LORA_SCALE", "ADV_CLIP_RANGE", "MAX_NOISE_LEVEL", "MAX_EVAL_SAMPLES", "MAX_THREADS",
           "check_bounds"]

MAX_SHIFT = 1e3  # SD3.5 uses 3; far above, every sigma of the grid rounds to 1 but the last
MAX_LORA_SCALE = 1e3  # lora_alpha / lora_rank; 0.5 to 2 is usual
ADV_CLIP_RANGE = (1e-3, 1e3)  # c of p = 0.5 + A / (2c) on standardised advantages; 5 is DiffusionNFT's
MAX_NOISE_LEVEL = 10.0  # Flow-GRPO's a (0.7); far above, the SDE step's mean and std overflow
MAX_EVAL_SAMPLES = 4096  # eval_prompts x eval_group: the evaluation samples them in one batch
MAX_THREADS = 1024  # torch CPU threads per process


def _need(ok: bool, msg: str) -> None:
    if not ok:
        raise ValueError(msg)


def check_bounds(cfg) -> None:
    """Refuse values that no run can use, naming the field (see the module docstring).

    Raises:
        ValueError: shift, lora_alpha, adv_clip_max, noise_level, eval_prompts x eval_group or num_threads beyond its
            bound, or a sigma grid (num_steps, shift) that is not finite and strictly decreasing.
    """
    from recast.sampling import sigma_schedule

    _need(cfg.shift <= MAX_SHIFT, f"config field shift: {cfg.shift:g} is above {MAX_SHIFT:g} (SD3.5 uses 3); the sigma "
                                  "grid would collapse onto 1")
    sigmas = sigma_schedule(cfg.num_steps, cfg.shift)
    _need(bool(torch.isfinite(sigmas).all()) and bool((sigmas[1:] < sigmas[:-1]).all()),
          f"config field shift: {cfg.shift:g} with num_steps={cfg.num_steps} gives a sigma grid that is not strictly "
          "decreasing in float32; lower shift")
    if cfg.lora_rank > 0:
        scale = cfg.lora_alpha / cfg.lora_rank
        _need(scale <= MAX_LORA_SCALE, f"config field lora_alpha: {cfg.lora_alpha:g} / lora_rank {cfg.lora_rank} = "
                                       f"{scale:g} is LoRA's scale; need at most {MAX_LORA_SCALE:g} (0.5 to 2 is "
                                       "usual)")
    low, high = ADV_CLIP_RANGE
    _need(low <= cfg.adv_clip_max <= high,
          f"config field adv_clip_max: {cfg.adv_clip_max:g} is outside [{low:g}, {high:g}]: advantages are "
          "standardised, so c = 5 is usual; far below, p = 0.5 + A / (2c) divides by ~0, far above, p is 0.5 for "
          "every sample")
    _need(cfg.noise_level <= MAX_NOISE_LEVEL, f"config field noise_level: {cfg.noise_level:g} is above "
                                              f"{MAX_NOISE_LEVEL:g} (Flow-GRPO uses 0.7); the SDE step grows as its "
                                              "square")
    n = cfg.eval_prompts * cfg.eval_group
    _need(n <= MAX_EVAL_SAMPLES, f"config field eval_prompts: {cfg.eval_prompts} x eval_group {cfg.eval_group} = {n} "
                                 f"samples per evaluation, more than {MAX_EVAL_SAMPLES} (the evaluation samples them "
                                 "in one batch)")
    _need(cfg.num_threads <= MAX_THREADS, f"config field num_threads: {cfg.num_threads} is above {MAX_THREADS} "
                                          f"(this machine has {_cpus()} CPUs; 0 keeps torch's default)")


def _cpus() -> int | str:
    import os

    return os.cpu_count() or "an unknown number of"
