"""Small CNN reward models (digit classifier, realism discriminator) and their deterministic training.

Both nets end in global max pooling, so they score a whole 24x24 canvas wherever the glyph sits. Weights are tiny
safetensors files under ``data/rewards/`` made by ``scripts/train_reward_models.py``; they are trained only on the
``"base"`` glyph split (the ``"judge"`` glyphs are kept for the held-out judges).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

from recast.worlds.digits import data
from recast.worlds.digits.rewards.degrade import degrade, random_degrade
from recast.config import DATA_ROOT

WEIGHTS_DIR: Path = DATA_ROOT / "rewards"
TRAIN_SCRIPT: str = "scripts/train_reward_models.py"


class SmallCNN(nn.Module):
    """conv3x3(c1) -> pool -> conv3x3(c2) -> pool -> conv3x3(c3) -> global max -> linear(out).

    Args:
        in_ch: input channels (1 for intensity, 3 for RGB).
        out: number of logits.
        width: ``(c1, c2, c3)`` channel counts.
    """

    def __init__(self, in_ch: int, out: int, width: tuple[int, int, int] = (12, 24, 48)):
        super().__init__()
        c1, c2, c3 = width
        self.conv1 = nn.Conv2d(in_ch, c1, 3, padding=1)
        self.conv2 = nn.Conv2d(c1, c2, 3, padding=1)
        self.conv3 = nn.Conv2d(c2, c3, 3, padding=1)
        self.head = nn.Linear(c3, out)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, in_ch, H, W)`` -> ``(B, c3)``."""
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return F.relu(self.conv3(x)).amax(dim=(2, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, in_ch, H, W)`` -> logits ``(B, out)``."""
        return self.head(self.features(x))


def digit_net() -> SmallCNN:
    """Digit classifier on the intensity channel: logits over 0..9."""
    return SmallCNN(1, 10)


def realism_net() -> SmallCNN:
    """Real-vs-degraded discriminator on RGB: one logit, positive = real."""
    return SmallCNN(3, 1)


def realism_conditional_net() -> SmallCNN:
    """Real-vs-degraded discriminator on RGB with one logit per prompted size (`recast.worlds.digits.data.SIZES` order):
    positive = a real canvas of that size."""
    return SmallCNN(3, len(data.SIZES))


def size_heads(specs) -> torch.Tensor:
    """Each prompt spec's head of `realism_conditional_net`: the index of its size in `recast.worlds.digits.data.SIZES`,
    long ``(B,)``."""
    sizes = list(data.SIZES)
    return torch.tensor([sizes.index(s.size) for s in specs])


def digit_input(images: torch.Tensor) -> torch.Tensor:
    """Canvas ``(B, 3, H, W)`` in [0, 1] -> centred intensity ``(B, 1, H, W)`` (colour-blind)."""
    return 2.0 * data.ink_intensity(images)[:, None] - 1.0


def realism_input(images: torch.Tensor) -> torch.Tensor:
    """Canvas ``(B, 3, H, W)`` in [0, 1] -> model space ``(B, 3, H, W)``."""
    return data.to_model(images)


CANONICAL_SIDE: float = 12.0  # the glyph side of `canonical_view`, in pixels (a large glyph's, a whole quadrant)
CANONICAL_ZOOM: tuple[float, float] = (0.5, 2.0)  # the range of the view's scale (input pixels per output pixel)


def glyph_frame(images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Where the glyph is and how big: the centre ``(B, 2)`` as (y, x) in pixels and the side ``(B,)`` in pixels of
    its half-maximum box.

    Read on the ink above the canvas' own background (`recast.worlds.digits.rewards.digit.above_background`, blind to a
    uniform wash) with isolated specks left out (`recast.worlds.digits.rewards.specks.speck_mask`). The box holds the
    rows and columns whose ink reaches half the glyph's own peak (`SIZE_HALF_MAX_LEVEL`, the level of ``ink_side(...,
    relative=True)``), which a symmetric blur leaves in place; the centre is its midpoint and the side its larger
    extent. An inkless canvas gets the canvas centre and side `CANONICAL_SIDE`, so its view is the canvas itself."""
    import recast.worlds.digits.rewards.digit as rules
    from recast.worlds.digits.rewards.specks import speck_mask

    J = rules.above_background(images.float())
    J = J * (1.0 - speck_mask(J))
    B, H, W = J.shape
    peak = J.flatten(1).amax(1)
    has = peak > 1e-3
    inked = J >= rules.SIZE_HALF_MAX_LEVEL * peak[:, None, None].clamp_min(1e-6)
    rows, cols = inked.any(2), inked.any(1)
    ys, xs = torch.arange(H), torch.arange(W)
    y0, y1 = torch.where(rows, ys, H).amin(1), torch.where(rows, ys, -1).amax(1)
    x0, x1 = torch.where(cols, xs, W).amin(1), torch.where(cols, xs, -1).amax(1)
    centre = torch.stack([(y0 + y1) / 2, (x0 + x1) / 2], 1).to(J.dtype)
    side = (torch.maximum(y1 - y0, x1 - x0) + 1).to(J.dtype)
    middle = torch.full((B, 2), (H - 1) / 2, dtype=J.dtype)
    return torch.where(has[:, None], centre, middle), torch.where(has, side, torch.full_like(side, CANONICAL_SIDE))


def canonical_view(images: torch.Tensor) -> torch.Tensor:
    """The canvas resampled so its glyph sits at the centre with side `CANONICAL_SIDE`: ``(B, 3, H, W)`` in [0, 1].

    The affine map sends output pixel ``u`` to input point ``c + (u - (H - 1) / 2) * side / CANONICAL_SIDE`` (centre
    ``c`` and ``side`` from `glyph_frame`; the scale clamped to `CANONICAL_ZOOM`), bilinear. Where the view reaches
    past the canvas it shows the canvas' background (its per-channel median), so a wash stays a wash and a glyph
    touching the edge is not smeared. A glyph's size and place are therefore invisible in the view, while its
    strokes, edges, colour, wash and nearby specks are kept (resampled). The `realism_canonical` reward reads this
    view, a test of whether realism's size cost comes from the canvas-level CNN seeing size: trained alone, realism
    grew small prompts' glyphs to a large glyph's side, and so did realism_canonical (research/rounds/05-realism-size.md
    "The realism-size round")."""
    images = images.float()
    B, C, H, W = images.shape
    centre, side = glyph_frame(images)
    scale = (side / CANONICAL_SIDE).clamp(*CANONICAL_ZOOM)
    # affine_grid (align_corners=False): input_norm = scale * output_norm + centre_norm, norm = (2 pix + 1) / size - 1
    theta = torch.zeros(B, 2, 3, dtype=images.dtype)
    theta[:, 0, 0] = scale
    theta[:, 1, 1] = scale
    theta[:, 0, 2] = (2 * centre[:, 1] + 1) / W - 1
    theta[:, 1, 2] = (2 * centre[:, 0] + 1) / H - 1
    grid = F.affine_grid(theta.to(images.device), [B, C, H, W], align_corners=False)
    background = images.flatten(2).median(2).values[:, :, None, None]
    view = F.grid_sample(images - background, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
    return (view + background).clamp(0.0, 1.0)


def load_net(name: str, make: Callable[[], nn.Module], device: torch.device | str = "cpu",
             weights_dir: Path | None = None) -> nn.Module:
    """Build ``make()``, load ``{weights_dir}/{name}.safetensors`` and return it in eval mode on ``device``.

    Raises:
        FileNotFoundError: naming the path and the script that makes it.
    """
    from safetensors.torch import load_file

    path = Path(weights_dir or WEIGHTS_DIR) / f"{name}.safetensors"
    if not path.exists():
        raise FileNotFoundError(f"reward-model weights {path} are missing; regenerate them with "
                                f"`python {TRAIN_SCRIPT}`")
    net = make()
    net.load_state_dict({k: v.float() for k, v in load_file(str(path)).items()})
    return net.to(device).eval().requires_grad_(False)


def save_net(net: nn.Module, path: Path) -> None:
    """Save a net's weights as float16 safetensors (deterministic bytes for identical weights)."""
    from recast.io import save_safetensors

    save_safetensors(path, {k: v.detach().half().contiguous() for k, v in net.state_dict().items()})


def fit(net: nn.Module, make_batch: Callable[[torch.Generator], tuple[torch.Tensor, torch.Tensor]],
        loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], *, steps: int, lr: float = 3e-3,
        seed: int = 0, log_every: int = 0) -> nn.Module:
    """Deterministic Adam training loop (cosine learning rate) on synthetic batches.

    Args:
        net: the model, trained in place.
        make_batch: ``generator -> (inputs, targets)``.
        loss_fn: ``(logits, targets) -> scalar``.
        steps: optimisation steps.
        lr: peak learning rate.
        seed: seeds both the weight init (caller) and the batch generator.
        log_every: print the loss every this many steps (0: silent).

    Returns:
        ``net`` in eval mode.
    """
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)
    net.train()
    for step in range(steps):
        x, y = make_batch(gen)
        loss = loss_fn(net(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        if log_every and (step % log_every == 0 or step == steps - 1):
            print(f"  step {step:5d}  loss {loss.item():.4f}", flush=True)
    return net.eval()


def _mild(images: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Half the batch mildly degraded (strength <= 0.5), so the digit net also reads imperfect samples."""
    B = images.shape[0]
    out = images.clone()
    idx = torch.nonzero(torch.rand(B, generator=gen) < 0.5).flatten()
    if len(idx):
        out[idx] = random_degrade(images[idx], gen, min_strength=0.0) * 0.5 + images[idx] * 0.5
    return out


def digit_batch(gen: torch.Generator, n: int = 128, glyph_split: str = "base") -> tuple[torch.Tensor, torch.Tensor]:
    """Canvases of random prompts (all combinations), mildly augmented, then each quality defect the base model is
    taught (`recast.worlds.digits.corruption.DEFECTS`) injected with probability 1/2: the digit reward scores identity,
    not sharpness or cleanliness. Targets = digit labels."""
    from recast.worlds.digits.corruption import Corruption, inject_defects

    specs = data.all_specs()
    prompts = [specs[i] for i in torch.randint(len(specs), (n,), generator=gen).tolist()]
    images = data.render(prompts, glyph_split=glyph_split, generator=gen)
    images, _ = inject_defects(_mild(images, gen), Corruption(blur=0.5, speckle=0.5, fade=0.5), gen)
    return digit_input(images), torch.tensor([p.digit for p in prompts])


def _realism_canvases(gen: torch.Generator, n: int) -> tuple[torch.Tensor, torch.Tensor, list]:
    """`realism_batch`'s canvases ``(n, 3, H, W)`` in [0, 1], labels ``(n,)`` and the prompts they were drawn for."""
    specs = data.all_specs()
    prompts = [specs[i] for i in torch.randint(len(specs), (n,), generator=gen).tolist()]
    images = data.render(prompts, glyph_split="base", generator=gen)
    h = n // 2
    fake = random_degrade(images[h:], gen, min_strength=0.25)
    q = n // 8  # a quarter of the fakes: partial denoising, x = (1 - s) x0 + s eps in model space
    s = 0.05 + 0.3 * torch.rand(q, 1, 1, 1, generator=gen)
    eps = torch.randn(fake[:q].shape, generator=gen)
    fake[:q] = data.to_images((1 - s) * data.to_model(images[h:h + q]) + s * eps)
    x = torch.cat([images[:h], fake])
    y = torch.cat([torch.ones(h), torch.zeros(n - h)])
    return x, y, prompts


def realism_batch(gen: torch.Generator, n: int = 128, canonical: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Half real canvases (label 1), half degraded ones (label 0): blur, noise, speckle, jitter, bleed, fade, and
    blends with Gaussian noise in model space (what a half-denoised sample looks like). With ``canonical`` every
    canvas is seen through `canonical_view` after it is degraded, as the `realism_canonical` reward sees samples."""
    x, y, _ = _realism_canvases(gen, n)
    return realism_input(canonical_view(x) if canonical else x), y


def realism_conditional_batch(gen: torch.Generator, n: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    """`realism_batch`'s canvases, each scored under a prompted size: targets ``(n, 2)`` = (size head, label).

    The first half are real canvases under their own size (label 1). The second half are `realism_batch`'s fakes
    (degraded, or blended with noise) under their own size (label 0), except its last quarter, which holds the first
    real canvases again under the other size (label 0): a real glyph of the wrong size is not a real sample of the
    prompt."""
    images, y, specs = _realism_canvases(gen, n)
    heads = size_heads(specs)
    q = n // 8
    images[n - q:] = images[:q]
    heads[n - q:] = (heads[:q] + 1) % len(data.SIZES)
    return realism_input(images), torch.stack([heads.float(), y], 1)


def realism_conditional_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Binary cross-entropy of each sample's prompted-size logit (``targets`` from `realism_conditional_batch`)."""
    z = logits.gather(1, targets[:, :1].long())[:, 0]
    return F.binary_cross_entropy_with_logits(z, targets[:, 1])


def train_digit_net(steps: int = 1500, seed: int = 0, log_every: int = 0) -> SmallCNN:
    """Train the digit reward CNN on base-split canvases (cross-entropy)."""
    torch.manual_seed(seed)
    return fit(digit_net(), digit_batch, F.cross_entropy, steps=steps, seed=seed, log_every=log_every)


def train_realism_conditional_net(steps: int = 1500, seed: int = 0, log_every: int = 0) -> SmallCNN:
    """Train the size-conditional realism CNN (`realism_conditional_batch`, `realism_conditional_loss`)."""
    torch.manual_seed(seed)
    return fit(realism_conditional_net(), realism_conditional_batch, realism_conditional_loss, steps=steps, seed=seed,
               log_every=log_every)


def train_realism_net(steps: int = 1500, seed: int = 0, log_every: int = 0, canonical: bool = False) -> SmallCNN:
    """Train the realism reward CNN (binary cross-entropy, real = 1); ``canonical``: on `canonical_view`s."""
    torch.manual_seed(seed)
    return fit(realism_net(), lambda g: realism_batch(g, canonical=canonical),
               lambda z, y: F.binary_cross_entropy_with_logits(z[:, 0], y), steps=steps, seed=seed,
               log_every=log_every)


__all__ = ["SmallCNN", "digit_net", "realism_net", "digit_input", "realism_input", "glyph_frame", "canonical_view",
           "CANONICAL_SIDE", "CANONICAL_ZOOM", "load_net", "save_net", "fit",
           "digit_batch", "realism_batch", "train_digit_net", "train_realism_net", "realism_conditional_net",
           "realism_conditional_batch", "realism_conditional_loss", "train_realism_conditional_net", "size_heads",
           "degrade", "WEIGHTS_DIR"]
