"""Pairwise VLM judge (the paper's LLM-as-a-Judge): which of two images of one prompt is better?

The judge shows a vision-language model both images with `JUDGE_PROMPT` and parses its verdict. Each pair is shown
in a random order (a seeded coin per pair) and the verdict is mapped back, so a model's preference for the first
(or second) position cancels out over many pairs. Answers that cannot be parsed are abstentions: counted and
reported, never guessed. Verdicts aggregate with `recast.winrate.aggregate_verdicts` (ties count half, Wilson
interval).

Backends are callables `(text, [png_bytes_first, png_bytes_second]) -> answer text`:

- `OpenAIChatBackend`: any OpenAI-compatible `/chat/completions` endpoint (vLLM, SGLang, TGI, a hosted API), over
  plain `urllib`, images sent inline as base64 PNG data URLs;
- `TransformersBackend`: a local image-text-to-text model folder (e.g. Qwen2.5-VL) through transformers.
"""

from __future__ import annotations

import base64
import io
import json
import re
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass

import torch

from recast.winrate import WinRateCI, aggregate_verdicts

__all__ = ["JUDGE_PROMPT", "parse_verdict", "PairVerdict", "PairwiseVLMJudge", "OpenAIChatBackend",
           "TransformersBackend", "to_png"]

JUDGE_PROMPT = """You are an expert judge of text-to-image generation. You see two images made for the same prompt.
The first image is Image A, the second is Image B.

Prompt: "{prompt}"

Decide which image is better. First, prompt faithfulness: the right objects, counts, colours, positions and any
quoted text, spelled exactly. Only if both are equally faithful, visual quality: no artifacts, coherent anatomy and
geometry, clean textures, pleasing composition. Answer "tie" only if they are truly equal.

Reply with one line and nothing else: "Verdict: A", "Verdict: B" or "Verdict: tie"."""

Backend = Callable[[str, list[bytes]], str]

_TIE = r"(tie|tied|draw|equal(ly)?( good| bad)?|same|neither|no preference|both( are)? (equally|the same))"
_EXPLICIT = re.compile(r"(verdict|answer|winner|choice|final answer|better image|preferred)\s*(is)?\s*[:=\-]?\s*"
                       r"\**\s*(image\s*)?(?P<v>a|b|1|2|first|second|" + _TIE + r")\b")
_A = re.compile(r"\b(image\s*a|a\b(?= is better| wins)|first image|image\s*1|left image|the first one)\b")
_B = re.compile(r"\b(image\s*b|b\b(?= is better| wins)|second image|image\s*2|right image|the second one)\b")


def _label(word: str) -> str | None:
    word = word.strip().lower()
    if word in ("a", "1", "first"):
        return "A"
    if word in ("b", "2", "second"):
        return "B"
    return "tie" if re.fullmatch(_TIE, word) else None


def parse_verdict(text: str) -> str | None:
    """"A", "B" or "tie" from a judge's answer, or None when it cannot be read (an abstention).

    Accepts the requested format ("Verdict: A") and common variants: "**Answer:** B", "Winner = image 1",
    a bare "A" / "b." / "Tie", "Image B is better", "I prefer the first image", "Both are equally good". An answer
    naming both images without an explicit verdict, or neither, is None.
    """
    if not isinstance(text, str):
        return None
    t = text.strip().lower().replace("*", "")
    m = list(_EXPLICIT.finditer(t))
    if m:
        return _label(m[-1].group("v"))  # the last explicit verdict: models reason first, then conclude
    bare = re.sub(r"[^a-z0-9 ]", "", t).strip()
    if bare in ("a", "b", "1", "2", "tie", "image a", "image b"):
        return _label(bare.replace("image ", ""))
    if re.search(r"\b" + _TIE + r"\b", t) and not (_A.search(t) or _B.search(t)):
        return "tie"
    a, b = bool(_A.search(t)), bool(_B.search(t))
    if a != b:
        return "A" if a else "B"
    return None


def to_png(image: torch.Tensor) -> bytes:
    """One image (3, H, W) in [0, 1] -> PNG bytes."""
    from PIL import Image

    arr = (image.detach().float().clamp(0, 1).permute(1, 2, 0).cpu().numpy() * 255).round().astype("uint8")
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="PNG")
    return buf.getvalue()


@dataclass(frozen=True)
class PairVerdict:
    """One judged pair: verdict +1 (a better), -1 (b better), 0 (tie) or None (abstained); whether b was shown
    first; the raw answer."""

    verdict: int | None
    swapped: bool
    answer: str


class PairwiseVLMJudge:
    """Judge pairs (a_i, b_i) of images of prompt_i with a VLM backend, in randomised order.

    Args:
        backend: `(text, [png_first, png_second]) -> answer`.
        prompt_template: the judge prompt; "{prompt}" is replaced by the generation prompt.
        seed: seeds the per-pair order coin (so a run is reproducible).
    """

    def __init__(self, backend: Backend, prompt_template: str = JUDGE_PROMPT, seed: int = 0):
        if "{prompt}" not in prompt_template:
            raise ValueError("prompt_template must contain '{prompt}'")
        self.backend, self.template, self.seed = backend, prompt_template, seed

    def judge(self, a_images: torch.Tensor, b_images: torch.Tensor, prompts: list[str]) -> list[PairVerdict]:
        """Verdicts for each pair (see `PairVerdict`); images (B, 3, H, W) in [0, 1]."""
        if a_images.shape != b_images.shape or len(prompts) != len(a_images):
            raise ValueError(f"mismatched pairs: {tuple(a_images.shape)}, {tuple(b_images.shape)}, "
                             f"{len(prompts)} prompts")
        swaps = torch.rand(len(prompts), generator=torch.Generator().manual_seed(self.seed)) < 0.5
        out = []
        for a, b, prompt, swap in zip(a_images, b_images, prompts, swaps.tolist()):
            first, second = (b, a) if swap else (a, b)
            answer = self.backend(self.template.replace("{prompt}", prompt), [to_png(first), to_png(second)])
            label = parse_verdict(answer)
            v = None if label is None else 0 if label == "tie" else (1 if label == "A" else -1)
            out.append(PairVerdict(-v if (swap and v) else v, swap, answer))
        return out

    def win_rate(self, a_images: torch.Tensor, b_images: torch.Tensor, prompts: list[str],
                 confidence: float = 0.95) -> WinRateCI:
        """Win rate of a over b with ties half, abstentions counted apart, and a Wilson interval."""
        return aggregate_verdicts([v.verdict for v in self.judge(a_images, b_images, prompts)], confidence)


class OpenAIChatBackend:
    """An OpenAI-compatible chat endpoint, e.g. `vllm serve Qwen/Qwen2.5-VL-7B-Instruct` -> base_url
    "http://localhost:8000/v1".

    Args:
        base_url: the API root (".../v1"); "/chat/completions" is appended.
        model: the served model name.
        api_key: sent as a Bearer token when given.
        timeout: seconds per request.
        max_tokens, temperature: generation settings (greedy by default: a judge should be deterministic).
    """

    def __init__(self, base_url: str, model: str, *, api_key: str | None = None, timeout: float = 60.0,
                 max_tokens: int = 32, temperature: float = 0.0):
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model, self.api_key, self.timeout = model, api_key, timeout
        self.max_tokens, self.temperature = max_tokens, temperature

    def __call__(self, text: str, images: list[bytes]) -> str:
        content = [{"type": "text", "text": text}] + [
            {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(im).decode()}}
            for im in images]
        body = json.dumps({"model": self.model, "messages": [{"role": "user", "content": content}],
                           "max_tokens": self.max_tokens, "temperature": self.temperature}).encode()
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        request = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
        with urllib.request.urlopen(request, timeout=self.timeout) as response:
            reply = json.loads(response.read())
        try:
            return reply["choices"][0]["message"]["content"] or ""
        except (KeyError, IndexError, TypeError) as e:
            raise ValueError(f"{self.url} returned no chat completion: {str(reply)[:200]}") from e


class TransformersBackend:
    """A local image-text-to-text model folder through transformers (chat template with two images).

    Args:
        model_path: a folder holding the model and its processor (nothing downloads).
        device: where the model runs.
        max_new_tokens: generation length (greedy decoding).
    """

    def __init__(self, model_path: str, device="cpu", max_new_tokens: int = 32, dtype=torch.bfloat16):
        from pathlib import Path

        from transformers import AutoModelForImageTextToText, AutoProcessor

        if not (Path(model_path) / "config.json").is_file():
            raise FileNotFoundError(f"VLM judge: no config.json in {model_path}; download a VLM with "
                                    "`huggingface-cli download Qwen/Qwen2.5-VL-7B-Instruct --local-dir DIR`")
        self.processor = AutoProcessor.from_pretrained(model_path)
        self.model = AutoModelForImageTextToText.from_pretrained(model_path, dtype=dtype).to(device).eval()
        self.max_new_tokens = max_new_tokens

    @torch.no_grad()
    def __call__(self, text: str, images: list[bytes]) -> str:
        from PIL import Image

        pil = [Image.open(io.BytesIO(b)).convert("RGB") for b in images]
        messages = [{"role": "user", "content": [{"type": "image"}, {"type": "image"}, {"type": "text", "text": text}]}]
        chat = self.processor.apply_chat_template(messages, add_generation_prompt=True)
        inputs = self.processor(text=[chat], images=pil, return_tensors="pt").to(self.model.device)
        out = self.model.generate(**inputs, max_new_tokens=self.max_new_tokens, do_sample=False)
        return self.processor.batch_decode(out[:, inputs["input_ids"].shape[1]:], skip_special_tokens=True)[0]
