"""Tiny random Qwen2-VL pieces built from config, offline, for tests and CPU smoke runs of the VLM-based judges.

A character-level tokenizer carrying Qwen2-VL's special tokens and a chat template of the same shape (a user turn,
the image as <|vision_start|><|image_pad|><|vision_end|>, the generation prompt), a 16-wide one-layer Qwen2-VL with
patch 4 and merge 2 (8-pixel factor), and `save_tiny_hpsv3`, which writes a complete `hpsv3` reward folder (what
scripts/convert_hpsv3.py writes for the real model) so a paper-scale command runs end to end on CPU.
"""

from __future__ import annotations

import json
import string
from pathlib import Path

import torch

__all__ = ["SPECIAL_TOKENS", "TINY_PIXELS", "qwen2vl_tokenizer", "tiny_image_processor", "tiny_qwen2vl",
           "save_tiny_hpsv3"]

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
                  "<|image_pad|>", "<|video_pad|>")
TINY_PIXELS = 256  # a 16 x 16 image: 4 x 4 patches of 4 pixels, merged 2 x 2 into 4 image tokens
_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% for c in m['content'] %}"
             "{% if c['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>{% else %}{{ c['text'] }}"
             "{% endif %}{% endfor %}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
             "{% endif %}")


def qwen2vl_tokenizer():
    """A character-level tokenizer (every printable character a token) with Qwen2-VL's special tokens last."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {c: i for i, c in enumerate(["<unk>", *string.printable])}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>", pad_token="<|endoftext|>",
                                  eos_token="<|im_end|>")
    tok.add_special_tokens({"additional_special_tokens": list(SPECIAL_TOKENS)})
    tok.chat_template = _TEMPLATE
    return tok


def tiny_image_processor():
    """Qwen2-VL's image processor (the PIL backend: no torchvision needed) at patch 4, merge 2."""
    from transformers import Qwen2VLImageProcessorPil

    return Qwen2VLImageProcessorPil(patch_size=4, merge_size=2, temporal_patch_size=2, min_pixels=64,
                                    max_pixels=4096)


def tiny_qwen2vl(tokenizer, seed: int = 0, *, vocab_size: int | None = None):
    """A random `Qwen2VLForConditionalGeneration`, 16 wide, one layer per tower (the global RNG is left untouched)."""
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration

    ids = dict(zip(SPECIAL_TOKENS, tokenizer.convert_tokens_to_ids(list(SPECIAL_TOKENS))))
    config = Qwen2VLConfig(
        text_config=dict(vocab_size=vocab_size or len(tokenizer), hidden_size=16, intermediate_size=32,
                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,
                         max_position_embeddings=1024, rope_scaling={"type": "mrope", "mrope_section": [1, 1, 2]},
                         bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"]),
        vision_config=dict(depth=1, embed_dim=16, hidden_size=16, num_heads=2, mlp_ratio=2, patch_size=4,
                           spatial_merge_size=2, temporal_patch_size=2),
        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"])
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2VLForConditionalGeneration(config).eval()
        with torch.no_grad():  # random norms and biases too, so a misplaced tensor changes the outputs
            for p in model.parameters():
                p.add_(0.1 * torch.randn_like(p))
    return model


def save_tiny_hpsv3(folder: str | Path, seed: int = 0) -> Path:
    """A complete random `hpsv3` reward folder (backbone, tokenizer with the reward token, processor, head, prompt
    file with a made-up instruction) at `folder`; `recast.worlds.sd3.rewards.get("hpsv3")` loads it."""
    from safetensors.torch import save_file

    from recast.worlds.sd3.rewards.hpsv3 import HEAD_FILE, PROMPT_FILE, HPSv3Head

    folder = Path(folder)
    tok = qwen2vl_tokenizer()
    tok.add_special_tokens({"additional_special_tokens": ["<|Reward|>"]})
    model = tiny_qwen2vl(tok, seed)
    model.model.save_pretrained(folder)
    tok.save_pretrained(folder)
    tiny_image_processor().save_pretrained(folder)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed + 1)
        save_file(HPSv3Head(16).state_dict(), folder / HEAD_FILE)
    (folder / PROMPT_FILE).write_text(json.dumps({
        "instruction": "score this image for the prompt: {text_prompt}\n", "suffix": "rating: <|Reward|>\nend\n",
        "reward_token": "<|Reward|>", "pixels": TINY_PIXELS}))
    return folder
