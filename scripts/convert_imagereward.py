"""Split THUDM's ImageReward.pt into the folder the `imagereward` reward loads: a transformers
`BlipForImageTextRetrieval` (config.json, model.safetensors, processor files) plus `imagereward_mlp.safetensors`.

    python scripts/convert_imagereward.py ImageReward.pt reward_ckpts/imagereward --processor-from DIR

SRC is the state dict of ImageReward's `ImageReward` module (THUDM/ImageReward on the Hugging Face hub), read as plain
tensors (torch.load with weights_only=True, or .safetensors; unwrapped from "state_dict" / "model" and "module."):

    blip.visual_encoder.*   BLIP's timm-style ViT (ViT-L/16 at 224 px)  -> vision_model.*
    blip.text_encoder.*     BLIP's BERT with cross-attention (med.py)   -> text_encoder.* (same names)
    blip.vision_proj/text_proj (and itm_head if present)                -> vision_proj / text_proj / itm_head
    mlp.layers.*            the reward head                             -> imagereward_mlp.safetensors (layers.*)

The ViT names follow transformers' own BLIP conversion: cls_token -> embeddings.class_embedding, pos_embed ->
embeddings.position_embedding, patch_embed.proj -> embeddings.patch_embedding, blocks.N -> encoder.layers.N with
norm1/norm2 -> layer_norm1/2, attn.qkv -> self_attn.qkv (the same fused q, k, v layout), attn.proj ->
self_attn.projection, mlp.fc1/fc2 unchanged, and norm -> post_layernorm. BLIP's ViT uses LayerNorm eps 1e-6 and its
BERT 1e-12, which the config records. The text encoder's `embeddings.position_ids` buffer is checked to be 0..n-1 and
dropped. ImageReward's score uses neither the projections nor an ITM head; a head the checkpoint lacks is written as
zeros (and reported), so the folder loads without random weights. Optional `mean` / `std` entries must equal the
constants the reward standardises with.

Sizes come from tensor shapes; head counts do not show in any shape: by default width / 64 (16 heads for BLIP's
1024-wide ViT-L, 12 for its 768-wide BERT), else --vision-heads / --text-heads. The image processor is written to
match ImageReward's own transform (bicubic resize of the short side to the ViT's image size, centre crop, OpenAI CLIP
mean and std); the tokenizer comes from --processor-from, a folder with BLIP's BERT tokenizer (bert-base-uncased
vocabulary, e.g. the tokenizer files of Salesforce/blip-itm-large-coco).

Refuses, with one line on stderr and exit status 2, before writing anything: a missing file, an empty, truncated or
corrupt .safetensors file, a state dict that is not ImageReward's (naming what is missing), a tensor whose shape does
not fit, keys it cannot map (named; --ignore PREFIX drops keys deliberately), and an OUT_DIR that is a file, a link, a
folder of other files (or of a model, without --overwrite) or cannot be written. Shares the checkpoint plumbing and
the all-or-nothing folder write of scripts/convert_hpsv2.py.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from convert_hpsv2 import (DTYPES, OPENAI_MEAN, OPENAI_STD, Plan, Refusal, _layers,  # noqa: E402
                           _listing, _same, _shape, apply_plan, check_against_model, check_out, fail,
                           load_state_dict, load_tokenizer, positive_int, save_weights, write_out)

HEAD_FILE = "imagereward_mlp.safetensors"
VIT, BERT = "blip.visual_encoder", "blip.text_encoder"
ANCHORS = (f"{VIT}.cls_token", f"{VIT}.pos_embed", f"{VIT}.patch_embed.proj.weight", f"{VIT}.blocks.0.attn.qkv.weight",
           f"{VIT}.blocks.0.mlp.fc1.weight", f"{BERT}.embeddings.word_embeddings.weight",
           f"{BERT}.embeddings.position_embeddings.weight", f"{BERT}.encoder.layer.0.intermediate.dense.weight",
           f"{BERT}.encoder.layer.0.crossattention.self.key.weight", "mlp.layers.0.weight")
OPTIONAL_HEADS = ("vision_proj", "text_proj", "itm_head")  # in BlipForImageTextRetrieval, unused by the reward


def infer_architecture(sd: dict, vision_heads: int | None = None, text_heads: int | None = None) -> dict:
    missing = [k for k in ANCHORS if k not in sd]
    if missing:
        raise Refusal(f"not an ImageReward state dict: missing {_listing(missing)} (it has {_listing(sd, 4)})")
    patch = sd[f"{VIT}.patch_embed.proj.weight"]
    if patch.ndim != 4 or patch.shape[1] != 3 or patch.shape[2] != patch.shape[3]:
        raise Refusal(f"{VIT}.patch_embed.proj.weight has shape {_shape(patch)}; expected (width, 3, patch, patch)")
    pos = sd[f"{VIT}.pos_embed"]
    grid = int(round((pos.shape[-2] - 1) ** 0.5)) if pos.ndim == 3 else 0
    if pos.ndim != 3 or grid < 1 or grid * grid + 1 != pos.shape[1]:
        raise Refusal(f"{VIT}.pos_embed has shape {_shape(pos)}; expected (1, grid*grid + 1, width)")
    words = sd[f"{BERT}.embeddings.word_embeddings.weight"]
    arch = dict(vision_width=patch.shape[0], patch_size=patch.shape[2], image_size=grid * patch.shape[2],
                vision_layers=_layers(sd, f"{VIT}.blocks."), vision_mlp=sd[f"{VIT}.blocks.0.mlp.fc1.weight"].shape[0],
                vocab_size=words.shape[0], text_width=words.shape[1],
                max_positions=sd[f"{BERT}.embeddings.position_embeddings.weight"].shape[0],
                text_layers=_layers(sd, f"{BERT}.encoder.layer."),
                text_mlp=sd[f"{BERT}.encoder.layer.0.intermediate.dense.weight"].shape[0],
                embed_dim=next((sd[f"blip.{h}.weight"].shape[0] for h in ("vision_proj", "text_proj")
                                if f"blip.{h}.weight" in sd), 256))
    arch["vision_heads"] = vision_heads if vision_heads is not None else arch["vision_width"] // 64
    arch["text_heads"] = text_heads if text_heads is not None else arch["text_width"] // 64
    for name in ("vision", "text"):
        width, heads = arch[f"{name}_width"], arch[f"{name}_heads"]
        if heads < 1 or width % heads:
            raise Refusal(f"{name} width {width} is not divisible into {heads} heads (the default head width is 64; "
                          f"pass --{name}-heads)")
    return arch


def _pairs(src: str, dst: str, shapes: dict) -> Plan:
    return [(f"{src}.{p}", shape, [(f"{dst}.{p}", _same)]) for p, shape in shapes.items()]


def _linear(src: str, dst: str, out: int, inp: int) -> Plan:
    return _pairs(src, dst, {"weight": (out, inp), "bias": (out,)})


def _norm(src: str, dst: str, width: int) -> Plan:
    return _pairs(src, dst, {"weight": (width,), "bias": (width,)})


def plan(arch: dict, sd: dict) -> tuple[Plan, list[str]]:
    """Source keys -> BlipForImageTextRetrieval keys, and the optional heads absent from `sd` (zero-filled)."""
    V, H, E, M, I = (arch[k] for k in ("vision_width", "text_width", "embed_dim", "vision_mlp", "text_mlp"))
    p, g = arch["patch_size"], arch["image_size"] // arch["patch_size"]
    out: Plan = [
        (f"{VIT}.cls_token", (1, 1, V), [("vision_model.embeddings.class_embedding", _same)]),
        (f"{VIT}.pos_embed", (1, g * g + 1, V), [("vision_model.embeddings.position_embedding", _same)]),
        *_pairs(f"{VIT}.patch_embed.proj", "vision_model.embeddings.patch_embedding",
                {"weight": (V, 3, p, p), "bias": (V,)}),
        *_norm(f"{VIT}.norm", "vision_model.post_layernorm", V),
    ]
    for i in range(arch["vision_layers"]):
        s, d = f"{VIT}.blocks.{i}", f"vision_model.encoder.layers.{i}"
        out += [*_norm(f"{s}.norm1", f"{d}.layer_norm1", V), *_linear(f"{s}.attn.qkv", f"{d}.self_attn.qkv", 3 * V, V),
                *_linear(f"{s}.attn.proj", f"{d}.self_attn.projection", V, V),
                *_norm(f"{s}.norm2", f"{d}.layer_norm2", V), *_linear(f"{s}.mlp.fc1", f"{d}.mlp.fc1", M, V),
                *_linear(f"{s}.mlp.fc2", f"{d}.mlp.fc2", V, M)]
    out += [(f"{BERT}.embeddings.word_embeddings.weight", (arch["vocab_size"], H),
             [("text_encoder.embeddings.word_embeddings.weight", _same)]),
            (f"{BERT}.embeddings.position_embeddings.weight", (arch["max_positions"], H),
             [("text_encoder.embeddings.position_embeddings.weight", _same)]),
            *_norm(f"{BERT}.embeddings.LayerNorm", "text_encoder.embeddings.LayerNorm", H)]
    for i in range(arch["text_layers"]):
        s, d = f"{BERT}.encoder.layer.{i}", f"text_encoder.encoder.layer.{i}"
        for att, kv in (("attention", H), ("crossattention", V)):  # cross-attention keys/values read the ViT tokens
            out += [*_linear(f"{s}.{att}.self.query", f"{d}.{att}.self.query", H, H),
                    *_linear(f"{s}.{att}.self.key", f"{d}.{att}.self.key", H, kv),
                    *_linear(f"{s}.{att}.self.value", f"{d}.{att}.self.value", H, kv),
                    *_linear(f"{s}.{att}.output.dense", f"{d}.{att}.output.dense", H, H),
                    *_norm(f"{s}.{att}.output.LayerNorm", f"{d}.{att}.output.LayerNorm", H)]
        out += [*_linear(f"{s}.intermediate.dense", f"{d}.intermediate.dense", I, H),
                *_linear(f"{s}.output.dense", f"{d}.output.dense", H, I),
                *_norm(f"{s}.output.LayerNorm", f"{d}.output.LayerNorm", H)]
    absent = []
    for name, (o, n) in zip(OPTIONAL_HEADS, ((E, V), (E, H), (2, H))):
        if f"blip.{name}.weight" in sd or f"blip.{name}.bias" in sd:
            out += _linear(f"blip.{name}", name, o, n)
        else:
            absent.append(name)
    return out, absent


def build_config(arch: dict, **token_ids):
    """The transformers `BlipConfig`: BLIP's ViT uses LayerNorm eps 1e-6, its BERT 1e-12; both exact GELU."""
    from transformers import BlipConfig

    V, H, E = arch["vision_width"], arch["text_width"], arch["embed_dim"]
    return BlipConfig(
        text_config=dict(vocab_size=arch["vocab_size"], hidden_size=H, intermediate_size=arch["text_mlp"],
                         num_hidden_layers=arch["text_layers"], num_attention_heads=arch["text_heads"],
                         max_position_embeddings=arch["max_positions"], encoder_hidden_size=V, hidden_act="gelu",
                         layer_norm_eps=1e-12, **token_ids),
        vision_config=dict(hidden_size=V, intermediate_size=arch["vision_mlp"], num_hidden_layers=arch["vision_layers"],
                           num_attention_heads=arch["vision_heads"], image_size=arch["image_size"],
                           patch_size=arch["patch_size"], hidden_act="gelu", layer_norm_eps=1e-6),
        projection_dim=E, image_text_hidden_size=E)


def head_plan(dim: int) -> Plan:
    """mlp.layers.* -> the reward's head (`AestheticMLP(dim)`, whose names are ImageReward's MLP's)."""
    from recast.worlds.sd3.rewards.clip import AestheticMLP

    return [(f"mlp.{k}", _shape(v), [(k, _same)]) for k, v in AestheticMLP(dim).state_dict().items()]


def check_extras(sd: dict, arch: dict) -> set[str]:
    """Keys known to carry nothing the folder needs, after checking that they say what the reward assumes."""
    from recast.worlds.sd3.rewards.imagereward import MEAN, STD

    known = set()
    key = f"{BERT}.embeddings.position_ids"
    if key in sd:
        ids = sd[key]
        if ids.numel() != arch["max_positions"] or not torch.equal(ids.reshape(-1).long(),
                                                                    torch.arange(arch["max_positions"])):
            raise Refusal(f"{key} is not 0..{arch['max_positions'] - 1}; transformers' BLIP assumes it is")
        known.add(key)
    for name, value in (("mean", MEAN), ("std", STD)):
        if name in sd:
            got = sd[name]
            if got.numel() != 1 or abs(float(got.double()) - value) > 1e-6 * abs(value):
                raise Refusal(f"the checkpoint's {name} is {got.flatten()[:3].tolist()}, but the imagereward reward "
                              f"standardises with {name}={value}")
            known.add(name)
    return known


def convert(args) -> None:
    src, out = Path(args.src), Path(args.out)
    if not src.is_file():
        raise Refusal(f"{src}: no such file")
    if args.processor_from is None:
        load_tokenizer(None, "BLIP's BERT tokenizer (e.g. Salesforce/blip-itm-large-coco's tokenizer files)")
    check_out(out, args.overwrite)
    sd = load_state_dict(src)
    ignored = sorted(k for k in sd if any(k.startswith(p) for p in args.ignore))
    sd = {k: v for k, v in sd.items() if k not in ignored}
    arch = infer_architecture(sd, args.vision_heads, args.text_heads)
    known = check_extras(sd, arch)
    blip_steps, absent = plan(arch, sd)
    head_steps = head_plan(arch["text_width"])
    # one pass over every key, so nothing goes unaccounted for; then split into the model and the head
    mapped = apply_plan(sd, blip_steps + head_steps, known)
    head = {dst: mapped.pop(dst) for _, _, targets in head_steps for dst, _ in targets}
    tokenizer = load_tokenizer(Path(args.processor_from), "BLIP's BERT tokenizer")
    if len(tokenizer) > arch["vocab_size"]:
        raise Refusal(f"the tokenizer of {args.processor_from} has {len(tokenizer)} tokens, the checkpoint's "
                      f"embedding only {arch['vocab_size']}")

    from transformers import BlipForImageTextRetrieval, CLIPImageProcessor

    V, H, E = arch["vision_width"], arch["text_width"], arch["embed_dim"]
    zeros = {"vision_proj": (E, V), "text_proj": (E, H), "itm_head": (2, H)}
    for name in absent:
        mapped[f"{name}.weight"], mapped[f"{name}.bias"] = torch.zeros(zeros[name]), torch.zeros(zeros[name][0])
    config = build_config(arch, pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0,
                          sep_token_id=tokenizer.sep_token_id, bos_token_id=tokenizer.bos_token_id)
    check_against_model(BlipForImageTextRetrieval, config, mapped)
    size = arch["image_size"]
    image_processor = CLIPImageProcessor(size={"shortest_edge": size}, crop_size={"height": size, "width": size},
                                         resample=3, do_center_crop=True, do_resize=True, do_rescale=True,
                                         do_normalize=True, image_mean=list(OPENAI_MEAN), image_std=list(OPENAI_STD),
                                         do_convert_rgb=True)
    from safetensors.torch import save_file

    def write(folder: Path) -> None:
        save_weights(folder, config, mapped, DTYPES[args.dtype])
        save_file({k: v.float().contiguous() for k, v in head.items()}, folder / HEAD_FILE, metadata={"format": "pt"})
        image_processor.save_pretrained(folder)
        tokenizer.save_pretrained(folder)

    write_out(out, write)
    print(f"vision: width {V}, {arch['vision_layers']} layers, {arch['vision_heads']} heads, patch "
          f"{arch['patch_size']}, image {size}; text: width {H}, {arch['text_layers']} layers, {arch['text_heads']} "
          f"heads, {arch['max_positions']} positions, vocab {arch['vocab_size']}; projections {E}")
    if ignored or known:
        print(f"dropped: {_listing([*ignored, *known])}")
    if absent:
        print(f"not in the checkpoint, written as zeros (the reward does not use them): {', '.join(absent)}")
    print(f"wrote {len(mapped)} tensors ({args.dtype}), {HEAD_FILE} and the processor files to {out}")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="convert_imagereward", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("src", help="ImageReward.pt (or a .safetensors of the same tensors)")
    p.add_argument("out", help="output folder (e.g. reward_ckpts/imagereward)")
    p.add_argument("--processor-from", metavar="DIR", help="folder with BLIP's BERT tokenizer files (required)")
    p.add_argument("--vision-heads", type=positive_int, help="attention heads of the ViT (default width / 64)")
    p.add_argument("--text-heads", type=positive_int, help="attention heads of the BERT (default width / 64)")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="float32",
                   help="dtype of the BLIP weights (the head stays float32)")
    p.add_argument("--ignore", action="append", default=[], metavar="PREFIX",
                   help="drop source keys starting with PREFIX (repeatable)")
    p.add_argument("--overwrite", action="store_true", help="replace a model a conversion wrote in OUT_DIR")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        convert(args)
    except Refusal as e:
        return fail("convert_imagereward", e)
    except OSError as e:  # a disk that fills, a folder that vanishes mid-write: one line, nothing left half-written
        return fail("convert_imagereward", Refusal(f"cannot write {args.out}: {e.strerror or e}"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
