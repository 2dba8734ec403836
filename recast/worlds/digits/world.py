"""The digit world behind the `recast.world.World` protocol.

A thin adapter: every call forwards to the code the trainer uses today (`recast.worlds.digits.model.DigitWorld`,
`recast.worlds.digits.data.prompt_set`, `recast.worlds.digits.rewards`, `recast.worlds.digits.judges`), so behaviour is unchanged bit
for bit.
`evaluate` returns the same numbers as `recast.trainer.evaluation._judge_scores`, without the "judge/" prefix.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch

from recast.io import check_safetensors, read_json
from recast.sampling import PromptEmbeds

__all__ = ["DigitsWorld", "load", "tiny", "info"]


class DigitsWorld:
    """`World` over a `recast.worlds.digits.model.DigitWorld`.

    Args:
        inner: the digit world (its modules are used in place, not copied).
    """

    def __init__(self, inner):
        from recast.worlds.digits import rewards

        self.inner = inner
        self.reward_settings: dict[str, tuple[str, ...]] = dict(rewards.SETTINGS)
        self.setting_budgets: dict[str, tuple[float, ...]] = dict(rewards.BUDGETS)

    @property
    def transformer(self) -> torch.nn.Module:
        return self.inner.transformer

    @property
    def text_encoder(self) -> torch.nn.Module:
        return self.inner.text_encoder

    @property
    def sample_shape(self) -> tuple[int, int, int]:
        return self.inner.sample_shape

    def encode_prompts(self, prompts: Sequence[str]) -> PromptEmbeds:
        return self.inner.encode_prompts(prompts)

    def decode(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner.decode(x)

    def to(self, device: str | torch.device) -> DigitsWorld:
        self.inner.to(device)
        return self

    def freeze(self) -> None:
        self.inner.text_encoder.requires_grad_(False)

    def prompts(self, split: str) -> list[str]:
        from recast.worlds.digits.data import prompt_set

        return prompt_set(split)

    def reward(self, name: str, device: str | torch.device):
        from recast.worlds.digits import rewards

        return rewards.get(name)(device)

    def render_proposals(self, prompts: Sequence[str], generator: torch.Generator | None = None) -> torch.Tensor:
        """Clean renderings of the prompts from the base glyphs, in model space (B, 3, H, W): the digit world's
        analogue of a strong external generator, a proposal for `recast profile --proposal renderings`."""
        from recast.worlds.digits.data import render, to_model

        device = next(self.inner.transformer.parameters()).device
        return to_model(render(list(prompts), glyph_split="base", generator=generator)).to(device)

    def encode_images(self, images: torch.Tensor) -> torch.Tensor:
        """Images (B, 3, H, W) in [0, 1] at the canvas size -> model space (a proposal folder's images)."""
        from recast.worlds.digits.data import to_model

        if tuple(images.shape[1:]) != self.sample_shape:
            raise ValueError(f"digit-world proposals must be {self.sample_shape[1]}x{self.sample_shape[2]} RGB images, "
                             f"got shape {tuple(images.shape[1:])}")
        return to_model(images.clamp(0, 1))

    def prefer(self, a_images: torch.Tensor, b_images: torch.Tensor, prompts: list[str]) -> torch.Tensor:
        """The pairwise preference judge (`recast.worlds.digits.judges.preference.prefer`): +1 / -1 / 0 per pair."""
        from recast.worlds.digits.judges.preference import prefer

        return prefer(a_images.cpu(), b_images.cpu(), list(prompts))

    def verdicts(self, images: torch.Tensor, prompts: list[str]) -> dict[str, torch.Tensor]:
        """The held-out judges' per-sample verdicts, bool (B,) each, True = passes (the four attributes, strict,
        not_blur, not_speckle, not_fade, defect_free): what `evaluate`'s accuracies and defect rates average."""
        from recast.worlds.digits.judges.agreement import judge_verdicts

        return judge_verdicts(images.cpu(), prompts)

    def evaluate(self, images: torch.Tensor, prompts: list[str], *, seed: int = 0) -> dict[str, float]:
        """Strict / per-attribute accuracy, Fréchet distance, and (with repeated prompts) diversity."""
        from recast.worlds.digits import judges

        images = images.cpu()
        out = {k: float(v) for k, v in judges.judge_report(images, prompts).as_dict().items() if k != "n"}
        out.update({f"defect_{k}": float(v) for k, v in judges.defect_report(images).as_dict().items()
                    if k not in ("n", "clean")})
        out["fid"] = float(judges.fid(images, prompts, generator=torch.Generator().manual_seed(seed)))
        if len(set(prompts)) < len(prompts):
            out["diversity"] = float(judges.diversity(images, prompts))
        return out


def load(path: str | None = "data/digit_base", **_) -> DigitsWorld:
    """The digit world saved at `path` ("digits:PATH")."""
    from recast.worlds.digits.model import load_world

    return DigitsWorld(load_world(path or "data/digit_base"))


def tiny(arg: str | None = None, *, seed: int = 0, **_) -> DigitsWorld:
    """A random tiny digit world ("tiny"; an optional "tiny:SEED" picks the seed)."""
    from recast.worlds.digits.model import tiny_world

    return DigitsWorld(tiny_world(int(arg) if arg else seed))


def info(arg: str | None = None):
    """Static `WorldInfo` of "tiny" and "digits:PATH" (no weights read; a PATH without world.json is refused)."""
    from recast.worlds.digits import rewards
    from recast.world import WorldInfo

    if arg is not None and not arg.isdigit():
        if not (Path(arg) / "world.json").is_file():
            raise FileNotFoundError(f"no digit world at {arg!r} (world.json missing): make the base model with "
                                    "`python -m recast.worlds.digits.pretrain --out data/digit_base`, or use the spec 'tiny'")
        read_json(Path(arg) / "world.json")  # names the file when it is not JSON
        for p in sorted(Path(arg).glob("*.safetensors")):
            check_safetensors(p)
    _check_judge_weights()
    return WorldInfo(dict(rewards.SETTINGS), rewards.names(), setting_budgets=dict(rewards.BUDGETS),
                     profiles=committed_profiles(arg))


def committed_profiles(arg: str | None) -> tuple[str, ...]:
    """The density-ratio profiles committed for a digit world (data/profiles/, data/README.md says how each was made):
    the base model's, for "digits:" naming the committed base; the tiny world's smoke profile for "tiny" (seed 0)."""
    from recast.config import DATA_ROOT

    folder = DATA_ROOT / "profiles"
    if arg is None or arg.isdigit():
        stem = "tiny_renderings"
    else:
        try:
            same = Path(arg).resolve() == (DATA_ROOT / "digit_base").resolve()
        except OSError:
            same = False
        if not same:
            return ()
        stem = "digit_base_renderings"
    return tuple(str(p) for p in sorted(folder.glob(f"{stem}_T*.npz")))


def _check_judge_weights() -> None:
    """The held-out judges' weights, which every run's final evaluation needs: present and complete."""
    from recast.worlds.digits.judges import features

    path = Path(features.WEIGHTS_PATH)
    if not path.is_file():
        raise FileNotFoundError(f"judge weights {path} are missing, and every run ends with an evaluation that needs "
                                "them; regenerate them with `python scripts/train_reward_models.py`")
    check_safetensors(path)
