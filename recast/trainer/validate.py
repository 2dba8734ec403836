"""Bad input caught before any compute, each error naming the field, flag or file at fault and saying what to fix.

`validate_config` checks a config on its own (types, finite numbers, ranges, devices, the files it needs);
`check_out_dir` and `check_run_dir` check the run directory. `validate` does all three (the demo uses it to vet every
run before starting any); the trainer runs `check_run_dir` only while holding the directory's lock.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch

from recast.config import (BACKENDS, NFT_NORMS, REPLAY_PRIORITIES, SDE_TYPES, STD_SCOPES, TrainConfig,
                           check_field_types, resolve_budgets, resolve_path, resolve_rewards, resolve_world)
from recast.credit.methods import MethodSpec, resolve_method
from recast.io import check_safetensors, read_json, read_jsonl
from recast.solver import ConvergenceError, min_temperature
from recast.advantages import normalise_budgets, validate_W
from recast.trainer.bounds import check_bounds
from recast.trainer.rundir import RUN_FILES, RUN_MARKER, check_out_dir, check_run_dir, is_finished, is_recast_run
from recast.trainer.sharding import check_fsdp
from recast.trainer.speed import SDPA_BACKENDS, check_switches
from recast.trainer.tracking import check_trackers
from recast.world import world_info, world_settings

__all__ = ["RUN_FILES", "RUN_MARKER", "RunSpec", "validate", "validate_config", "check_out_dir", "check_run_dir", "is_recast_run",
           "check_safetensors"]

MIXED_PRECISION = ("auto", "no", "fp16", "bf16")
SEED_LIMIT = 2**32  # numpy's and torch's seeds; the trainer derives generator seeds from it


def _need(ok: bool, msg: str) -> None:
    if not ok:
        raise ValueError(msg)


def _check_source_finished(src: Path, given: str) -> None:
    """Refuse an earlier stage that never finished (killed, or still training): its checkpoint is a partial one."""
    try:
        planned = read_json(src / "config.json").get("iterations")
    except (OSError, ValueError, AttributeError):
        raise ValueError(f"config field initialize_from: {given} has no readable config.json (a finished run of the "
                         "earlier stage)") from None
    if not is_finished(src, planned):
        try:
            reached = read_jsonl(src / "metrics.jsonl")[-1].get("iteration")
        except (OSError, ValueError, IndexError, AttributeError):
            reached = 0
        raise ValueError(f"config field initialize_from: {given} never finished: it reached iteration {reached} of "
                         f"{planned} planned (killed, or still training); finish it (train --auto) or start from a "
                         "finished run")


def _ranges(cfg: TrainConfig) -> list[tuple[str, bool]]:
    """(requirement, holds) for every numeric field with a range."""
    return [("nft_beta > 0", cfg.nft_beta > 0), ("adv_clip_max > 0", cfg.adv_clip_max > 0),
            ("kl_beta >= 0", cfg.kl_beta >= 0), ("0 <= ema_decay < 1", 0 <= cfg.ema_decay < 1),
            ("0 <= old_decay_max < 1", 0 <= cfg.old_decay_max < 1), ("old_decay_rate >= 0", cfg.old_decay_rate >= 0),
            ("0 < lr <= 1 (an AdamW step larger than the weights themselves diverges at once)", 0 < cfg.lr <= 1),
            ("grad_accum >= 1", cfg.grad_accum >= 1),
            ("recast_every >= 1", cfg.recast_every >= 1), ("temperature > 0", cfg.temperature > 0),
            ("floor > 0", cfg.floor > 0), ("0 <= uniform_mix <= 1", 0 <= cfg.uniform_mix <= 1),
            ("alpha > 0", cfg.alpha > 0), ("0 <= tracker_ema < 1", 0 <= cfg.tracker_ema < 1),
            ("iterations >= 1", cfg.iterations >= 1), ("prompts_per_iter >= 1", cfg.prompts_per_iter >= 1),
            ("batch_size >= 0 (0 = prompts_per_iter * group_size)", cfg.batch_size >= 0),
            ("num_steps >= 1", cfg.num_steps >= 1), ("shift > 0", cfg.shift > 0),
            ("noise_level > 0", cfg.noise_level > 0), ("train_columns >= 0", cfg.train_columns >= 0),
            ("lora_rank >= 0", cfg.lora_rank >= 0), ("lora_alpha > 0", cfg.lora_alpha > 0),
            ("weight_decay >= 0", cfg.weight_decay >= 0), ("adam_eps > 0", cfg.adam_eps > 0),
            ("0 <= adam_betas < 1", all(0 <= b < 1 for b in cfg.adam_betas)), ("grad_clip >= 0", cfg.grad_clip >= 0),
            ("clip_range >= 0", cfg.clip_range >= 0), ("informativeness_subset >= 0", cfg.informativeness_subset >= 0),
            ("0 <= seed < 2**32", 0 <= cfg.seed < SEED_LIMIT), ("num_threads >= 0", cfg.num_threads >= 0),
            ("eval_prompts >= 1 (the final evaluation needs test prompts)", cfg.eval_prompts >= 1),
            ("eval_group >= 1", cfg.eval_group >= 1), ("eval_every >= 0", cfg.eval_every >= 0),
            ("checkpoint_every >= 0", cfg.checkpoint_every >= 0),
            ("checkpoint_minutes >= 0 (0 = off)", cfg.checkpoint_minutes >= 0), ("grid_every >= 0", cfg.grid_every >= 0),
            ("reward_std_floor >= 0", cfg.reward_std_floor >= 0), ("0 < cps_noise_level <= 1",
            0 < cfg.cps_noise_level <= 1), ("tracker_window >= 1", cfg.tracker_window >= 1),
            ("tracker_min_pairs >= 0", cfg.tracker_min_pairs >= 0), ("tracker_bootstrap >= 0",
            cfg.tracker_bootstrap >= 0), ("replay_share >= 0 (0 = replay off)", cfg.replay_share >= 0),
            ("replay_capacity >= 1", cfg.replay_capacity >= 1), ("replay_max_age >= 1", cfg.replay_max_age >= 1)]


def _check_device(device: str) -> None:
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"config field device: unknown device {device!r}; use 'cpu' or 'cuda' (or 'cuda:N')") from None
    _need(dev.type in ("cpu", "cuda"), f"config field device: unsupported device {device!r}; use 'cpu' or 'cuda'")
    if dev.type == "cuda":
        _need(torch.cuda.is_available(), f"config field device: {device!r} was asked for but no CUDA device is "
                                         "available here (torch.cuda.is_available() is False); use device='cpu'")
        _need(dev.index is None or dev.index < torch.cuda.device_count(),
              f"config field device: {device!r} does not exist ({torch.cuda.device_count()} CUDA devices)")


@dataclass(frozen=True)
class RunSpec:
    """What a validated config resolves to, computed once (`validate_config`) and trusted by the rest of the code.

    Attributes:
        world: the world spec (`recast.config.resolve_world`), e.g. "digits:/abs/data/digit_base".
        reward_names: the K training rewards.
        lam: the budgets normalised to Σλ = 1, float64 (K,).
        settings: the world's own settings object resolved from ``world_settings`` and the setting (SD3:
            `SD3Settings`), or None for a world without settings.
        world_settings: those settings as plain data (what config.json's run marker records).
        method: the credit method resolved (`recast.credit.resolve_method`): where W comes from and the aggregation.
        table: method recast's `recast.archives.WeightTable` for these rewards and budgets, else None.
        weight_file: the profile or table file it came from, else None.
    """

    world: str
    reward_names: tuple[str, ...]
    lam: torch.Tensor
    settings: object = None
    world_settings: dict | None = None
    method: MethodSpec | None = None
    table: object = None
    weight_file: str | None = None


def validate_config(cfg: TrainConfig) -> RunSpec:
    """Check a config on its own, once; returns its `RunSpec` (world spec, reward names, normalised λ).

    Raises:
        ValueError: a field of the wrong type or non-finite, an unknown method / backend / setting / reward /
            device, bad λ, a group size that does not divide the batch, a bad fixed W, an out-of-range number, or a
            temperature below the smallest the solver resolves (the message names it).
        FileNotFoundError: missing base model or judge weights.
    """
    _need(isinstance(cfg, TrainConfig), f"expected a TrainConfig, got {type(cfg).__name__}")
    check_field_types(cfg)
    try:
        method = resolve_method(cfg.method, cfg.aggregation, cfg.kernel)
    except ValueError as err:
        raise ValueError(f"config field method/aggregation/kernel: {err}") from None
    _need(cfg.backend in BACKENDS, f"unknown backend {cfg.backend!r}; choose one of {BACKENDS}")
    _need(cfg.std_scope in STD_SCOPES, f"unknown std_scope {cfg.std_scope!r}; choose one of {STD_SCOPES}")
    _need(cfg.nft_norm in NFT_NORMS, f"unknown nft_norm {cfg.nft_norm!r}; choose one of {NFT_NORMS}")
    _need(cfg.sde_type in SDE_TYPES, f"unknown sde_type {cfg.sde_type!r}; choose one of {SDE_TYPES}")
    _need(cfg.mixed_precision in MIXED_PRECISION,
          f"unknown mixed_precision {cfg.mixed_precision!r}; choose one of {MIXED_PRECISION}")
    for name, ok in _ranges(cfg):
        _need(ok, f"config out of range: need {name}")
    check_bounds(cfg)  # absurd values the ranges let through, named before they fail mid-run (trainer/bounds.py)
    world = resolve_world(cfg.world)
    info = world_info(world)  # read once: the reward names and the setting's default budgets both come from it
    names = resolve_rewards(cfg, world, info=info)
    lam = normalise_budgets(resolve_budgets(cfg, world, info=info), len(names))
    G, B = cfg.group_size, cfg.B
    _need(G >= 2, f"group_size must be >= 2 (advantages compare samples of one prompt), got {G}")
    _need(B % G == 0, f"group_size={G} does not divide the batch size {B}: set batch_size to a multiple of {G}")
    _need(cfg.num_steps >= (2 if cfg.backend == "grpo" else 1),
          f"num_steps must be >= 1 (>= 2 for grpo: the last step is deterministic), got {cfg.num_steps}")
    if method.weights == "fixed":
        _need(len(cfg.fixed_W) > 0, "method='fixed' needs fixed_W, a (K, T) matrix with rows lam and equal columns")
        validate_W(cfg.fixed_W, lam, cfg.num_steps)
    if method.weights == "sample":
        _need(cfg.step_credit_eps > 0, "step_credit_eps must be > 0")
        _need(0 <= cfg.otca_explore <= 1, "otca_explore must be in [0, 1]")
        _need(cfg.replay_share == 0, f"config field replay_share: method {cfg.method!r} weights each sample's own "
              "trajectory, which a replayed sample no longer has; set replay_share=0")
    if method.weights == "live":
        _need(cfg.informativeness_subset >= 2, f"informativeness_subset must be >= 2 for method {cfg.method!r}")
        smallest = min_temperature(cfg.floor)
        _need(method.kernel != "power" or cfg.temperature >= smallest,
              f"config field temperature: {cfg.temperature:g} is below the smallest temperature the weight solver "
              f"resolves at floor={cfg.floor:g}: {smallest:.3g}")
    _check_replay(cfg, method)
    if cfg.initialize_from:  # a new stage from another run's last checkpoint (read by the trainer, checked here)
        _need(resolve_path(cfg.initialize_from).joinpath("checkpoint.pt").is_file(),
              f"config field initialize_from: {cfg.initialize_from} holds no checkpoint.pt (a finished run of the "
              "earlier stage)")
        _check_source_finished(resolve_path(cfg.initialize_from), cfg.initialize_from)
    check_trackers(cfg.log_with)
    _need(cfg.sdpa_backend in SDPA_BACKENDS, f"config field sdpa_backend: unknown {cfg.sdpa_backend!r}; choose from "
                                             f"{SDPA_BACKENDS}")
    check_switches(cfg)
    check_fsdp(cfg)  # a sharded run's passes must stay in step over processes (recast.trainer.sharding)
    _need(not cfg.lora_merge_rollouts or cfg.lora_rank > 0, "config field lora_merge_rollouts: needs LoRA "
                                                            "(lora_rank > 0); a full fine-tuning run has no adapter")
    _check_device(cfg.device)
    settings, plain = world_settings(world, cfg.setting, cfg.world_settings, rewards=names)
    # after the world's own checks (a missing reward package is named first): the weight table, read and solved
    table, weight_file = (_weight_table(cfg, world, info, names, lam) if method.weights == "table" else (None, None))
    return RunSpec(world, names, lam, settings, plain, method, table, weight_file)


def _weight_table(cfg: TrainConfig, world: str, info, names, lam):
    """Method recast's W for this run: its weight_file (a profile, solved for λ here, or a table whose budgets must
    be λ), or the world's committed profile for this grid; refused before compute, naming the command that makes one."""
    import numpy as np

    from recast.archives import is_table, load_profile, load_table, table_from_profile
    from recast.sampling import sigma_schedule

    sigmas = sigma_schedule(cfg.num_steps, cfg.shift).double().numpy()
    make = (f"make one with `python -m recast profile --world {cfg.world} --proposal SOURCE --num-steps "
            f"{cfg.num_steps} --shift {cfg.shift:g} --out PROFILE.npz` and pass --set weight_file=PROFILE.npz, or "
            "train --method static (the paper's baseline) or recast_live (W estimated live)")
    if cfg.weight_file and cfg.weight_file != "auto":
        candidates, named = [cfg.weight_file], True
    else:
        candidates, named = list(info.profiles), False
    for path in candidates:
        if named and not resolve_path(path).is_file():
            raise FileNotFoundError(f"config field weight_file: {path}: no such file")
        if is_table(path):
            table = load_table(path)
        else:
            profile = load_profile(path)
            missing = [n for n in names if n not in profile.ratios]
            if missing or profile.sigmas.size != sigmas.size or np.abs(profile.sigmas - sigmas).max() > 1e-5:
                if named:
                    why = f"no ratios for {missing}" if missing else f"its grid has T={profile.num_steps} steps, " \
                          f"not the run's {cfg.num_steps} (shift {cfg.shift:g})"
                    raise ValueError(f"config field weight_file: {path}: {why}; {make}")
                continue
            try:
                table = table_from_profile(profile, lam.tolist(), cfg.temperature, reward_names=names,
                                           alpha=cfg.alpha)
            except ConvergenceError as err:
                raise ValueError(f"config field temperature: {cfg.temperature:g} with {path}: {err}") from None
        try:
            table = table.subset(names)
        except ValueError as err:
            raise ValueError(f"config field weight_file: {path}: {err}") from None
        if table.num_steps != cfg.num_steps or np.abs(table.sigmas - sigmas).max() > 1e-5:
            raise ValueError(f"config field weight_file: {path}: the table's grid (T={table.num_steps}) is not the "
                             f"run's (T={cfg.num_steps}, shift {cfg.shift:g}); {make}")
        own = torch.as_tensor(table.budgets / table.budgets.sum(), dtype=torch.float64)
        _need((own - lam).abs().max() <= 1e-6, f"config field weight_file: {path} is a weight table for the budgets "
              f"{[round(x, 6) for x in own.tolist()]}, the run's are {[round(x, 6) for x in lam.tolist()]}: pass the "
              "profile it came from instead (a table follows from a profile for any budgets)")
        return table, str(path)
    raise ValueError(f"method 'recast' needs a weight table, and world {world!r} has no committed density-ratio "
                     f"profile for rewards {list(names)} on a {cfg.num_steps}-step grid (shift {cfg.shift:g}): {make}")


def _check_replay(cfg: TrainConfig, method: MethodSpec) -> None:
    """Trajectory replay (`recast.trainer.replay`): a backend that can use stale samples, and a buffer that can fill."""
    from recast.trainer.replay import replay_count

    _need(cfg.replay_priority in REPLAY_PRIORITIES,
          f"unknown replay_priority {cfg.replay_priority!r}; choose one of {REPLAY_PRIORITIES}")
    if cfg.replay_share == 0:
        return
    _need(cfg.backend == "nft", f"config field replay_share: {cfg.replay_share:g} > 0 needs backend='nft'; the grpo "
                                "backend cannot replay samples, because its PPO ratio needs the log-probs of the "
                                "policy that drew them, and a stored sample's drawing policy is gone (no importance "
                                "correction is implemented); set replay_share=0 or backend='nft'")
    _need(method.aggregation in ("per_reward", "reward_sum"),
          f"config field replay_share: replay re-normalises each reward of a stored sample against the current batch, "
          f"which the {method.aggregation!r} aggregation of method {cfg.method!r} (raw rewards mixed before "
          "normalising) has no form for; use aggregation per_reward or set replay_share=0")
    _need(cfg.replay_priority != "informativeness" or method.weights == "live",
          f"config field replay_priority: 'informativeness' reads the live estimate's D gains, which only "
          f"method='recast_live' has (method is {cfg.method!r}); use replay_priority='advantage' or 'recency'")
    n = replay_count(cfg.replay_share, cfg.B)
    _need(n >= 1, f"config field replay_share: {cfg.replay_share:g} x batch size {cfg.B} rounds to 0 replayed "
                  "samples per iteration; raise it or set 0 to turn replay off")
    _need(cfg.replay_capacity >= n, f"config field replay_capacity: {cfg.replay_capacity} is smaller than the "
                                    f"{n} samples replayed per iteration (replay_share {cfg.replay_share:g} x batch "
                                    f"size {cfg.B}); raise replay_capacity")


def validate(cfg: TrainConfig, out_dir: str | Path, *, resume: bool | str = False, overwrite: bool = False) -> RunSpec:
    """Check a config and its run directory; returns the config's `RunSpec`.

    Raises:
        everything `validate_config`, `check_out_dir` and `check_run_dir` raise.
    """
    spec = validate_config(cfg)
    check_run_dir(check_out_dir(out_dir), cfg, resume=resume, overwrite=overwrite, spec=spec)
    return spec
