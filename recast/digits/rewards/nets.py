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

from recast.digits import data
from recast.digits.rewards.degrade import degrade, random_degrade

WEIGHTS_DIR: Path = Path(__file__).resolve().parents[3] / "data" / "rewards"
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


def digit_input(images: torch.Tensor) -> torch.Tensor:
    """Canvas ``(B, 3, H, W)`` in [0, 1] -> centred intensity ``(B, 1, H, W)`` (colour-blind)."""
    return 2.0 * data.ink_intensity(images)[:, None] - 1.0


def realism_input(images: torch.Tensor) -> torch.Tensor:
    """Canvas ``(B, 3, H, W)`` in [0, 1] -> model space ``(B, 3, H, W)``."""
    return data.to_model(images)


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
    from safetensors.torch import save_file

    path.parent.mkdir(parents=True, exist_ok=True)
    save_file({k: v.detach().half().contiguous() for k, v in net.state_dict().items()}, str(path))


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
    taught (`recast.digits.corruption.DEFECTS`) injected with probability 1/2: the digit reward scores identity,
    not sharpness or cleanliness. Targets = digit labels."""
    from recast.digits.corruption import Corruption, inject_defects

    specs = data.all_specs()
    prompts = [specs[i] for i in torch.randint(len(specs), (n,), generator=gen).tolist()]
    images = data.render(prompts, glyph_split=glyph_split, generator=gen)
    images, _ = inject_defects(_mild(images, gen), Corruption(blur=0.5, speckle=0.5, fade=0.5), gen)
    return digit_input(images), torch.tensor([p.digit for p in prompts])


def realism_batch(gen: torch.Generator, n: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    """Half real canvases (label 1), half degraded ones (label 0): blur, noise, speckle, jitter, bleed, fade, and
    blends with Gaussian noise in model space (what a half-denoised sample looks like)."""
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
    return realism_input(x), y


def train_digit_net(steps: int = 1500, seed: int = 0, log_every: int = 0) -> SmallCNN:
    """Train the digit reward CNN on base-split canvases (cross-entropy)."""
    torch.manual_seed(seed)
    return fit(digit_net(), digit_batch, F.cross_entropy, steps=steps, seed=seed, log_every=log_every)


def train_realism_net(steps: int = 1500, seed: int = 0, log_every: int = 0) -> SmallCNN:
    """Train the realism reward CNN (binary cross-entropy, real = 1)."""
    torch.manual_seed(seed)
    return fit(realism_net(), realism_batch, lambda z, y: F.binary_cross_entropy_with_logits(z[:, 0], y),
               steps=steps, seed=seed, log_every=log_every)


__all__ = ["SmallCNN", "digit_net", "realism_net", "digit_input", "realism_input", "load_net", "save_net", "fit",
           "digit_batch", "realism_batch", "train_digit_net", "train_realism_net", "degrade", "WEIGHTS_DIR"]
