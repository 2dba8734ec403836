"""How an iteration's images split over GPUs: per-GPU prompts, micro-batch and gradient accumulation.

An iteration draws `prompts_per_iter` prompts and `group_size` samples of each. Whole groups stay on one process:
the samples of a prompt are generated, scored and normalised together (the trainer lays a group out contiguously
and gathers rewards across processes before normalising), so `prompts_per_iter` must divide by `num_gpus`. Inside a
process, the loss runs in micro-batches of at most `max_per_gpu` images and accumulates gradients over them;
micro-batches may cut through a group, which is harmless because advantages are fixed before the loss runs.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["BatchPlan", "plan_batches", "process_plan", "global_batch", "check_launch"]


@dataclass(frozen=True)
class BatchPlan:
    """Batch layout of one iteration.

    Attributes:
        group_size: G samples per prompt.
        num_gpus: processes.
        prompts_per_gpu: whole groups each process samples and scores.
        images_per_gpu: prompts_per_gpu * G.
        micro_batch: images per forward/backward pass (the largest divisor of images_per_gpu <= max_per_gpu).
        grad_accum: micro-batches per optimiser step (images_per_gpu / micro_batch).
        global_images: images per iteration over all processes.
    """

    group_size: int
    num_gpus: int
    prompts_per_gpu: int
    images_per_gpu: int
    micro_batch: int
    grad_accum: int
    global_images: int

    def __str__(self) -> str:
        return (f"{self.num_gpus} GPU(s) x {self.prompts_per_gpu} prompts x {self.group_size} samples = "
                f"{self.images_per_gpu} images per GPU ({self.global_images} per iteration); micro-batch "
                f"{self.micro_batch} x {self.grad_accum} accumulation steps")


def plan_batches(group_size: int, prompts_per_iter: int, num_gpus: int, max_per_gpu: int) -> BatchPlan:
    """Derive per-GPU batch and gradient accumulation (see module docstring).

    Args:
        group_size: G >= 2 samples per prompt (group normalisation needs two).
        prompts_per_iter: prompts per iteration over all GPUs; a multiple of num_gpus.
        num_gpus: processes >= 1.
        max_per_gpu: the most images one forward/backward pass may hold (memory bound) >= 1.

    Raises:
        ValueError: naming the argument, with the nearest valid prompts_per_iter when it does not divide.
    """
    for name, value, low in (("group_size", group_size, 2), ("prompts_per_iter", prompts_per_iter, 1),
                             ("num_gpus", num_gpus, 1), ("max_per_gpu", max_per_gpu, 1)):
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    if prompts_per_iter % num_gpus:
        lower = prompts_per_iter // num_gpus * num_gpus
        upper = lower + num_gpus
        near = f"{lower} or {upper}" if lower else f"{upper}"
        raise ValueError(f"prompts_per_iter={prompts_per_iter} does not split into whole groups over "
                         f"num_gpus={num_gpus}; use {near}")
    prompts_per_gpu = prompts_per_iter // num_gpus
    images = prompts_per_gpu * group_size
    micro = max(d for d in range(1, min(images, max_per_gpu) + 1) if images % d == 0)
    return BatchPlan(group_size, num_gpus, prompts_per_gpu, images, micro, images // micro,
                     images * num_gpus)


def process_plan(cfg, num_processes: int) -> BatchPlan:
    """The `BatchPlan` of a `TrainConfig` run on `num_processes` processes.

    The trainer's `prompts_per_iter` and `batch_size` are per process, and `grad_accum` splits each process's
    batch into that many micro-batches, so the plan asks for micro-batches of at most ceil(B / grad_accum) images.
    """
    per_process = cfg.B // cfg.group_size
    return plan_batches(cfg.group_size, per_process * num_processes, num_processes,
                        max(1, -(-cfg.B // cfg.grad_accum)))


def global_batch(plan: BatchPlan) -> dict:
    """What a run's marker (config.json's ``_run``) records of its layout: the process count and the global batch
    of one iteration, in prompts and images (every process draws its own `prompts_per_gpu` of them)."""
    return {"num_processes": plan.num_gpus, "global_batch": {"prompts": plan.prompts_per_gpu * plan.num_gpus,
                                                             "images": plan.global_images}}


def check_launch(num_processes: int, env: Mapping[str, str] | None = None, *, fsdp: bool = False,
                 distributed_type: str = "") -> None:
    """Refuse a launch that cannot run as asked, in one line, before anything is built.

    * `accelerate launch --num_processes N` with ``--cpu``, or on a machine without GPUs and without ``--multi_gpu``,
      runs accelerate's one-process launcher: it exports the rendezvous address (MASTER_ADDR) as if for N processes
      but starts one, with no WORLD_SIZE, and says nothing. A run would then train 1/N of the asked-for batch. That
      signature (accelerate's launcher variable ACCELERATE_USE_CPU, a MASTER_ADDR, no WORLD_SIZE) is refused.
    * accelerate's own FSDP (an accelerate config with distributed_type FSDP): its wrapping replaces the parameters
      the trainer's old-policy and EMA copies point to; the trainer shards itself (config field ``fsdp``).
    * ``fsdp`` on one process: nothing to shard over.

    Args:
        num_processes: the processes this run has (`Accelerator.num_processes`).
        env: the environment to read (default `os.environ`).
        fsdp: the config's ``fsdp`` field.
        distributed_type: `Accelerator.distributed_type`, as text.

    Raises:
        ValueError: saying what happened and how to launch instead.
    """
    env = os.environ if env is None else env
    if num_processes == 1 and "ACCELERATE_USE_CPU" in env and "MASTER_ADDR" in env and "WORLD_SIZE" not in env:
        raise ValueError("accelerate launch was asked for several processes but started one (its --cpu flag, or "
                         "--num_processes without --multi_gpu on a machine without GPUs, runs a single process): "
                         "launch N CPU processes with `accelerate launch --multi_gpu --num_processes N` (gloo) or "
                         "`torchrun --nproc_per_node N -m recast train ...`, or drop --num_processes for one")
    if distributed_type.endswith("FSDP"):
        raise ValueError("accelerate's own FSDP (an accelerate config with distributed_type FSDP) is not how this "
                         "trainer shards: launch with --multi_gpu (configs/accelerate/ddp_8gpu.yaml) and --set "
                         "fsdp=true (torch's fully_shard, run by the trainer: recast.trainer.sharding)")
    if fsdp and num_processes == 1:
        raise ValueError("config field fsdp: sharding needs several processes (accelerate launch --multi_gpu "
                         "--num_processes N, or torchrun --nproc_per_node N); this launch has one")
