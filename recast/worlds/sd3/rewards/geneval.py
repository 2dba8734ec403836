"""GenEval-style compositional reward: objects, counts, colours and relative positions, from a detector.

Each prompt must have a `GenEvalItem` (from GenEval metadata jsonl, `recast.worlds.sd3.prompts`). An image is
checked clause by clause:

- include: the class is detected at least `count` times (exactly `count` times for the "counting" tag);
- colour: at least `count` detections of the class have the required colour (`color_fn` of the box);
- position: the highest-scoring detection of the class stands in the relation to the highest-scoring detection of
  `include[i]`: its box centre differs by more than `margin` of the image side in that direction;
- exclude: fewer than `count` detections of the class.

The reward is the fraction of clauses satisfied (in [0, 1]); `strict=True` gives GenEval's all-or-nothing score.
The detector is pluggable (any `Detector`); the default is transformers' zero-shot OWL-ViT / OWLv2 loaded from a
local folder. GenEval itself uses Mask2Former and a CLIP colour classifier; the default colour rule here is the
nearest named colour to the box's median pixel, cheap and weight-free (pass `color_fn` to change it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import torch

from recast.worlds.sd3.prompts import GenEvalItem, load_geneval_metadata
from recast.worlds.sd3.rewards._common import check_batch, require_files, weights_dir as _wd

__all__ = ["Detection", "Detector", "OwlDetector", "PALETTE", "nearest_color", "score_item", "geneval"]

# GenEval's colour names, with a representative sRGB value each (in [0, 1]).
PALETTE = {"red": (0.85, 0.1, 0.1), "orange": (1.0, 0.55, 0.0), "yellow": (0.95, 0.9, 0.1),
           "green": (0.1, 0.65, 0.15), "blue": (0.1, 0.25, 0.85), "purple": (0.5, 0.15, 0.6),
           "pink": (1.0, 0.6, 0.75), "brown": (0.45, 0.27, 0.1), "black": (0.05, 0.05, 0.05),
           "white": (0.95, 0.95, 0.95)}
FILES = ("config.json", ("model.safetensors", "pytorch_model.bin"),
         ("preprocessor_config.json", "processor_config.json"))
HINT = ("GenEval detector: any transformers zero-shot detector folder, e.g. `huggingface-cli download "
        "google/owlv2-base-patch16-ensemble --local-dir DIR`.")


@dataclass(frozen=True)
class Detection:
    """One detected object: class label, confidence, box (x0, y0, x1, y1) in pixels."""

    label: str
    score: float
    box: tuple[float, float, float, float]


class Detector(Protocol):
    def __call__(self, images: torch.Tensor, labels: list[list[str]]) -> list[list[Detection]]:
        """Detect, in each image (B, 3, H, W) in [0, 1], the objects named in its label list."""


class OwlDetector:
    """Zero-shot detection with a transformers OWL-ViT / OWLv2 model from a local folder."""

    def __init__(self, folder: str | Path, device="cpu", threshold: float = 0.1):
        require_files("geneval", Path(folder), FILES, HINT)
        from transformers import AutoModelForZeroShotObjectDetection, AutoProcessor

        self.device, self.threshold = torch.device(device), threshold
        self.model = AutoModelForZeroShotObjectDetection.from_pretrained(folder).to(self.device).eval()
        self.processor = AutoProcessor.from_pretrained(folder)

    @torch.no_grad()
    def __call__(self, images: torch.Tensor, labels: list[list[str]]) -> list[list[Detection]]:
        queries = [[f"a photo of a {c}" for c in ls] for ls in labels]
        inputs = self.processor(text=queries, images=[im.float().cpu() for im in images], return_tensors="pt",
                                truncation=True,  # a query longer than the text tower is cut, not an error
                                do_rescale=False, input_data_format="channels_first").to(self.device)
        outputs = self.model(**inputs)
        sizes = torch.tensor([im.shape[-2:] for im in images])
        results = self.processor.post_process_grounded_object_detection(outputs, threshold=self.threshold,
                                                                        target_sizes=sizes)
        # the processor pads every image's queries to the batch's longest list: a hit on a padding query is dropped
        return [[Detection(ls[int(k)], float(s), tuple(float(v) for v in b))
                 for s, k, b in zip(r["scores"], r["labels"], r["boxes"]) if int(k) < len(ls)]
                for r, ls in zip(results, labels)]


def nearest_color(image: torch.Tensor, box: tuple[float, float, float, float]) -> str:
    """Name (from `PALETTE`) nearest to the median colour of the central half of `box` in image (3, H, W)."""
    x0, y0, x1, y1 = box
    H, W = image.shape[-2:]
    cx, cy, hw, hh = (x0 + x1) / 2, (y0 + y1) / 2, max((x1 - x0) / 4, 0.5), max((y1 - y0) / 4, 0.5)
    ys = slice(max(int(cy - hh), 0), min(int(cy + hh) + 1, H))
    xs = slice(max(int(cx - hw), 0), min(int(cx + hw) + 1, W))
    rgb = image[:, ys, xs].float().reshape(3, -1).median(dim=1).values.cpu()
    names = list(PALETTE)
    d = ((torch.tensor([PALETTE[n] for n in names]) - rgb) ** 2).sum(1)
    return names[int(d.argmin())]


def _center(d: Detection) -> tuple[float, float]:
    return (d.box[0] + d.box[2]) / 2, (d.box[1] + d.box[3]) / 2


def _relation_holds(obj: Detection, ref: Detection, relation: str, margin_px: tuple[float, float]) -> bool:
    (x, y), (rx, ry) = _center(obj), _center(ref)
    mx, my = margin_px
    return {"left of": x < rx - mx, "right of": x > rx + mx, "above": y < ry - my, "below": y > ry + my}[relation]


def score_item(item: GenEvalItem, detections: list[Detection], image: torch.Tensor, *,
               color_fn: Callable = nearest_color, margin: float = 0.1) -> tuple[int, int]:
    """(clauses satisfied, clauses checked) of one image against its GenEval item (see module docstring)."""
    H, W = image.shape[-2:]
    by_class: dict[str, list[Detection]] = {}
    for d in sorted(detections, key=lambda d: -d.score):
        by_class.setdefault(d.label, []).append(d)
    ok = total = 0
    for obj in item.include:
        found = by_class.get(obj.cls, [])
        total += 1
        ok += len(found) == obj.count if item.tag == "counting" else len(found) >= obj.count
        if obj.color is not None:
            total += 1
            ok += sum(color_fn(image, d.box) == obj.color for d in found) >= obj.count
        if obj.position is not None:
            relation, i = obj.position
            ref = by_class.get(item.include[i].cls, [])
            total += 1
            ok += bool(found and ref and _relation_holds(found[0], ref[0], relation, (margin * W, margin * H)))
    for obj in item.exclude:
        total += 1
        ok += len(by_class.get(obj.cls, [])) < obj.count
    return ok, total


def geneval(device="cpu", *, root=None, weights_dir=None, metadata: str | Path | list[GenEvalItem] | None = None,
            detector: Detector | None = None, color_fn: Callable = nearest_color, margin: float = 0.1,
            strict: bool = False, threshold: float = 0.1):
    """GenEval-style reward in [0, 1].

    Scale: the fraction of clauses satisfied. The ReCAST release's geneval is also in [0, 1] but not the same
    number: the mean of per-clause parts (count closeness 1 - |n - count| / count, colour share, relation 0/1) from
    a Mask2Former detector with a CLIP colour classifier, where ours uses a zero-shot detector and clause pass/fail.

    Args:
        metadata: GenEval metadata (a jsonl path or loaded items) covering every prompt that will be scored;
            defaults to data/prompts/compose_train.jsonl and compose_test.jsonl.
        detector: a `Detector`; default `OwlDetector(weights_dir or root/geneval)`.
        strict: 1 only when every clause holds (GenEval's metric), else the fraction of clauses.
    """
    from recast.worlds.sd3.settings import DATA_PROMPTS

    if metadata is None:
        items = [i for f in ("compose_train.jsonl", "compose_test.jsonl")
                 for i in load_geneval_metadata(DATA_PROMPTS / f)]
    else:
        items = load_geneval_metadata(metadata) if isinstance(metadata, (str, Path)) else list(metadata)
    table = {i.prompt: i for i in items}
    detector = detector or OwlDetector(_wd("geneval", root, weights_dir), device, threshold)
    device = torch.device(device)

    def reward(images: torch.Tensor, prompts: list[str]) -> torch.Tensor:
        check_batch(images, prompts)
        unknown = [p for p in prompts if p not in table]
        if unknown:
            raise ValueError(f"geneval reward has no metadata for prompt {unknown[0]!r}")
        wanted = [sorted({o.cls for o in (*table[p].include, *table[p].exclude)}) for p in prompts]
        found = detector(images, wanted)
        out = []
        for image, p, dets in zip(images, prompts, found):
            ok, total = score_item(table[p], dets, image, color_fn=color_fn, margin=margin)
            out.append(float(ok == total) if strict else ok / total)
        return torch.tensor(out, dtype=torch.float32, device=device)

    return reward
