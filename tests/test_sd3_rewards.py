"""SD3 reward adapters on tiny random models built from config (real loading code paths), prompts, groupwise."""

import json

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from recast.worlds.sd3 import rewards
from recast.worlds.sd3.prompts import GenEvalItem, ObjectSpec, load_geneval_metadata, load_prompt_file, load_prompts
from recast.worlds.sd3.rewards.clip import AestheticMLP
from recast.worlds.sd3.rewards.geneval import Detection, nearest_color, score_item
from recast.worlds.sd3.tiny import CLIP_BOS, CLIP_EOS, clip_tokenizer
from recast.worlds.sd3.settings import DATA_PROMPTS

TEXT = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
            max_position_embeddings=16, bos_token_id=CLIP_BOS, eos_token_id=CLIP_EOS, pad_token_id=CLIP_EOS)
VISION = dict(image_size=32, patch_size=8, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
              num_attention_heads=2)
IMAGES = torch.rand(3, 3, 40, 48, generator=torch.Generator().manual_seed(0))


def _constant_head(dim, value):
    head = AestheticMLP(dim)
    for p in head.parameters():
        torch.nn.init.zeros_(p)
    head.layers[-1].bias.data.fill_(value)
    return head.state_dict()


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    """reward_ckpts/ with tiny random CLIP (pickscore, clipscore, hpsv2, aesthetic), BLIP and OWL-ViT folders."""
    from transformers import (BlipConfig, BlipForImageTextRetrieval, BlipImageProcessor, CLIPConfig, CLIPImageProcessor,
                              CLIPModel, CLIPProcessor, OwlViTConfig, OwlViTForObjectDetection, OwlViTImageProcessor,
                              OwlViTProcessor)

    root, tok = tmp_path_factory.mktemp("reward_ckpts"), clip_tokenizer()
    torch.manual_seed(0)
    clip = CLIPModel(CLIPConfig(text_config={**TEXT, "vocab_size": len(tok)}, vision_config=VISION, projection_dim=8))
    proc = CLIPProcessor(image_processor=CLIPImageProcessor(size={"shortest_edge": 32},
                                                            crop_size={"height": 32, "width": 32}), tokenizer=tok)
    for name in ("pickscore", "clipscore", "hpsv2", "aesthetic"):
        clip.save_pretrained(root / name)
        proc.save_pretrained(root / name)
    save_file(_constant_head(8, 3.0), root / "aesthetic" / "aesthetic_mlp.safetensors")
    blip = BlipForImageTextRetrieval(BlipConfig(
        text_config={**TEXT, "vocab_size": len(tok), "max_position_embeddings": 40, "encoder_hidden_size": 16},
        vision_config=VISION, projection_dim=8, image_text_hidden_size=8))
    blip.save_pretrained(root / "imagereward")
    BlipImageProcessor(size={"height": 32, "width": 32}).save_pretrained(root / "imagereward")
    tok.save_pretrained(root / "imagereward")
    save_file(_constant_head(16, 1.2), root / "imagereward" / "imagereward_mlp.safetensors")
    owl = OwlViTForObjectDetection(OwlViTConfig(text_config={**TEXT, "vocab_size": len(tok)}, vision_config=VISION,
                                                projection_dim=16))
    owl.save_pretrained(root / "geneval")
    OwlViTProcessor(image_processor=OwlViTImageProcessor(size={"height": 32, "width": 32},
                                                         crop_size={"height": 32, "width": 32}),
                    tokenizer=tok).save_pretrained(root / "geneval")
    return root


@pytest.mark.parametrize("name,expected", [("pickscore", "PickScore_v1"), ("clipscore", "clip-vit-large"),
                                           ("hpsv2", "HPS_v2.1"), ("aesthetic", "sac\\+logos"),
                                           ("imagereward", "imagereward_mlp.safetensors"), ("geneval", "owlv2")])
def test_missing_weights_fail_fast_naming_files_and_source(name, expected, tmp_path):
    with pytest.raises(FileNotFoundError, match=f"(?s)reward '{name}': missing config.json.*{expected}"):
        rewards.get(name)("cpu", root=tmp_path)


def test_registry_names_settings_and_unknown_names():
    assert set(rewards.SETTINGS["composition"]) == {"geneval", "ocr", "pickscore", "clipscore"}
    assert set(rewards.SETTINGS["quality"]) == {"pickscore", "hpsv2", "aesthetic", "imagereward"}
    assert all(n in rewards.names() for s in rewards.SETTINGS.values() for n in s)
    with pytest.raises(ValueError, match="unknown SD3 reward 'nope'.*pickscore"):
        rewards.get("nope")
    with pytest.raises(ValueError, match="rank:NAME"):
        rewards.get("rank:nope")


def test_clip_family_scores(root):
    prompts = ["a red cat", "two dogs", "a red cat"]
    pick = rewards.get("pickscore")("cpu", root=root)(IMAGES, prompts)
    clip = rewards.get("clipscore")("cpu", root=root)(IMAGES, prompts)
    hps = rewards.get("hpsv2")("cpu", weights_dir=root / "hpsv2")(IMAGES, prompts)
    assert pick.shape == (3,) and pick.dtype == torch.float32 and (clip.abs() <= 1).all()
    from transformers import CLIPModel

    scale = CLIPModel.from_pretrained(root / "pickscore").logit_scale.exp()
    torch.testing.assert_close(pick, scale * clip)  # PickScore = logit_scale * cosine
    torch.testing.assert_close(hps, clip)
    assert clip[0] != clip[1]  # the prompt matters
    with pytest.raises(ValueError, match="B prompts"):
        rewards.get("clipscore")("cpu", root=root)(IMAGES, prompts[:2])


def test_aesthetic_and_imagereward_heads(root):
    aes = rewards.get("aesthetic")("cpu", root=root)(IMAGES, ["x"] * 3)
    torch.testing.assert_close(aes, torch.full((3,), 3.0))  # constant head: bias only
    from recast.worlds.sd3.rewards.imagereward import MEAN, STD

    ir = rewards.get("imagereward")("cpu", root=root)(IMAGES, ["a red cat", "b", "c"])
    torch.testing.assert_close(ir, torch.full((3,), (1.2 - MEAN) / STD))  # ImageReward's standardisation


def test_geneval_clauses_closed_form():
    img = torch.zeros(3, 100, 100)
    img[0, 10:40, 10:40] = 0.9  # a red square on the left
    item = GenEvalItem("p", "position", (ObjectSpec("cat", 1, "red"), ObjectSpec("dog", 1, None, ("right of", 0))),
                       (ObjectSpec("car", 1),))
    cat, dog = Detection("cat", 0.9, (10, 10, 40, 40)), Detection("dog", 0.8, (60, 10, 90, 40))
    assert nearest_color(img, cat.box) == "red" and nearest_color(img, dog.box) == "black"
    assert score_item(item, [cat, dog], img) == (5, 5)
    assert score_item(item, [cat, Detection("dog", 0.8, (0, 50, 30, 80))], img) == (4, 5)  # dog not right of cat
    assert score_item(item, [cat, dog, Detection("car", 0.5, (0, 0, 5, 5))], img) == (4, 5)  # excluded car
    counting = GenEvalItem("p", "counting", (ObjectSpec("cat", 2),))
    assert score_item(counting, [cat, cat, cat], img) == (0, 1)  # counting wants exactly 2


def test_geneval_reward_with_a_plugged_detector_and_with_owlvit(root):
    items = load_geneval_metadata(DATA_PROMPTS / "compose_train.jsonl")
    single = [i for i in items if i.tag == "single_object"][:2]
    prompts = [i.prompt for i in single]

    def detector(images, labels):
        return [[Detection(ls[0], 0.9, (0, 0, 10, 10))] if k == 0 else [] for k, ls in enumerate(labels)]

    fn = rewards.get("geneval")("cpu", metadata=single, detector=detector)
    assert fn(IMAGES[:2], prompts).tolist() == [1.0, 0.0]
    with pytest.raises(ValueError, match="no metadata"):
        fn(IMAGES[:1], ["an unknown prompt"])
    owl = rewards.get("geneval")("cpu", root=root, threshold=0.0)(IMAGES, [i.prompt for i in items[:3]])
    assert owl.shape == (3,) and ((owl >= 0) & (owl <= 1)).all()


def test_groupwise_rank_and_custom_group_scorer():
    flat, noisy = torch.full((3, 32, 32), 0.5), torch.rand(3, 32, 32, generator=torch.Generator().manual_seed(1))
    images = torch.stack([noisy, flat, flat * 0.9, noisy])
    jpeg = rewards.get("jpeg")("cpu")(images, ["a"] * 4)
    assert jpeg[1] > jpeg[0]  # a flat image compresses better
    ranked = rewards.get("rank:jpeg")("cpu")
    r = ranked(images, ["a", "a", "b", "b"])
    assert ranked.groupwise and r.tolist() == [0.0, 1.0, 1.0, 0.0]
    seen = []
    fn = rewards.groupwise(lambda im, p: (seen.append((p, len(im))), torch.arange(len(im)).float())[1])
    assert fn(images, ["x", "y", "x", "x"]).tolist() == [0.0, 0.0, 1.0, 2.0] and seen == [("x", 3), ("y", 1)]
    assert rewards.group_rank(torch.tensor([2.0, 2.0, 1.0])).tolist() == [0.75, 0.75, 0.0]


def _render(text):
    from PIL import Image, ImageDraw, ImageFont

    im = Image.new("RGB", (320, 96), "white")
    ImageDraw.Draw(im).text((12, 20), text, fill="black", font=ImageFont.load_default(size=48))
    return torch.from_numpy(np.array(im)).permute(2, 0, 1).float() / 255


def test_ocr_reads_rendered_text():
    pytest.importorskip("rapidocr_onnxruntime", reason="OCR extra not installed: pip install -e '.[ocr]'")
    fn = rewards.get("ocr")("cpu", intra_op_num_threads=1)
    images = torch.stack([_render("OPEN"), _render("hello"), torch.ones(3, 96, 320)])
    r = fn(images, ['a sign that says "open"', 'a sign that says "help"', 'a sign that says "hello"'])
    assert r[0] == 1.0 and 0.0 < r[1] < 1.0 and r[2] == 0.0  # exact, one edit of four ("hell" vs "help"), blank
    with pytest.raises(ValueError, match="double quotes"):
        fn(images[:1], ["a sign without quotes"])


def test_prompt_files_and_geneval_metadata(tmp_path):
    f = tmp_path / "p.txt"
    f.write_text("# header\n\n  a cat  \nb dog\n")
    assert load_prompt_file(f) == ["a cat", "b dog"]
    (tmp_path / "empty.txt").write_text("# nothing\n")
    with pytest.raises(ValueError, match="no prompts"):
        load_prompts(tmp_path / "empty.txt")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"prompt": "x", "include": [{"class": "cat"}]}) + "\n{oops\n")
    with pytest.raises(ValueError, match="bad.jsonl:2: not JSON"):
        load_geneval_metadata(bad)
    bad.write_text(json.dumps({"prompt": "x", "include": [{"class": "cat", "position": ["near", 0]}]}))
    with pytest.raises(ValueError, match="position"):
        load_geneval_metadata(bad)
    train, test = load_prompts(DATA_PROMPTS / "compose_train.jsonl"), load_prompts(DATA_PROMPTS / "compose_test.jsonl")
    assert len(train) == 48 and len(test) == 16 and not set(train) & set(test)
    assert all('"' in p for p in train + test)  # every composition prompt quotes a text for the OCR reward
    assert len(load_prompts(DATA_PROMPTS / "quality_train.txt")) == 36
