"""OCR reward: does the image spell the text quoted in its prompt? (Flow-GRPO's OCR task.)

The target is the text between the first pair of double quotes in the prompt ('a sign that says "open late"' ->
"open late"). The image is read by RapidOCR (PP-OCRv4 detection + recognition as ONNX models that ship inside the
`rapidocr-onnxruntime` wheel, so it runs offline), recognised pieces are joined, and

    r = 1 - min(Levenshtein(recognised, target), len(target)) / len(target)      in [0, 1]

compared case-insensitively with spaces removed. A prompt without quotes raises ValueError.
"""

from __future__ import annotations

import numpy as np
import torch

from recast.extras import pip_hint
from recast.worlds.sd3.rewards._common import check_batch

HINT = f"install the OCR extra: {pip_hint('ocr')} (rapidocr-onnxruntime and rapidfuzz; models ship in the wheel)"


def quoted_text(prompt: str) -> str:
    """The text inside the first pair of double quotes; ValueError if there is none."""
    parts = prompt.split('"')
    if len(parts) < 3 or not parts[1].strip():
        raise ValueError(f'ocr reward needs the target text in double quotes in the prompt, got {prompt!r}')
    return parts[1]


def _normalise(text: str) -> str:
    return "".join(text.lower().split())


def text_similarity(recognised: str, target: str) -> float:
    """1 - min(edit distance, len(target)) / len(target) on lower-cased, space-free strings."""
    from rapidfuzz.distance import Levenshtein

    rec, tgt = _normalise(recognised), _normalise(target)
    if not tgt:
        raise ValueError("empty OCR target")
    return 1.0 - min(Levenshtein.distance(rec, tgt), len(tgt)) / len(tgt)


# RapidOCR's defaults upscale every image to a 736 px short side (slow on 512 px renders) and run an angle
# classifier for upside-down text; generated images are upright, so neither is needed.
ENGINE_DEFAULTS = {"det_limit_type": "max", "det_limit_side_len": 960, "use_cls": False}


def ocr(device="cpu", *, root=None, weights_dir=None, min_confidence: float = 0.0, **engine_options):
    """OCR reward in [0, 1] (images are read on CPU; `device` is where the result goes). Scale: 1 minus the
    normalised edit distance, as Flow-GRPO's OCR reward; the ReCAST release ships no OCR reward (its Stage-OCR setting
    is on its page only), so this is ours.

    Args:
        min_confidence: ignore recognised pieces below this confidence.
        engine_options: RapidOCR settings (e.g. intra_op_num_threads=1), over `ENGINE_DEFAULTS`.
    """
    try:
        from rapidocr_onnxruntime import RapidOCR
        import rapidfuzz  # noqa: F401 - fail here, not in the first call
    except ImportError as e:
        raise ImportError(f"reward 'ocr' needs rapidocr-onnxruntime and rapidfuzz: {HINT}") from e
    engine = RapidOCR(**{**ENGINE_DEFAULTS, **engine_options})
    device = torch.device(device)

    def read(image: torch.Tensor) -> str:
        arr = (image.detach().float().clamp(0, 1).permute(1, 2, 0).cpu().numpy() * 255).round().astype(np.uint8)
        result, _ = engine(np.ascontiguousarray(arr[:, :, ::-1]))  # RapidOCR expects OpenCV's BGR order
        return " ".join(text for _, text, conf in (result or []) if float(conf) >= min_confidence)

    def reward(images: torch.Tensor, prompts: list[str]) -> torch.Tensor:
        check_batch(images, prompts)
        targets = [quoted_text(p) for p in prompts]
        return torch.tensor([text_similarity(read(im), t) for im, t in zip(images, targets)],
                            dtype=torch.float32, device=device)

    reward.read = read
    return reward
