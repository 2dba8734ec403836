"""The transformer sharded over processes with torch's FSDP2 (`torch.distributed.fsdp.fully_shard`): config field
``fsdp``.

One FSDP unit per transformer block and one for the rest: each process keeps 1/N of every parameter (base weights,
LoRA, and, because `recast.trainer.policy.Policy` makes them as copies of the sharded parameters, the old policy, the
EMA and a full fine-tuning's reference) and of the optimiser state, and all-gathers a block's weights for each pass
through it. Sharded parameters are `DTensor`s split along their first dimension, so a companion made from a
parameter is split exactly as the parameter is and every update between them (old <- d·old + (1 - d)·θ, the swaps of
`Policy.use`) is elementwise on the local pieces, with no communication.

What a sharded run must keep: every process runs the same passes through the transformer in the same order (each
one is a collective), so the trainer evaluates on every process and validation asks that every sample trains every
column (``train_columns`` 0); a checkpoint holds whole tensors, gathered by every process and written by the main
one, in the same layout as an unsharded run's, so either kind of run can start from the other's (``initialize_from``).

This is torch's own sharding run by the trainer, not accelerate's: accelerate's FSDP plugin wraps the model in
`acc.prepare`, which the trainer's parameter copies do not survive, and on CPU it silently falls back to DDP.
"""

from __future__ import annotations

import torch

__all__ = ["check_fsdp", "prepare", "shard_transformer", "is_sharded", "full_tensor", "copy_full_",
           "full_optimizer_state", "load_full_optimizer_state"]


def check_fsdp(cfg) -> None:
    """Refuse a sharded config that cannot keep the processes' passes in step, naming the field, before any compute.

    Raises:
        ValueError: ``fsdp`` with a random subset of columns per sample (``train_columns`` other than 0 or all of
            them: the passes per process would differ), or with a switch that rewrites the base weights or compiles
            the blocks (untried under sharding).
    """
    if not cfg.fsdp:
        return
    eligible = cfg.num_steps - 1 if (cfg.backend == "grpo" or cfg.skip_last_column) else cfg.num_steps
    if 0 < cfg.train_columns < eligible:
        raise ValueError(f"config field fsdp: needs every sample to train every column (train_columns=0; here "
                         f"{cfg.train_columns} of {eligible}): each pass through a sharded transformer is a "
                         "collective, and a random subset of columns per sample gives the processes different "
                         "numbers of passes")
    for name in ("lora_merge_rollouts", "lora_merged_old", "compile_blocks"):
        if getattr(cfg, name):
            raise ValueError(f"config field {name}: not with fsdp (it rewrites the base weights or compiles the "
                             "blocks, neither tried on sharded ones); turn one of them off")


def is_sharded(t: torch.Tensor) -> bool:
    """Whether `t` is a sharded (DTensor) parameter or companion."""
    return hasattr(t, "device_mesh") and hasattr(t, "full_tensor")


def full_tensor(t: torch.Tensor) -> torch.Tensor:
    """The whole tensor: gathered from every process for a sharded one (a collective), `t` itself otherwise."""
    return t.full_tensor() if is_sharded(t) else t


@torch.no_grad()
def copy_full_(dst: torch.Tensor, src: torch.Tensor) -> None:
    """dst <- src, where `src` is a whole tensor and `dst` may be sharded: each process copies its own piece of
    `src` (every process holds all of it, read from one checkpoint), with no communication."""
    if is_sharded(dst):
        from torch.distributed.tensor import distribute_tensor

        piece = distribute_tensor(src.detach().to(dst.device, dst.dtype), dst.device_mesh, dst.placements,
                                  src_data_rank=None)
        dst.copy_(piece)  # both split alike: a local copy
    else:
        dst.copy_(src.to(dst.device))


def shard_transformer(transformer: torch.nn.Module, device: torch.device) -> int:
    """Shard `transformer` in place over every process: one unit per block of ``transformer_blocks`` and one for
    the rest; returns the number of units. Parameters made before this (the optimiser's, `Policy`'s) are stale
    afterwards: `Policy.rebind` re-reads them.

    Raises:
        ValueError: a transformer without ``transformer_blocks``, or torch.distributed not initialised (one process).
    """
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    if not (dist.is_available() and dist.is_initialized()):
        raise ValueError("config field fsdp: sharding needs several processes (launch with accelerate launch "
                         "--multi_gpu --num_processes N, or torchrun); this run has one")
    blocks = getattr(transformer, "transformer_blocks", None)
    if blocks is None:
        raise ValueError(f"config field fsdp: {type(transformer).__name__} has no transformer_blocks to shard by")
    mesh = init_device_mesh(torch.device(device).type, (dist.get_world_size(),))
    for block in blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(transformer, mesh=mesh)
    return len(blocks) + 1


def prepare(acc, transformer: torch.nn.Module, policy, make_optimizer, *, shard: bool):
    """The (model, optimiser) the loop trains: with ``shard``, `transformer` sharded in place (`shard_transformer`),
    the policy's parameters and companions re-read from it (`Policy.rebind`), and the optimiser made over them;
    otherwise accelerate's ``prepare`` (DDP over several processes). ``make_optimizer(params)`` builds the optimiser.
    """
    if not shard:
        return acc.prepare(transformer, make_optimizer(policy.params))
    shard_transformer(transformer, acc.device)  # before the optimiser sees the parameters
    policy.rebind()
    return transformer, acc.prepare(make_optimizer(policy.params))


def full_optimizer_state(model: torch.nn.Module, optimizer, names: list[str]) -> dict:
    """The optimiser's whole state on the main process ({} elsewhere), laid out as `torch.optim.Optimizer.state_dict`
    lays out an unsharded one (parameters numbered in the order of `names`), so a checkpoint reads the same whether
    its run was sharded. A collective: every process calls it.

    Args:
        names: the trainable parameters' names in the optimiser's order (`Policy.names`).
    """
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    raw = get_optimizer_state_dict(model, getattr(optimizer, "optimizer", optimizer),
                                   options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if not raw:
        return {}
    index = {n: i for i, n in enumerate(names)}
    return {"state": {index[n]: s for n, s in raw["state"].items()},
            "param_groups": [{**g, "params": [index[n] for n in g["params"]]} for g in raw["param_groups"]]}


def load_full_optimizer_state(model: torch.nn.Module, optimizer, state: dict, names: list[str]) -> None:
    """Load a whole optimiser state (`full_optimizer_state`'s layout, or an unsharded run's) into the optimiser of
    a sharded model; each process keeps its pieces. A collective: every process calls it with the same state."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    raw = {"state": {names[int(i)]: s for i, s in state["state"].items()},
           "param_groups": [{**g, "params": [names[int(i)] for i in g["params"]]} for g in state["param_groups"]]}
    set_optimizer_state_dict(model, getattr(optimizer, "optimizer", optimizer), raw,
                             options=StateDictOptions(full_state_dict=True))
