"""The online ReCAST loop: sample from the old policy, score, normalise per reward, weight through W, optimise.

One iteration, in sampling order (RECAST.md §3-§6):
    prompts -> G samples each from the old policy (ODE for nft, SDE with log-probs for grpo) -> every reward ->
    per-reward group normalisation -> per-step signals through W -> one optimiser step -> (recast) informativeness
    from the old policy's x0_hat and a W re-solve -> old-policy and EMA updates.

`train(cfg, out_dir)` runs it end to end; `Trainer` exposes the steps for tests and notebooks.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

from recast.config import NFT_NORMS, SDE_TYPES, TrainConfig
from recast.informativeness import InformativenessTracker
from recast.io import append_jsonl, write_json
from recast.sampling import sample_ode, sample_sde, sigma_schedule
from recast.solver import static_weights
from recast.trainer import checkpoint as ckpt
from recast.trainer.advantages import group_advantages, reward_sum, reward_to_p, validate_W
from recast.trainer.backends import NonFiniteLossError, Rollouts, grpo_optimise, nft_optimise
from recast.trainer.evaluation import evaluate as evaluate_policy
from recast.trainer.metrics import PhaseTimer, load_run
from recast.trainer.policy import Policy, old_decay
from recast.trainer.validate import RUN_FILES, validate

__all__ = ["Trainer", "train", "NonFiniteLossError"]


class Trainer:
    """One run of the online loop, resumable bit-exactly.

    Args:
        cfg: the run's config.
        out_dir: run directory (config, metrics, checkpoint, grids).
        resume: continue from `out_dir/checkpoint.pt` (config must match).
        overwrite: start fresh even if `out_dir` already holds a run (its log files are cleared).

    Raises:
        ValueError / FileNotFoundError / PermissionError: bad input, caught before any compute (see `validate`).
    """

    def __init__(self, cfg: TrainConfig, out_dir: str | Path, *, resume: bool = False, overwrite: bool = False):
        from accelerate import Accelerator

        self.out = Path(out_dir)
        self.reward_names, self.lam = validate(cfg, self.out, resume=resume, overwrite=overwrite)
        self.cfg = cfg
        if cfg.num_threads > 0:
            torch.set_num_threads(cfg.num_threads)
        self.acc = Accelerator(cpu=cfg.device == "cpu", mixed_precision=cfg.mixed_precision,
                               log_with=list(cfg.log_with) or None, project_dir=str(self.out))
        self.main = self.acc.is_main_process
        torch.manual_seed(cfg.seed)
        self.world = self._load_world().to(self.acc.device)
        self.world.text_encoder.requires_grad_(False)
        self.policy = Policy(self.world.transformer, lora_rank=cfg.lora_rank, lora_alpha=cfg.lora_alpha,
                             seed=cfg.seed, keep_ref=cfg.kl_beta > 0)
        opt = torch.optim.AdamW(self.policy.params, lr=cfg.lr, betas=tuple(cfg.adam_betas), eps=cfg.adam_eps,
                                weight_decay=cfg.weight_decay)
        self.model, self.optimizer = self.acc.prepare(self.world.transformer, opt)
        from recast import rewards

        self.rewards = [rewards.get(n)(self.acc.device) for n in self.reward_names]
        self.K, self.T = len(self.reward_names), cfg.num_steps
        self.sigmas = sigma_schedule(cfg.num_steps, cfg.shift)
        self.gen = torch.Generator().manual_seed(cfg.seed * 1_000_003 + self.acc.process_index)
        self.tracker = InformativenessTracker(self.K, self.T, cfg.alpha, cfg.tracker_ema) \
            if cfg.method == "recast" else None
        if cfg.method == "fixed":
            self.W = validate_W(cfg.fixed_W, self.lam, self.T)
        elif cfg.method == "reward_sum":
            self.W = static_weights([1.0], self.T)  # one combined reward: the same p at every column
        else:
            self.W = static_weights(self.lam, self.T)
        self.D = None
        self.iteration = 0
        if resume:
            self._resume()
        elif self.main:
            for name in RUN_FILES:
                (self.out / name).unlink(missing_ok=True)
            write_json(self.out / "config.json", {**cfg.to_dict(), "_run": {
                "reward_names": list(self.reward_names), "lam": self.lam.tolist(), "sigmas": self.sigmas.tolist()}})
        if cfg.log_with:
            self.acc.init_trackers("recast", config={k: str(v) for k, v in cfg.to_dict().items()})

    def _load_world(self):
        from recast.digits.world import load_world, tiny_world

        from recast.config import resolve_world

        return tiny_world(self.cfg.seed) if self.cfg.world == "tiny" else load_world(resolve_world(self.cfg.world))

    # ------------------------------------------------------------------ one iteration
    def rollout(self) -> Rollouts:
        """Draw B // G train prompts, G samples each, from the old policy."""
        from recast.digits.data import sample_prompts

        cfg, G = self.cfg, self.cfg.group_size
        prompts = [p for p in sample_prompts(cfg.B // G, split="train", generator=self.gen) for _ in range(G)]
        noise = torch.randn((cfg.B, *self.world.sample_shape), generator=self.gen).to(self.acc.device)
        with torch.no_grad(), self.acc.autocast():
            embeds = self.world.encode_prompts(prompts).detach()
            with self.policy.use("old") as tr:
                if cfg.backend == "nft":
                    out = sample_ode(tr, embeds, self.sigmas, noise=noise, return_trajectory=False)
                else:
                    out = sample_sde(tr, embeds, self.sigmas, noise_level=cfg.sde_noise_level, noise=noise,
                                     generator=self.gen, sde_type=cfg.sde_type)
        return Rollouts(prompts, embeds, out.x0.float(), out.xs, out.x0_hats, out.log_probs)

    def score(self, x0: torch.Tensor, prompts: list[str]) -> torch.Tensor:
        """Raw rewards (K, N) of model-space samples."""
        images = self.world.decode(x0)
        return torch.stack([fn(images, prompts).float() for fn in self.rewards])

    def step(self) -> dict:
        """Run one iteration; returns its metrics record."""
        cfg, timer, i = self.cfg, PhaseTimer(), self.iteration
        _check_step_config(cfg)
        start = time.perf_counter()
        with timer("sampling"):
            ro = self.rollout()
        with timer("rewards"):
            R = self.score(ro.x0, ro.prompts)
            R_all = self.acc.gather(R.T.contiguous()).T  # (K, B * processes), groups stay contiguous
            local = slice(self.acc.process_index * cfg.B, (self.acc.process_index + 1) * cfg.B)
            norm = dict(adv_clip_max=cfg.adv_clip_max, std_scope=cfg.std_scope, std_floor=cfg.reward_std_floor)
            adv = group_advantages(R_all, cfg.group_size, **norm)
            train_adv = adv if cfg.method != "reward_sum" else group_advantages(
                reward_sum(R_all, self.lam), cfg.group_size, **norm)
        W_used = self.W
        info_mask = self._info_mask() if self.tracker is not None else None
        with timer("optimisation"):
            backend = nft_optimise if cfg.backend == "nft" else grpo_optimise
            signal = (train_adv.p if cfg.backend == "nft" else train_adv.A)[:, local]
            out = backend(self.model, self.policy, ro, signal, W_used, self.sigmas, cfg, self.gen, self.acc,
                          info_mask)
            grad_norm = self._optimiser_step()
        if self.tracker is not None:
            with timer("informativeness"):
                self.D = self._informativeness(out, ro.prompts, adv, local, info_mask)
            with timer("solver"):
                if (i + 1) % cfg.recast_every == 0:
                    self.W = self.tracker.weights(self.lam, temperature=cfg.temperature, floor=cfg.floor,
                                                  uniform_mix=cfg.uniform_mix)
                    if self.main:
                        append_jsonl(self.out / "weights.jsonl", {
                            "iteration": i + 1, "D": self.D, "gains": self.tracker.gains(), "W": self.W,
                            "noise_share": self.tracker.noise_share, "pairs": self.tracker.pairs_per_row(),
                            "ready": self.tracker.ready()})
        self.policy.update_old(old_decay(i, cfg.old_decay_rate, cfg.old_decay_max))
        self.policy.update_ema(cfg.ema_decay)
        self.iteration = i + 1
        rec = {"iteration": i + 1, "reward/weighted": float(reward_sum(R_all, self.lam).mean())}
        for k, name in enumerate(self.reward_names):
            rec[f"reward/{name}/mean"], rec[f"reward/{name}/std"] = float(R_all[k].mean()), float(R_all[k].std())
            rec[f"silenced/{name}"] = float(adv.silenced[k])  # 1: batch std below the floor, p = 0.5 this iteration
        if cfg.method == "reward_sum":
            rec["silenced/reward_sum"] = float(train_adv.silenced[0])
        rec.update({f"loss/{k}": v for k, v in out.parts.items()})
        rec["grad_norm"] = grad_norm
        rec["zero_std_frac"] = float((R_all.reshape(R_all.shape[0], -1, cfg.group_size).std(-1) == 0).float().mean())
        rec.update({f"time/{k}": v for k, v in timer.times.items()})
        rec["time/total"] = time.perf_counter() - start
        rec["W"], rec["D"] = W_used, self.D
        if self.main:
            append_jsonl(self.out / "metrics.jsonl", rec)
        if cfg.log_with:
            self.acc.log({k: v for k, v in rec.items() if isinstance(v, float)}, step=i + 1)
        return rec

    def _info_mask(self) -> torch.Tensor:
        """Samples whose x0_hat is scored for informativeness (all of them by default); evenly spread, no RNG used.

        Also points the tracker at this run's pooling settings (idempotent; `__init__` builds it with defaults).
        """
        cfg = self.cfg
        trained = cfg.num_steps - 1 if (cfg.backend == "grpo" or cfg.skip_last_column) else cfg.num_steps
        self.tracker.configure(window=cfg.tracker_window, min_pairs=cfg.tracker_min_pairs,
                               bootstrap=cfg.tracker_bootstrap, trained_columns=trained, seed=cfg.seed)
        B, S = cfg.B, min(cfg.informativeness_subset, cfg.B)
        mask = torch.zeros(B, dtype=torch.bool)
        mask[torch.linspace(0, B - 1, max(S, 1)).round().long()] = S > 0
        return mask

    def _optimiser_step(self) -> float:
        """Clip, check and apply the accumulated gradient; returns the pre-clip grad norm."""
        max_norm = self.cfg.grad_clip if self.cfg.grad_clip > 0 else float("inf")
        norm = self.acc.clip_grad_norm_(self.policy.params, max_norm)
        norm = float(norm)
        if norm != norm or norm == float("inf"):
            raise NonFiniteLossError(f"non-finite gradient norm at iteration {self.iteration + 1}; stopping before "
                                     "the optimiser step (the last checkpoint is intact)")
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return norm

    def _informativeness(self, out, prompts, adv, local, info_mask) -> torch.Tensor | None:
        """Score the old policy's x0_hat, pool the (p_clean, proxy) pairs in the tracker, return its D (K, T+1)."""
        if out.proxy_x0 is None:
            return self.D
        subset = info_mask.nonzero()[:, 0]
        pos = torch.full((self.cfg.B,), -1, dtype=torch.long)
        pos[subset] = torch.arange(subset.numel())
        R_hat = self.score(out.proxy_x0, [prompts[s] for s in out.proxy_sample.tolist()]).cpu()
        mean, std = adv.mean[:, local].cpu(), adv.std[:, local].cpu()
        s = out.proxy_sample
        _, p_hat = reward_to_p(R_hat, mean[:, s], std[:, s], self.cfg.adv_clip_max)
        p_hat[adv.silenced.cpu()] = 0.5  # a silenced reward has no signal on either side
        p_proxy = torch.full((self.K, self.T + 1, subset.numel()), float("nan"), dtype=torch.float64)
        p_proxy[:, out.proxy_row, pos[s]] = p_hat.double()
        p_clean = adv.p[:, local].cpu()[:, subset].double()
        if self.acc.num_processes > 1:
            p_clean = self.acc.gather(p_clean.T.contiguous().to(self.acc.device)).T.cpu()
            p_proxy = self.acc.gather(p_proxy.permute(2, 0, 1).contiguous().to(self.acc.device)).permute(1, 2, 0).cpu()
        return self.tracker.add(p_clean, p_proxy)

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict:
        """Everything needed to continue bit-exactly."""
        return {"iteration": self.iteration, "config": self.cfg.to_dict(), "reward_names": list(self.reward_names),
                "policy": self.policy.state_dict(), "optimizer": self.optimizer.state_dict(),
                "rng": ckpt.capture_rng({"train": self.gen}), "W": self.W, "D": self.D,
                "tracker": self.tracker.state_dict() if self.tracker is not None else None}

    def save(self) -> None:
        """Atomically write the checkpoint (main process)."""
        self.acc.wait_for_everyone()
        if self.main:
            ckpt.save_checkpoint(self.out, self.state_dict())

    def _resume(self) -> None:
        state = ckpt.load_checkpoint(self.out)
        if list(state["reward_names"]) != list(self.reward_names):
            raise ValueError(f"checkpoint rewards {state['reward_names']} differ from {list(self.reward_names)}")
        self.policy.load_state_dict(state["policy"])
        self.optimizer.load_state_dict(state["optimizer"])
        ckpt.restore_rng(state["rng"], {"train": self.gen})
        if self.tracker is not None:
            self.tracker.load_state_dict(state["tracker"])
        self.W, self.D, self.iteration = state["W"], state["D"], int(state["iteration"])
        if self.main:
            for name in ("metrics.jsonl", "weights.jsonl", "eval.jsonl"):
                ckpt.truncate_jsonl(self.out / name, self.iteration)

    # ------------------------------------------------------------------ the whole run
    def run(self):
        """Iterate to `cfg.iterations`, evaluating and checkpointing on schedule; returns `load_run(out_dir)`."""
        from tqdm.auto import tqdm

        cfg = self.cfg
        if self.iteration == 0 and cfg.eval_every > 0:
            self.evaluate()
        bar = tqdm(range(self.iteration, cfg.iterations), initial=self.iteration, total=cfg.iterations,
                   disable=not (cfg.progress and self.main), desc=f"{cfg.method}/{cfg.backend}")
        for _ in bar:
            rec = self.step()
            bar.set_postfix(reward=f"{rec['reward/weighted']:.3f}", loss=f"{rec['loss/loss']:.3g}")
            n, last = self.iteration, self.iteration == cfg.iterations
            if last or (cfg.eval_every and n % cfg.eval_every == 0) or (cfg.grid_every and n % cfg.grid_every == 0):
                self.evaluate(grid=last or bool(cfg.grid_every and n % cfg.grid_every == 0))
            if last or (cfg.checkpoint_every and n % cfg.checkpoint_every == 0):
                self.save()
        if cfg.log_with:
            self.acc.end_training()
        return load_run(self.out)

    def evaluate(self, grid: bool = True) -> None:
        """Score the EMA policy on test prompts now (main process) and append the record to eval.jsonl."""
        if self.main:
            rec = evaluate_policy(self, grid=grid)
            append_jsonl(self.out / "eval.jsonl", rec)


def _check_step_config(cfg: TrainConfig) -> None:
    """Refuse an unknown NFT normalisation or SDE step before the iteration computes anything."""
    if cfg.nft_norm not in NFT_NORMS:
        raise ValueError(f"unknown nft_norm {cfg.nft_norm!r}; choose one of {NFT_NORMS}")
    if cfg.sde_type not in SDE_TYPES:
        raise ValueError(f"unknown sde_type {cfg.sde_type!r}; choose one of {SDE_TYPES}")
    if not cfg.reward_std_floor >= 0:
        raise ValueError(f"reward_std_floor must be >= 0, got {cfg.reward_std_floor}")
    if not 0 < cfg.cps_noise_level <= 1:
        raise ValueError(f"cps_noise_level must be in (0, 1], got {cfg.cps_noise_level}")


def train(cfg: TrainConfig, out_dir: str | Path, *, resume: bool = False, overwrite: bool = False):
    """Run (or resume) a training run; returns the parsed run directory (`recast.trainer.metrics.Run`)."""
    return Trainer(cfg, out_dir, resume=resume, overwrite=overwrite).run()
