"""What the trainer does differently on several processes: the process count a resume must keep, each process's own
random state in the checkpoint, the x̂_0 rewards gathered in one layout whatever a process drew, and the logged
numbers reduced over processes.

Every function here is a no-op (or the identity) on one process, so a one-process run is exactly what it was. On
several, each one is a collective that every process joins at the same point with tensors of one shape: none
depends on what a process drew (issue 59: a gather skipped by the one process whose drawn columns left it no x̂_0
made gloo abort and would hang NCCL).
"""

from __future__ import annotations

from pathlib import Path

import torch

from recast.io import read_json
import recast.trainer.checkpoint as ckpt

MARKER = "_run"  # config.json's run marker (recast.trainer.rundir.RUN_MARKER, which imports this module)

__all__ = ["marker_processes", "check_processes", "gather_rng", "restore_rank_rng", "derived_seed", "gather_proxies",
           "mean_over_ranks", "max_over_ranks"]


def marker_processes(out: Path) -> int:
    """The processes a run trained on, as its marker records them (1 for a run from before they were recorded)."""
    n = read_json(Path(out) / "config.json").get(MARKER, {}).get("num_processes", 1)
    if not (isinstance(n, int) and not isinstance(n, bool) and n >= 1):
        raise ValueError(f"{Path(out) / 'config.json'}: _run.num_processes must be an integer >= 1, got {n!r}")
    return n


def check_processes(out: Path, cfg, num_processes: int, change: bool) -> None:
    """Refuse to resume a run on another number of processes than it trained on, naming both (each process draws
    its own prompts, so the count is part of the global batch), unless ``change``."""
    saved = marker_processes(out)
    if saved == num_processes or change:
        return
    per = cfg.B

    def plural(n):
        return f"{n} process{'es' if n > 1 else ''}"

    raise ValueError(f"cannot resume {out}: it trained on {plural(saved)} ({saved * per} images per iteration) and "
                     f"this launch has {plural(num_processes)} ({num_processes * per}); launch {saved}, or pass "
                     "--change-processes (Trainer(change_processes=True)) to continue with the new global batch")


def gather_rng(acc, generators: dict[str, torch.Generator]) -> list[dict] | None:
    """Every process's random state (`recast.trainer.checkpoint.capture_rng`), in rank order; None on one process
    (the checkpoint's ``rng`` is then the whole story). A collective: every process calls it."""
    if acc.num_processes == 1:
        return None
    from accelerate.utils import gather_object

    return list(gather_object([ckpt.capture_rng(generators)]))


def derived_seed(seed: int, rank: int, iteration: int) -> int:
    """The seed of a process that joins a run at ``iteration`` with no saved state of its own (a resume onto more
    processes than the run had): a function of (seed, rank, iteration) alone, distinct from every fresh stream."""
    return (int(seed) * 1_000_003 + 300_007 + int(rank) * 7_919 + int(iteration) * 2_147_483_647) % 2**63


def restore_rank_rng(state: dict, generators: dict[str, torch.Generator], rank: int, seed: int) -> str:
    """Restore process ``rank``'s own random state from a checkpoint; returns where it came from.

    A checkpoint of several processes holds each one's state (``rng_ranks``); one of a single process holds
    ``rng`` only. A rank the checkpoint has no state for (the run continues on more processes, asked for) seeds its
    generators from `derived_seed`, so it neither repeats another process's stream nor needs one saved.

    Returns:
        "saved" or "derived".
    """
    saved = state.get("rng_ranks") or [state["rng"]]
    if rank < len(saved):
        ckpt.restore_rng(saved[rank], generators)
        return "saved"
    for i, g in enumerate(generators.values()):
        g.manual_seed(derived_seed(seed, rank, int(state["iteration"])) + i)
    return "derived"


def gather_proxies(acc, out, subset: torch.Tensor, K: int, T: int, B: int, score) -> tuple | None:
    """This iteration's x̂_0 rewards of every process as (sample, column, rewards (K, M), clean samples), sample
    indices global (rank r's sample i is r·B + i); None when no process has any.

    Every process joins the gather with a dense (subset, K, T+1) layout, NaN where it has no x̂_0, so the collective
    never depends on the columns a process drew.

    Args:
        out: the backend's `OptOutput` (its proxy_x0 may be None).
        subset: (S,) the local samples whose x̂_0 are scored (the same on every process).
        score: `Trainer.score`, called only where this process has x̂_0 to score.
    """
    layout = torch.full((subset.numel(), K, T + 1), float("nan"))
    if out.proxy_x0 is not None:
        s, c = out.proxy_sample.cpu(), out.proxy_row.cpu()
        pos = torch.full((B,), -1, dtype=torch.long)
        pos[subset] = torch.arange(subset.numel())
        layout[pos[s], :, c] = score(out.proxy_x0, s).cpu().T
    if acc.num_processes > 1:
        layout = acc.gather(layout.to(acc.device)).cpu()  # (processes * S, K, T+1), rank-major
        subset = torch.cat([subset + r * B for r in range(acc.num_processes)])
    n, c = torch.isfinite(layout[:, 0]).nonzero(as_tuple=True)
    if n.numel() == 0:
        return None
    return subset[n], c, layout[n, :, c].T.contiguous(), subset


def mean_over_ranks(acc, values: dict[str, float]) -> dict[str, float]:
    """The mean over processes of each value (every process holds the same keys); the values themselves on one."""
    if acc.num_processes == 1 or not values:
        return dict(values)
    keys = sorted(values)
    t = acc.gather(torch.tensor([[float(values[k]) for k in keys]], dtype=torch.float64, device=acc.device))
    return dict(zip(keys, t.cpu().mean(0).tolist()))


def max_over_ranks(acc, values: dict[str, float]) -> dict[str, float]:
    """The largest over processes of each value (a phase's time is its slowest process's)."""
    if acc.num_processes == 1 or not values:
        return dict(values)
    keys = sorted(values)
    t = acc.gather(torch.tensor([[float(values[k]) for k in keys]], dtype=torch.float64, device=acc.device))
    return dict(zip(keys, t.cpu().max(0).values.tolist()))
