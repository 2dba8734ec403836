"""Helpers shared by test modules (pytest puts tests/ on sys.path: ``from helpers import load_script``)."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load_script(name: str, folder: str = "research/probes"):
    """``<repo>/<folder>/<name>.py`` imported as a module (the scripts are not a package)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / folder / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def assert_rows_match(saved: list[dict], table: list[dict], name: str) -> None:
    """A table as `recast.io.read_csv` gives it back equals the rows an analysis computes now: floats to 1e-9
    relative, inf and nan as the empty cells `write_csv` stores, everything else as text."""
    import math

    import pytest

    assert len(saved) == len(table), name
    for want, got in zip(saved, table):
        for k, v in got.items():
            if isinstance(v, float) and math.isfinite(v):
                assert want[k] == pytest.approx(v, rel=1e-9, abs=1e-12), (name, k)
            elif isinstance(v, float):  # write_csv stores inf and nan as empty cells (JSON has neither)
                assert want[k] is None or str(want[k]) == str(v), (name, k)
            else:
                assert str(want[k]) == str(v), (name, k)


def tiny_llava(folder) -> list[str]:
    """A random tiny LLaVA (CLIP vision tower, one-layer llama, a word-level vocabulary of w0..w19) with a one-image
    chat template, saved to ``folder`` as transformers' processor and model files; returns its vocabulary."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import (CLIPImageProcessor, LlavaConfig, LlavaForConditionalGeneration, LlavaProcessor,
                              PreTrainedTokenizerFast)

    words = ["<pad>", "<unk>", "<s>", "</s>", "<image>", "user:", "assistant:"] + [f"w{i}" for i in range(20)]
    core = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", unk_token="<unk>", bos_token="<s>",
                                  eos_token="</s>", extra_special_tokens={"image_token": "<image>"})
    template = ("{% for m in messages %}user: {% for c in m['content'] %}{% if c['type'] == 'image' %}<image> "
                "{% else %}{{ c['text'] }} {% endif %}{% endfor %}{% endfor %}assistant:")
    image_processor = CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})
    LlavaProcessor(image_processor=image_processor, tokenizer=tok, patch_size=8, chat_template=template,
                   vision_feature_select_strategy="default", num_additional_image_tokens=1).save_pretrained(folder)
    torch.manual_seed(0)
    LlavaForConditionalGeneration(LlavaConfig(
        vision_config=dict(model_type="clip_vision_model", image_size=32, patch_size=8, hidden_size=16,
                           intermediate_size=32, num_hidden_layers=1, num_attention_heads=2),
        text_config=dict(model_type="llama", vocab_size=len(words), hidden_size=16, intermediate_size=32,
                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,
                         max_position_embeddings=256, pad_token_id=0, bos_token_id=2, eos_token_id=3),
        image_token_index=4, vision_feature_layer=-1)).save_pretrained(folder)
    return words
