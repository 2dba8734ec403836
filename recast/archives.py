"""The paper's two files, read and written without pickle: density-ratio profiles and weight tables.

Both are NumPy archives interoperable with the authors' release (docs/method.md §0 states the format):

* a **profile** holds ``sigmas`` (T + 1,), from 1 (noise) down to 0, and one ``ratio__<reward>`` (N, T) ≥ 0 per
  reward, column j the destination σ_{j+1} of scheduler step j (noise → clean). This repo adds ``recast_meta``, a JSON
  string saying how the ratios were made (proposal, continuations, model, seed, cost); other readers ignore it.
* a **weight table** stores W in "paper order", columns clean → noise (the reverse of the scheduler), under the keys
  ``reward_names``, ``sigmas``, ``paper_source_sigmas``, ``paper_destination_sigmas``, ``weights`` (T·W),
  ``paper_weights`` (W), ``divergences``, ``raw_gains``, ``budgets``, ``temperatures`` and ``metadata`` (JSON with
  format_version 2). `WeightTable` holds everything in scheduler order; only the file is in paper order.

Loading checks the metadata, every shape, value and marginal, and refuses a damaged file with one line naming it.
"""

from __future__ import annotations

import io
import json
import os
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from recast.offline import paper_weights, ratio_divergence

__all__ = ["DensityProfile", "WeightTable", "load_profile", "save_profile", "load_table", "save_table",
           "table_from_profile", "is_table", "TABLE_METADATA", "MARGIN_TOL"]

RATIO_PREFIX = "ratio__"
META_KEY = "recast_meta"
MARGIN_TOL = 1e-5  # W's marginals as stored (float32) hold to this
MAX_NAME = 200  # longest reward name read from a file
TABLE_METADATA = {"format_version": 2, "weight_column_order": "clean_to_noise",
                  "weights_semantics": "num_steps_times_paper_weights",
                  "profile_column_order": "scheduler_destinations_noise_to_clean", "training_weight_scale": "num_steps"}
TABLE_KEYS = ("reward_names", "sigmas", "paper_source_sigmas", "paper_destination_sigmas", "weights", "paper_weights",
              "divergences", "raw_gains", "budgets", "temperatures", "metadata")


class ArchiveError(ValueError):
    """A profile or weight table that cannot be used, with the file and the key at fault."""


def _check_sigmas(s: np.ndarray, where: str) -> np.ndarray:
    s = np.asarray(s, dtype=np.float64)
    if s.ndim != 1 or s.size < 2 or not np.isfinite(s).all():
        raise ArchiveError(f"{where}: sigmas must be a finite 1-D array of T + 1 >= 2 values, got shape {s.shape}")
    if not (np.diff(s) < 0).all() or abs(s[0] - 1) > MARGIN_TOL or abs(s[-1]) > MARGIN_TOL:
        raise ArchiveError(f"{where}: sigmas must fall strictly from 1 (noise) to 0 (clean), got {s.round(4).tolist()}")
    return s


def _names(values, where: str) -> tuple[str, ...]:
    names = tuple(str(n) for n in np.asarray(values).reshape(-1).tolist())
    if not names or any(not n or len(n) > MAX_NAME for n in names) or len(set(names)) != len(names):
        raise ArchiveError(f"{where}: reward_names must be distinct, non-empty names of at most {MAX_NAME} characters")
    return names


def _open(path) -> np.lib.npyio.NpzFile:
    from recast.config import resolve_path

    p = resolve_path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{p}: no such file")
    try:
        return np.load(p, allow_pickle=False)
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as err:
        raise ArchiveError(f"{p}: not a NumPy archive ({str(err).splitlines()[0][:200]})") from None


def _save(path, arrays: dict) -> Path:
    from recast.io import atomic_write_bytes

    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    p = Path(path)
    if p.suffix != ".npz":
        raise ValueError(f"{p}: a profile or weight table must be written to a .npz file")
    return atomic_write_bytes(p, buf.getvalue())


def _read(arc, key: str, where: str) -> np.ndarray:
    if key not in arc.files:
        raise ArchiveError(f"{where}: missing key {key!r}")
    try:
        return arc[key]
    except ValueError as err:  # an object array (pickle), refused by allow_pickle=False
        raise ArchiveError(f"{where}: key {key!r} cannot be read without pickle ({err})") from None


# ---------------------------------------------------------------------------------------------------------------------
# profiles

@dataclass(frozen=True)
class DensityProfile:
    """Density ratios of each reward on a sampler grid (scheduler order).

    Attributes:
        sigmas: (T + 1,) float64, 1 → 0.
        ratios: reward name → (N, T) float64 ≥ 0; column j is the destination sigmas[j + 1] of step j.
        meta: how the ratios were made (proposal, continuations, model, seed, reward offsets, cost), or {}.
    """

    sigmas: np.ndarray
    ratios: dict
    meta: dict = field(default_factory=dict)

    @property
    def num_steps(self) -> int:
        return int(self.sigmas.size - 1)

    @property
    def reward_names(self) -> tuple[str, ...]:
        return tuple(self.ratios)

    def __post_init__(self):
        s = _check_sigmas(self.sigmas, "profile")
        object.__setattr__(self, "sigmas", s)
        if not self.ratios:
            raise ArchiveError("profile: no ratio__<reward> arrays")
        fixed = {}
        for name, r in self.ratios.items():
            r = np.asarray(r, dtype=np.float64)
            if r.ndim != 2 or r.shape[1] != s.size - 1 or r.shape[0] < 1:
                raise ArchiveError(f"profile: {RATIO_PREFIX}{name} must be (N, T={s.size - 1}), got {r.shape}")
            if not np.isfinite(r).all() or (r < 0).any():
                raise ArchiveError(f"profile: {RATIO_PREFIX}{name} must be finite and >= 0 (a density ratio)")
            fixed[str(name)] = r
        object.__setattr__(self, "ratios", fixed)


def save_profile(profile: DensityProfile, path) -> Path:
    """Write a profile archive (the release's keys, plus ``recast_meta``)."""
    arrays = {"sigmas": profile.sigmas.astype(np.float32)}
    arrays.update({f"{RATIO_PREFIX}{k}": v.astype(np.float32) for k, v in profile.ratios.items()})
    arrays[META_KEY] = np.asarray(json.dumps(profile.meta, sort_keys=True))
    return _save(path, arrays)


def load_profile(path, reward_names=None) -> DensityProfile:
    """Read a profile archive; with ``reward_names``, only those rewards (each must be there).

    Raises:
        FileNotFoundError, ArchiveError (a ValueError): naming the file and the key at fault.
    """
    where = str(path)
    with _open(path) as arc:
        sigmas = _read(arc, "sigmas", where)
        have = [k[len(RATIO_PREFIX):] for k in arc.files if k.startswith(RATIO_PREFIX)]
        want = list(have) if reward_names is None else list(reward_names)
        missing = [n for n in want if n not in have]
        if missing:
            raise ArchiveError(f"{where}: no ratios for rewards {missing} (it holds {have}); make a profile that "
                               "scores them with `python -m recast profile --proposal ...`")
        ratios = {n: _read(arc, f"{RATIO_PREFIX}{n}", where) for n in want}
        meta = {}
        if META_KEY in arc.files:
            try:
                meta = json.loads(str(_read(arc, META_KEY, where)))
            except json.JSONDecodeError:
                raise ArchiveError(f"{where}: {META_KEY} is not JSON") from None
    try:
        return DensityProfile(sigmas, ratios, meta if isinstance(meta, dict) else {})
    except ArchiveError as err:
        raise ArchiveError(f"{where}: {str(err).removeprefix('profile: ')}") from None


# ---------------------------------------------------------------------------------------------------------------------
# weight tables

@dataclass(frozen=True)
class WeightTable:
    """A weight table, in scheduler order (column 0 the noisiest step).

    Attributes:
        reward_names: the K rewards, in row order.
        sigmas: (T + 1,) the grid, 1 → 0.
        W: (K, T) the paper's W: rows λ / Σλ, columns 1 / T.
        divergences: (K, T) D at each step's destination σ; raw_gains: (K, T) the clipped gains.
        budgets: (K,) λ as given; temperatures: (K,) τ; alpha: the Rényi order.
        TW: (K, T) T·W as the file stores it (float32 values); what training multiplies rewards by.
    """

    reward_names: tuple[str, ...]
    sigmas: np.ndarray
    W: np.ndarray
    divergences: np.ndarray
    raw_gains: np.ndarray
    budgets: np.ndarray
    temperatures: np.ndarray
    alpha: float
    TW: np.ndarray

    @property
    def num_steps(self) -> int:
        return int(self.W.shape[1])

    def validate(self, where: str = "weight table") -> None:
        """Shapes, finiteness, signs and both marginals (within MARGIN_TOL); raises ArchiveError naming the part."""
        K, T = len(self.reward_names), self.W.shape[1] if self.W.ndim == 2 else -1
        _check_sigmas(self.sigmas, where)
        for name in ("W", "divergences", "raw_gains", "TW"):
            a = getattr(self, name)
            if a.shape != (K, self.sigmas.size - 1):
                raise ArchiveError(f"{where}: {name} must be (K={K}, T={self.sigmas.size - 1}), got {a.shape}")
            if not np.isfinite(a).all():
                raise ArchiveError(f"{where}: {name} contains NaN or inf")
        for name in ("budgets", "temperatures"):
            a = getattr(self, name)
            if a.shape != (K,) or not np.isfinite(a).all():
                raise ArchiveError(f"{where}: {name} must be (K={K},) and finite, got {a.shape}")
        if (self.W < 0).any() or (self.raw_gains < 0).any() or (self.budgets < 0).any() or self.budgets.sum() <= 0:
            raise ArchiveError(f"{where}: weights, gains and budgets must be >= 0 (budgets with a positive sum)")
        if not (self.temperatures > 0).all():
            raise ArchiveError(f"{where}: temperatures must be > 0")
        cols, rows = self.W.sum(0), self.W.sum(1)
        if np.abs(cols - 1.0 / T).max() > MARGIN_TOL:
            raise ArchiveError(f"{where}: W's columns must each sum to 1/T = {1 / T:.6g}, got {cols.round(6).tolist()}")
        want = self.budgets / self.budgets.sum()
        if np.abs(rows - want).max() > MARGIN_TOL:
            raise ArchiveError(f"{where}: W's rows {rows.round(6).tolist()} do not match the budgets "
                               f"{want.round(6).tolist()} (normalised)")
        if np.abs(self.TW - T * self.W).max() > MARGIN_TOL:
            raise ArchiveError(f"{where}: weights must equal T * paper_weights")

    def subset(self, reward_names) -> "WeightTable":
        """The same table with its rows in the order of ``reward_names`` (exactly the table's rewards)."""
        names = tuple(reward_names)
        if sorted(names) != sorted(self.reward_names):
            raise ValueError(f"the weight table is for rewards {list(self.reward_names)}, the run trains "
                             f"{list(names)}: make a table for these rewards with `python -m recast weights`")
        if names == self.reward_names:
            return self
        idx = [self.reward_names.index(n) for n in names]
        return WeightTable(names, self.sigmas, self.W[idx], self.divergences[idx], self.raw_gains[idx],
                           self.budgets[idx], self.temperatures[idx], self.alpha, self.TW[idx])


def table_from_profile(profile: DensityProfile, lam, temperature=1.0, *, reward_names=None, alpha: float = 2.0,
                       max_iter: int = 1_000, tol: float = 1e-9) -> WeightTable:
    """The weight table of a profile for budgets λ (milliseconds): gains per reward, exp kernel, log Sinkhorn.

    Args:
        profile: a `DensityProfile`.
        lam: budgets, one per reward of ``reward_names``, or a {name: budget} mapping.
        temperature: τ, a float or one per reward.
        reward_names: the rows, in order (default: the mapping's keys, else the profile's rewards).
        alpha: Rényi order (> 1).

    Returns:
        a validated `WeightTable` whose W and T·W are rounded to float32, as the file stores them.
    """
    if isinstance(lam, dict):
        names = tuple(reward_names or lam)
        lam = [lam[n] for n in names]
    else:
        names = tuple(reward_names or profile.reward_names)
    missing = [n for n in names if n not in profile.ratios]
    if missing:
        raise ValueError(f"the profile has no ratios for {missing} (it holds {list(profile.reward_names)})")
    D, gains = zip(*(ratio_divergence(profile.ratios[n], alpha) for n in names))
    D, gains = np.stack(D), np.stack(gains)
    tau = np.broadcast_to(np.asarray(temperature, dtype=np.float64), (len(names),)).copy()
    W32 = paper_weights(gains, lam, tau, max_iter=max_iter, tol=tol).astype(np.float32)
    T = W32.shape[1]

    def f32(x):  # what the file stores, so that a table round-trips through save/load exactly
        return np.asarray(x, dtype=np.float32).astype(np.float64)

    table = WeightTable(names, f32(profile.sigmas), f32(W32), f32(D), f32(gains), f32(np.reshape(lam, -1)),
                        f32(tau), float(alpha), f32(T * W32))
    table.validate("new weight table")
    return table


def save_table(table: WeightTable, path) -> Path:
    """Write a weight table in the release's format (paper order: columns clean → noise)."""
    table.validate()
    rev = slice(None, None, -1)
    s = table.sigmas.astype(np.float32)
    meta = dict(TABLE_METADATA, alpha=float(table.alpha))
    return _save(path, {
        "reward_names": np.asarray(table.reward_names, dtype=np.str_), "sigmas": s,
        "paper_source_sigmas": np.ascontiguousarray(s[-2::-1]), "paper_destination_sigmas": np.ascontiguousarray(s[:0:-1]),
        "weights": table.TW[:, rev].astype(np.float32), "paper_weights": table.W[:, rev].astype(np.float32),
        "divergences": table.divergences[:, rev].astype(np.float32),
        "raw_gains": table.raw_gains[:, rev].astype(np.float32), "budgets": table.budgets.astype(np.float32),
        "temperatures": table.temperatures.astype(np.float32),
        "metadata": np.asarray(json.dumps(meta, sort_keys=True))})


def is_table(path) -> bool:
    """Whether the archive at ``path`` is a weight table (it has ``paper_weights``) rather than a profile."""
    with _open(path) as arc:
        return "paper_weights" in arc.files


def load_table(path) -> WeightTable:
    """Read and validate a weight table written here or by the release.

    Raises:
        FileNotFoundError, ArchiveError (a ValueError): wrong metadata, a missing key, a wrong marginal, a negative
            weight, sigmas that do not match, naming the file and the part.
    """
    where = str(path)
    with _open(path) as arc:
        a = {k: _read(arc, k, where) for k in TABLE_KEYS}
    try:
        meta = json.loads(str(a["metadata"]))
    except json.JSONDecodeError:
        raise ArchiveError(f"{where}: metadata is not JSON") from None
    if not isinstance(meta, dict):
        raise ArchiveError(f"{where}: metadata must be a JSON object")
    for key, want in TABLE_METADATA.items():
        if meta.get(key) != want:
            raise ArchiveError(f"{where}: metadata {key} is {meta.get(key)!r}, expected {want!r}")
    alpha = meta.get("alpha")
    if not isinstance(alpha, (int, float)) or isinstance(alpha, bool) or not alpha > 1:
        raise ArchiveError(f"{where}: metadata alpha must be a number > 1, got {alpha!r}")
    s = _check_sigmas(a["sigmas"], where)
    for key, want in (("paper_source_sigmas", s[-2::-1]), ("paper_destination_sigmas", s[:0:-1])):
        got = np.asarray(a[key], dtype=np.float64)
        if got.shape != want.shape or np.abs(got - want).max() > MARGIN_TOL:
            raise ArchiveError(f"{where}: {key} do not match the sigmas in paper order")
    f = {k: np.asarray(a[k], dtype=np.float64) for k in ("weights", "paper_weights", "divergences", "raw_gains",
                                                          "budgets", "temperatures")}
    for k in ("weights", "paper_weights", "divergences", "raw_gains"):
        if f[k].ndim != 2:
            raise ArchiveError(f"{where}: {k} must be (K, T), got shape {f[k].shape}")
    def sched(key):  # paper order (clean → noise) back to the scheduler's
        return np.ascontiguousarray(f[key][:, ::-1])

    table = WeightTable(_names(a["reward_names"], where), s, sched("paper_weights"), sched("divergences"),
                        sched("raw_gains"), f["budgets"].reshape(-1), f["temperatures"].reshape(-1),
                        float(alpha), sched("weights"))
    table.validate(where)
    return table


def describe(path: str | os.PathLike) -> str:
    """One line naming what the archive at ``path`` is (a table or a profile), its rewards and T."""
    if is_table(path):
        t = load_table(path)
        return f"weight table: rewards {list(t.reward_names)}, T={t.num_steps}, budgets {t.budgets.tolist()}"
    p = load_profile(path)
    return f"density profile: rewards {list(p.reward_names)}, T={p.num_steps}, " \
           f"{min(r.shape[0] for r in p.ratios.values())}+ observations"
