"""The judges' feature space: a small CNN trained apart from the reward models, plus Fréchet distance and diversity.

``JudgeNet`` is trained on canvases rendered from the ``"judge"`` glyph split only, to predict all four prompt
attributes (digit, colour, position, size) from RGB. Its 32-d penultimate layer (``features``, before the ReLU) is
the space of the Fréchet distance, the diversity metric and the preference judge's quality term. Unlike the reward
CNNs it flattens its spatial map instead of pooling it globally, so the features also encode where the ink is.
Weights: ``data/judges/judge_features.safetensors`` made by ``scripts/train_reward_models.py``.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from recast.worlds.digits import data
from recast.config import DATA_ROOT

WEIGHTS_PATH: Path = DATA_ROOT / "judges" / "judge_features.safetensors"
HEADS: tuple[int, ...] = (10, len(data.COLORS), len(data.POSITIONS), len(data.SIZES))  # digit, colour, position, size


class JudgeNet(nn.Module):
    """conv3x3(8) -> pool -> conv3x3(16) -> pool -> flatten -> linear(32) = features -> ReLU -> linear(sum(HEADS))."""

    def __init__(self, dim: int = 32):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.fc = nn.Linear(16 * (data.CANVAS // 4) ** 2, dim)
        self.head = nn.Linear(dim, sum(HEADS))

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """Model-space canvases ``(B, 3, H, W)`` -> features ``(B, dim)``."""
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc(x.flatten(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, 3, H, W)`` -> concatenated logits of the four heads ``(B, sum(HEADS))``."""
        return self.head(F.relu(self.features(x)))


def _judge_batch(gen: torch.Generator, n: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    specs = data.all_specs()
    prompts = [specs[i] for i in torch.randint(len(specs), (n,), generator=gen).tolist()]
    images = data.render(prompts, glyph_split="judge", generator=gen)
    y = torch.tensor([[p.digit, list(data.COLORS).index(p.color), list(data.POSITIONS).index(p.position),
                       list(data.SIZES).index(p.size)] for p in prompts])
    return data.to_model(images), y


def _multi_head_loss(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return sum(F.cross_entropy(z, y[:, k]) for k, z in enumerate(logits.split(HEADS, dim=1)))


def train_judge_net(steps: int = 1500, seed: int = 0, log_every: int = 0) -> JudgeNet:
    """Train the judge feature net on judge-split canvases (sum of the four heads' cross-entropies)."""
    from recast.worlds.digits.rewards.nets import fit

    torch.manual_seed(seed)
    return fit(JudgeNet(), _judge_batch, _multi_head_loss, steps=steps, seed=seed, log_every=log_every)


@functools.lru_cache(maxsize=1)
def load_judge_net(path: str | None = None) -> JudgeNet:
    """The trained judge feature net (CPU, eval mode, cached).

    Raises:
        FileNotFoundError: naming the path and the script that makes it.
    """
    from recast.worlds.digits.rewards.nets import TRAIN_SCRIPT, load_net

    path = Path(path or WEIGHTS_PATH)
    if not path.exists():
        raise FileNotFoundError(f"judge weights {path} are missing; regenerate them with `python {TRAIN_SCRIPT}`")
    return load_net(path.stem, JudgeNet, "cpu", path.parent)


@torch.no_grad()
def judge_features(images: torch.Tensor) -> torch.Tensor:
    """Judge features ``(B, 32)`` float64 of canvases ``(B, 3, H, W)`` in ``[0, 1]``."""
    return load_judge_net().features(data.to_model(images.detach().float().cpu())).double()


def frechet_distance(feats_a: torch.Tensor, feats_b: torch.Tensor, eps: float = 1e-6) -> float:
    """Fréchet distance between Gaussians fitted to two feature sets.

    ``|mu_a - mu_b|^2 + tr(S_a) + tr(S_b) - 2 tr((S_a^1/2 S_b S_a^1/2)^1/2)``; the cross term is computed from the
    eigenvalues of the symmetric PSD matrix ``S_a^1/2 S_b S_a^1/2`` (float64, ``eps`` I added to both covariances),
    which avoids the complex round-off of a general ``sqrtm(S_a S_b)``.

    Args:
        feats_a: ``(N, D)``; feats_b: ``(M, D)``, N, M >= 2.

    Returns:
        The distance (>= 0, 0 for identical sets up to round-off).
    """
    a, b = (np.asarray(f, dtype=np.float64) for f in (feats_a, feats_b))
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[1] or min(len(a), len(b)) < 2:
        raise ValueError(f"need two (N>=2, D) feature sets with equal D, got {a.shape} and {b.shape}")
    eye = eps * np.eye(a.shape[1])
    s_a, s_b = np.cov(a, rowvar=False) + eye, np.cov(b, rowvar=False) + eye
    w, v = np.linalg.eigh(s_a)
    root_a = (v * np.sqrt(w.clip(0))) @ v.T
    cross = np.sqrt(np.linalg.eigvalsh(root_a @ s_b @ root_a).clip(0)).sum()
    d = ((a.mean(0) - b.mean(0)) ** 2).sum() + np.trace(s_a) + np.trace(s_b) - 2 * cross
    return float(max(d, 0.0))


def precision_recall(real_feats: torch.Tensor, fake_feats: torch.Tensor, k: int = 3) -> tuple[float, float]:
    """Improved precision and recall of generated features against real ones (Kynkäänniemi et al., 2019).

    Each set's manifold is the union of balls around its points, each ball reaching the point's ``k``-th nearest
    neighbour in the same set. Precision is the share of generated points inside the real manifold (fidelity: how
    many samples look like some real canvas); recall is the share of real points inside the generated manifold
    (coverage: how much of the real variety the samples reach). A model that collapses onto a few good modes keeps
    its precision and loses recall; the Fréchet distance mixes both. ``recall(real, fake) == precision(fake, real)``.

    Args:
        real_feats: ``(N, D)``; fake_feats: ``(M, D)``; both with more than ``k`` points.
        k: neighbour whose distance sets a ball's radius (3 in the paper).

    Returns:
        ``(precision, recall)``, each in [0, 1].
    """
    real, fake = (torch.as_tensor(np.asarray(f, dtype=np.float64)) for f in (real_feats, fake_feats))
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if real.ndim != 2 or fake.ndim != 2 or real.shape[1] != fake.shape[1] or min(len(real), len(fake)) <= k:
        raise ValueError(f"need two (N > k={k}, D) feature sets with equal D, got {tuple(real.shape)} and "
                         f"{tuple(fake.shape)}")

    def radii(x: torch.Tensor) -> torch.Tensor:  # distance to the k-th nearest other point (column 0 is itself)
        return torch.cdist(x, x).kthvalue(k + 1, dim=1).values

    def covered(by: torch.Tensor, r: torch.Tensor, x: torch.Tensor) -> float:
        return float((torch.cdist(x, by) <= r[None]).any(1).double().mean())

    return covered(real, radii(real), fake), covered(fake, radii(fake), real)


def fid(images: torch.Tensor, prompts: list[str], *, generator: torch.Generator | None = None) -> float:
    """Fréchet distance in judge features between ``images`` and real canvases of the same prompts rendered from the
    judge glyph split (``generator`` drives that rendering)."""
    real = data.render(list(prompts), glyph_split="judge", generator=generator)
    return frechet_distance(judge_features(images), judge_features(real))


def diversity(images: torch.Tensor, prompts: list[str]) -> float:
    """Within-prompt diversity: mean pairwise Euclidean distance of judge features between images of the same
    prompt, averaged over prompts with >= 2 images (NaN if there are none). Collapse drives it to 0."""
    feats = judge_features(images)
    groups: dict[str, list[int]] = {}
    for i, p in enumerate(prompts):
        groups.setdefault(p, []).append(i)
    per_prompt = []
    for idx in groups.values():
        if len(idx) >= 2:
            d = torch.cdist(feats[idx], feats[idx])
            per_prompt.append(d.sum().item() / (len(idx) * (len(idx) - 1)))
    return float(np.mean(per_prompt)) if per_prompt else float("nan")
