"""The online ReCAST loop: sample from the old policy, score, normalise per reward, weight through W, optimise.

One iteration, in sampling order (docs/method.md §3-§6):
    prompts -> G samples each from the old policy (ODE for nft, SDE with log-probs for grpo) -> every reward ->
    per-reward group normalisation -> per-step signals through W -> one optimiser step -> (recast) informativeness
    from the old policy's x0_hat and a W re-solve -> old-policy and EMA updates.

`train(cfg, out_dir)` runs it end to end; `Trainer` exposes the steps for tests and notebooks.
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from pathlib import Path

import torch

from recast.config import TrainConfig
from recast.distributed import check_launch, global_batch, process_plan
from recast.credit import Credit, Trajectory
from recast.io import append_jsonl, remove_stale_temps, write_json
from recast.sampling import sample_ode, sample_sde, sigma_schedule
import recast.trainer.checkpoint as ckpt
from recast.advantages import reward_sum
from recast.trainer.backends import NonFiniteLossError, RewardError, Rollouts, grpo_optimise, nft_optimise
from recast.trainer.metrics import PhaseTimer, load_run
from recast.trainer.persist import Persistent
from recast.trainer.policy import Policy, old_decay
from recast.trainer.ranks import gather_proxies, max_over_ranks, mean_over_ranks
from recast.trainer.sharding import full_tensor, prepare
from recast.trainer.replay import ReplayBuffer
from recast.trainer.replay_step import replay_batch
from recast.trainer.rundir import RunLock, check_run_dir, unlink_run_files
from recast.trainer.speed import apply_switches, merged_lora, sdpa_context
from recast.trainer.progress import IterationProgress
from recast.trainer.stopping import StopRequests, TrainingStopped
from recast.trainer.validate import RUN_MARKER, check_out_dir, validate_config

__all__ = ["Trainer", "train", "NonFiniteLossError", "RewardError", "TrainingStopped"]


class Trainer(Persistent):
    """One run of the online loop, resumable bit-exactly.

    Args:
        cfg: the run's config.
        out_dir: run directory (config, metrics, checkpoint, grids).
        resume: True continues from `out_dir/checkpoint.pt` (the config must match); "auto" continues a compatible
            run, returns a finished one as it is and starts an empty folder, refusing anything else (how notebooks
            and sweeps rerun: a crashed job continues, a finished one is not retrained).
        overwrite: start fresh even if `out_dir` already holds a run (its log files are cleared); with "auto", only
            where the run there is incompatible.
        change_processes: let a resume run on another number of processes than the run trained on (the global
            batch changes with it, and the trainer says to what); without it such a resume is refused.

    Raises:
        ValueError / FileNotFoundError / FileExistsError / PermissionError: bad input, caught before any compute
            (see `recast.trainer.validate`); `RunDirBusyError` when another live run holds `out_dir`.
    """

    def __init__(self, cfg: TrainConfig, out_dir: str | Path, *, resume: bool | str = False, overwrite: bool = False,
                 change_processes: bool = False):
        from accelerate import Accelerator

        self.spec = validate_config(cfg)  # the config is checked and resolved once; the rest trusts self.spec
        self.reward_names, self.lam = self.spec.reward_names, self.spec.lam
        self.out = check_out_dir(out_dir)
        self.cfg = cfg
        if cfg.num_threads > 0:
            torch.set_num_threads(cfg.num_threads)
        # "auto" leaves the precision to accelerate (its config file or ACCELERATE_MIXED_PRECISION, else "no"); an
        # explicit value wins. Either way the run marker records what was used.
        self.acc = Accelerator(cpu=cfg.device == "cpu",
                               mixed_precision=None if cfg.mixed_precision == "auto" else cfg.mixed_precision,
                               log_with=list(cfg.log_with) or None, project_dir=str(self.out))
        self.main = self.acc.is_main_process
        # several processes asked for and one started; accelerate's FSDP; fsdp on one process: refused here
        check_launch(self.acc.num_processes, fsdp=cfg.fsdp, distributed_type=str(self.acc.distributed_type))
        # One run per directory: the lock is held until `run` ends (or this object goes), and the directory is
        # judged only under it, so two runs started together cannot both pass the check and interleave their logs.
        self._lock = RunLock(self.out).acquire() if self.main else None
        try:
            self.mode = check_run_dir(self.out, cfg, resume=resume, overwrite=overwrite, spec=self.spec,
                                      num_processes=self.acc.num_processes, change_processes=change_processes)
            if self.mode != "finished":  # a finished run with the same config: nothing to build or train
                self._build(self.mode == "resume")
        except BaseException:
            self.release()
            raise

    def _build(self, resume: bool) -> None:
        """Load the world, policy, optimiser and rewards; then resume, or clear the directory and write config.json."""
        cfg = self.cfg
        torch.manual_seed(cfg.seed)
        try:
            world = self._load_world()
        except (RuntimeError, OSError, KeyError, TypeError, ValueError) as err:
            first = (str(err).strip().splitlines() or [type(err).__name__])[0][:300]
            raise ValueError(f"cannot load the world {cfg.world!r}: {first}") from None
        self.world = world.to(self.acc.device)
        # the base weights' fingerprint (before LoRA is added): a resume onto a changed base model is refused
        self.world_fingerprint = ckpt.world_fingerprint(self.world)
        self.world.freeze()
        self.policy = Policy(self.world.transformer, lora_rank=cfg.lora_rank, lora_alpha=cfg.lora_alpha,
                             seed=cfg.seed, keep_ref=cfg.kl_beta > 0)
        self.policy = apply_switches(cfg, self.world.transformer, self.policy)  # each off until measured
        self.sharded = cfg.fsdp  # DDP (accelerate's wrapping) or FSDP2 (recast.trainer.sharding) over processes
        self.model, self.optimizer = prepare(self.acc, self.world.transformer, self.policy, lambda params: (
            torch.optim.AdamW(params, lr=cfg.lr, betas=tuple(cfg.adam_betas), eps=cfg.adam_eps,
                              weight_decay=cfg.weight_decay)), shard=self.sharded)
        self.rewards = [self.world.reward(n, self.acc.device) for n in self.reward_names]
        if hasattr(self.world, "load_judges"):  # a missing judge fails here, not at the first evaluation
            self.world.load_judges(self.acc.device)
        self.plan = process_plan(cfg, self.acc.num_processes)
        if self.main and self.acc.num_processes > 1:
            print(f"batch plan: {self.plan}", flush=True)
        self.K, self.T = len(self.reward_names), cfg.num_steps
        self.sigmas = sigma_schedule(cfg.num_steps, cfg.shift)
        self.gen = torch.Generator().manual_seed(cfg.seed * 1_000_003 + self.acc.process_index)
        self.replay = self.replay_gen = None
        if cfg.replay_share > 0:
            if self.acc.num_processes > 1:  # each process would hold its own buffer, and only the main one is saved
                raise ValueError("config field replay_share: trajectory replay runs on one process only for now "
                                 f"({self.acc.num_processes} processes here); set replay_share=0")
            self.replay = ReplayBuffer(cfg.replay_capacity, cfg.replay_max_age)
            # its own stream: turning replay on must not shift the prompts, noise and columns of the fresh batch
            self.replay_gen = torch.Generator().manual_seed(cfg.seed * 1_000_003 + 500_009)
        self.queries = {"images": 0, "proxies": 0}  # reward queries so far: fresh samples scored, x0_hat proxies scored
        trained = cfg.num_steps - 1 if (cfg.backend == "grpo" or cfg.skip_last_column) else cfg.num_steps
        # the credit assignment (normalisation, W, the live estimate) is the public `recast.credit.Credit`, built
        # from what validation resolved once (the method, its weight table)
        weights = self.spec.table if self.spec.method.weights == "table" else (
            cfg.fixed_W if self.spec.method.weights == "fixed" else None)
        self.credit = Credit(self.reward_names, cfg.num_steps, self.lam, method=cfg.method, weights=weights,
                             aggregation=cfg.aggregation, kernel=cfg.kernel, sigmas=self.sigmas,
                             signal="nft" if cfg.backend == "nft" else "grpo", adv_clip_max=cfg.adv_clip_max,
                             std_scope=cfg.std_scope, std_floor=cfg.reward_std_floor, alpha=cfg.alpha,
                             temperature=cfg.temperature, floor=cfg.floor, uniform_mix=cfg.uniform_mix,
                             window=cfg.tracker_window, min_pairs=cfg.tracker_min_pairs,
                             bootstrap=cfg.tracker_bootstrap, ema=cfg.tracker_ema, trained_columns=trained,
                             recast_every=cfg.recast_every, step_eps=cfg.step_credit_eps,
                             otca_explore=cfg.otca_explore, seed=cfg.seed)
        self.iteration = 0
        self.update_offset = 0  # optimiser updates of earlier stages (initialize_from): the old policy's decay reads them
        self.resumed = resume
        if self.main:  # safe: we hold the lock, so no live writer owns these temp files
            for folder in (self.out, self.out / "grids"):
                remove_stale_temps(folder)
        if resume:
            self._resume()
        elif cfg.initialize_from:
            self._initialize_from(cfg.initialize_from)
        if not resume and self.main:
            unlink_run_files(self.out)
            marker = {"format": "recast-run/2", "reward_names": list(self.reward_names), "lam": self.lam.tolist(),
                      "sigmas": self.sigmas.tolist(), "world_fingerprint": self.world_fingerprint,
                      "mixed_precision": str(self.acc.mixed_precision), "world_settings": self.spec.world_settings,
                      "method": {"weights": self.spec.method.weights, "aggregation": self.spec.method.aggregation,
                                 "kernel": self.spec.method.kernel, "weight_file": self.spec.weight_file},
                      **global_batch(self.plan)}
            if cfg.initialize_from:
                marker["initialized_from"] = {"run": str(cfg.initialize_from), "updates": self.update_offset}
            if self.spec.table is not None:  # the run's own table, in the release's format (it trains there too)
                from recast.archives import save_table

                save_table(self.spec.table, self.out / "recast_weights.npz")
            write_json(self.out / "config.json", {**cfg.to_dict(), RUN_MARKER: marker})
        if cfg.log_with:
            self.acc.init_trackers("recast", config={k: str(v) for k, v in cfg.to_dict().items()})

    @property
    def tracker(self):
        """The live estimate (`InformativenessTracker`) of method "recast", else None."""
        return self.credit.tracker

    @property
    def W(self):
        """The W in force (K, T); for the per-sample baselines the batch mean of their step credit."""
        return self.credit.mean_W()

    @property
    def D(self):
        """The last smoothed discriminability (K, T+1), or None."""
        return self.credit.D

    def release(self) -> None:
        """Release the run directory's lock (done by `run` when it ends; safe to call twice)."""
        lock = getattr(self, "_lock", None)
        if lock is not None:
            lock.release()

    def _load_world(self):
        from recast.world import load_world

        kwargs = {"settings": self.spec.settings} if self.spec.settings is not None else {}
        return load_world(self.spec.world, seed=self.cfg.seed, **kwargs)  # seed: random worlds ("tiny")

    # ------------------------------------------------------------------ one iteration
    def rollout(self) -> Rollouts:
        """Draw B // G train prompts, G samples each, from the old policy. With several processes each one draws
        from its own part of the prompt pool, dealt alike on every process from the run's seed and the iteration
        (`recast.world.sample_prompts`), so no two processes train a prompt in the same iteration."""
        from recast.world import sample_prompts, shard_seed

        cfg, G = self.cfg, self.cfg.group_size
        prompts = [p for p in sample_prompts(self.world, cfg.B // G, split="train", generator=self.gen,
                                             rank=self.acc.process_index, num_ranks=self.acc.num_processes,
                                             shard_seed=shard_seed(cfg.seed, self.iteration))
                   for _ in range(G)]
        noise = torch.randn((cfg.B, *self.world.sample_shape), generator=self.gen).to(self.acc.device)
        with torch.no_grad(), self.acc.autocast(), sdpa_context(cfg.sdpa_backend):
            embeds = self.world.encode_prompts(prompts).detach()
            with self.policy.use("old") as tr, (merged_lora(tr) if cfg.lora_merge_rollouts else nullcontext()):
                if cfg.backend == "nft":  # the baselines' step credit reads the trajectory
                    out = sample_ode(tr, embeds, self.sigmas, noise=noise,
                                     return_trajectory=self.spec.method.weights == "sample")
                else:
                    out = sample_sde(tr, embeds, self.sigmas, noise_level=cfg.sde_noise_level, noise=noise,
                                     generator=self.gen, sde_type=cfg.sde_type)
        return Rollouts(prompts, embeds, out.x0.float(), out.xs, out.x0_hats, out.log_probs)

    def score(self, x0: torch.Tensor, prompts: list[str]) -> torch.Tensor:
        """Raw rewards (K, N) of model-space samples.

        Raises:
            RewardError: a reward returned other than N values, or NaN/inf (named; the last checkpoint is intact).
        """
        images = self.world.decode(x0)
        rows = []
        for name, fn in zip(self.reward_names, self.rewards):
            r = fn(images, prompts)
            if not isinstance(r, torch.Tensor) or tuple(r.shape) != (len(prompts),):
                shape = tuple(r.shape) if isinstance(r, torch.Tensor) else type(r).__name__
                raise RewardError(f"reward {name!r} returned {shape} for {len(prompts)} images; a reward must return "
                                  "a tensor of shape (N,)")
            bad = int((~torch.isfinite(r)).sum())
            if bad:
                raise RewardError(f"reward {name!r} returned NaN or inf for {bad} of {len(prompts)} images at "
                                  f"iteration {self.iteration + 1}; stopping before the optimiser step (the last "
                                  "checkpoint is intact): check the reward, not lr")
            rows.append(r.float())
        return torch.stack(rows)

    def step(self) -> dict:
        """Run one iteration; returns its metrics record."""
        cfg, timer, i = self.cfg, PhaseTimer(), self.iteration
        start = time.perf_counter()
        with timer("sampling"):
            ro = self.rollout()
        with timer("rewards"):
            R = self.score(ro.x0, ro.prompts)
            R_all = self.acc.gather(R.T.contiguous()).T  # (K, B * processes), groups stay contiguous
            local = slice(self.acc.process_index * cfg.B, (self.acc.process_index + 1) * cfg.B)
            traj = None
            if self.spec.method.weights == "sample":  # this process's trajectories, for its own samples
                traj = Trajectory(ro.xs.cpu(), ro.x0_hats.cpu(), ro.x0.cpu(), torch.arange(local.start, local.stop))
            credit = self.credit.normalise(R_all, torch.arange(R_all.shape[1]) // cfg.group_size, trajectory=traj)
            adv, train_adv = credit.adv, credit.train
        W_used = self.W
        if self.spec.method.weights == "sample" and self.acc.num_processes > 1:  # each process's mean of its own
            W_used = self.acc.gather(W_used[None].to(self.acc.device)).mean(0).cpu()  # samples: equal counts
        info_mask = self._info_mask() if self.tracker is not None else None
        S = credit.S[local]  # (B, T): each local sample's signal at every step
        batch, replay_rec = ro, {}
        if self.replay is not None:
            with timer("replay"):
                batch, S, info_mask, replay_rec = replay_batch(self, ro, R_all, train_adv, S, info_mask)
        n_replay = batch.x0.shape[0] - ro.x0.shape[0]
        with timer("optimisation"), sdpa_context(cfg.sdpa_backend):
            backend = nft_optimise if cfg.backend == "nft" else grpo_optimise
            out = backend(self.model, self.policy, batch, S, self.sigmas, cfg, self.gen, self.acc, info_mask)
            grad_norm = self._optimiser_step()
        if self.tracker is not None:
            self._informativeness(out, ro.prompts, info_mask)
            timer.times["informativeness"] += self.credit.times["informativeness"]
            timer.times["solver"] += self.credit.times["solver"]
            if self.credit.resolved and self.main:
                append_jsonl(self.out / "weights.jsonl", {
                    "iteration": i + 1, "D": self.D, "gains": self.tracker.gains(), "W": self.credit.W,
                    "noise_share": self.tracker.noise_share, "pairs": self.tracker.pairs_per_row(),
                    "ready": self.tracker.ready()})
        else:
            self.credit.observe()
        if self.replay is not None:  # after the draw: a sample is replayed from the next iteration on
            self.replay.add(ro.prompts, ro.x0, R, replay_rec.pop("_offsets"), iteration=i + 1)
        # the updates done so far, this iteration's included (one per iteration) and earlier stages' (update_offset),
        # as the release counts them: d = 0.001 after the first update, 0.5 from update 500
        self.policy.update_old(old_decay(self.update_offset + i + 1, cfg.old_decay_rate, cfg.old_decay_max))
        self.policy.update_ema(cfg.ema_decay)
        self.iteration = i + 1
        self._count_queries(R_all.shape[1], out)
        rec = {"iteration": i + 1, "reward/weighted": float(reward_sum(R_all, self.lam).mean())}
        for k, name in enumerate(self.reward_names):
            rec[f"reward/{name}/mean"], rec[f"reward/{name}/std"] = float(R_all[k].mean()), float(R_all[k].std())
            rec[f"silenced/{name}"] = float(adv.silenced[k])  # 1: batch std below the floor, p = 0.5 this iteration
        if self.spec.method.aggregation == "reward_sum":
            rec["silenced/reward_sum"] = float(train_adv.silenced[0])
        # the spread of the combined signal actually trained on (what a fixed KL weight is measured against)
        S_all = credit.S[torch.isfinite(credit.S).all(1)]
        rec["signal/sd"] = float(S_all.std()) if S_all.numel() > 1 else 0.0
        # the loss parts are each process's means over its own examples, as many on every process: their mean is
        # the global one
        rec.update({f"loss/{k}": v for k, v in mean_over_ranks(self.acc, out.parts).items()})
        rec["grad_norm"] = grad_norm
        # replayed samples cost no reward query: curves against reward queries read these two counters
        rec["reward_queries"], rec["reward_queries_proxy"] = self.queries["images"], self.queries["proxies"]
        rec["replay/fraction"] = n_replay / (ro.x0.shape[0] + n_replay)
        rec.update(replay_rec)
        rec["zero_std_frac"] = float((R_all.reshape(R_all.shape[0], -1, cfg.group_size).std(-1) == 0).float().mean())
        times = max_over_ranks(self.acc, {**timer.times, "total": time.perf_counter() - start})  # the slowest's
        rec.update({f"time/{k}": times[k] for k in (*timer.times, "total")})
        rec["W"], rec["D"] = W_used, self.D
        if self.main:
            append_jsonl(self.out / "metrics.jsonl", rec)
        if cfg.log_with:
            self.acc.log({k: v for k, v in rec.items() if isinstance(v, float)}, step=i + 1)
        return rec

    def _count_queries(self, fresh: int, out) -> None:
        """Add this iteration's reward queries: every fresh sample (all processes), every x0_hat proxy scored."""
        self.queries["images"] += int(fresh)
        n = 0 if out.proxy_x0 is None else int(out.proxy_x0.shape[0])
        if self.acc.num_processes > 1:
            n = int(self.acc.gather(torch.tensor([n], device=self.acc.device)).sum())
        self.queries["proxies"] += n

    def _info_mask(self) -> torch.Tensor:
        """Samples whose x0_hat is scored for informativeness (all of them by default); evenly spread, no RNG used."""
        cfg = self.cfg
        B, S = cfg.B, min(cfg.informativeness_subset, cfg.B)
        mask = torch.zeros(B, dtype=torch.bool)
        mask[torch.linspace(0, B - 1, max(S, 1)).round().long()] = S > 0
        return mask

    def _optimiser_step(self) -> float:
        """Clip, check and apply the accumulated gradient; returns the pre-clip grad norm."""
        max_norm = self.cfg.grad_clip if self.cfg.grad_clip > 0 else float("inf")
        norm = float(full_tensor(self.acc.clip_grad_norm_(self.policy.params, max_norm)))
        if norm != norm or norm == float("inf"):
            raise NonFiniteLossError(f"non-finite gradient norm at iteration {self.iteration + 1}; stopping before "
                                     "the optimiser step (the last checkpoint is intact)")
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return norm

    def _informativeness(self, out, prompts, info_mask) -> None:
        """Score the old policy's x0_hat and hand the (sample, column, rewards) triples to the credit object, which
        pools them and re-solves W when due. With several processes the pairs are gathered first, by every process
        whether or not its drawn columns left it any (`recast.trainer.ranks.gather_proxies`)."""
        subset = info_mask.nonzero()[:, 0]
        if self.acc.num_processes > 1:
            pooled = gather_proxies(self.acc, out, subset, self.K, self.T, self.cfg.B,
                                    lambda x, s: self.score(x, [prompts[i] for i in s.tolist()]))
            if pooled is None:
                self.credit.observe()
            else:
                s, c, R_hat, everyone = pooled
                self.credit.observe(s, c, R_hat, clean_samples=everyone)
            return
        if out.proxy_x0 is None:
            self.credit.observe()
            return
        R_hat = self.score(out.proxy_x0, [prompts[s] for s in out.proxy_sample.tolist()]).cpu()
        self.credit.observe(out.proxy_sample.cpu(), out.proxy_row.cpu(), R_hat, clean_samples=subset)

    # ------------------------------------------------------------------ the whole run
    def _eval_due(self, n: int) -> tuple[bool, bool]:
        """(evaluate, write a grid) after iteration n."""
        cfg, last = self.cfg, n == self.cfg.iterations
        grid = last or bool(cfg.grid_every and n % cfg.grid_every == 0)
        return last or grid or bool(cfg.eval_every and n % cfg.eval_every == 0), grid

    def run(self):
        """Iterate to `cfg.iterations`, checkpointing and then evaluating on schedule; returns `load_run(out_dir)`.

        A checkpoint is written every `checkpoint_every` iterations, after an iteration that ends `checkpoint_minutes`
        after the last one, at the end, and after the iteration under way when SIGINT or SIGTERM arrives (the run
        then raises TrainingStopped). Where a checkpoint is written does not change the trajectory.

        The checkpoint is written before the evaluation of the same iteration, so a failed or killed evaluation
        loses no training; a resumed run redoes an evaluation that the checkpoint's logs do not hold. The run
        directory's lock is released when this returns or raises.

        Raises:
            TrainingStopped: a SIGINT or SIGTERM arrived; the iteration under way finished and was checkpointed
                (`recast.trainer.stopping`). Resume continues bit for bit.
        """
        cfg = self.cfg
        if self.mode == "finished":
            self.release()
            return load_run(self.out)
        try:
            if self.iteration == 0 and cfg.eval_every > 0:
                self.evaluate()
            elif self.resumed and self._eval_due(self.iteration)[0] and not self._has_eval(self.iteration):
                self.evaluate(grid=self._eval_due(self.iteration)[1])
            bar = IterationProgress(initial=self.iteration, total=cfg.iterations, desc=f"{cfg.method}/{cfg.backend}",
                                    enabled=bool(cfg.progress and self.main))
            saved_at = time.monotonic()
            with StopRequests(announce=self.main) as stop:
                for _ in range(self.iteration, cfg.iterations):
                    rec = self.step()
                    bar.update(reward=f"{rec['reward/weighted']:.3f}", loss=f"{rec['loss/loss']:.3g}")
                    n = self.iteration
                    # a SIGINT/SIGTERM on any process, or the clock on any: every process acts after this iteration
                    late = cfg.checkpoint_minutes and time.monotonic() - saved_at >= 60 * cfg.checkpoint_minutes
                    agreed = max_over_ranks(self.acc, {"stop": float(stop.requested), "late": float(bool(late))})
                    signum = int(agreed["stop"])
                    if (signum or agreed["late"] or n == cfg.iterations
                            or (cfg.checkpoint_every and n % cfg.checkpoint_every == 0)):
                        self.save()
                        saved_at = time.monotonic()
                    if signum and n < cfg.iterations:  # a due evaluation is redone on resume (`_has_eval`)
                        bar.close()
                        raise TrainingStopped(n, cfg.iterations, signum, self.out)
                    due, grid = self._eval_due(n)
                    if due:
                        self.evaluate(grid=grid)
            bar.close()
            if cfg.log_with:
                self.acc.end_training()
            return load_run(self.out)
        finally:
            self.release()


def train(cfg: TrainConfig, out_dir: str | Path, *, resume: bool | str = False, overwrite: bool = False,
          change_processes: bool = False):
    """Run (or resume) a training run; returns the parsed run directory (`recast.trainer.metrics.Run`).

    ``resume="auto"`` is the rerun-safe mode of notebooks and sweeps: a compatible run continues bit-exactly, a
    finished one is returned untouched, an incompatible one is refused naming what differs, and nothing is deleted
    unless ``overwrite`` (see `Trainer`).

    Raises:
        ValueError / FileNotFoundError / FileExistsError / PermissionError: bad input, before any compute
            (`recast.trainer.rundir.RunDirBusyError`, a FileExistsError, when another run holds `out_dir`).
        NonFiniteLossError: a NaN/inf loss, gradient or weight; the last checkpoint stays intact.
        TrainingStopped: SIGINT or SIGTERM; the iteration under way finished and was checkpointed.
    """
    return Trainer(cfg, out_dir, resume=resume, overwrite=overwrite, change_processes=change_processes).run()
