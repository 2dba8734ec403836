"""Turn MizzenAI's HPSv3.safetensors into the folder the `hpsv3` reward loads: a transformers `Qwen2VLModel`
(config.json, sharded safetensors), Qwen2-VL's tokenizer with the reward token added, its image processor, the head
`hpsv3_head.safetensors` and `hpsv3_prompt.json` (the authors' instruction and suffix).

    python scripts/convert_hpsv3.py HPSv3.safetensors reward_ckpts/hpsv3 --base QWEN2VL_DIR \\
        --prompt-from HPSv3/hpsv3/dataset/data_collator_qwen.py

SRC is the state dict of the authors' reward model (a Qwen2VLForConditionalGeneration subclass with `rm_head`), read
as plain tensors (.safetensors, or torch.load with weights_only=True; unwrapped from "state_dict" / "model" and
"module."). Its keys come in either of transformers' two Qwen2-VL layouts:

    model.embed_tokens / model.layers.N / model.norm  (before 4.52)  -> language_model.*
    model.language_model.*                             (4.52 on)      -> language_model.*
    visual.* or model.visual.*                                       -> visual.*
    rm_head.{0,3,5}.{weight,bias}                                    -> hpsv3_head.safetensors (layers.*)
    lm_head.weight                                                   dropped (the score never reads the LM head)

--base is a folder with Qwen2-VL-7B-Instruct's config.json, tokenizer and preprocessor files (no weights needed):
the config gives the architecture (its vocabulary size is replaced by the checkpoint's, which counts the added
token), the tokenizer gets "<|Reward|>" as an additional special token (the authors' name for it) with right
padding, and the image processor is copied as is (the reward resizes images itself, to --pixels).

--prompt-from is the authors' Python source that defines the instruction (a "{text_prompt}" template) and the suffix
holding the reward token, read with `ast` as module-level string constants (--instruction-name, --suffix-name;
nothing is imported or run), or a JSON file with "instruction" and "suffix". Their text is not shipped in this
repository: get it from a clone of github.com/MizzenAI/HPSv3 or the `hpsv3` sdist.

Refuses, with one line on stderr and exit status 2, before writing anything: a missing file, a state dict that is not
HPSv3's (naming what is missing), keys it cannot map (named; --ignore PREFIX drops keys deliberately), tensors that do
not fit transformers' Qwen2VLModel built from --base's config, a tokenizer or chat template that cannot carry the
reward token and the image, and an instruction or suffix without its placeholder or token.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from convert_hpsv2 import DTYPES, Refusal, _listing, _shape, check_against_model, fail, load_state_dict  # noqa: E402

REWARD_TOKEN = "<|Reward|>"  # the authors' name for the added token
PIXELS = 256 * 28 * 28  # the authors' min_pixels = max_pixels
HEAD = "rm_head."


def split_state(sd: dict) -> tuple[dict, dict, list[str]]:
    """(backbone tensors under Qwen2VLModel's names, head tensors under `HPSv3Head`'s, dropped keys)."""
    head_keys = [f"{HEAD}{i}.{p}" for i in (0, 3, 5) for p in ("weight", "bias")]
    missing = [k for k in (*head_keys, "model.embed_tokens.weight") if k not in sd] if not any(
        k.startswith("model.language_model.") for k in sd) else [k for k in head_keys if k not in sd]
    if missing or not any(k.startswith(("visual.", "model.visual.")) for k in sd):
        raise Refusal(f"not an HPSv3 state dict: missing {_listing(missing) or 'the visual.* tower'} "
                      f"(it has {_listing(sorted(sd), 4)})")
    backbone, head, dropped, unmapped = {}, {}, [], []
    for k, v in sd.items():
        if k.startswith(HEAD):
            if k not in head_keys:
                unmapped.append(k)
            head["layers." + k[len(HEAD):]] = v
        elif k == "lm_head.weight":
            dropped.append(k)
        elif k.startswith(("visual.", "model.visual.")):
            backbone["visual." + k.split("visual.", 1)[1]] = v
        elif k.startswith("model.language_model."):
            backbone["language_model." + k[len("model.language_model."):]] = v
        elif k.startswith("model."):
            backbone["language_model." + k[len("model."):]] = v
        else:
            unmapped.append(k)
    if unmapped:
        raise Refusal(f"cannot map {_listing(unmapped)}: HPSv3 has no place for them (pass --ignore PREFIX to drop "
                      "them deliberately)")
    w0, w3, w5 = (head[f"layers.{i}.weight"] for i in (0, 3, 5))
    chain = w0.ndim == w3.ndim == w5.ndim == 2 and w3.shape[1] == w0.shape[0] and w5.shape[1] == w3.shape[0]
    if not chain or w5.shape[0] != 2 or any(head[f"layers.{i}.bias"].shape != (w.shape[0],)
                                             for i, w in ((0, w0), (3, w3), (5, w5))):
        raise Refusal(f"rm_head shapes {_shape(w0)}, {_shape(w3)}, {_shape(w5)} are not a Linear chain ending in "
                      "(mu, sigma)")
    return backbone, head, dropped


def read_prompt(path: Path, instruction_name: str, suffix_name: str) -> tuple[str, str]:
    """The instruction and suffix strings of the authors' source (module-level constants) or of a JSON file."""
    if not path.is_file():
        raise Refusal(f"--prompt-from {path}: no such file")
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        try:
            data = json.loads(text)
        except ValueError as e:
            raise Refusal(f"--prompt-from {path}: not JSON ({e})") from None
        found = {k: data.get(k) for k in ("instruction", "suffix")} if isinstance(data, dict) else {}
        names = ("instruction", "suffix")
    else:
        try:
            tree = ast.parse(text, filename=str(path))
        except SyntaxError as e:
            raise Refusal(f"--prompt-from {path}: not Python source ({e.msg}, line {e.lineno})") from None
        found = {}
        for node in tree.body:
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
                for target in node.targets:
                    if isinstance(target, ast.Name) and isinstance(node.value.value, str):
                        found.setdefault(target.id, node.value.value)
        names = (instruction_name, suffix_name)
    missing = [n for n in names if not isinstance(found.get(n), str)]
    if missing:
        raise Refusal(f"--prompt-from {path}: no string constant {' or '.join(missing)} "
                      "(--instruction-name / --suffix-name pick others)")
    instruction, suffix = found[names[0]], found[names[1]]
    if "{text_prompt}" not in instruction:
        raise Refusal(f"--prompt-from {path}: the instruction has no {{text_prompt}} placeholder")
    if suffix.count(REWARD_TOKEN) != 1:
        raise Refusal(f"--prompt-from {path}: the suffix holds {REWARD_TOKEN} {suffix.count(REWARD_TOKEN)} times, "
                      "not once")
    return instruction, suffix


def load_base(base: Path, vocab_rows: int):
    """(config with the checkpoint's vocabulary size, tokenizer with the reward token, image processor)."""
    if not (base / "config.json").is_file():
        raise Refusal(f"--base {base}: no config.json (Qwen2-VL-7B-Instruct's config, tokenizer and processor files)")
    from transformers import AutoConfig, AutoImageProcessor, AutoTokenizer

    config = AutoConfig.from_pretrained(base)
    if config.model_type != "qwen2_vl":
        raise Refusal(f"--base {base}: a {config.model_type!r} config, not Qwen2-VL's")
    try:
        tokenizer, processor = AutoTokenizer.from_pretrained(base), AutoImageProcessor.from_pretrained(base)
    except Exception as e:  # noqa: BLE001 - any loading failure is a refusal naming the folder
        raise Refusal(f"--base {base}: no tokenizer and image processor could be loaded ({type(e).__name__})") from None
    tokenizer.add_special_tokens({"additional_special_tokens": [REWARD_TOKEN]})
    tokenizer.padding_side = "right"
    reward_id = tokenizer.convert_tokens_to_ids(REWARD_TOKEN)
    if len(tokenizer) > vocab_rows or reward_id >= vocab_rows:
        raise Refusal(f"the tokenizer of --base {base} has {len(tokenizer)} tokens with {REWARD_TOKEN}, the "
                      f"checkpoint's embedding {vocab_rows} rows")
    turn = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "x"}]}]
    image_token = tokenizer.convert_ids_to_tokens(config.image_token_id)
    try:
        chat = tokenizer.apply_chat_template(turn, tokenize=False, add_generation_prompt=True)
    except Exception as e:  # noqa: BLE001
        raise Refusal(f"--base {base}: its tokenizer has no usable chat template ({type(e).__name__})") from None
    if chat.count(image_token) != 1:
        raise Refusal(f"--base {base}: its chat template places {chat.count(image_token)} {image_token} tokens for "
                      "one image, not 1")
    vision = config.vision_config
    if (processor.patch_size, processor.merge_size) != (vision.patch_size, vision.spatial_merge_size):
        raise Refusal(f"--base {base}: the image processor's patch/merge sizes {processor.patch_size}/"
                      f"{processor.merge_size} differ from the vision config's {vision.patch_size}/"
                      f"{vision.spatial_merge_size}")
    config.text_config.vocab_size = vocab_rows
    return config, tokenizer, processor


def convert(args) -> None:
    from recast.worlds.sd3.rewards.hpsv3 import HEAD_FILE, PROMPT_FILE

    src, out, base = Path(args.src), Path(args.out), Path(args.base)
    if not src.is_file():
        raise Refusal(f"{src}: no such file")
    if (out / "config.json").exists() and not args.overwrite:
        raise Refusal(f"{out} already holds a model (pass --overwrite to replace it)")
    instruction, suffix = read_prompt(Path(args.prompt_from), args.instruction_name, args.suffix_name)
    sd = load_state_dict(src)
    ignored = sorted(k for k in sd if any(k.startswith(p) for p in args.ignore))
    backbone, head, dropped = split_state({k: v for k, v in sd.items() if k not in ignored})
    embed = backbone.get("language_model.embed_tokens.weight")
    if embed is None or embed.ndim != 2:
        raise Refusal("the checkpoint has no 2-D language-model embedding (model.embed_tokens.weight)")
    config, tokenizer, processor = load_base(base, embed.shape[0])
    if head["layers.0.weight"].shape[1] != config.text_config.hidden_size:
        raise Refusal(f"rm_head reads width {head['layers.0.weight'].shape[1]}, the language model's hidden size "
                      f"is {config.text_config.hidden_size}")
    from transformers import Qwen2VLModel

    check_against_model(Qwen2VLModel, config, backbone)
    dtype = DTYPES[args.dtype]
    with torch.device("meta"):
        model = Qwen2VLModel(config)
    model.load_state_dict({k: v.to(dtype) for k, v in backbone.items()}, strict=True, assign=True)
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    model.config.dtype = args.dtype
    model.save_pretrained(out, max_shard_size=args.max_shard_size)
    tokenizer.save_pretrained(out)
    processor.save_pretrained(out)
    save_file({k: v.float().contiguous() for k, v in head.items()}, out / HEAD_FILE, metadata={"format": "pt"})
    source = Path(args.prompt_from)
    (out / PROMPT_FILE).write_text(json.dumps({
        "instruction": instruction, "suffix": suffix, "reward_token": REWARD_TOKEN, "pixels": args.pixels,
        "source": source.name, "source_sha256": hashlib.sha256(source.read_bytes()).hexdigest()}, indent=1) + "\n")
    print(f"Qwen2-VL: hidden {config.text_config.hidden_size}, {config.text_config.num_hidden_layers} layers, vocab "
          f"{embed.shape[0]}; head {tuple(head['layers.0.weight'].shape)[::-1]} -> 2; reward token id "
          f"{tokenizer.convert_tokens_to_ids(REWARD_TOKEN)}")
    if ignored or dropped:
        print(f"dropped: {_listing([*ignored, *dropped])}")
    print(f"wrote {len(backbone)} backbone tensors ({args.dtype}), the head, the processor and {PROMPT_FILE} to {out}")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="convert_hpsv3", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("src", help="HPSv3.safetensors (or a .pth state dict)")
    p.add_argument("out", help="output folder (e.g. reward_ckpts/hpsv3)")
    p.add_argument("--base", required=True, metavar="DIR", help="Qwen2-VL-7B-Instruct's config/tokenizer/processor")
    p.add_argument("--prompt-from", required=True, metavar="FILE", help="the authors' source (.py) or a JSON file")
    p.add_argument("--instruction-name", default="INSTRUCTION", help="the instruction constant's name in FILE")
    p.add_argument("--suffix-name", default="prompt_with_special_token", help="the suffix constant's name in FILE")
    p.add_argument("--pixels", type=int, default=PIXELS, help="image area the reward resizes to (authors: 200704)")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="bfloat16", help="dtype of the saved backbone")
    p.add_argument("--max-shard-size", default="5GB", help="safetensors shard size")
    p.add_argument("--ignore", action="append", default=[], metavar="PREFIX",
                   help="drop source keys starting with PREFIX (repeatable)")
    p.add_argument("--overwrite", action="store_true", help="replace a model already in OUT")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.pixels < 1:
            raise Refusal(f"--pixels must be >= 1, got {args.pixels}")
        convert(args)
    except Refusal as e:
        return fail("convert_hpsv3", e)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
