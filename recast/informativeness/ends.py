"""Stored continuation ends: a reward's ground-truth timing in seconds, without sampling again.

The `rollout` ground truth (`recast.rollout.rollout_estimate`) spends nearly all its time sampling: N clean samples,
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
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save({"sigmas": self.sigmas, "prompts": list(self.prompts), "clean": self.clean, "ends": self.ends,
                    "meta": dict(self.meta)}, path)
        return path

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
    from recast.informativeness.probe import estimate_profiles, grid_sigmas

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


@torch.no_grad()
def ends_profile(ends: RolloutEnds, reward_fn: Callable[[torch.Tensor, list[str]], torch.Tensor], *,
                 alpha: float = 2.0, adv_clip_max: float = 5.0, std_floor: float = 1e-2, bootstrap: int = 200,
                 seed: int = 0) -> dict:
    """The ground truth of ``reward_fn`` on stored ends: what `estimate_profiles`' rollout profile gives.

    Args:
        ends: from `record_ends`.
        reward_fn: (images, prompts) -> (N,) or (N, K) raw rewards.
        alpha, adv_clip_max, std_floor: Rényi order and the trainer's p map (`p_map`), frozen at the clean batch.
        bootstrap, seed: replicates over the N states for the bands, and their seed.

    Returns:
        dict of float64 tensors, one row per reward (K): ``D`` (K, T + 1), ``D_boot`` (R, K, T + 1) or None,
        ``gains`` (K, T), ``com`` (K,) the centre of mass of the gains (0 = noisiest column), ``com_lo`` /
        ``com_hi`` its 5-95 % band (NaN without a bootstrap), ``cleanest_third_share`` (K,) the share of the gains
        in the last ⌈T/3⌉ columns, ``silenced`` (K,) bool, the raw rewards they come from: ``R_clean`` (N, K)
        of the clean batch and ``R_ends`` (T − 1, M, N, K) of the ends (None for T = 1), and ``ends_z_first`` (K,),
        the Welch z of the raw rewards of the ends continued from the noisiest interior state against the clean
        batch's (`reward_agreement`; NaN for T = 1): whether the continuations reproduce the batch they continue.
    """
    from recast.informativeness import centre_of_mass_band, gains_centre_of_mass, telescoping_gains
    from recast.informativeness.probe import p_map
    from recast.rollout import discriminability_from_ends, reward_agreement

    def raw(images: torch.Tensor, prompts: list[str]) -> torch.Tensor:
        r = reward_fn(images, prompts).float().double().cpu()  # float32 first, as the estimators see it
        return r[:, None] if r.ndim == 1 else r

    prompts = list(ends.prompts)
    R_clean = raw(ends.clean, prompts)
    to_p, silenced = p_map(R_clean, adv_clip_max, std_floor)
    T = len(ends.sigmas) - 1
    if T == 1:
        R_ends, p_ends = None, to_p(R_clean)[None, None]
        ends_z = torch.full((R_clean.shape[1],), float("nan"), dtype=torch.float64)
    else:
        _, M, N = ends.ends.shape[:3]
        R_ends = torch.stack([raw(e.reshape(M * N, *e.shape[2:]), prompts * M).reshape(M, N, -1) for e in ends.ends])
        p_ends = to_p(R_ends.reshape(-1, R_ends.shape[-1])).reshape(R_ends.shape)
        ends_z = reward_agreement(R_ends[0].flatten(0, 1), R_clean)
    D, D_boot = discriminability_from_ends(p_ends.double(), T, alpha=alpha, bootstrap=bootstrap,
                                           generator=torch.Generator().manual_seed(seed))
    gains = telescoping_gains(D)
    com = gains_centre_of_mass(gains)
    last = -(-T // 3)
    total = gains.sum(1)
    share = gains[:, -last:].sum(1) / total.where(total > 0, torch.ones(()))
    lo = hi = torch.full_like(com, float("nan"))
    if D_boot is not None:
        lo, hi = centre_of_mass_band(D_boot)
    return {"D": D, "D_boot": D_boot, "gains": gains, "com": com, "com_lo": lo, "com_hi": hi,
            "cleanest_third_share": share, "silenced": silenced, "R_clean": R_clean, "R_ends": R_ends,
            "ends_z_first": ends_z}
