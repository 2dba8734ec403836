"""scripts/convert_hpsv2.py and scripts/convert_imagereward.py on tiny random models (nothing downloads).

Each test builds a tiny transformers model, exports its weights under the authors' names (open_clip for HPSv2; BLIP's
timm ViT + med.py BERT + the MLP head for ImageReward: the inverse of the conversion, written here), converts them
back with the script and scores images through the real reward factory. The scores must equal the tiny model's own
and those of a forward pass written here from the source naming's semantics (open_clip's nn.MultiheadAttention blocks
and x @ proj projections, BLIP's fused-qkv ViT), so a mistake made symmetrically in the export and the conversion
cannot pass. Then the refusals: one line on stderr, exit status 2, nothing written.
"""

import argparse
import json
import string
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from helpers import ROOT, load_script

from recast.worlds.sd3 import rewards
from recast.worlds.sd3.rewards._common import processor_pixels
from recast.worlds.sd3.rewards.clip import AestheticMLP
from recast.worlds.sd3.rewards.imagereward import MAX_TOKENS, MEAN, STD
from recast.worlds.sd3.tiny import CLIP_BOS, CLIP_EOS, clip_tokenizer

hps = load_script("convert_hpsv2", "scripts")
irw = load_script("convert_imagereward", "scripts")

IMAGES = torch.rand(3, 3, 40, 48, generator=torch.Generator().manual_seed(0))
PROMPTS = ["a red cat", "two dogs on a bench", "a red cat"]


def _jitter(model, seed):
    """Perturb every parameter (layer norms included), so swapped or misplaced tensors change the outputs."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=g))
    return model.eval()


def _features(out):
    return out if isinstance(out, torch.Tensor) else out.pooler_output


def _refused(capsys, code, *needles):
    """Exit status 2 and one stderr line holding every needle."""
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, (code, err)
    for needle in needles:
        assert needle in err, err
    return err


# ---- HPSv2: open_clip ViT -> transformers CLIPModel ----------------------------------------------------------------

V_WIDTH, V_HEADS, T_WIDTH, T_HEADS, CTX = 64, 4, 64, 4, 16  # head width 16, not open_clip's default 64


def _tiny_clip(vocab):
    from transformers import CLIPConfig, CLIPModel

    torch.manual_seed(0)
    return _jitter(CLIPModel(CLIPConfig(
        text_config=dict(vocab_size=vocab, hidden_size=T_WIDTH, intermediate_size=2 * T_WIDTH, num_hidden_layers=2,
                         num_attention_heads=T_HEADS, max_position_embeddings=CTX, hidden_act="gelu",
                         bos_token_id=CLIP_BOS, eos_token_id=CLIP_EOS, pad_token_id=CLIP_EOS),
        vision_config=dict(image_size=32, patch_size=8, hidden_size=V_WIDTH, intermediate_size=4 * V_WIDTH,
                           num_hidden_layers=2, num_attention_heads=V_HEADS, hidden_act="gelu"),
        projection_dim=16)), 1)


def to_open_clip(model) -> dict:
    """A transformers CLIPModel's weights under open_clip's CLIP names (the inverse of convert_hpsv2)."""
    sd, out = model.state_dict(), {}

    def block(src, dst):
        for a, b in (("layer_norm1", "ln_1"), ("layer_norm2", "ln_2"), ("self_attn.out_proj", "attn.out_proj"),
                     ("mlp.fc1", "mlp.c_fc"), ("mlp.fc2", "mlp.c_proj")):
            for p in ("weight", "bias"):
                out[f"{dst}.{b}.{p}"] = sd[f"{src}.{a}.{p}"]
        for p in ("weight", "bias"):
            out[f"{dst}.attn.in_proj_{p}"] = torch.cat([sd[f"{src}.self_attn.{n}_proj.{p}"] for n in "qkv"])

    v, t = "vision_model", "text_model"
    out["visual.conv1.weight"] = sd[f"{v}.embeddings.patch_embedding.weight"]
    out["visual.class_embedding"] = sd[f"{v}.embeddings.class_embedding"]
    out["visual.positional_embedding"] = sd[f"{v}.embeddings.position_embedding.weight"]
    for a, b in ((f"{v}.pre_layrnorm", "visual.ln_pre"), (f"{v}.post_layernorm", "visual.ln_post"),
                 (f"{t}.final_layer_norm", "ln_final")):
        for p in ("weight", "bias"):
            out[f"{b}.{p}"] = sd[f"{a}.{p}"]
    out["visual.proj"] = sd["visual_projection.weight"].T
    out["token_embedding.weight"] = sd[f"{t}.embeddings.token_embedding.weight"]
    out["positional_embedding"] = sd[f"{t}.embeddings.position_embedding.weight"]
    out["text_projection"] = sd["text_projection.weight"].T
    out["logit_scale"] = sd["logit_scale"]
    out["attn_mask"] = torch.full((CTX, CTX), float("-inf")).triu(1)
    for i in range(model.config.vision_config.num_hidden_layers):
        block(f"{v}.encoder.layers.{i}", f"visual.transformer.resblocks.{i}")
    for i in range(model.config.text_config.num_hidden_layers):
        block(f"{t}.encoder.layers.{i}", f"transformer.resblocks.{i}")
    return {k: x.detach().clone().contiguous() for k, x in out.items()}


def _resblock(x, sd, p, heads, mask=None):
    """open_clip's ResidualAttentionBlock on (seq, batch, width): nn.MultiheadAttention + c_fc/c_proj GELU MLP."""
    w = x.shape[-1]
    y = F.layer_norm(x, (w,), sd[f"{p}.ln_1.weight"], sd[f"{p}.ln_1.bias"])
    y = F.multi_head_attention_forward(y, y, y, w, heads, sd[f"{p}.attn.in_proj_weight"],
                                       sd[f"{p}.attn.in_proj_bias"], None, None, False, 0.0,
                                       sd[f"{p}.attn.out_proj.weight"], sd[f"{p}.attn.out_proj.bias"],
                                       training=False, need_weights=False, attn_mask=mask)[0]
    x = x + y
    y = F.layer_norm(x, (w,), sd[f"{p}.ln_2.weight"], sd[f"{p}.ln_2.bias"])
    y = F.linear(F.gelu(F.linear(y, sd[f"{p}.mlp.c_fc.weight"], sd[f"{p}.mlp.c_fc.bias"])),
                 sd[f"{p}.mlp.c_proj.weight"], sd[f"{p}.mlp.c_proj.bias"])
    return x + y


def open_clip_cosine(sd, pixels, ids):
    """cos(image, text) as open_clip's CLIP.encode_image / encode_text compute it from its own state dict."""
    conv = sd["visual.conv1.weight"]
    x = F.conv2d(pixels, conv, stride=conv.shape[-1]).flatten(2).transpose(1, 2)
    x = torch.cat([sd["visual.class_embedding"].expand(len(x), 1, -1), x], 1) + sd["visual.positional_embedding"]
    x = F.layer_norm(x, (V_WIDTH,), sd["visual.ln_pre.weight"], sd["visual.ln_pre.bias"]).transpose(0, 1)
    for i in range(2):
        x = _resblock(x, sd, f"visual.transformer.resblocks.{i}", V_HEADS)
    img = F.layer_norm(x[0], (V_WIDTH,), sd["visual.ln_post.weight"], sd["visual.ln_post.bias"]) @ sd["visual.proj"]
    ids = F.pad(ids, (0, CTX - ids.shape[1]))  # open_clip pads every prompt to the context length with 0
    x = (sd["token_embedding.weight"][ids] + sd["positional_embedding"]).transpose(0, 1)
    for i in range(2):
        x = _resblock(x, sd, f"transformer.resblocks.{i}", T_HEADS, mask=sd["attn_mask"])
    x = F.layer_norm(x.transpose(0, 1), (T_WIDTH,), sd["ln_final.weight"], sd["ln_final.bias"])
    txt = x[torch.arange(len(ids)), ids.argmax(-1)] @ sd["text_projection"]  # pooled at the end-of-text token
    return (F.normalize(img, dim=-1) * F.normalize(txt, dim=-1)).sum(-1)


@pytest.fixture(scope="module")
def hps_case(tmp_path_factory):
    """A tiny CLIP, its open_clip export (wrapped as HPSv2 ships it), a tokenizer folder and an open_clip config."""
    root, tok = tmp_path_factory.mktemp("hps"), clip_tokenizer()
    model = _tiny_clip(len(tok))
    sd = to_open_clip(model)
    torch.save({"state_dict": {f"module.{k}": v for k, v in sd.items()}, "epoch": 3}, root / "hps.pt")
    tok.save_pretrained(root / "tokenizer")
    config = {"embed_dim": 16, "vision_cfg": {"image_size": 32, "layers": 2, "width": V_WIDTH, "head_width": 16,
                                              "patch_size": 8},
              "text_cfg": {"context_length": CTX, "vocab_size": len(tok), "width": T_WIDTH, "heads": T_HEADS,
                           "layers": 2, "mlp_ratio": 2}}
    (root / "cfg.json").write_text(json.dumps(config))
    return dict(root=root, tok=tok, model=model, sd=sd, config=config)


def _hps_args(case, out, *extra, src=None):
    root = case["root"]
    return [str(src or root / "hps.pt"), str(out), "--processor-from", str(root / "tokenizer"), *extra]


def test_hpsv2_conversion_scores_like_open_clip_and_the_original(hps_case, tmp_path, capsys):
    from transformers import CLIPImageProcessor

    out = tmp_path / "hpsv2"
    assert hps.main(_hps_args(hps_case, out, "--config", str(hps_case["root"] / "cfg.json"))) == 0
    assert "4 heads" in capsys.readouterr().out
    scores = rewards.get("hpsv2")("cpu", weights_dir=out)(IMAGES, PROMPTS)

    processor = CLIPImageProcessor.from_pretrained(out)  # open_clip's eval transform: short side, centre crop
    assert processor.crop_size == {"height": 32, "width": 32} and processor.size == {"shortest_edge": 32}
    assert tuple(processor.image_mean) == hps.OPENAI_MEAN and processor.resample == 3
    pixels = processor_pixels(processor, IMAGES)
    tok = hps_case["tok"](PROMPTS, padding=True, truncation=True, return_tensors="pt")
    model = hps_case["model"]
    with torch.no_grad():
        img = F.normalize(_features(model.get_image_features(pixel_values=pixels)), dim=-1)
        txt = F.normalize(_features(model.get_text_features(**tok)), dim=-1)
        reference = open_clip_cosine(hps_case["sd"], pixels, tok["input_ids"])
    torch.testing.assert_close(scores, (img * txt).sum(-1))
    torch.testing.assert_close(scores, reference)
    assert len(set(scores.tolist())) == 3  # not a constant

    # head counts never show in shapes: --vision-heads/--text-heads give the same model; the default (64) does not
    again = tmp_path / "again"
    assert hps.main(_hps_args(hps_case, again, "--vision-heads", str(V_HEADS), "--text-heads", str(T_HEADS))) == 0
    torch.testing.assert_close(rewards.get("hpsv2")("cpu", weights_dir=again)(IMAGES, PROMPTS), scores)
    guessed = tmp_path / "guessed"
    assert hps.main(_hps_args(hps_case, guessed)) == 0
    assert not torch.allclose(rewards.get("hpsv2")("cpu", weights_dir=guessed)(IMAGES, PROMPTS), scores)


def _hps_variant(case, tmp_path, edit):
    sd = dict(case["sd"])
    edit(sd)
    torch.save(sd, tmp_path / "edited.pt")
    return tmp_path / "edited.pt"


@pytest.mark.parametrize("edit,needles", [
    (lambda sd: sd.pop("visual.conv1.weight"), ["not an open_clip CLIP state dict", "visual.conv1.weight"]),
    (lambda sd: sd.pop("transformer.resblocks.1.ln_2.bias"), ["lacks", "transformer.resblocks.1.ln_2.bias"]),
    (lambda sd: sd.__setitem__("visual.transformer.resblocks.1.mlp.c_fc.weight", torch.zeros(100, V_WIDTH)),
     ["shapes do not match", "visual.transformer.resblocks.1.mlp.c_fc.weight (100, 64) (expected (256, 64))"]),
    (lambda sd: sd.__setitem__("visual.transformer.resblocks.0.ls_1.gamma", torch.ones(V_WIDTH)),
     ["cannot map visual.transformer.resblocks.0.ls_1.gamma", "--ignore"]),
    (lambda sd: sd.__setitem__("visual.positional_embedding", torch.zeros(18, V_WIDTH)),
     ["visual.positional_embedding has shape (18, 64)"]),
])
def test_hpsv2_refuses_what_it_cannot_map(hps_case, tmp_path, capsys, edit, needles):
    out = tmp_path / "out"
    _refused(capsys, hps.main(_hps_args(hps_case, out, src=_hps_variant(hps_case, tmp_path, edit))), *needles)
    assert not out.exists()


def test_hpsv2_refusals_of_files_config_and_processor(hps_case, tmp_path, capsys):
    root, out = hps_case["root"], tmp_path / "out"
    _refused(capsys, hps.main(_hps_args(hps_case, out, src=tmp_path / "nope.pt")), "nope.pt: no such file")
    _refused(capsys, hps.main([str(root / "hps.pt"), str(out)]), "--processor-from")
    transformers_sd = tmp_path / "hf.pt"
    torch.save(hps_case["model"].state_dict(), transformers_sd)
    _refused(capsys, hps.main(_hps_args(hps_case, out, src=transformers_sd)), "not an open_clip",
             "visual.class_embedding")
    torch.save({"state_dict": hps_case["sd"], "args": argparse.Namespace(lr=1e-5)}, tmp_path / "obj.pt")
    _refused(capsys, hps.main(_hps_args(hps_case, out, src=tmp_path / "obj.pt")), "weights_only=True")
    bad = json.loads(json.dumps(hps_case["config"]))
    bad["vision_cfg"]["layers"] = 3
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    _refused(capsys, hps.main(_hps_args(hps_case, out, "--config", str(tmp_path / "bad.json"))),
             "--config disagrees", "vision_cfg.layers=3 but the tensors say 2")
    _refused(capsys, hps.main(_hps_args(hps_case, out, "--vision-heads", "3")),
             "vision width 64 is not divisible into 3")
    assert not out.exists()
    # an explicit --ignore drops keys it names; a filled folder is kept unless --overwrite
    extra = _hps_variant(hps_case, tmp_path, lambda sd: sd.__setitem__("score_head.weight", torch.ones(3)))
    assert hps.main(_hps_args(hps_case, out, "--ignore", "score_head", src=extra)) == 0
    assert "dropped: attn_mask, score_head.weight" in capsys.readouterr().out
    _refused(capsys, hps.main(_hps_args(hps_case, out)), "already holds a model", "--overwrite")
    assert hps.main(_hps_args(hps_case, out, "--overwrite")) == 0


def _meta(*shape):
    return torch.empty(shape, device="meta")


def open_clip_layout(vw=1280, vl=32, patch=14, image=224, tw=1024, tl=24, ctx=77, vocab=49408, embed=1024):
    """Shapes of open_clip's CLIP state dict (ViT-H-14 by default: HPSv2's tower), as meta tensors (no memory)."""
    sd = {"visual.conv1.weight": _meta(vw, 3, patch, patch), "visual.class_embedding": _meta(vw),
          "visual.positional_embedding": _meta((image // patch) ** 2 + 1, vw), "visual.proj": _meta(vw, embed),
          "token_embedding.weight": _meta(vocab, tw), "positional_embedding": _meta(ctx, tw),
          "text_projection": _meta(tw, embed), "logit_scale": _meta()}
    for name, w in (("visual.ln_pre", vw), ("visual.ln_post", vw), ("ln_final", tw)):
        sd |= {f"{name}.weight": _meta(w), f"{name}.bias": _meta(w)}
    for prefix, w, layers in (("visual.transformer", vw, vl), ("transformer", tw, tl)):
        for i in range(layers):
            b = f"{prefix}.resblocks.{i}"
            sd |= {f"{b}.ln_1.weight": _meta(w), f"{b}.ln_1.bias": _meta(w), f"{b}.ln_2.weight": _meta(w),
                   f"{b}.ln_2.bias": _meta(w), f"{b}.attn.in_proj_weight": _meta(3 * w, w),
                   f"{b}.attn.in_proj_bias": _meta(3 * w), f"{b}.attn.out_proj.weight": _meta(w, w),
                   f"{b}.attn.out_proj.bias": _meta(w), f"{b}.mlp.c_fc.weight": _meta(4 * w, w),
                   f"{b}.mlp.c_fc.bias": _meta(4 * w), f"{b}.mlp.c_proj.weight": _meta(w, 4 * w),
                   f"{b}.mlp.c_proj.bias": _meta(w)}
    return sd


def test_hpsv2_maps_a_full_size_vit_h_14_onto_clip_model():
    """At HPSv2's real size (ViT-H-14: 1280 wide, 16 heads of 80; text 1024 wide, 16 heads), shapes only."""
    from transformers import CLIPModel

    sd = open_clip_layout()
    arch = hps.infer_architecture(sd)
    assert (arch["vision_heads"], arch["text_heads"], arch["image_size"], arch["patch_size"]) == (16, 16, 224, 14)
    assert (arch["vision_layers"], arch["text_layers"], arch["context_length"], arch["embed_dim"]) == (32, 24, 77, 1024)
    mapped = hps.apply_plan(sd, hps.plan(arch, sd))
    hps.check_against_model(CLIPModel, hps.build_config(arch), mapped)  # every parameter, right shape
    assert 0.98e9 < sum(t.numel() for t in mapped.values()) < 0.99e9


def imagereward_layout(V=1024, vl=24, patch=16, image=224, H=768, tl=12, vocab=30524, positions=512, E=256):
    """Shapes of ImageReward.pt (BLIP ViT-L/16 at 224 px + BERT-base with cross-attention + MLP head), as meta."""
    p, t = "blip.visual_encoder", "blip.text_encoder"
    sd = {f"{p}.cls_token": _meta(1, 1, V), f"{p}.pos_embed": _meta(1, (image // patch) ** 2 + 1, V),
          f"{p}.patch_embed.proj.weight": _meta(V, 3, patch, patch), f"{p}.patch_embed.proj.bias": _meta(V),
          f"{p}.norm.weight": _meta(V), f"{p}.norm.bias": _meta(V),
          f"{t}.embeddings.word_embeddings.weight": _meta(vocab, H),
          f"{t}.embeddings.position_embeddings.weight": _meta(positions, H),
          f"{t}.embeddings.LayerNorm.weight": _meta(H), f"{t}.embeddings.LayerNorm.bias": _meta(H),
          "blip.vision_proj.weight": _meta(E, V), "blip.vision_proj.bias": _meta(E),
          "blip.text_proj.weight": _meta(E, H), "blip.text_proj.bias": _meta(E)}

    def lin(name, o, i):
        return {f"{name}.weight": _meta(o, i), f"{name}.bias": _meta(o)}

    def norm(name, w):
        return {f"{name}.weight": _meta(w), f"{name}.bias": _meta(w)}

    for i in range(vl):
        b = f"{p}.blocks.{i}"
        sd |= {**norm(f"{b}.norm1", V), **norm(f"{b}.norm2", V), **lin(f"{b}.attn.qkv", 3 * V, V),
               **lin(f"{b}.attn.proj", V, V), **lin(f"{b}.mlp.fc1", 4 * V, V), **lin(f"{b}.mlp.fc2", V, 4 * V)}
    for i in range(tl):
        b = f"{t}.encoder.layer.{i}"
        for att, kv in (("attention", H), ("crossattention", V)):
            sd |= {**lin(f"{b}.{att}.self.query", H, H), **lin(f"{b}.{att}.self.key", H, kv),
                   **lin(f"{b}.{att}.self.value", H, kv), **lin(f"{b}.{att}.output.dense", H, H),
                   **norm(f"{b}.{att}.output.LayerNorm", H)}
        sd |= {**lin(f"{b}.intermediate.dense", 4 * H, H), **lin(f"{b}.output.dense", H, 4 * H),
               **norm(f"{b}.output.LayerNorm", H)}
    for j, (o, i) in zip((0, 2, 4, 6, 7), ((1024, H), (128, 1024), (64, 128), (16, 64), (1, 16))):
        sd |= lin(f"mlp.layers.{j}", o, i)
    return sd


def test_imagereward_maps_a_full_size_blip_onto_blip_for_image_text_retrieval():
    """At ImageReward's real size (ViT-L/16, 16 heads; BERT-base, 12 heads; head 768 -> 1), shapes only."""
    from transformers import BlipForImageTextRetrieval

    sd = imagereward_layout()
    arch = irw.infer_architecture(sd)
    assert (arch["vision_heads"], arch["text_heads"], arch["image_size"], arch["embed_dim"]) == (16, 12, 224, 256)
    steps, absent = irw.plan(arch, sd)
    mapped = irw.apply_plan(sd, steps + irw.head_plan(768))
    head = {k: mapped.pop(k) for k in [k for k in mapped if k.startswith("layers.")]}
    assert absent == ["itm_head"] and len(head) == 10
    mapped |= {"itm_head.weight": _meta(2, 768), "itm_head.bias": _meta(2)}
    irw.check_against_model(BlipForImageTextRetrieval, irw.build_config(arch), mapped)


@pytest.mark.slow  # an interpreter importing torch
def test_convert_script_exits_2_from_the_command_line(tmp_path):
    """convert_imagereward.py run as a script (it imports convert_hpsv2.py's plumbing from its own folder)."""
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "convert_imagereward.py"), str(tmp_path / "no.pt"),
                          str(tmp_path / "out")], capture_output=True, text=True, timeout=120)
    assert run.returncode == 2, run.stderr
    assert run.stderr.strip().splitlines() == [f"convert_imagereward: error: {tmp_path / 'no.pt'}: no such file"]


# ---- ImageReward: BLIP (timm ViT + med.py BERT) + MLP head -> BlipForImageTextRetrieval + imagereward_mlp ----------

IV_WIDTH, IV_HEADS, IT_WIDTH, IT_HEADS = 48, 3, 32, 2  # not multiples of 64: the heads come from the arguments
HEADS_ARGS = ("--vision-heads", str(IV_HEADS), "--text-heads", str(IT_HEADS))
VIT_NAMES = (("embeddings.class_embedding", "cls_token"), ("embeddings.position_embedding", "pos_embed"),
             ("embeddings.patch_embedding", "patch_embed.proj"), ("post_layernorm", "norm"),
             ("encoder.layers.", "blocks."), ("layer_norm1", "norm1"), ("layer_norm2", "norm2"),
             ("self_attn.qkv", "attn.qkv"), ("self_attn.projection", "attn.proj"))


def _bert_tokenizer(folder):
    """A character-level BERT WordPiece tokenizer with BLIP's extra [DEC] / [ENC] tokens."""
    from transformers import BertTokenizer

    chars = string.ascii_lowercase + string.digits
    folder.mkdir()
    (folder / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *chars,
                                                 *("##" + c for c in chars), ".", ","]) + "\n")
    tok = BertTokenizer(str(folder / "vocab.txt"))
    tok.add_special_tokens({"bos_token": "[DEC]", "additional_special_tokens": ["[ENC]"]})
    tok.save_pretrained(folder)
    return tok


def _tiny_blip(vocab):
    from transformers import BlipConfig, BlipForImageTextRetrieval

    torch.manual_seed(0)
    return _jitter(BlipForImageTextRetrieval(BlipConfig(
        text_config=dict(vocab_size=vocab, hidden_size=IT_WIDTH, intermediate_size=2 * IT_WIDTH, num_hidden_layers=2,
                         num_attention_heads=IT_HEADS, max_position_embeddings=40, hidden_act="gelu",
                         layer_norm_eps=1e-12),
        vision_config=dict(image_size=32, patch_size=8, hidden_size=IV_WIDTH, intermediate_size=4 * IV_WIDTH,
                           num_hidden_layers=2, num_attention_heads=IV_HEADS, layer_norm_eps=1e-6),
        projection_dim=8, image_text_hidden_size=8)), 2)


def to_imagereward(blip, head) -> dict:
    """ImageReward's state dict: BLIP_Pretrain's names under "blip." (no ITM head) and the head under "mlp."."""
    out = {}
    for k, v in blip.state_dict().items():
        if k.startswith("vision_model."):
            name = k[len("vision_model."):]
            for a, b in VIT_NAMES:
                name = name.replace(a, b)
            out[f"blip.visual_encoder.{name}"] = v
        elif k.startswith(("text_encoder.", "vision_proj.", "text_proj.")):
            out[f"blip.{k}"] = v
    out["blip.text_encoder.embeddings.position_ids"] = torch.arange(40)[None]  # a persistent buffer in med.py
    out.update({f"mlp.{k}": v for k, v in head.state_dict().items()})
    return {k: v.detach().clone().contiguous() for k, v in out.items()}


def blip_vit(sd, pixels):
    """BLIP's VisionTransformer (models/vit.py: timm blocks, fused qkv, LayerNorm eps 1e-6) from its own names."""
    p, C = "blip.visual_encoder", IV_WIDTH

    def norm(x, name):
        return F.layer_norm(x, (C,), sd[f"{name}.weight"], sd[f"{name}.bias"], eps=1e-6)

    def lin(x, name):
        return F.linear(x, sd[f"{name}.weight"], sd[f"{name}.bias"])

    w = sd[f"{p}.patch_embed.proj.weight"]
    x = F.conv2d(pixels, w, sd[f"{p}.patch_embed.proj.bias"], stride=w.shape[-1]).flatten(2).transpose(1, 2)
    x = torch.cat([sd[f"{p}.cls_token"].expand(len(x), -1, -1), x], 1)
    x = x + sd[f"{p}.pos_embed"][:, :x.shape[1]]
    for i in range(2):
        b = f"{p}.blocks.{i}"
        B, N, _ = x.shape
        qkv = lin(norm(x, f"{b}.norm1"), f"{b}.attn.qkv").reshape(B, N, 3, IV_HEADS, C // IV_HEADS)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        attn = ((q @ k.transpose(-2, -1)) * (C // IV_HEADS) ** -0.5).softmax(-1)
        x = x + lin((attn @ v).transpose(1, 2).reshape(B, N, C), f"{b}.attn.proj")
        x = x + lin(F.gelu(lin(norm(x, f"{b}.norm2"), f"{b}.mlp.fc1")), f"{b}.mlp.fc2")
    return norm(x, f"{p}.norm")


@pytest.fixture(scope="module")
def ir_case(tmp_path_factory):
    root = tmp_path_factory.mktemp("imagereward")
    tok = _bert_tokenizer(root / "tokenizer")
    blip = _tiny_blip(len(tok))
    torch.manual_seed(3)
    head = _jitter(AestheticMLP(IT_WIDTH), 4)
    sd = to_imagereward(blip, head)
    torch.save(sd, root / "ImageReward.pt")
    return dict(root=root, tok=tok, blip=blip, head=head, sd=sd)


def _ir_args(case, out, *extra, src=None):
    root = case["root"]
    return [str(src or root / "ImageReward.pt"), str(out), "--processor-from", str(root / "tokenizer"), *HEADS_ARGS,
            *extra]


def _ir_variant(case, tmp_path, edit):
    sd = dict(case["sd"])
    edit(sd)
    torch.save(sd, tmp_path / "edited.pt")
    return tmp_path / "edited.pt"


def test_imagereward_conversion_scores_like_blip_and_the_original(ir_case, tmp_path, capsys):
    from transformers import AutoImageProcessor, BlipForImageTextRetrieval

    out = tmp_path / "imagereward"
    assert irw.main(_ir_args(ir_case, out)) == 0
    assert "written as zeros (the reward does not use them): itm_head" in capsys.readouterr().out
    scores = rewards.get("imagereward")("cpu", weights_dir=out)(IMAGES, PROMPTS)

    processor = AutoImageProcessor.from_pretrained(out)  # ImageReward's transform: short side, centre crop
    assert processor.crop_size == {"height": 32, "width": 32} and processor.size == {"shortest_edge": 32}
    pixels = processor_pixels(processor, IMAGES)
    tok = ir_case["tok"](PROMPTS, padding="max_length", truncation=True, max_length=MAX_TOKENS, return_tensors="pt")
    blip, head = ir_case["blip"], ir_case["head"]

    def score(image_embeds):
        text = blip.text_encoder(input_ids=tok["input_ids"], attention_mask=tok["attention_mask"],
                                 encoder_hidden_states=image_embeds,
                                 encoder_attention_mask=torch.ones(image_embeds.shape[:-1], dtype=torch.long))
        return (head(text.last_hidden_state[:, 0])[:, 0] - MEAN) / STD

    with torch.no_grad():
        original = score(blip.vision_model(pixel_values=pixels).last_hidden_state)
        reference = score(blip_vit(ir_case["sd"], pixels))
    torch.testing.assert_close(scores, original)
    torch.testing.assert_close(scores, reference)
    assert len(set(scores.tolist())) == 3  # not a constant

    converted = BlipForImageTextRetrieval.from_pretrained(out)
    assert converted.config.vision_config.layer_norm_eps == 1e-6
    assert converted.config.text_config.layer_norm_eps == 1e-12
    assert not converted.itm_head.weight.any() and torch.equal(converted.vision_proj.weight, blip.vision_proj.weight)


@pytest.mark.parametrize("edit,needles", [
    (lambda sd: sd.pop("blip.visual_encoder.cls_token"), ["not an ImageReward state dict",
                                                          "blip.visual_encoder.cls_token"]),
    (lambda sd: sd.pop("mlp.layers.7.bias"), ["lacks mlp.layers.7.bias"]),
    (lambda sd: sd.__setitem__("blip.text_encoder_m.embeddings.word_embeddings.weight", torch.zeros(3, 3)),
     ["cannot map blip.text_encoder_m.embeddings.word_embeddings.weight", "--ignore"]),
    (lambda sd: sd.__setitem__("blip.text_encoder.embeddings.token_type_embeddings.weight", torch.zeros(2, IT_WIDTH)),
     ["cannot map blip.text_encoder.embeddings.token_type_embeddings.weight"]),
    (lambda sd: sd.__setitem__("blip.text_encoder.encoder.layer.1.crossattention.self.key.weight",
                               torch.zeros(IT_WIDTH, 40)),
     ["shapes do not match", "crossattention.self.key.weight (32, 40) (expected (32, 48))"]),
    (lambda sd: sd.__setitem__("mlp.layers.2.weight", torch.zeros(64, 1024)),
     ["mlp.layers.2.weight (64, 1024) (expected (128, 1024))"]),
    (lambda sd: sd.__setitem__("std", torch.tensor(2.0)), ["standardises with std=1.03"]),
    (lambda sd: sd.__setitem__("blip.text_encoder.embeddings.position_ids", torch.arange(40).flip(0)[None]),
     ["position_ids is not 0..39"]),
])
def test_imagereward_refuses_what_it_cannot_map(ir_case, tmp_path, capsys, edit, needles):
    out = tmp_path / "out"
    _refused(capsys, irw.main(_ir_args(ir_case, out, src=_ir_variant(ir_case, tmp_path, edit))), *needles)
    assert not out.exists()


def test_imagereward_refusals_of_files_heads_and_processor(ir_case, tmp_path, capsys):
    root, out = ir_case["root"], tmp_path / "out"
    _refused(capsys, irw.main(_ir_args(ir_case, out, src=tmp_path / "nope.pt")), "nope.pt: no such file")
    _refused(capsys, irw.main([str(root / "ImageReward.pt"), str(out)]), "--processor-from")
    _refused(capsys, irw.main([str(root / "ImageReward.pt"), str(out), "--processor-from", str(root / "tokenizer")]),
             "vision width 48 is not divisible into 0 heads", "pass --vision-heads")
    torch.save(to_open_clip(_tiny_clip(40)), tmp_path / "clip.pt")
    _refused(capsys, irw.main(_ir_args(ir_case, out, src=tmp_path / "clip.pt")), "not an ImageReward state dict")
    assert not out.exists()
    # BLIP pre-training leftovers go only when named; ImageReward's own mean/std constants are accepted
    def edit(sd):
        sd.update({"blip.text_encoder_m.x": torch.ones(1), "mean": torch.tensor(MEAN), "std": torch.tensor(STD)})

    assert irw.main(_ir_args(ir_case, out, "--ignore", "blip.text_encoder_m.",
                             src=_ir_variant(ir_case, tmp_path, edit))) == 0
    assert "dropped: blip.text_encoder.embeddings.position_ids, blip.text_encoder_m.x, mean, std" in \
        capsys.readouterr().out
    _refused(capsys, irw.main(_ir_args(ir_case, out)), "already holds a model")
