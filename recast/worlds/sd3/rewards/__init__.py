"""SD3 reward registry: ``get(name)(device, root=..., weights_dir=...)`` returns ``(images, prompts) -> Tensor[B]``.

Images are (B, 3, H, W) in [0, 1]; results are float32 (B,) on `device`. Factories load their model from
`weights_dir` (default `root/<name>`, root "reward_ckpts") and fail fast, before building anything, with a
FileNotFoundError naming the files they expect and where users usually get them. Nothing loads at import.

Pointwise rewards score each image alone. Groupwise rewards score a prompt's whole group at once (samples sharing a
prompt text): ``"rank:NAME"`` is the normalised rank of reward NAME within each group (0 lowest, 1 highest), and
`groupwise(score_group)` wraps any group scorer. They carry ``reward.groupwise = True``.

The paper's two four-reward settings (docs/method.md §1):

- ``composition``: geneval + ocr + pickscore + clipscore: two rewards that judge layout and text (informative
  early to mid denoising) with two that judge prompt-image agreement as a whole;
- ``quality``: pickscore + hpsv2 + aesthetic + imagereward: four human-preference / aesthetics models that overlap
  heavily, the case where one reward's variance silently dominates a raw sum.

The ReCAST release's staged settings (RECAST.md §0): ``stage1`` = clipscore + hpsv2 + pickscore, then ``stage_ocr``
and ``stage_geneval`` add ocr or geneval; their held-out judges are imagereward, aesthetic, hpsv3 and unifiedreward.
"""

from __future__ import annotations

import io
from collections.abc import Callable

import torch

from recast.worlds.sd3.rewards._common import RewardFn, check_batch, group_diversity, group_rank, groupwise

__all__ = ["SETTINGS", "RewardFn", "get", "names", "groupwise", "group_rank", "group_diversity", "NEEDS",
           "check_installed"]

SETTINGS: dict[str, tuple[str, ...]] = {
    "composition": ("geneval", "ocr", "pickscore", "clipscore"),
    "quality": ("pickscore", "hpsv2", "aesthetic", "imagereward"),
    # the ReCAST release's staged recipe (docs/paper-scale.md, "The paper's experiments"): stage 1, then each
    # four-reward setting adds its fourth reward; the order is the paper's, so budget (2,1,1,1) weighs clipscore
    "stage1": ("clipscore", "hpsv2", "pickscore"),
    "stage_ocr": ("clipscore", "hpsv2", "pickscore", "ocr"),
    "stage_geneval": ("clipscore", "hpsv2", "pickscore", "geneval"),
}


def jpeg_compressibility(device="cpu", *, root=None, weights_dir=None, quality: int = 95):
    """-(JPEG size in kB) of each image at `quality` (Flow-GRPO's model-free reward; higher = simpler image)."""
    from PIL import Image

    device = torch.device(device)

    def reward(images: torch.Tensor, prompts: list[str]) -> torch.Tensor:
        check_batch(images, prompts)
        sizes = []
        for im in images:
            arr = (im.detach().float().clamp(0, 1).permute(1, 2, 0).cpu().numpy() * 255).round().astype("uint8")
            buf = io.BytesIO()
            Image.fromarray(arr).save(buf, format="JPEG", quality=quality)
            sizes.append(-buf.tell() / 1000)
        return torch.tensor(sizes, dtype=torch.float32, device=device)

    return reward


def colour_entropy(device="cpu", *, root=None, weights_dir=None, bins: int = 8):
    """Entropy (nats) of each image's colours on a bins³ RGB histogram: a model-free held-out measure of reward
    hacking (a policy that collapses onto a few flat colours lowers it; noise raises it). Range [0, 3 log bins]."""
    device = torch.device(device)

    def reward(images: torch.Tensor, prompts: list[str]) -> torch.Tensor:
        check_batch(images, prompts)
        q = (images.detach().float().clamp(0, 1) * (bins - 1e-6)).long().cpu()
        codes = (q[:, 0] * bins + q[:, 1]) * bins + q[:, 2]
        out = []
        for c in codes.flatten(1):
            p = torch.bincount(c, minlength=bins ** 3).double() / c.numel()
            p = p[p > 0]
            out.append(float(-(p * p.log()).sum()))
        return torch.tensor(out, dtype=torch.float32, device=device)

    return reward


def dark_fraction(device="cpu", *, root=None, weights_dir=None, level: float = 0.05):
    """Share of each image's pixels whose luminance is below `level`: a model-free held-out measure of the darkening
    that preference rewards are known to be hacked by (lower is healthier). Range [0, 1]."""
    device = torch.device(device)

    def reward(images: torch.Tensor, prompts: list[str]) -> torch.Tensor:
        check_batch(images, prompts)
        x = images.detach().float().clamp(0, 1)
        lum = 0.2126 * x[:, 0] + 0.7152 * x[:, 1] + 0.0722 * x[:, 2]
        return (lum < level).float().flatten(1).mean(1).to(device)

    return reward


def _lazy(module: str, attr: str) -> Callable[..., RewardFn]:
    def factory(device="cpu", **kw):
        import importlib

        return getattr(importlib.import_module(f"recast.worlds.sd3.rewards.{module}"), attr)(device, **kw)

    factory.__name__ = attr
    return factory


_REGISTRY: dict[str, Callable[..., RewardFn]] = {
    "pickscore": _lazy("clip", "pickscore"),
    "clipscore": _lazy("clip", "clipscore"),
    "hpsv2": _lazy("clip", "hpsv2"),
    "aesthetic": _lazy("clip", "aesthetic"),
    "imagereward": _lazy("imagereward", "imagereward"),
    "hpsv3": _lazy("hpsv3", "hpsv3"),
    "unifiedreward": _lazy("unifiedreward", "unifiedreward"),
    "ocr": _lazy("ocr", "ocr"),
    "geneval": _lazy("geneval", "geneval"),
    "jpeg": jpeg_compressibility,
    "colour_entropy": colour_entropy,
    "dark_fraction": dark_fraction,
}


# reward -> the packages it imports beyond the sd3 extra, as (distribution, module) pairs
NEEDS: dict[str, tuple[tuple[str, str], ...]] = {"ocr": (("rapidocr-onnxruntime", "rapidocr_onnxruntime"),
                                                          ("rapidfuzz", "rapidfuzz"))}


def check_installed(reward_names) -> None:
    """Refuse rewards or judges whose optional packages are not installed, before any model or pipeline loads (a run
    would otherwise load everything, then stop at the reward's first use).

    Raises:
        ValueError: naming the reward, the missing packages and the command that installs them.
    """
    from recast.extras import EXTRAS, missing, pip_hint

    for name in dict.fromkeys(n.removeprefix("rank:") for n in reward_names):
        pairs = dict((module, dist) for dist, module in NEEDS.get(name, ()))
        gone = missing(pairs)
        if gone:
            raise ValueError(f"reward {name!r} needs {', '.join(pairs[m] for m in gone)}, not installed here: "
                             f"{pip_hint(EXTRAS[gone[0]])}")


def names() -> tuple[str, ...]:
    """Registered pointwise reward names (each also works as ``rank:NAME``)."""
    return tuple(_REGISTRY)


def _rank_factory(base: str) -> Callable[..., RewardFn]:
    def factory(device="cpu", **kw) -> RewardFn:
        fn = _REGISTRY[base](device, **kw)
        reward = groupwise(lambda images, prompt: group_rank(fn(images, [prompt] * len(images))))
        device_ = torch.device(device)

        def ranked(images, prompts):
            return reward(images, prompts).to(device_)

        ranked.groupwise = True
        return ranked

    return factory


def get(name: str) -> Callable[..., RewardFn]:
    """The factory of a reward: ``get(name)(device, **options) -> RewardFn``.

    Raises:
        ValueError: unknown name, listing the valid ones.
    """
    base = name[len("rank:"):] if name.startswith("rank:") else name
    if base not in _REGISTRY:
        raise ValueError(f"unknown SD3 reward {name!r}; valid: {', '.join(_REGISTRY)} (or rank:NAME)")
    return _rank_factory(base) if base != name else _REGISTRY[name]
