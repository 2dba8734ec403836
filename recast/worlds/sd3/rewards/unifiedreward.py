"""UnifiedReward-2 as a pointwise judge: a VLM rates each image against its prompt on alignment, coherence and style
(1 to 5 each); the score is their mean, in [1, 5], NaN where the judge abstains (`recast.worlds.sd3.vlm_score`).

The model (e.g. CodeGoat24/UnifiedReward-2.0-qwen-7b, a Qwen2.5-VL) is reached in one of two ways, chosen by what
its folder (``root/unifiedreward`` or ``weights_dir``) holds, or by the ``endpoint`` and ``model`` arguments:

- ``endpoint.json``: ``{"endpoint": "http://127.0.0.1:8000/v1", "model": "UnifiedReward-2.0-qwen-7b"}`` and
  optionally ``api_key_env``, ``timeout``, ``retries``: an OpenAI-compatible server (``vllm serve DIR``), reached
  with the pairwise judge's client (deadline per request, no redirects, bounded retries);
- ``config.json`` (a transformers image-text-to-text model folder): the weights run locally (nothing downloads).

A ``prompt.txt`` in the folder (any text with "{prompt}") replaces `SCORE_PROMPT`, e.g. with the authors' own wording.
Nothing loads at import; a folder with neither file fails before anything is built, naming both.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from recast.worlds.sd3.rewards._common import check_batch, weights_dir as _wd

__all__ = ["ENDPOINT_FILE", "PROMPT_FILE", "unifiedreward"]

ENDPOINT_FILE, PROMPT_FILE = "endpoint.json", "prompt.txt"
ENDPOINT_KEYS = {"endpoint", "model", "api_key_env", "timeout", "retries", "max_tokens"}
HINT = ("UnifiedReward-2: serve it with `vllm serve CodeGoat24/UnifiedReward-2.0-qwen-7b` and write endpoint.json "
        '({"endpoint": "http://127.0.0.1:8000/v1", "model": NAME}), or download the weights into the folder '
        "(`huggingface-cli download CodeGoat24/UnifiedReward-2.0-qwen-7b --local-dir DIR`).")


def _endpoint_config(folder: Path, endpoint: str | None, model: str | None) -> dict | None:
    """The endpoint settings: the arguments over ``endpoint.json``; None when neither names an endpoint."""
    cfg = {}
    path = folder / ENDPOINT_FILE
    if path.is_file():
        try:
            cfg = json.loads(path.read_text(encoding="utf-8"))
        except ValueError as e:
            raise ValueError(f"reward 'unifiedreward': {path} is not JSON ({e})") from None
        unknown = sorted(set(cfg) - ENDPOINT_KEYS) if isinstance(cfg, dict) else None
        if unknown is None or unknown:
            raise ValueError(f"reward 'unifiedreward': {path} must be a mapping of {sorted(ENDPOINT_KEYS)}, got "
                             f"{unknown if unknown else type(cfg).__name__}")
    cfg = {**cfg, **({"endpoint": endpoint} if endpoint else {}), **({"model": model} if model else {})}
    if not cfg:
        return None
    if not cfg.get("endpoint") or not cfg.get("model"):
        raise ValueError(f"reward 'unifiedreward': an endpoint needs both endpoint and model (got {sorted(cfg)})")
    return cfg


def unifiedreward(device="cpu", *, root=None, weights_dir=None, endpoint: str | None = None, model: str | None = None,
                  prompt_template: str | None = None, axes: tuple[str, ...] = ("alignment", "coherence", "style")):
    """UnifiedReward-2's mean axis score of each (image, prompt), NaN where it abstains (module docstring).

    Args:
        endpoint, model: an OpenAI-compatible server and its model name, over the folder's ``endpoint.json``.
        prompt_template: the judge prompt (with "{prompt}"), over the folder's ``prompt.txt`` and `SCORE_PROMPT`.
        axes: the axes averaged (a subset of alignment, coherence, style).

    Raises:
        FileNotFoundError: neither an endpoint nor local weights (config.json) are configured.
        ValueError: a malformed endpoint.json or prompt, an unknown axis, or an endpoint setting that cannot work.
    """
    from recast.worlds.sd3.vlm_score import AXES, SCORE_PROMPT, PointwiseVLMJudge

    folder = _wd("unifiedreward", root, weights_dir)
    bad = [a for a in axes if a not in AXES]
    if bad or not axes:
        raise ValueError(f"reward 'unifiedreward': unknown axes {bad or axes}; valid: {AXES}")
    if prompt_template is None and (folder / PROMPT_FILE).is_file():
        prompt_template = (folder / PROMPT_FILE).read_text(encoding="utf-8")
    cfg = _endpoint_config(folder, endpoint, model)
    if cfg is not None:
        from recast.worlds.sd3.vlm_client import OpenAIChatBackend

        backend = OpenAIChatBackend(cfg["endpoint"], cfg["model"], api_key_env=cfg.get("api_key_env"),
                                    timeout=float(cfg.get("timeout", 60.0)), max_retries=int(cfg.get("retries", 3)),
                                    max_tokens=int(cfg.get("max_tokens", 64)))
    elif (folder / "config.json").is_file():
        from recast.worlds.sd3.vlm_judge import TransformersBackend

        backend = TransformersBackend(str(folder), device, max_new_tokens=64,
                                      dtype=torch.bfloat16 if torch.device(device).type == "cuda" else torch.float32)
    else:
        raise FileNotFoundError(f"reward 'unifiedreward': missing {ENDPOINT_FILE} or config.json in {folder} (pass "
                                f"weights_dir=... or root=..., or endpoint= and model=). {HINT}")
    judge = PointwiseVLMJudge(backend, prompt_template or SCORE_PROMPT, axes=tuple(axes))
    device = torch.device(device)

    def reward(images: torch.Tensor, prompts: list[str]) -> torch.Tensor:
        check_batch(images, prompts)
        return judge(images, list(prompts)).to(device)

    reward.judge = judge  # its `abstained` count
    reward.__name__ = "unifiedreward"
    return reward
