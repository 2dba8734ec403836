"""What a run leaves on disk and reads back: the bit-exact checkpoint, resuming from it, and the evaluation log.

`Persistent` is a mixin of `recast.trainer.loop.Trainer`; it reads the trainer's attributes (cfg, out, acc, main,
model, policy, optimizer, sharded, plan, credit, replay, gen, replay_gen, W, D, iteration, queries,
world_fingerprint) and writes only the run directory. With several processes every one of them calls `save`, and
each restores its own random state on a resume.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from recast.io import append_jsonl, read_json, read_jsonl, write_json
import recast.trainer.checkpoint as ckpt
from recast.trainer.adapters import write_adapters
from recast.trainer.backends import NonFiniteLossError
from recast.trainer.evaluation import evaluate as evaluate_policy
from recast.trainer.ranks import gather_rng, marker_processes, restore_rank_rng
from recast.trainer.sharding import full_optimizer_state, load_full_optimizer_state
from recast.trainer.runfiles import check_checkpoint_config, load_trained
from recast.trainer.validate import RUN_MARKER

if TYPE_CHECKING:
    import torch

__all__ = ["Persistent"]


class Persistent:
    """Checkpoint, resume and evaluation-log methods of the trainer (see the module docstring)."""

    def state_dict(self) -> dict:
        """Everything needed to continue bit-exactly (``rng`` is this process's random state; `save` adds every
        process's as ``rng_ranks`` when there are several). Sharded, every process calls it (whole tensors are
        gathered) and the main process's is complete."""
        optimizer = (full_optimizer_state(self.model, self.optimizer, self.policy.names) if self.sharded
                     else self.optimizer.state_dict())
        return {"iteration": self.iteration, "config": self.cfg.to_dict(), "reward_names": list(self.reward_names),
                "policy": self.policy.state_dict(), "optimizer": optimizer,
                "rng": ckpt.capture_rng(self._generators()), "num_processes": self.acc.num_processes,
                "W": self.W, "D": self.D,
                "credit": self.credit.state_dict(), "update_offset": self.update_offset,
                "queries": dict(self.queries), "replay": self.replay.state_dict() if self.replay is not None else None}

    def _generators(self) -> dict[str, torch.Generator]:
        """The run's own RNG streams (the replay draw has its own, so replay off leaves the others as they were)."""
        return {"train": self.gen} if self.replay_gen is None else {"train": self.gen, "replay": self.replay_gen}

    def save(self) -> None:
        """Atomically write the checkpoint (main process), after checking that every weight in it is finite. Every
        process calls it: each one's random state is gathered into the checkpoint, to be restored as its own.

        Raises:
            NonFiniteLossError: a NaN/inf parameter, old-policy, EMA or W entry; the last checkpoint stays intact.
        """
        self.acc.wait_for_everyone()
        rng_ranks = gather_rng(self.acc, self._generators())
        if not (self.main or self.sharded):
            return
        state = self.state_dict()  # sharded: a collective, joined by every process
        if not self.main:
            return
        if rng_ranks is not None:
            state["rng_ranks"] = rng_ranks
        tensors = {f"{group}/{name}": t for group in ("params", "old", "ema", "ref")
                   for name, t in (state["policy"].get(group) or {}).items()}
        bad = ckpt.non_finite({**tensors, "W": state["W"]})
        if bad:
            raise NonFiniteLossError(f"non-finite values in {', '.join(bad[:3])}{' ...' if len(bad) > 3 else ''} at "
                                     f"iteration {self.iteration}; not saving them (the last checkpoint is intact). "
                                     "Lower lr or nft_beta, or enable grad_clip.")
        ckpt.save_checkpoint(self.out, {**state, "world_fingerprint": self.world_fingerprint,
                                        "logs": ckpt.capture_logs(self.out)})
        # the adapter a user takes away, raw and EMA, in diffusers' LoRA format (recast.trainer.adapters)
        write_adapters(state["policy"], self.cfg.lora_rank, self.cfg.lora_alpha, self.out)

    def _resume(self) -> None:
        state = ckpt.load_checkpoint(self.out)
        path = self.out / ckpt.CHECKPOINT
        # The checkpoint's own config must be the run's: a checkpoint copied from another run, or a base model
        # changed between kill and resume, would otherwise continue silently on a different trajectory.
        check_checkpoint_config(self.out, state)
        run_fp = read_json(self.out / "config.json").get(RUN_MARKER, {}).get("world_fingerprint")
        if state.get("world_fingerprint") != self.world_fingerprint or run_fp not in (None, self.world_fingerprint):
            raise ValueError(f"cannot resume {self.out}: the base model's weights differ from those {path} was "
                             f"trained from (fingerprint {str(state.get('world_fingerprint'))[:12]} vs now "
                             f"{self.world_fingerprint[:12]}); restore the base model ({self.cfg.world!r}) or start "
                             "a new --out")
        if list(state["reward_names"]) != list(self.reward_names):
            raise ValueError(f"checkpoint rewards {state['reward_names']} differ from {list(self.reward_names)}")
        if int(state["iteration"]) > self.cfg.iterations:
            raise ValueError(f"cannot resume {self.out} to iterations={self.cfg.iterations}: its checkpoint is already "
                             f"at iteration {int(state['iteration'])}; ask for at least that many (--iterations)")
        self.policy.load_state_dict(state["policy"])
        self._load_optimizer(state["optimizer"])
        # each process continues its own streams (a checkpoint of one process holds only "rng")
        restore_rank_rng(state, self._generators(), self.acc.process_index, self.cfg.seed)
        self.credit.load_state_dict(state["credit"] if "credit" in state else self._legacy_credit(state))
        if self.replay is not None:
            self.replay.load_state_dict(state["replay"])
        # a checkpoint from before the counters: every iteration scored B fresh samples; its proxies are unknown (0)
        self.queries = {k: int(v) for k, v in (state.get("queries") or {
            "images": int(state["iteration"]) * self.cfg.B * self.acc.num_processes, "proxies": 0}).items()}
        self.iteration = int(state["iteration"])
        self.update_offset = int(state.get("update_offset", 0))
        if self.main:
            if "logs" in state:
                ckpt.restore_logs(self.out, state["logs"], keep_evals_at=self.iteration)
            else:  # a checkpoint written without its logs: keep what the files hold up to its iteration
                for name in ckpt.LOG_FILES:
                    ckpt.truncate_jsonl(self.out / name, self.iteration)
            # the fields a resume may change (more iterations, another schedule) become the run's own, so a finished
            # extension reads as finished and config.json says what the run now is
            saved = read_json(self.out / "config.json")
            now = self.cfg.to_dict()
            if any(saved.get(k) != now[k] for k in ckpt.RESUMABLE_FIELDS):
                write_json(self.out / "config.json", {**saved, **{k: now[k] for k in ckpt.RESUMABLE_FIELDS}})
            self._record_processes()

    def _record_processes(self) -> None:
        """A resume on another number of processes (asked for: `check_processes` refuses it otherwise) says how the
        global batch changes, and the run marker records the new layout and when it changed."""
        from recast.distributed import global_batch

        before, now = marker_processes(self.out), self.acc.num_processes
        if before == now:
            return
        saved = read_json(self.out / "config.json")
        marker = dict(saved[RUN_MARKER])
        old = marker.get("global_batch") or {"images": before * self.cfg.B}
        new = global_batch(self.plan)
        print(f"resuming {self.out} at iteration {self.iteration} on {now} process(es) where it trained on {before}: "
              f"the global batch changes from {old['images']} to {new['global_batch']['images']} images "
              f"({new['global_batch']['prompts']} prompts) per iteration", flush=True)
        changes = list(marker.get("process_changes", [])) + [{"iteration": self.iteration, "from": before, "to": now}]
        write_json(self.out / "config.json", {**saved, RUN_MARKER: {**marker, **new, "process_changes": changes}})

    def _initialize_from(self, run_dir) -> None:
        """Start a new stage from another run's last checkpoint: its LoRA, optimiser, old policy and EMA, and its
        update count (the old policy's decay continues); this run's iterations, rewards, budgets and RNG are its own.

        Raises:
            ValueError / FileNotFoundError: naming what differs (the base model, the adapter's shape, the optimiser).
        """
        src = Path(run_dir)
        if src.resolve() == self.out.resolve():
            raise ValueError(f"config field initialize_from: {src} is this run's own folder; to continue a run, resume it")
        try:  # the checkpoint compared with the source's config.json, as every other reader does (I07)
            _, state = load_trained(src, "cannot initialize from")
        except ValueError as err:
            raise ValueError(f"config field initialize_from: {err}") from None
        theirs = state.get("config") or {}
        if state.get("world_fingerprint") != self.world_fingerprint:
            raise ValueError(f"config field initialize_from: {src} was trained from another base model (fingerprint "
                             f"{str(state.get('world_fingerprint'))[:12]} vs {self.world_fingerprint[:12]})")
        same = ("lora_rank", "lora_alpha", "world")
        diff = [f"{k}: {theirs.get(k)!r} there vs {getattr(self.cfg, k)!r} here" for k in same
                if theirs.get(k) != getattr(self.cfg, k)]
        if diff:
            raise ValueError(f"config field initialize_from: {src} is not a stage this run can continue ({'; '.join(diff)})")
        try:
            self.policy.load_state_dict(state["policy"])
            self._load_optimizer(state["optimizer"])
        except (KeyError, ValueError, RuntimeError) as err:
            raise ValueError(f"config field initialize_from: {src}: its adapter or optimiser does not fit this run "
                             f"({str(err).splitlines()[0][:200]})") from None
        # torch's load_state_dict brings back the source's hyperparameters with its moments: this stage's own win
        for group in self.optimizer.param_groups:
            group.update(lr=self.cfg.lr, betas=tuple(self.cfg.adam_betas), eps=self.cfg.adam_eps,
                         weight_decay=self.cfg.weight_decay)
            if "initial_lr" in group:
                group["initial_lr"] = self.cfg.lr
        self.update_offset = int(state.get("update_offset", 0)) + int(state["iteration"])

    def _load_optimizer(self, state: dict) -> None:
        """The optimiser's state from a checkpoint (one layout, sharded or not: `recast.trainer.sharding`)."""
        if self.sharded:
            load_full_optimizer_state(self.model, self.optimizer, state, self.policy.names)
        else:
            self.optimizer.load_state_dict(state)

    def _legacy_credit(self, state: dict) -> dict:
        """The credit state of a checkpoint written before `recast.credit` (W, D and the tracker at the top level)."""
        return {**self.credit.state_dict(), "iteration": int(state["iteration"]), "W": state["W"], "D": state["D"],
                "tracker": state.get("tracker")}

    def _has_eval(self, n: int) -> bool:
        path = self.out / "eval.jsonl"
        return path.is_file() and any(r.get("iteration") == n for r in read_jsonl(path))

    def evaluate(self, grid: bool = True) -> None:
        """Score the EMA policy on test prompts now (main process) and append the record to eval.jsonl.

        Every global RNG (python, numpy, torch) is restored afterwards, so evaluating cannot shift training. A sharded
        transformer's passes are collectives: every process evaluates, alike, and the main one writes.
        """
        if self.main or self.sharded:
            saved = ckpt.capture_rng({})
            try:
                rec = evaluate_policy(self, grid=grid and self.main)
            finally:
                ckpt.restore_rng(saved, {})
        if self.main:
            append_jsonl(self.out / "eval.jsonl", rec)
            if self.cfg.log_with:
                from recast.trainer.tracking import log_evaluation

                log_evaluation(self.acc, self.cfg.log_with, rec, self.last_eval_images, self.W, self.reward_names,
                               self.sigmas.tolist(), self.iteration)
