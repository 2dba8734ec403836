"""Tokenizer and text encoder for the digit world's prompt grammar.

The digit world conditions its SD3 transformer exactly as SD3 does, only smaller: a CLIP text tower
(`transformers.CLIPTextModelWithProjection`, built from a small `CLIPTextConfig`) gives per-token states
`encoder_hidden_states` (B, L, D) = `last_hidden_state` and a pooled vector `pooled_projections` (B, P) =
`text_embeds`. The tokenizer is a `tokenizers` word-level model over the grammar's closed vocabulary, wrapped
in `transformers.PreTrainedTokenizerFast`; it is built offline from a word list, so nothing downloads.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
from transformers import CLIPTextConfig, CLIPTextModelWithProjection, PreTrainedTokenizerFast

PAD, UNK, BOS, EOS = "[PAD]", "[UNK]", "[BOS]", "[EOS]"
SPECIAL_TOKENS = (PAD, UNK, BOS, EOS)  # ids 0..3; EOS != 2 so CLIP pools at the first EOS, not at argmax(id)


@dataclass(frozen=True)
class TextEncoderConfig:
    """Size of the digit world's CLIP text tower."""

    hidden_size: int = 64  # D: width of encoder_hidden_states (= the transformer's joint_attention_dim)
    projection_dim: int = 64  # P: width of pooled_projections (= the transformer's pooled_projection_dim)
    num_layers: int = 2  # transformer layers in the text tower
    num_heads: int = 4  # attention heads per layer
    intermediate_size: int = 128  # MLP width
    max_length: int = 12  # L: tokens per prompt incl. BOS/EOS; prompts are padded to exactly this length


def build_tokenizer(vocab: Sequence[str], max_length: int = 12) -> PreTrainedTokenizerFast:
    """Word-level tokenizer over a closed vocabulary.

    Args:
        vocab: the grammar's words (lower case, whitespace-free). Order fixes the ids: word i gets id 4 + i.
        max_length: every prompt is padded (or truncated) to this many tokens, BOS and EOS included.

    Returns:
        A fast tokenizer; `tok(prompts, padding="max_length", return_tensors="pt")` gives `input_ids` (B, L).
        Unknown words map to `[UNK]`, so a typo degrades the conditioning instead of raising.
    """
    words = [w.lower() for w in vocab]
    if len(set(words)) != len(words) or any(w in SPECIAL_TOKENS or not w or " " in w for w in words):
        raise ValueError("vocab must be distinct, non-empty, whitespace-free words other than the special tokens")
    ids = {tok: i for i, tok in enumerate([*SPECIAL_TOKENS, *words])}
    core = Tokenizer(models.WordLevel(vocab=ids, unk_token=UNK))
    core.normalizer = normalizers.Lowercase()
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    core.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A {EOS}", special_tokens=[(BOS, ids[BOS]), (EOS, ids[EOS])]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token=PAD,
        unk_token=UNK,
        bos_token=BOS,
        eos_token=EOS,
        model_max_length=max_length,
        padding_side="right",
    )


def build_text_encoder(
    vocab_size: int, config: TextEncoderConfig = TextEncoderConfig(), seed: int = 0
) -> CLIPTextModelWithProjection:
    """A randomly initialised CLIP text tower (deterministic in `seed`).

    Args:
        vocab_size: number of token ids, i.e. `len(tokenizer)`.
        config: sizes.
        seed: initialisation seed (the global RNG state is restored afterwards).
    """
    clip_config = CLIPTextConfig(
        vocab_size=vocab_size,
        hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size,
        projection_dim=config.projection_dim,
        num_hidden_layers=config.num_layers,
        num_attention_heads=config.num_heads,
        max_position_embeddings=config.max_length,
        pad_token_id=SPECIAL_TOKENS.index(PAD),
        bos_token_id=SPECIAL_TOKENS.index(BOS),
        eos_token_id=SPECIAL_TOKENS.index(EOS),
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return CLIPTextModelWithProjection(clip_config).eval()


def encode_text(
    tokenizer: PreTrainedTokenizerFast, text_encoder: CLIPTextModelWithProjection, prompts: Sequence[str]
) -> tuple[torch.Tensor, torch.Tensor]:
    """SD3-style conditioning for a list of prompts.

    Returns:
        (encoder_hidden_states (B, L, D), pooled_projections (B, P)), on the text encoder's device. Gradients flow
        when the caller has them enabled (the text encoder is trained jointly during pretraining).
    """
    device = text_encoder.device
    batch = tokenizer(
        list(prompts),
        padding="max_length",
        truncation=True,
        max_length=tokenizer.model_max_length,
        return_tensors="pt",
    )
    out = text_encoder(input_ids=batch["input_ids"].to(device), attention_mask=batch["attention_mask"].to(device))
    return out.last_hidden_state, out.text_embeds
