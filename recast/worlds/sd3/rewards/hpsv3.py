"""HPSv3 (MizzenAI, ICCV 2025): Qwen2-VL-7B-Instruct fine-tuned as a preference model, read at a reward token.

The published model is the whole Qwen2-VL (vision tower, merger, language model) fine-tuned, its vocabulary grown by
one token, ``<|Reward|>``, with an MLP head on the last hidden state at that token:

    h = Qwen2-VL(chat turn: image, instruction(prompt) + suffix)[position of <|Reward|>]       (B, hidden)
    (mu, sigma) = Linear(16, 2) ReLU Linear(1024, 16) ReLU Linear(hidden, 1024) (h)            in float32
    score = mu

so transformers' `Qwen2VLModel` and a three-layer MLP build it; nothing outside transformers is needed. Three details
of the authors' own forward pass are reproduced because the model was trained with them:

- **positions**: they embed the image themselves and call the language model without position ids, so every token,
  the image's included, sits at its plain index 0..L-1 on all three rotary sections, not at Qwen2-VL's 3-D (time,
  height, width) positions. Scored with 3-D positions the same weights give other numbers;
- **the image**: resized with PIL's bicubic filter to Qwen2-VL's "smart resize" of exactly ``pixels`` = 256 * 28^2
  pixels (448 x 448 for a square image), as qwen_vl_utils does before the processor, whose own resize is then the
  identity (and no torchvision resize, which filters differently, ever runs);
- **the text**: one user turn holding the image and then ``instruction.format(text_prompt=prompt) + suffix`` (the
  suffix holds the reward token) through the model's chat template with the generation prompt; right padding.

The instruction is the authors' text, shipped with their code and not here: `scripts/convert_hpsv3.py` reads it from
a copy of their source into ``hpsv3_prompt.json`` next to the weights. **Scale**: ``mu`` as the model gives it
(unbounded, higher is preferred), no rescaling; a held-out judge of the paper (the release trains on it nowhere).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch
from torch import nn

from recast.worlds.sd3.rewards._common import check_batch, require_files, weights_dir as _wd

__all__ = ["FILES", "HEAD_FILE", "PROMPT_FILE", "HPSv3Head", "smart_resize", "load_prompt", "hpsv3"]

HEAD_FILE, PROMPT_FILE = "hpsv3_head.safetensors", "hpsv3_prompt.json"
FILES = ("config.json", ("model.safetensors", "model.safetensors.index.json"), "tokenizer_config.json",
         "preprocessor_config.json", HEAD_FILE, PROMPT_FILE)
HINT = ("HPSv3: the authors ship HPSv3.safetensors (MizzenAI/HPSv3) and their instruction in their code "
        "(github.com/MizzenAI/HPSv3); convert with `python scripts/convert_hpsv3.py HPSv3.safetensors DIR --base "
        "QWEN2VL_DIR --prompt-from hpsv3/dataset/data_collator_qwen.py` (QWEN2VL_DIR: the config, tokenizer and "
        "processor files of Qwen/Qwen2-VL-7B-Instruct).")


class HPSv3Head(nn.Module):
    """HPSv3's reward head: Linear, ReLU, Dropout, Linear, ReLU, Linear -> (mu, sigma); sizes from `state`."""

    def __init__(self, dim: int, hidden: int = 1024, inner: int = 16, out: int = 2):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Dropout(0.05), nn.Linear(hidden, inner),
                                    nn.ReLU(), nn.Linear(inner, out))

    @classmethod
    def from_state(cls, state: dict[str, torch.Tensor]) -> "HPSv3Head":
        """A head whose sizes are read off its state dict (keys ``layers.{0,3,5}.{weight,bias}``), loaded strictly."""
        head = cls(state["layers.0.weight"].shape[1], state["layers.0.weight"].shape[0],
                   state["layers.3.weight"].shape[0], state["layers.5.weight"].shape[0])
        head.load_state_dict(state, strict=True)
        return head

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.layers(h)


def smart_resize(height: int, width: int, factor: int, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """Qwen2-VL's target size: each side rounded to a multiple of `factor`, then both scaled by one factor so the
    area lies in [min_pixels, max_pixels] (rounded down when shrinking, up when growing)."""
    h, w = max(factor, round(height / factor) * factor), max(factor, round(width / factor) * factor)
    if h * w > max_pixels:
        scale = math.sqrt(height * width / max_pixels)
        h = max(factor, math.floor(height / scale / factor) * factor)
        w = max(factor, math.floor(width / scale / factor) * factor)
    elif h * w < min_pixels:
        scale = math.sqrt(min_pixels / (height * width))
        h, w = math.ceil(height * scale / factor) * factor, math.ceil(width * scale / factor) * factor
    return h, w


def load_prompt(folder: Path) -> dict:
    """The instruction, suffix, reward token and pixel count of ``hpsv3_prompt.json``, checked."""
    path = Path(folder) / PROMPT_FILE
    try:
        spec = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ValueError(f"reward 'hpsv3': {path} is not readable JSON ({type(e).__name__}); rewrite it with "
                         "scripts/convert_hpsv3.py") from None
    ok = isinstance(spec, dict) and all(isinstance(spec.get(k), str) for k in ("instruction", "suffix",
                                                                               "reward_token"))
    ok = ok and isinstance(spec.get("pixels"), int) and spec["pixels"] > 0
    if not ok or "{text_prompt}" not in spec["instruction"] or spec["suffix"].count(spec["reward_token"]) != 1:
        raise ValueError(f"reward 'hpsv3': {path} needs instruction (with {{text_prompt}}), suffix (with the "
                         "reward token once), reward_token and pixels; rewrite it with scripts/convert_hpsv3.py")
    return spec


def _pil(image: torch.Tensor, size: tuple[int, int]):
    """One image (3, H, W) in [0, 1] as 8-bit RGB (as a PNG holds it), resized bicubically to size (h, w)."""
    from PIL import Image

    arr = (image.detach().float().clamp(0, 1).permute(1, 2, 0).cpu().numpy() * 255).round().astype("uint8")
    return Image.fromarray(arr).resize((size[1], size[0]), Image.Resampling.BICUBIC)


def hpsv3(device="cpu", *, root=None, weights_dir=None, batch_size: int = 8, dtype: torch.dtype | None = None):
    """HPSv3's ``mu`` for each (image, prompt) (see the module docstring).

    Args:
        batch_size: images per forward pass (right padding does not change a score: the reward token precedes the
            padding, and attention is causal).
        dtype: the backbone's dtype (default bfloat16 on CUDA, float32 elsewhere); the head runs in float32.
    """
    folder = _wd("hpsv3", root, weights_dir)
    require_files("hpsv3", folder, FILES, HINT)
    spec = load_prompt(folder)
    from safetensors.torch import load_file
    from transformers import AutoImageProcessor, AutoTokenizer, Qwen2VLModel

    device = torch.device(device)
    dtype = dtype or (torch.bfloat16 if device.type == "cuda" else torch.float32)
    model = Qwen2VLModel.from_pretrained(folder, dtype=dtype).to(device).eval().requires_grad_(False)
    tokenizer, processor = AutoTokenizer.from_pretrained(folder), AutoImageProcessor.from_pretrained(folder)
    tokenizer.padding_side = "right"
    head = HPSv3Head.from_state(load_file(folder / HEAD_FILE)).to(device).eval().requires_grad_(False)
    reward_id = tokenizer.convert_tokens_to_ids(spec["reward_token"])
    image_token = tokenizer.convert_ids_to_tokens(model.config.image_token_id)
    merge, factor = processor.merge_size, processor.patch_size * processor.merge_size

    def encode(images: torch.Tensor, prompts: list[str]) -> dict:
        pil = [_pil(im, smart_resize(im.shape[-2], im.shape[-1], factor, spec["pixels"], spec["pixels"]))
               for im in images]
        vision = processor(images=pil, return_tensors="pt")
        texts = []
        for prompt, thw in zip(prompts, vision["image_grid_thw"]):
            turn = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": spec["instruction"].format(
                text_prompt=prompt) + spec["suffix"]}]}]
            text = tokenizer.apply_chat_template(turn, tokenize=False, add_generation_prompt=True)
            if text.count(image_token) != 1:
                raise ValueError(f"reward 'hpsv3': the chat template of {folder} placed {text.count(image_token)} "
                                 "image tokens, not 1")
            texts.append(text.replace(image_token, image_token * (int(thw.prod()) // merge ** 2)))
        tok = tokenizer(texts, padding=True, return_tensors="pt")
        if not bool(((tok["input_ids"] == reward_id).sum(1) == 1).all()):
            raise ValueError(f"reward 'hpsv3': a prompt does not hold the reward token {spec['reward_token']!r} "
                             "exactly once after tokenising (a prompt that spells it itself?)")
        return {**tok, **vision}

    @torch.no_grad()
    def forward(batch: dict) -> torch.Tensor:
        ids, mask = batch["input_ids"].to(device), batch["attention_mask"].to(device)
        embeds = model.get_input_embeddings()(ids)
        vision = model.visual(batch["pixel_values"].to(device, dtype), grid_thw=batch["image_grid_thw"].to(device))
        feats = vision if isinstance(vision, torch.Tensor) else vision.pooler_output
        image = (ids == model.config.image_token_id).unsqueeze(-1)
        embeds = embeds.masked_scatter(image, feats.to(embeds.dtype))
        positions = torch.arange(ids.shape[1], device=device).view(1, 1, -1).expand(3, ids.shape[0], -1)
        hidden = model.language_model(inputs_embeds=embeds, attention_mask=mask,
                                      position_ids=positions).last_hidden_state
        return head(hidden[ids == reward_id].float())[:, 0]

    def reward(images: torch.Tensor, prompts: list[str]) -> torch.Tensor:
        check_batch(images, prompts)
        out = [forward(encode(images[i:i + batch_size], list(prompts[i:i + batch_size])))
               for i in range(0, len(prompts), batch_size)]
        return torch.cat(out).float()

    reward.__name__ = "hpsv3"
    return reward
