"""Stored continuation ends: a reward's ground-truth timing in seconds, without sampling again.

The `rollout` ground truth (`recast.informativeness.rollout.rollout_estimate`) spends nearly all its time sampling: N clean samples,
then M ancestral continuations of each at every interior grid point. The rewards only read the images those
samples end on, and the samples do not depend on the rewards. So the ends can be drawn once and stored, and any
reward, a candidate still being designed among them, scored on them later:

    ends = record_ends(world, prompts, seed=0)            # ~8 min at figure 02's 256 x 8 on 2 cores
    ends.save("runs/ends_seed0.pt")
    prof = ends_profile(RolloutEnds.load("runs/ends_seed0.pt"), reward_fn)   # seconds per reward
    prof["com"], prof["cleanest_third_share"]

`record_ends` draws exactly what `recast.informativeness.probe.estimate_profiles` (figure 02) draws with the same
prompts, grid, sampler settings and seed: the tweedie estimate runs first as it does there, so the shared generator
reaches the continuations in the same state. `ends_profile` then gives the same D as figure 02 for any reward
(`tests/test_ground_truth.py` checks it); only the bootstrap replicates differ, because their seed comes from a
generator of their own here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from recast.informativeness.probe import ends_profile, estimate_profiles, grid_sigmas

__all__ = ["RolloutEnds", "record_ends", "ends_profile"]

_RECORD = "__record_ends__"


@dataclass(frozen=True)
class RolloutEnds:
    """The images the ground truth scores (`record_ends`).

    Attributes:
        sigmas: (T + 1,) grid.
        prompts: the N prompts, one sample each.
        clean: (N, 3, H, W) the clean samples x_0 as images.
        ends: (T − 1, M, N, 3, H, W) the ends of the M continuations of every state at grid index 1 .. T − 1.
        meta: how they were drawn (world, seed, num_rollouts, substeps, shift).
    """

    sigmas: torch.Tensor
    prompts: tuple[str, ...]
    clean: torch.Tensor
    ends: torch.Tensor
    meta: dict = field(default_factory=dict)

    def save(self, path: str | Path) -> Path:
        """Write to ``path`` (a torch file; parent folders are created)."""
        from recast.io import save_torch

        return save_torch(path, {"sigmas": self.sigmas, "prompts": list(self.prompts), "clean": self.clean,
                                 "ends": self.ends, "meta": dict(self.meta)})

    @classmethod
    def load(cls, path: str | Path) -> RolloutEnds:
        """Read what `save` wrote.

        Raises:
            FileNotFoundError: no file at ``path``.
        """
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"no stored ends at {path} (record them with record_ends)")
        d = torch.load(path, weights_only=True)
        return cls(d["sigmas"], tuple(d["prompts"]), d["clean"], d["ends"], d["meta"])


@torch.no_grad()
def record_ends(world, prompts: Sequence[str], *, num_steps: int = 6, shift: float = 3.0, num_rollouts: int = 8,
                substeps: int = 4, bootstrap: int = 200, seed: int = 0, sigmas=None,
                x0_substeps: int | None = None) -> RolloutEnds:
    """Draw the ground truth's samples as `estimate_profiles` does with these arguments, and keep the images.

    Args:
        world: the model (its `reward` is wrapped for the duration of the call and restored after).
        prompts: N prompts (at least 4), one sample each.
        num_steps, shift, num_rollouts, substeps, seed, sigmas, x0_substeps: as in `estimate_profiles` (``sigmas``,
            when given, is the grid instead of num_steps and shift; ``x0_substeps`` draws the clean batch on its own
            sub-grid).
        bootstrap: as in the figure being reproduced (only whether it is > 0 changes the generator's stream).

    Returns:
        RolloutEnds on CPU, float32.

    Raises:
        ValueError: num_rollouts < 2 (the ground truth's Monte-Carlo debiasing needs two ends per state).
    """
    if num_rollouts < 2:
        raise ValueError(f"num_rollouts must be >= 2, got {num_rollouts}")
    grid = grid_sigmas(num_steps, shift, sigmas)
    num_steps = len(grid) - 1
    calls: list[torch.Tensor] = []

    def recorder(images: torch.Tensor, _prompts: list[str]) -> torch.Tensor:
        calls.append(images.detach().float().cpu().clone())
        return images.detach().float().mean((1, 2, 3))  # any reward: the samples do not depend on it

    own = vars(world).get("reward")  # an instance attribute to put back, or None: the class's method
    reward = world.reward
    world.reward = lambda name, device: recorder if name == _RECORD else reward(name, device)
    try:
        out = estimate_profiles(world, [_RECORD], list(prompts), num_steps=num_steps, shift=shift,
                                num_rollouts=num_rollouts, substeps=substeps, bootstrap=bootstrap, seed=seed,
                                sigmas=sigmas, x0_substeps=x0_substeps)
    finally:
        if own is None:
            del world.reward
        else:
            world.reward = own
    T, N = num_steps, len(prompts)
    # model_batch's clean batch, tweedie's clean batch and its T - 1 proxies, rollout's clean batch, its T - 1 ends
    clean, rollout_clean, ends = calls[0], calls[T + 1], calls[T + 2: 2 * T + 1]
    if not torch.equal(clean, rollout_clean) or any(e.shape[0] != num_rollouts * N for e in ends):
        raise RuntimeError("estimate_profiles no longer scores its samples in the order record_ends expects")
    ends_t = torch.stack([e.reshape(num_rollouts, N, *e.shape[1:]) for e in ends]) if ends else clean[None, None]
    meta = {"seed": seed, "num_rollouts": num_rollouts, "substeps": substeps, "shift": shift, "bootstrap": bootstrap}
    if sigmas is not None:
        meta["sigmas"] = [float(x) for x in grid]
    if x0_substeps is not None:
        meta["x0_substeps"] = x0_substeps
    return RolloutEnds(out["rollout"].sigmas.clone(), tuple(prompts), clean, ends_t, meta)
