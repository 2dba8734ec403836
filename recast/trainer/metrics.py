"""Run-directory records: phase timers, sample grids, and `load_run` for notebooks and benchmarks.

A run directory holds
    config.json       the TrainConfig (plus reward names and the normalised budgets under "_run")
    metrics.jsonl     one record per iteration: rewards, loss parts, W, D, time per phase
    weights.jsonl     one record per W re-solve: iteration, D (K, T+1), gains (K, T), W (K, T)
    eval.jsonl        judge and reward scores of EMA samples on test prompts
    grids/*.png       sample grids of the EMA policy
    checkpoint.pt     the last checkpoint (see checkpoint.py)
"""

from __future__ import annotations

import io
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from recast.io import atomic_write_bytes, read_json, read_jsonl

__all__ = ["PHASES", "PhaseTimer", "image_grid", "write_grid", "Run", "load_run"]

PHASES = ("sampling", "rewards", "informativeness", "solver", "optimisation")


class PhaseTimer:
    """Accumulates wall time per named phase: `with timer("sampling"): ...`."""

    def __init__(self):
        self.times: dict[str, float] = {p: 0.0 for p in PHASES}

    @contextmanager
    def __call__(self, phase: str):
        start = time.perf_counter()
        try:
            yield
        finally:
            self.times[phase] = self.times.get(phase, 0.0) + time.perf_counter() - start


def image_grid(images: torch.Tensor, ncol: int = 8) -> np.ndarray:
    """Tile images (N, 3, H, W) in [0, 1] into one uint8 array (rows*H, ncol*W, 3), row-major, with
    `diffusers.utils.make_image_grid`; a last row that is not full is padded with white tiles."""
    from diffusers.utils import make_image_grid
    from PIL import Image

    n = images.shape[0]
    ncol = max(1, min(ncol, n))
    nrow = -(-n // ncol)
    arrays = (images.detach().float().cpu().clamp(0, 1).permute(0, 2, 3, 1).numpy() * 255).round().astype(np.uint8)
    tiles = [Image.fromarray(a) for a in arrays]
    tiles += [Image.new("RGB", tiles[0].size, "white")] * (nrow * ncol - n)
    return np.asarray(make_image_grid(tiles, rows=nrow, cols=ncol))


def write_grid(path: str | Path, images: torch.Tensor, ncol: int = 8, scale: int = 4) -> Path:
    """Write a PNG sample grid atomically (nearest-neighbour upscaled by `scale` for legibility)."""
    from PIL import Image

    img = Image.fromarray(image_grid(images, ncol))
    img = img.resize((img.width * scale, img.height * scale), Image.NEAREST)
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return atomic_write_bytes(path, buf.getvalue())


@dataclass(frozen=True)
class Run:
    """Everything a finished (or running) run directory holds, parsed.

    Attributes:
        path: the run directory.
        config: the saved config dict.
        reward_names: names of the K training rewards.
        lam: normalised budgets (K,).
        sigmas: the sampler grid (T+1,), sigma_0 = 1 ... sigma_T = 0.
        metrics: per-iteration records.
        weights: per-re-solve records with "iteration", "D", "gains", "W".
        evals: evaluation records.
    """

    path: Path
    config: dict
    reward_names: tuple[str, ...]
    lam: tuple[float, ...]
    sigmas: tuple[float, ...] = ()
    metrics: list[dict] = field(default_factory=list)
    weights: list[dict] = field(default_factory=list)
    evals: list[dict] = field(default_factory=list)

    def curve(self, key: str, source: str = "metrics") -> tuple[np.ndarray, np.ndarray]:
        """(iterations, values) of a scalar key in "metrics" or "evals" (records missing the key are skipped)."""
        recs = [r for r in getattr(self, source) if r.get(key) is not None]
        return np.array([r["iteration"] for r in recs]), np.array([r[key] for r in recs], dtype=float)

    def require_W_history(self) -> None:
        """Raise ValueError unless the run logged W re-solves (weights.jsonl): only the live estimate (method
        'recast_live') re-solves W; the paper's recast trains one W, its weight table (recast_weights.npz)."""
        if not self.weights:
            method = self.config.get("method", "?")
            raise ValueError(f"{self.path} has no W history (weights.jsonl is empty or missing): it is a "
                             f"method={method!r} run, whose W does not change during training (its weight table, "
                             "lambda/T or fixed_W); point run_dir at a method='recast_live' run, or read a recast run's "
                             "table with recast.archives.load_table(RUN/recast_weights.npz)")

    def solve_iterations(self, panels: int) -> list[int]:
        """Up to `panels` iterations with a W re-solve, evenly spread from the first to the last.

        Raises:
            ValueError: the run has no W history (see `require_W_history`), or panels < 1.
        """
        self.require_W_history()
        if int(panels) != panels or panels < 1:
            raise ValueError(f"panels must be a positive integer, got {panels!r}")
        idx = np.linspace(0, len(self.weights) - 1, int(panels)).round().astype(int)
        return sorted({self.weights[i]["iteration"] for i in idx})

    def W_at(self, iteration: int) -> tuple[int, np.ndarray]:
        """The W (K, T) in force after `iteration`, and the iteration it comes from: the last re-solve at or before it
        (weights.jsonl) of a run that re-solves W (method 'recast_live'), else the W the last metrics record at or
        before it trained with (a fixed W: the paper's weight table, λ/T, fixed_W).

        Raises:
            ValueError: the run has neither (no W re-solve and no metrics record carrying W).
        """
        recs = [r for r in self.weights if r["iteration"] <= iteration] or self.weights[:1]
        if not recs:
            recs = [r for r in self.metrics if r["iteration"] <= iteration and r.get("W") is not None]
            recs = recs or [r for r in self.metrics if r.get("W") is not None][:1]
        if not recs:
            raise ValueError(f"{self.path} has no W record (weights.jsonl is empty and no metrics record carries W): "
                             "has it finished an iteration?")
        return recs[-1]["iteration"], np.array(recs[-1]["W"], dtype=float)

    def D_at(self, iteration: int) -> tuple[int, np.ndarray]:
        """The last smoothed D (K, T+1) at or before `iteration`."""
        recs = [r for r in self.weights if r["iteration"] <= iteration and r.get("D") is not None]
        if not recs:
            raise ValueError(f"{self.path} has no D record at or before iteration {iteration}")
        return recs[-1]["iteration"], np.array(recs[-1]["D"], dtype=float)


def load_run(path: str | Path) -> Run:
    """Parse a run directory written by `recast.trainer.train`.

    Raises:
        FileNotFoundError: when `path/config.json` is missing.
    """
    path = Path(path)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"{path} is not a run directory (no config.json)")
    cfg = read_json(path / "config.json")  # names the file when it is not JSON
    if not isinstance(cfg, dict):
        raise ValueError(f"{path / 'config.json'} is not a run's config (expected a JSON object)")
    meta = cfg.pop("_run", {})

    def jl(name):
        return read_jsonl(path / name) if (path / name).is_file() else []

    return Run(path=path, config=cfg, reward_names=tuple(meta.get("reward_names", ())),
               lam=tuple(meta.get("lam", ())), sigmas=tuple(meta.get("sigmas", ())), metrics=jl("metrics.jsonl"),
               weights=jl("weights.jsonl"),
               evals=jl("eval.jsonl"))
