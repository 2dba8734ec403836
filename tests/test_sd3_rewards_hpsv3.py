"""HPSv3: scripts/convert_hpsv3.py and the `hpsv3` reward on a tiny random Qwen2-VL (nothing downloads).

A tiny `Qwen2VLForConditionalGeneration` is exported under the authors' names (the pre-4.52 layout: model.*, visual.*,
lm_head, rm_head.{0,3,5}), converted back by the script with a made-up instruction file, and scored through the
reward factory. The reference is transformers' own multimodal forward of the original model (its own image-token
merge) with the positions the authors' code gives, a chat turn written out by hand here, and the head applied as
plain matrix products: a mistake made symmetrically in the export and the conversion cannot pass.
"""

import json
import math

import pytest
import torch
import torch.nn.functional as F
from helpers import load_script

from recast.worlds.sd3 import rewards
from recast.worlds.sd3.rewards.hpsv3 import HEAD_FILE, PROMPT_FILE, smart_resize
from recast.worlds.sd3.vlm_tiny import qwen2vl_tokenizer, save_tiny_hpsv3, tiny_image_processor, tiny_qwen2vl

conv = load_script("convert_hpsv3", "scripts")

IMAGES = torch.rand(3, 3, 40, 48, generator=torch.Generator().manual_seed(0))
PROMPTS = ["a red cat", "two dogs on a bench", "a red cat"]
INSTRUCTION = "Judge the picture for this caption.\nCaption: {text_prompt}\n"
SUFFIX = "\nOverall: <|Reward|>\nDONE\n"
SOURCE = f'"""a stand-in for the authors\' collator"""\nimport os\nINSTRUCTION = {INSTRUCTION!r}\n' \
         f"prompt_with_special_token = {SUFFIX!r}\nOTHER = 3\n"


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    """(the original model, its rm_head tensors, the exported checkpoint, the --base folder, the source file)."""
    from safetensors.torch import save_file

    root = tmp_path_factory.mktemp("hpsv3")
    tok = qwen2vl_tokenizer()
    base = root / "qwen2vl"
    tok.save_pretrained(base)
    tiny_image_processor().save_pretrained(base)
    vocab = len(tok) + 1  # the authors resize the embedding to the tokenizer with <|Reward|> added
    model = tiny_qwen2vl(tok, seed=3, vocab_size=vocab)
    model.config.save_pretrained(base)
    g = torch.Generator().manual_seed(5)
    head = {f"rm_head.{i}.{p}": 0.5 * torch.randn(shape, generator=g) for i, (o, n) in
            {0: (24, 16), 3: (16, 24), 5: (2, 16)}.items() for p, shape in (("weight", (o, n)), ("bias", (o,)))}
    old = {}  # transformers < 4.52's names, as the published file has them
    for k, v in model.state_dict().items():
        if k.startswith("model.language_model."):
            old["model." + k[len("model.language_model."):]] = v.clone()
        elif k.startswith("model.visual."):
            old[k[len("model."):]] = v.clone()
        else:
            old[k] = v.clone()
    assert "lm_head.weight" in old and "model.embed_tokens.weight" in old and "visual.merger.mlp.0.weight" in old
    ckpt = root / "HPSv3.safetensors"
    save_file({**old, **head}, ckpt)
    source = root / "data_collator_qwen.py"
    source.write_text(SOURCE)
    return model, head, ckpt, base, source


def _convert(case, out, *extra, ckpt=None, source=None):
    _, _, ck, base, src = case
    return conv.main([str(ckpt or ck), str(out), "--base", str(base), "--prompt-from", str(source or src),
                      "--pixels", "256", "--dtype", "float32", *extra])


def _reference(model, head, tok, images, prompts, pixels=256, positions="plain"):
    """The authors' score written out: PIL bicubic to transformers' smart resize, their chat turn spelled by hand,
    transformers' Qwen2VLModel forward (its own image merge), the hidden state at <|Reward|>, the head as matmuls."""
    from PIL import Image
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize as hf_resize

    processor, out = tiny_image_processor(), []
    for image, prompt in zip(images, prompts):
        h, w = hf_resize(image.shape[1], image.shape[2], factor=8, min_pixels=pixels, max_pixels=pixels)
        arr = (image.permute(1, 2, 0).numpy() * 255).round().astype("uint8")
        pix = processor(images=[Image.fromarray(arr).resize((w, h), Image.BICUBIC)], return_tensors="pt")
        n = int(pix["image_grid_thw"].prod()) // 4
        text = ("<|im_start|>user\n<|vision_start|>" + "<|image_pad|>" * n + "<|vision_end|>"
                + INSTRUCTION.format(text_prompt=prompt) + SUFFIX + "<|im_end|>\n<|im_start|>assistant\n")
        ids = tok(text, return_tensors="pt")["input_ids"]
        if positions == "plain":
            kw = {"position_ids": torch.arange(ids.shape[1]).view(1, 1, -1).expand(3, 1, -1)}
        else:  # Qwen2-VL's own 3-D positions (image tokens by time, row and column)
            kw = {"mm_token_type_ids": (ids == model.config.image_token_id).int()}
        with torch.no_grad():
            hidden = model.model(input_ids=ids, pixel_values=pix["pixel_values"], image_grid_thw=pix["image_grid_thw"],
                                 **kw).last_hidden_state[0]
        x = hidden[(ids[0] == tok.convert_tokens_to_ids("<|Reward|>")).nonzero()[0, 0]]
        for i in (0, 3):
            x = F.relu(x @ head[f"rm_head.{i}.weight"].T + head[f"rm_head.{i}.bias"])
        out.append((x @ head["rm_head.5.weight"].T + head["rm_head.5.bias"])[0])
    return torch.stack(out)


def test_conversion_scores_like_the_authors_forward(case, tmp_path):
    model, head, *_ = case
    assert _convert(case, tmp_path / "hpsv3") == 0
    spec = json.loads((tmp_path / "hpsv3" / PROMPT_FILE).read_text())
    assert (spec["instruction"], spec["suffix"], spec["pixels"]) == (INSTRUCTION, SUFFIX, 256)
    tok = qwen2vl_tokenizer()
    tok.add_special_tokens({"additional_special_tokens": ["<|Reward|>"]})
    want = _reference(model, head, tok, IMAGES, PROMPTS)
    reward = rewards.get("hpsv3")("cpu", root=tmp_path)
    got = reward(IMAGES, PROMPTS)
    assert got.shape == (3,) and got.dtype == torch.float32
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    # the authors' plain positions, not Qwen2-VL's 3-D ones: the same weights score otherwise with those
    assert (_reference(model, head, tok, IMAGES, PROMPTS, positions="mrope") - want).abs().max() > 1e-4
    torch.testing.assert_close(rewards.get("hpsv3")("cpu", root=tmp_path, batch_size=2)(IMAGES, PROMPTS), got,
                               atol=1e-6, rtol=1e-6)  # right padding in a batch changes no score
    assert got[0] != got[2] and reward(IMAGES[:1], ["two dogs on a bench"])[0] != got[0]  # image and prompt matter


def test_smart_resize_matches_transformers():
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize as hf_resize

    assert smart_resize(512, 512, 28, 200704, 200704) == (448, 448)  # the authors' 256 * 28^2 pixels
    for h, w, factor, lo, hi in [(40, 48, 8, 256, 256), (512, 768, 28, 200704, 200704), (1024, 512, 28, 3136, 10 ** 6),
                                 (30, 900, 14, 56 * 56, 28 * 28 * 1280), (20, 20, 28, 200704, 200704)]:
        assert smart_resize(h, w, factor, lo, hi) == tuple(hf_resize(h, w, factor=factor, min_pixels=lo, max_pixels=hi))


def test_the_new_transformers_layout_converts_too(case, tmp_path):
    from safetensors.torch import save_file

    model, head, *_ = case
    new = tmp_path / "new.safetensors"
    save_file({**{k: v.clone() for k, v in model.state_dict().items()}, **head}, new)
    assert _convert(case, tmp_path / "a", ckpt=new) == 0 and _convert(case, tmp_path / "b") == 0
    a = rewards.get("hpsv3")("cpu", weights_dir=tmp_path / "a")(IMAGES[:2], PROMPTS[:2])
    torch.testing.assert_close(a, rewards.get("hpsv3")("cpu", weights_dir=tmp_path / "b")(IMAGES[:2], PROMPTS[:2]))


def _refused(capsys, code, *needles):
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, (code, err)
    for needle in needles:
        assert needle in err, err


@pytest.mark.parametrize("edit,needles", [
    (lambda sd: sd.pop("rm_head.3.bias"), ["not an HPSv3 state dict", "rm_head.3.bias"]),
    (lambda sd: sd.__setitem__("extra.scale", torch.ones(1)), ["cannot map", "extra.scale", "--ignore"]),
    (lambda sd: sd.__setitem__("rm_head.5.weight", torch.zeros(3, 16)), ["not a Linear chain"]),
    (lambda sd: sd.__setitem__("model.norm.weight", torch.ones(8)), ["do not fit", "Qwen2VLModel"]),
])
def test_refuses_state_dicts_it_cannot_map(case, tmp_path, capsys, edit, needles):
    from safetensors.torch import load_file, save_file

    sd = load_file(case[2])
    edit(sd)
    save_file(sd, tmp_path / "bad.safetensors")
    _refused(capsys, _convert(case, tmp_path / "out", ckpt=tmp_path / "bad.safetensors"), *needles)
    assert not (tmp_path / "out").exists()


def test_ignore_drops_keys_deliberately(case, tmp_path):
    from safetensors.torch import load_file, save_file

    sd = load_file(case[2])
    sd["extra.scale"] = torch.ones(1)
    save_file(sd, tmp_path / "x.safetensors")
    assert _convert(case, tmp_path / "out", "--ignore", "extra.", ckpt=tmp_path / "x.safetensors") == 0


@pytest.mark.parametrize("source,needles", [
    ("INSTRUCTION = 'no placeholder'\nprompt_with_special_token = '<|Reward|>'\n", ["no {text_prompt}"]),
    ("INSTRUCTION = '{text_prompt}'\nprompt_with_special_token = 'no token'\n", ["0 times, not once"]),
    ("INSTRUCTION = '{text_prompt}'\n", ["no string constant prompt_with_special_token"]),
    ("def broken(:\n", ["not Python source"]),
])
def test_refuses_prompt_sources_without_instruction_or_token(case, tmp_path, capsys, source, needles):
    (tmp_path / "src.py").write_text(source)
    _refused(capsys, _convert(case, tmp_path / "out", source=tmp_path / "src.py"), *needles)
    assert not (tmp_path / "out").exists()


def test_prompt_from_json_and_other_refusals(case, tmp_path, capsys):
    (tmp_path / "p.json").write_text(json.dumps({"instruction": INSTRUCTION, "suffix": SUFFIX}))
    assert _convert(case, tmp_path / "out", source=tmp_path / "p.json") == 0
    capsys.readouterr()
    _refused(capsys, _convert(case, tmp_path / "out"), "already holds a model", "--overwrite")
    assert _convert(case, tmp_path / "out", "--overwrite") == 0
    capsys.readouterr()
    _refused(capsys, _convert(case, tmp_path / "x", ckpt=tmp_path / "none.safetensors"), "no such file")
    _refused(capsys, conv.main([str(case[2]), str(tmp_path / "y"), "--base", str(tmp_path), "--prompt-from",
                                str(case[4])]), "--base", "no config.json")
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()


def test_factory_refuses_missing_files_and_a_bad_prompt_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="(?s)reward 'hpsv3': missing config.json.*hpsv3_prompt.json.*MizzenAI"):
        rewards.get("hpsv3")("cpu", root=tmp_path)
    folder = save_tiny_hpsv3(tmp_path / "hpsv3")
    (folder / PROMPT_FILE).write_text(json.dumps({"instruction": "no placeholder", "suffix": "<|Reward|>",
                                                  "reward_token": "<|Reward|>", "pixels": 256}))
    with pytest.raises(ValueError, match="hpsv3_prompt.json needs instruction"):
        rewards.get("hpsv3")("cpu", root=tmp_path)
    assert (folder / HEAD_FILE).is_file()


def test_tiny_folder_scores_finite_and_is_deterministic(tmp_path):
    a = rewards.get("hpsv3")("cpu", weights_dir=save_tiny_hpsv3(tmp_path / "a", seed=1))(IMAGES, PROMPTS)
    b = rewards.get("hpsv3")("cpu", weights_dir=save_tiny_hpsv3(tmp_path / "b", seed=1))(IMAGES, PROMPTS)
    assert torch.equal(a, b) and all(math.isfinite(x) for x in a.tolist())
