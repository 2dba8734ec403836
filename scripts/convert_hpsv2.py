"""Convert the HPS v2 / v2.1 open_clip checkpoint into the transformers `CLIPModel` folder the `hpsv2` reward loads.

    python scripts/convert_hpsv2.py HPS_v2.1_compressed.pt reward_ckpts/hpsv2 --processor-from DIR
    python scripts/convert_hpsv2.py SRC.pt OUT_DIR --processor-from DIR --config ViT-H-14.json

SRC is the open_clip state dict the HPSv2 authors publish (xswu/HPSv2 on the Hugging Face hub, HPS_v2.1_compressed.pt:
a fine-tuned open_clip ViT-H-14). It is read as plain tensors (torch.load with weights_only=True, or a .safetensors
file), unwrapped from a "state_dict" / "model" entry and a "module." prefix if present; open_clip is not needed.

Every tensor is mapped by name, none is guessed: the fused attention `in_proj_weight/bias` is split into q/k/v, the
projections `visual.proj` and `text_projection` ((width, embed), used as x @ proj) become the bias-free Linear weights
`visual_projection.weight` / `text_projection.weight` (their transposes), `c_fc/c_proj` become `fc1/fc2`, `ln_1/ln_2`
become `layer_norm1/2`, `ln_pre/ln_post/ln_final` become `pre_layrnorm/post_layernorm/final_layer_norm`, and the
causal `attn_mask` buffer is dropped (transformers builds its own). Widths, depths, patch and image size, context length
and vocabulary come from tensor shapes. The head count does not show in any shape: it comes from --config (an open_clip
model config, e.g. open_clip's model_configs/ViT-H-14.json: head_width 80, so 16 heads of the 1280-wide vision tower)
or --vision-heads/--text-heads; by default the vision tower uses open_clip's head width for its known widths (80 for
ViT-H's 1280, 88 for ViT-g's 1408, 104 for ViT-bigG's 1664) and 64 otherwise, the text tower 64.

OUT_DIR receives config.json and model.safetensors (what `save_pretrained` writes), the tokenizer of --processor-from
(open_clip's BPE is OpenAI CLIP's: laion/CLIP-ViT-H-14-laion2B-s32B-b79K's tokenizer files serve) and an image
processor equal to open_clip's evaluation transform (bicubic resize of the short side, centre crop, OpenAI CLIP mean
and std), written together as a `CLIPProcessor`. The activation is GELU (open_clip ViT-H-14); pass --quick-gelu for
OpenAI-pretrained towers (or set "quick_gelu": true in --config).

Refuses, with one line on stderr and exit status 2, before writing anything: a missing file, an empty, truncated or
corrupt .safetensors file, a state dict that is not open_clip's (naming what is missing), a tensor whose shape does
not fit the architecture, a --config that is not a UTF-8 JSON object or disagrees with the shapes, and tensors it
cannot map (open_clip variants transformers' CLIP has no place for: layer scale, attentional pooling, patch norm,
projection biases...). --ignore PREFIX drops keys deliberately. OUT_DIR must be new or empty (with --overwrite: a
folder a conversion wrote, which is replaced whole); a file, a link or a folder of other files there, or a place that
cannot be written, is refused before the conversion. The folder is written beside OUT_DIR and renamed into place, so
a failed conversion leaves nothing behind.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable
from pathlib import Path

import torch

OPENAI_MEAN = (0.48145466, 0.4578275, 0.40821073)  # open_clip's OPENAI_DATASET_MEAN / STD (HPSv2 uses these)
OPENAI_STD = (0.26862954, 0.26130258, 0.27577711)
VISION_HEAD_WIDTH = {1280: 80, 1408: 88, 1664: 104}  # open_clip's ViT-H-14, ViT-g-14, ViT-bigG-14; others use 64
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
WEIGHTS = "model.safetensors"


class Refusal(Exception):
    """A reason not to convert, printed as one line."""


def _shape(t) -> tuple:
    return tuple(t.shape)


def load_state_dict(path: Path) -> dict[str, torch.Tensor]:
    """The tensors of a checkpoint, unwrapped from "state_dict" / "model" entries and a "module." prefix."""
    if not path.is_file():
        raise Refusal(f"{path}: no such file")
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        from recast.io import check_safetensors

        try:
            check_safetensors(path)  # empty, random or truncated bytes: one line naming the file
            obj = load_file(path)
        except Exception as e:  # noqa: BLE001 - safetensors' own errors (SafetensorError) are refusals too
            raise Refusal(f"{path}: not a readable .safetensors file ({' '.join(str(e).split())[:200]})") from None
    else:
        try:
            obj = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as e:  # noqa: BLE001 - any unpickling failure is a refusal
            first = str(e).strip().splitlines()[0] if str(e).strip() else ""
            raise Refusal(f"{path}: cannot be read as tensors with torch.load(weights_only=True): "
                          f"{type(e).__name__}: {first}") from None
    while isinstance(obj, dict) and not all(isinstance(v, torch.Tensor) for v in obj.values()):
        inner = next((obj[k] for k in ("state_dict", "model") if isinstance(obj.get(k), dict)), None)
        if inner is None:
            break
        obj = inner
    if not isinstance(obj, dict) or not obj or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        what = f"a dict with keys {sorted(obj)[:8]}" if isinstance(obj, dict) else type(obj).__name__
        raise Refusal(f"{path}: not a state dict of tensors (found {what})")
    if all(k.startswith("module.") for k in obj):
        obj = {k[len("module."):]: v for k, v in obj.items()}
    return dict(obj)


def _listing(keys, limit: int = 6) -> str:
    keys = sorted(keys)
    more = f" ... ({len(keys)} in all)" if len(keys) > limit else ""
    return ", ".join(keys[:limit]) + more


def _layers(sd: dict, prefix: str) -> int:
    """Number of blocks `prefix.N.*` (0..N-1 must all be there)."""
    heads = [k[len(prefix):].split(".")[0] for k in sd if k.startswith(prefix)]
    idx = {int(h) for h in heads if h.isdigit()}
    if not idx:
        return 0
    missing = sorted(set(range(max(idx) + 1)) - idx)
    if missing:
        raise Refusal(f"blocks {prefix}{missing} are missing (found up to {prefix}{max(idx)})")
    return max(idx) + 1


# A plan entry: source key, the shape it must have, and the (target key, transform) pairs it becomes.
Plan = list[tuple[str, tuple, list[tuple[str, Callable]]]]


def _same(t):
    return t


def _transpose(t):
    return t.t()


def _block_plan(src: str, dst: str, width: int, mlp: int) -> Plan:
    """An open_clip ResidualAttentionBlock -> a transformers CLIPEncoderLayer."""
    W = width
    plan: Plan = []
    for a, b in (("ln_1", "layer_norm1"), ("ln_2", "layer_norm2")):
        plan += [(f"{src}.{a}.{p}", (W,), [(f"{dst}.{b}.{p}", _same)]) for p in ("weight", "bias")]
    for p, shape in (("weight", (3 * W, W)), ("bias", (3 * W,))):  # nn.MultiheadAttention's fused q, k, v rows
        plan.append((f"{src}.attn.in_proj_{p}", shape,
                     [(f"{dst}.self_attn.{n}_proj.{p}", lambda t, i=i: t[i * W:(i + 1) * W])
                      for i, n in enumerate("qkv")]))
    plan += [(f"{src}.attn.out_proj.weight", (W, W), [(f"{dst}.self_attn.out_proj.weight", _same)]),
             (f"{src}.attn.out_proj.bias", (W,), [(f"{dst}.self_attn.out_proj.bias", _same)]),
             (f"{src}.mlp.c_fc.weight", (mlp, W), [(f"{dst}.mlp.fc1.weight", _same)]),
             (f"{src}.mlp.c_fc.bias", (mlp,), [(f"{dst}.mlp.fc1.bias", _same)]),
             (f"{src}.mlp.c_proj.weight", (W, mlp), [(f"{dst}.mlp.fc2.weight", _same)]),
             (f"{src}.mlp.c_proj.bias", (W,), [(f"{dst}.mlp.fc2.bias", _same)])]
    return plan


ANCHORS = ("visual.conv1.weight", "visual.class_embedding", "visual.positional_embedding", "visual.proj",
           "visual.transformer.resblocks.0.attn.in_proj_weight", "visual.transformer.resblocks.0.mlp.c_fc.weight",
           "token_embedding.weight", "positional_embedding", "transformer.resblocks.0.attn.in_proj_weight",
           "transformer.resblocks.0.mlp.c_fc.weight", "ln_final.weight", "text_projection", "logit_scale")


def infer_architecture(sd: dict, config: dict | None = None, vision_heads: int | None = None,
                       text_heads: int | None = None) -> dict:
    """Sizes of both towers from tensor shapes; head counts from `config` / the arguments / the defaults."""
    missing = [k for k in ANCHORS if k not in sd and not (k == "text_projection" and "text_projection.weight" in sd)]
    if missing:
        raise Refusal(f"not an open_clip CLIP state dict: missing {_listing(missing)} "
                      f"(it has {_listing(sd, 4)})")
    conv = sd["visual.conv1.weight"]
    if conv.ndim != 4 or conv.shape[1] != 3 or conv.shape[2] != conv.shape[3]:
        raise Refusal(f"visual.conv1.weight has shape {_shape(conv)}; expected (width, 3, patch, patch) "
                      "(open_clip's input_patchnorm and non-square patches are not supported)")
    vw, patch = conv.shape[0], conv.shape[2]
    tokens = sd["visual.positional_embedding"].shape[0] - 1
    grid = math.isqrt(max(tokens, 0))
    if sd["visual.positional_embedding"].ndim != 2 or grid * grid != tokens or tokens == 0:
        raise Refusal(f"visual.positional_embedding has shape {_shape(sd['visual.positional_embedding'])}; "
                      "expected (grid*grid + 1, width) of a square patch grid")
    proj = sd["visual.proj"]
    text_proj = sd.get("text_projection", sd.get("text_projection.weight"))
    if proj.ndim != 2 or text_proj.ndim != 2:
        raise Refusal(f"visual.proj {_shape(proj)} and text_projection {_shape(text_proj)} must be matrices")
    embed = proj.shape[1]
    tok = sd["token_embedding.weight"]
    arch = dict(
        vision_width=vw, patch_size=patch, image_size=grid * patch,
        vision_layers=_layers(sd, "visual.transformer.resblocks."),
        vision_mlp=sd["visual.transformer.resblocks.0.mlp.c_fc.weight"].shape[0],
        text_width=tok.shape[1], vocab_size=tok.shape[0], context_length=sd["positional_embedding"].shape[0],
        text_layers=_layers(sd, "transformer.resblocks."),
        text_mlp=sd["transformer.resblocks.0.mlp.c_fc.weight"].shape[0], embed_dim=embed,
        quick_gelu=False)
    heads_v = vision_heads if vision_heads is not None else vw // VISION_HEAD_WIDTH.get(vw, 64)
    heads_t = text_heads if text_heads is not None else arch["text_width"] // 64
    if config is not None:
        vc, tc = config.get("vision_cfg", {}), config.get("text_cfg", {})
        unsupported = [f"vision_cfg.{k}" for k in ("timm_model_name", "attentional_pool", "global_average_pool",
                                                   "input_patchnorm", "ls_init_value") if vc.get(k)]
        unsupported += [f"text_cfg.{k}" for k in ("hf_model_name", "ls_init_value", "embed_cls") if tc.get(k)]
        if unsupported or isinstance(vc.get("layers"), (list, tuple)):
            raise Refusal(f"--config uses open_clip features transformers' CLIPModel lacks: "
                          f"{', '.join(unsupported) or 'a ResNet vision tower'}")
        checks = {"embed_dim": (config.get("embed_dim"), embed), "vision_cfg.width": (vc.get("width"), vw),
                  "vision_cfg.layers": (vc.get("layers"), arch["vision_layers"]),
                  "vision_cfg.patch_size": (vc.get("patch_size"), patch),
                  "vision_cfg.image_size": (vc.get("image_size"), arch["image_size"]),
                  "text_cfg.width": (tc.get("width"), arch["text_width"]),
                  "text_cfg.layers": (tc.get("layers"), arch["text_layers"]),
                  "text_cfg.context_length": (tc.get("context_length"), arch["context_length"]),
                  "text_cfg.vocab_size": (tc.get("vocab_size"), arch["vocab_size"])}
        if vc.get("mlp_ratio") is not None:
            checks["vision_cfg.mlp_ratio"] = (vc["mlp_ratio"], arch["vision_mlp"] / vw)
        if tc.get("mlp_ratio") is not None:
            checks["text_cfg.mlp_ratio"] = (tc["mlp_ratio"], arch["text_mlp"] / arch["text_width"])
        bad = [f"{k}={want} but the tensors say {got}" for k, (want, got) in checks.items()
               if want is not None and want != got]
        if bad:
            raise Refusal(f"--config disagrees with the checkpoint: {'; '.join(bad)}")
        if vision_heads is None:
            heads_v = vw // vc.get("head_width", 64)
        if text_heads is None and tc.get("heads"):
            heads_t = tc["heads"]
        arch["quick_gelu"] = bool(config.get("quick_gelu", False))
    for name, width, heads in (("vision", vw, heads_v), ("text", arch["text_width"], heads_t)):
        if heads < 1 or width % heads:
            raise Refusal(f"{name} width {width} is not divisible into {heads} heads (the default head width is 64; "
                          f"fix --config or pass --{name}-heads)")
    arch.update(vision_heads=heads_v, text_heads=heads_t)
    return arch


def plan(arch: dict, sd: dict) -> Plan:
    """Every source key the architecture needs, its expected shape, and where it goes."""
    vw, tw, e = arch["vision_width"], arch["text_width"], arch["embed_dim"]
    out: Plan = [
        ("visual.conv1.weight", (vw, 3, arch["patch_size"], arch["patch_size"]),
         [("vision_model.embeddings.patch_embedding.weight", _same)]),
        ("visual.class_embedding", (vw,), [("vision_model.embeddings.class_embedding", _same)]),
        ("visual.positional_embedding", ((arch["image_size"] // arch["patch_size"]) ** 2 + 1, vw),
         [("vision_model.embeddings.position_embedding.weight", _same)]),
        ("visual.proj", (vw, e), [("visual_projection.weight", _transpose)]),
        ("token_embedding.weight", (arch["vocab_size"], tw), [("text_model.embeddings.token_embedding.weight", _same)]),
        ("positional_embedding", (arch["context_length"], tw),
         [("text_model.embeddings.position_embedding.weight", _same)]),
        ("logit_scale", (), [("logit_scale", lambda t: t.reshape(()))]),
    ]
    for src, dst, w in (("visual.ln_pre", "vision_model.pre_layrnorm", vw),
                        ("visual.ln_post", "vision_model.post_layernorm", vw),
                        ("ln_final", "text_model.final_layer_norm", tw)):
        out += [(f"{src}.{p}", (w,), [(f"{dst}.{p}", _same)]) for p in ("weight", "bias")]
    if "text_projection.weight" in sd:  # newer open_clip: an nn.Linear (out, in), already transformers' layout
        out.append(("text_projection.weight", (e, tw), [("text_projection.weight", _same)]))
    else:
        out.append(("text_projection", (tw, e), [("text_projection.weight", _transpose)]))
    for i in range(arch["vision_layers"]):
        out += _block_plan(f"visual.transformer.resblocks.{i}", f"vision_model.encoder.layers.{i}", vw,
                           arch["vision_mlp"])
    for i in range(arch["text_layers"]):
        out += _block_plan(f"transformer.resblocks.{i}", f"text_model.encoder.layers.{i}", tw, arch["text_mlp"])
    return out


def apply_plan(sd: dict, steps: Plan, dropped=frozenset()) -> dict[str, torch.Tensor]:
    """Mapped tensors; refuses on missing, misshapen or unmapped source keys (`dropped`: keys known to be unused)."""
    missing = [k for k, _, _ in steps if k not in sd]
    if missing:
        raise Refusal(f"the checkpoint lacks {_listing(missing)}")
    bad = [f"{k} {_shape(sd[k])} (expected {shape})" for k, shape, _ in steps if _shape(sd[k]) != tuple(shape)]
    if bad:
        raise Refusal(f"shapes do not match the architecture: {_listing(bad, 4)}")
    used = {k for k, _, _ in steps}
    extra = [k for k in sd if k not in used and k not in dropped]
    if extra:
        raise Refusal(f"cannot map {_listing(extra)}: transformers has no place for them "
                      "(pass --ignore PREFIX to drop them deliberately)")
    return {dst: fn(sd[src]) for src, _, targets in steps for dst, fn in targets}


def check_against_model(model_cls, config, mapped: dict) -> None:
    """The mapped tensors are exactly the parameters of `model_cls(config)` (built on the meta device: no memory)."""
    with torch.device("meta"):
        model = model_cls(config)
    want = {k: _shape(v) for k, v in model.state_dict().items()}
    got = {k: _shape(v) for k, v in mapped.items()}
    missing, extra = sorted(set(want) - set(got)), sorted(set(got) - set(want))
    bad = [f"{k} {got[k]} vs {want[k]}" for k in set(want) & set(got) if got[k] != want[k]]
    if missing or extra or bad:
        raise Refusal(f"the mapped tensors do not fit transformers' {model_cls.__name__} (this transformers version "
                      f"names them differently?): missing {_listing(missing, 3) or '-'}; unexpected "
                      f"{_listing(extra, 3) or '-'}; shapes {_listing(bad, 3) or '-'}")


def save_weights(out: Path, config, mapped: dict, dtype: torch.dtype) -> None:
    """config.json + model.safetensors, the files `save_pretrained` writes for a single-shard model."""
    from safetensors.torch import save_file

    config.dtype = str(dtype).removeprefix("torch.")
    config.save_pretrained(out)
    save_file({k: v.detach().to(dtype, copy=True).contiguous() for k, v in mapped.items()}, out / WEIGHTS,
              metadata={"format": "pt"})


def load_tokenizer(folder: Path | None, what: str):
    if folder is None:
        raise Refusal(f"the reward needs tokenizer files next to the weights, and the checkpoint has none: pass "
                      f"--processor-from DIR, a folder holding {what}")
    if not folder.is_dir():
        raise Refusal(f"--processor-from {folder}: no such folder")
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(folder)
    except Exception as e:  # noqa: BLE001
        raise Refusal(f"--processor-from {folder}: no tokenizer could be loaded ({type(e).__name__})") from None


def build_config(arch: dict, logit_scale_init_value: float = 2.6592, **token_ids):
    """The transformers `CLIPConfig` of an inferred architecture (open_clip's LayerNorm eps is torch's 1e-5)."""
    from transformers import CLIPConfig

    act = "quick_gelu" if arch["quick_gelu"] else "gelu"
    return CLIPConfig(
        text_config=dict(vocab_size=arch["vocab_size"], hidden_size=arch["text_width"],
                         intermediate_size=arch["text_mlp"], num_hidden_layers=arch["text_layers"],
                         num_attention_heads=arch["text_heads"], max_position_embeddings=arch["context_length"],
                         hidden_act=act, layer_norm_eps=1e-5, projection_dim=arch["embed_dim"], **token_ids),
        vision_config=dict(hidden_size=arch["vision_width"], intermediate_size=arch["vision_mlp"],
                           num_hidden_layers=arch["vision_layers"], num_attention_heads=arch["vision_heads"],
                           image_size=arch["image_size"], patch_size=arch["patch_size"], hidden_act=act,
                           layer_norm_eps=1e-5, projection_dim=arch["embed_dim"]),
        projection_dim=arch["embed_dim"], logit_scale_init_value=logit_scale_init_value)


def read_config(path: str) -> dict:
    """An open_clip model config: a UTF-8 JSON object, unwrapped from a "model_cfg" entry (pretrained-config files
    nest it), whose vision_cfg and text_cfg are objects."""
    p = Path(path)
    if not p.is_file():
        raise Refusal(f"--config {path}: no such file")
    try:
        config = json.loads(p.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as e:
        raise Refusal(f"--config {path}: not a UTF-8 text file ({e.reason} at byte {e.start})") from None
    except (json.JSONDecodeError, RecursionError) as e:
        raise Refusal(f"--config {path}: not JSON ({e})") from None
    config = config.get("model_cfg", config) if isinstance(config, dict) else config
    if not isinstance(config, dict):
        raise Refusal(f"--config {path}: expected a JSON object (an open_clip model config), got a "
                      f"{type(config).__name__}")
    for key in ("vision_cfg", "text_cfg"):
        if not isinstance(config.get(key, {}), dict):
            raise Refusal(f"--config {path}: {key} must be an object, got {type(config[key]).__name__}")
    return config


# what a conversion writes into OUT_DIR: a folder holding only these may be replaced with --overwrite
OUTPUT_FILES = {"config.json", WEIGHTS, "preprocessor_config.json", "processor_config.json", "tokenizer.json",
                "tokenizer_config.json", "special_tokens_map.json", "vocab.json", "vocab.txt", "merges.txt",
                "added_tokens.json", "imagereward_mlp.safetensors", "chat_template.json", "chat_template.jinja"}


def check_out(out: Path, overwrite: bool) -> None:
    """Refuse, before any conversion, an OUT_DIR the result cannot go to: a file, a link, a folder holding files no
    conversion writes (or a model, without --overwrite), or a place that cannot be written."""
    if out.is_symlink():
        raise Refusal(f"{out} is a symbolic link; the converted model is never written through one: choose a new "
                      "folder")
    if out.exists() and not out.is_dir():
        raise Refusal(f"{out} is a file, not a folder; choose a new or empty folder")
    if out.is_dir():
        names = sorted(p.name for p in out.iterdir())
        others = [n for n in names if n not in OUTPUT_FILES]
        if others:
            raise Refusal(f"{out} holds files a conversion does not write ({', '.join(others[:3])}"
                          f"{', ...' if len(others) > 3 else ''}); choose a new or empty folder")
        if names and not overwrite:
            raise Refusal(f"{out} already holds a model (pass --overwrite to replace it)")
    parent = out.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    try:  # the result is written beside OUT_DIR and renamed into place: that folder must take a new entry
        import tempfile

        Path(tempfile.mkdtemp(prefix=f".{out.name}-probe-", dir=parent)).rmdir()
    except OSError as e:
        raise Refusal(f"{out}: cannot write in {parent} ({e.strerror or e})") from None


def write_out(out: Path, write: Callable[[Path], None]) -> None:
    """`write(folder)` into a fresh folder beside `out`, renamed into place (`recast.io.atomic_dir`)."""
    from recast.io import atomic_dir

    atomic_dir(out, write)


def positive_int(text: str) -> int:
    """An argparse type: an integer >= 1 (a head count of 0 is refused, not read as "not given")."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {value}")
    return value


def fail(prog: str, e: Exception) -> int:
    print(f"{prog}: error: {' '.join(str(e).split())}", file=sys.stderr)
    return 2


def convert(args) -> None:
    src, out = Path(args.src), Path(args.out)
    config = read_config(args.config) if args.config is not None else None
    if not src.is_file():
        raise Refusal(f"{src}: no such file")
    if args.processor_from is None:
        load_tokenizer(None, "a CLIP tokenizer (e.g. laion/CLIP-ViT-H-14-laion2B-s32B-b79K's tokenizer files)")
    check_out(out, args.overwrite)
    sd = load_state_dict(src)
    ignored = sorted(k for k in sd if any(k.startswith(p) for p in args.ignore))
    sd = {k: v for k, v in sd.items() if k not in ignored}
    if "text.token_embedding.weight" in sd:  # open_clip's CustomTextCLIP keeps the text tower under "text."
        sd = {k[len("text."):] if k.startswith("text.") else k: v for k, v in sd.items()}
    dropped = {"attn_mask"} & set(sd)  # the causal mask buffer of old open_clip; transformers builds its own
    arch = infer_architecture(sd, config, args.vision_heads, args.text_heads)
    if args.quick_gelu:
        arch["quick_gelu"] = True
    mapped = apply_plan(sd, plan(arch, sd), dropped)
    tokenizer = load_tokenizer(Path(args.processor_from), "a CLIP tokenizer")
    if len(tokenizer) > arch["vocab_size"]:
        raise Refusal(f"the tokenizer of {args.processor_from} has {len(tokenizer)} tokens, the checkpoint's "
                      f"embedding only {arch['vocab_size']}")
    if tokenizer.eos_token_id is None:
        raise Refusal(f"the tokenizer of {args.processor_from} has no end-of-text token (CLIP pools there)")
    if tokenizer.model_max_length > arch["context_length"]:
        tokenizer.model_max_length = arch["context_length"]  # open_clip truncates to its context length too

    from transformers import CLIPImageProcessor, CLIPModel, CLIPProcessor

    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    clip_config = build_config(arch, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                               pad_token_id=pad, logit_scale_init_value=float(sd["logit_scale"].float()))
    act = clip_config.vision_config.hidden_act
    check_against_model(CLIPModel, clip_config, mapped)
    size = arch["image_size"]
    image_processor = CLIPImageProcessor(size={"shortest_edge": size}, crop_size={"height": size, "width": size},
                                         resample=3, do_center_crop=True, do_resize=True, do_rescale=True,
                                         do_normalize=True, image_mean=list(OPENAI_MEAN), image_std=list(OPENAI_STD),
                                         do_convert_rgb=True)
    processor = CLIPProcessor(image_processor=image_processor, tokenizer=tokenizer)

    def write(folder: Path) -> None:
        save_weights(folder, clip_config, mapped, DTYPES[args.dtype])
        processor.save_pretrained(folder)

    write_out(out, write)
    print(f"vision: width {arch['vision_width']}, {arch['vision_layers']} layers, {arch['vision_heads']} heads, "
          f"patch {arch['patch_size']}, image {size}; text: width {arch['text_width']}, {arch['text_layers']} layers, "
          f"{arch['text_heads']} heads, context {arch['context_length']}, vocab {arch['vocab_size']}; "
          f"embed {arch['embed_dim']}; {act}")
    if ignored or dropped:
        print(f"dropped: {_listing([*ignored, *dropped])}")
    print(f"wrote {len(mapped)} tensors ({args.dtype}) and the processor to {out}")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="convert_hpsv2", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("src", help="the open_clip checkpoint (.pt / .bin / .safetensors)")
    p.add_argument("out", help="output folder (e.g. reward_ckpts/hpsv2)")
    p.add_argument("--processor-from", metavar="DIR", help="folder with CLIP tokenizer files (required)")
    p.add_argument("--config", metavar="JSON", help="open_clip model config (e.g. ViT-H-14.json): head widths")
    p.add_argument("--vision-heads", type=positive_int, help="attention heads of the vision tower (overrides --config)")
    p.add_argument("--text-heads", type=positive_int, help="attention heads of the text tower (overrides --config)")
    p.add_argument("--quick-gelu", action="store_true", help="QuickGELU activations (OpenAI-pretrained towers)")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="float32", help="dtype of the saved weights")
    p.add_argument("--ignore", action="append", default=[], metavar="PREFIX",
                   help="drop source keys starting with PREFIX (repeatable)")
    p.add_argument("--overwrite", action="store_true", help="replace a model a conversion wrote in OUT_DIR")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        convert(args)
    except Refusal as e:
        return fail("convert_hpsv2", e)
    except OSError as e:  # a disk that fills, a folder that vanishes mid-write: one line, nothing left half-written
        return fail("convert_hpsv2", Refusal(f"cannot write {args.out}: {e.strerror or e}"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
