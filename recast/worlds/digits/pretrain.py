"""Flow-matching pretraining of the digit world's base model.

Loss: || v_theta(x_sigma, sigma, c) - (eps - x0) ||^2 with x_sigma = (1 - sigma) x0 + sigma eps, sigma drawn
logit-normal (SD3's default) or uniform, on canvases from `sample_batch(split="train", glyph_split="base")`; the text
encoder is trained jointly. The saved weights are an exponential moving average of the trained ones.

The committed base model is made in three stages (a constant-lr run, then two cosine cool-downs that sharpen the
glyphs; data/README.md, "digit_base", has the exact commands, wall times and judge scores):

    python -m recast.worlds.digits.pretrain --threads 1 --out runs/base_stage1
    python -m recast.worlds.digits.pretrain --init runs/base_stage1 --steps 750 --decay-steps 750 --warmup-steps 50 \
        --seed 1 --threads 1 --out runs/base_stage2
    python -m recast.worlds.digits.pretrain --init runs/base_stage2 --steps 750 --decay-steps 750 --warmup-steps 50 \
        --lr 5e-4 --seed 2 --threads 1 --out data/digit_base

It is under-trained on purpose (about 1/3 of samples strictly prompt-correct), so RL has room to improve it.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import torch
from tqdm.auto import tqdm

from recast.worlds.digits.corruption import Corruption, sample_corrupted_batch
from recast.worlds.digits.data import PALETTES, palette, set_palette, to_model
from recast.worlds.digits.model import PRESETS, DigitWorld, build_world, save_world
from recast.sampling import predict_velocity


@dataclass(frozen=True)
class PretrainConfig:
    """Pretraining hyperparameters (defaults: stage 1 of the data/digit_base recipe)."""

    steps: int = 1750  # optimiser steps
    batch_size: int = 32  # canvases per step
    lr: float = 1e-3  # AdamW peak learning rate
    weight_decay: float = 0.01  # AdamW weight decay
    warmup_steps: int = 100  # linear warm-up steps, then constant lr ...
    decay_steps: int = 0  # ... until the last decay_steps steps, which decay it to 0 (cosine); 0 = no decay
    grad_clip: float = 1.0  # max global gradient norm
    ema_decay: float = 0.995  # EMA of weights that is returned/saved; 0 returns the raw weights
    sigma_sampling: str = "logit_normal"  # logit_normal (SD3: sigmoid of N(0, 1)) | uniform
    preset: str = "base"  # model size, a key of recast.worlds.digits.model.PRESETS (ignored with init_from)
    init_from: str = ""  # checkpoint folder to continue from (e.g. a cool-down stage); "" = random init
    seed: int = 0  # seeds initialisation, data and noise: same seed and thread count => same weights
    num_threads: int = 0  # torch CPU threads; 0 keeps torch's default
    device: str = "cpu"  # cpu | cuda
    log_every: int = 10  # record the (mean) loss every this many steps
    progress: bool = True  # show a tqdm progress bar
    corruption: Corruption = Corruption()  # caption corruption / defect rates (recast.worlds.digits.corruption); 0 = none
    tile: float = 0.0  # intensity of the colour plate under the glyph (recast.worlds.digits.data.render); 0 = none
    palette: str = "primary"  # the colours canvases are drawn in, a key of recast.worlds.digits.data.PALETTES


@dataclass(frozen=True)
class PretrainHistory:
    """Loss curve of a run.

    Attributes:
        step: steps at which the loss was recorded (every `log_every`).
        loss: mean training loss over the preceding `log_every` steps.
        wall_time_s: total wall-clock seconds of the run.
        config: the `PretrainConfig` as a dict.
    """

    step: list[int] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    wall_time_s: float = 0.0
    config: dict = field(default_factory=dict)


def sample_sigmas(n: int, how: str, generator: torch.Generator) -> torch.Tensor:
    """Training noise levels sigma (n,) in (0, 1): `logit_normal` = sigmoid(N(0, 1)) or `uniform`."""
    if how == "logit_normal":
        return torch.sigmoid(torch.randn(n, generator=generator))
    if how == "uniform":
        return torch.rand(n, generator=generator)
    raise ValueError(f"unknown sigma_sampling {how!r}; expected 'logit_normal' or 'uniform'")


def flow_matching_loss(world: DigitWorld, x0: torch.Tensor, prompts: list[str], sigma: torch.Tensor,
                       eps: torch.Tensor) -> torch.Tensor:
    """Mean squared velocity error || v_theta(x_sigma) - (eps - x0) ||^2 over a batch (scalar)."""
    s = sigma.view(-1, 1, 1, 1)
    x_sigma = (1 - s) * x0 + s * eps
    v = predict_velocity(world.transformer, x_sigma, sigma, world.encode_prompts(prompts))
    return ((v - (eps - x0)) ** 2).mean()


def _lr_factor(step: int, config: PretrainConfig) -> float:
    """Warm-up, constant, then a cosine cool-down over the last `decay_steps` (sharpens the glyphs)."""
    warm = min(1.0, (step + 1) / max(1, config.warmup_steps))
    decay_steps = min(config.decay_steps, config.steps)
    into_decay = step - (config.steps - decay_steps)
    if decay_steps <= 0 or into_decay < 0:
        return warm
    return warm * 0.5 * (1 + math.cos(math.pi * min(1.0, (into_decay + 1) / decay_steps)))


def pretrain(
    config: PretrainConfig = PretrainConfig(), *, callback: Callable[[int, DigitWorld], None] | None = None
) -> tuple[DigitWorld, PretrainHistory]:
    """Train a digit world from scratch.

    Args:
        config: hyperparameters.
        callback: called as callback(step, ema_world) after every step (steps count from 1), e.g. to save
            snapshots; the world is in train mode and must not be modified.

    Returns:
        (world, history): the EMA world in eval mode on `config.device`, and its loss curve.
    """
    if config.palette not in PALETTES:
        raise ValueError(f"unknown palette {config.palette!r}; valid: {', '.join(PALETTES)}")
    if config.num_threads:
        torch.set_num_threads(config.num_threads)
    with palette(config.palette):  # restores the caller's palette afterwards
        return _pretrain(config, callback)


def _pretrain(config: PretrainConfig, callback) -> tuple[DigitWorld, PretrainHistory]:
    start = time.time()
    if config.init_from:
        from recast.worlds.digits.model import load_world

        world = load_world(config.init_from, config.device)
        set_palette(config.palette)  # load_world set the init's; a fine-tune may draw in another palette
    else:
        world = build_world(PRESETS[config.preset], seed=config.seed).to(config.device)
    world.transformer.train()
    world.text_encoder.train()
    ema = copy.deepcopy(world) if config.ema_decay > 0 else world
    params = world.parameters()
    opt = torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: _lr_factor(step, config))
    data_gen = torch.Generator().manual_seed(config.seed)
    noise_gen = torch.Generator().manual_seed(config.seed + 1)
    corrupt_gen = torch.Generator().manual_seed(config.seed + 2)
    history = PretrainHistory(config=asdict(config))
    running = []
    for step in tqdm(range(config.steps), disable=not config.progress, desc="pretrain"):
        images, prompts = sample_corrupted_batch(config.batch_size, config.corruption, glyph_split="base",
                                                 generator=data_gen, corruption_generator=corrupt_gen,
                                                 tile=config.tile)
        x0 = to_model(images).to(config.device)
        sigma = sample_sigmas(config.batch_size, config.sigma_sampling, noise_gen).to(config.device)
        eps = torch.randn(x0.shape, generator=noise_gen).to(config.device)
        loss = flow_matching_loss(world, x0, prompts, sigma, eps)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, config.grad_clip)
        opt.step()
        sched.step()
        if config.ema_decay > 0:
            with torch.no_grad():
                torch._foreach_lerp_(ema.parameters(), params, 1 - config.ema_decay)
        running.append(loss.item())
        if callback is not None:
            callback(step + 1, ema)
        if (step + 1) % config.log_every == 0 or step + 1 == config.steps:
            history.step.append(step + 1)
            history.loss.append(sum(running) / len(running))
            running = []
    ema.transformer.eval()
    ema.text_encoder.eval()
    ema = dataclasses.replace(ema, palette=config.palette)
    return ema, PretrainHistory(history.step, history.loss, time.time() - start, history.config)


@torch.no_grad()
def evaluate_world(world: DigitWorld, *, n: int = 64, split: str = "train", num_steps: int = 10, shift: float = 3.0,
                   seed: int = 0, batch_size: int = 64):
    """Strict and per-attribute judge accuracies of ODE samples (the base model's quality band).

    Args:
        world: the model to judge.
        n: number of samples; prompts are drawn uniformly from `prompt_set(split)` with `seed`.
        split: prompt split, "train" or "test".
        num_steps, shift: the Euler grid (`sigma_schedule(num_steps, shift)`).
        seed: seeds prompts and starting noise.
        batch_size: samples per sampler call.

    Returns:
        `recast.worlds.digits.judges.attributes.JudgeReport` (strict, digit, color, position, size accuracies and n).
    """
    from recast.worlds.digits.audit import sample_world
    from recast.worlds.digits.judges.attributes import judge_report

    images, prompts = sample_world(world, n=n, split=split, num_steps=num_steps, shift=shift, seed=seed,
                                   batch_size=batch_size)
    return judge_report(images, prompts)


def parse_corruption(text: str, error=None) -> Corruption:
    """Parse ``"color=0.45,size=0.4"`` into a `Corruption`; calls ``error(msg)`` (or raises ValueError) on bad input."""
    kw = {}
    try:
        for item in filter(None, (t.strip() for t in text.split(","))):
            name, _, value = item.partition("=")
            if name.strip() not in Corruption.__dataclass_fields__:
                raise ValueError(f"unknown corruption {name.strip()!r}; valid: "
                                 f"{', '.join(Corruption.__dataclass_fields__)}")
            kw[name.strip()] = float(value)
        return Corruption(**kw)
    except ValueError as err:
        if error is None:
            raise
        error(f"--corrupt: {err}")


def main(argv: list[str] | None = None) -> None:
    """CLI: `python -m recast.worlds.digits.pretrain --steps N --out DIR [--seed S] [--threads K]`, or
    `python -m recast.worlds.digits.pretrain --eval DIR [--n 128] [--num-steps 10] [--shift 3]` to judge a checkpoint."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=PretrainConfig.steps)
    parser.add_argument("--batch-size", type=int, default=PretrainConfig.batch_size)
    parser.add_argument("--decay-steps", type=int, default=PretrainConfig.decay_steps)
    parser.add_argument("--warmup-steps", type=int, default=PretrainConfig.warmup_steps)
    parser.add_argument("--lr", type=float, default=PretrainConfig.lr)
    parser.add_argument("--init", default="", help="checkpoint folder to continue from (default: random init)")
    parser.add_argument("--preset", default=PretrainConfig.preset, choices=sorted(PRESETS))
    parser.add_argument("--seed", type=int, default=PretrainConfig.seed)
    parser.add_argument("--threads", type=int, default=PretrainConfig.num_threads)
    parser.add_argument("--device", default=PretrainConfig.device)
    parser.add_argument("--corrupt", default="", help="caption corruption / defect rates, e.g. "
                        "'color=0.45,position=0.45,size=0.4,blur=0.3' (recast.worlds.digits.corruption.Corruption)")
    parser.add_argument("--tile", type=float, default=PretrainConfig.tile,
                        help="intensity in [0, 1) of a colour plate filling the prompted quadrant under the glyph")
    parser.add_argument("--palette", default=PretrainConfig.palette, choices=sorted(PALETTES),
                        help="the colours canvases are drawn in (recast.worlds.digits.data.PALETTES); saved with the world")
    parser.add_argument("--out", help="checkpoint folder to write (replaced atomically)")
    parser.add_argument("--eval", help="instead of training, judge ODE samples of this checkpoint folder")
    parser.add_argument("--n", type=int, default=128, help="--eval: samples per prompt split")
    parser.add_argument("--num-steps", type=int, default=10, help="--eval: Euler steps")
    parser.add_argument("--shift", type=float, default=3.0, help="--eval: SD3 time shift of the grid")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.eval:
        from recast.worlds.digits.model import load_world

        world = load_world(args.eval, args.device)
        for split in ("train", "test"):
            report = evaluate_world(world, n=args.n, split=split, num_steps=args.num_steps, shift=args.shift)
            print(f"{split} prompts, ODE {args.num_steps} steps, shift {args.shift}:", report.as_dict())
        return
    if not args.out:
        parser.error("--out is required for training")
    if not 0.0 <= args.tile < 1.0:
        parser.error(f"--tile must be in [0, 1), got {args.tile}")
    config = PretrainConfig(steps=args.steps, batch_size=args.batch_size, decay_steps=args.decay_steps,
                            lr=args.lr, warmup_steps=args.warmup_steps, init_from=args.init, preset=args.preset, seed=args.seed,
                            num_threads=args.threads, device=args.device,
                            corruption=parse_corruption(args.corrupt, parser.error), tile=args.tile,
                            palette=args.palette)
    world, history = pretrain(config)
    save_world(world, args.out)
    from recast.io import write_json

    write_json(f"{args.out}/pretrain_history.json", asdict(history))
    print(f"saved {args.out}: {config.steps} steps in {history.wall_time_s:.0f} s, final loss {history.loss[-1]:.4f}")


if __name__ == "__main__":
    main()
