"""CLIP-family rewards: PickScore, CLIPScore, HPSv2 and the LAION aesthetic predictor (CLIP + MLP head).

Every model is a transformers `CLIPModel` folder (config.json, model.safetensors, and its processor files), so one
loader serves all four. The score is computed exactly as each model's authors define it:

    pickscore   logit_scale.exp() * cos(image, prompt)        (PickScore_v1, ~18-24 on real images)
    clipscore   cos(image, prompt)                            (CLIP ViT-L/14)
    hpsv2       cos(image, prompt)                            (HPS v2.1, a fine-tuned CLIP ViT-H/14)
    aesthetic   MLP(normalised CLIP image embedding)          (LAION improved-aesthetic-predictor, ~1-10)
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from recast.worlds.sd3.rewards._common import check_batch, processor_pixels, require_files, weights_dir

CLIP_FILES = ("config.json", ("model.safetensors", "pytorch_model.bin"),
              ("preprocessor_config.json", "processor_config.json"),
              ("tokenizer.json", "vocab.json"))
HINTS = {
    "pickscore": "PickScore: `huggingface-cli download yuvalkirstain/PickScore_v1 --local-dir DIR`, plus the "
                 "processor files of laion/CLIP-ViT-H-14-laion2B-s32B-b79K in the same DIR.",
    "clipscore": "CLIPScore: `huggingface-cli download openai/clip-vit-large-patch14 --local-dir DIR`.",
    "hpsv2": "HPSv2: the authors ship an open_clip checkpoint (xswu/HPSv2, HPS_v2.1_compressed.pt); convert it to a "
             "transformers CLIPModel folder (ViT-H-14) with processor files and point weights_dir at it.",
    "aesthetic": "Aesthetic: a CLIP ViT-L/14 folder (openai/clip-vit-large-patch14) plus the LAION head "
                 "sac+logos+ava1-l14-linearMSE.pth (github.com/christophschuhmann/improved-aesthetic-predictor) "
                 "or aesthetic_mlp.safetensors in the same DIR.",
}
AESTHETIC_HEADS = ("aesthetic_mlp.safetensors", "sac+logos+ava1-l14-linearMSE.pth")
# Each score's scale against the ReCAST release's (RECAST.md §0), which mixes raw rewards before normalising, so a
# reward's scale sets its share of the raw mix there: these outputs are left as they are and documented.
SCALES = {
    "pickscore": "Scale: logit_scale.exp() * cosine, about 18-24 on real images; the ReCAST release divides this by "
                 "26 (its pickscore = ours / 26).",
    "clipscore": "Scale: the cosine in [-1, 1], about 0.2-0.35 on real images; the ReCAST release's clipscore is CLIP's "
                 "logits / 100 = logit_scale.exp() / 100 * cosine, the same number for OpenAI's CLIP (logit scale 100).",
    "hpsv2": "Scale: the cosine of HPS v2.1's image and text embeddings, about 0.2-0.35; the ReCAST release's hpsv2 is "
             "the same dot product of normalised features (it letterboxes non-square images where we centre-crop).",
    "aesthetic": "Scale: the LAION predictor's rating, about 1-10 (about 5-6 on SD images); not a ReCAST release "
                 "reward (a held-out judge of the paper).",
}


class AestheticMLP(nn.Module):
    """The MLP head of LAION's improved aesthetic predictor (and of ImageReward); parameter names match their
    released state dicts (`layers.0.weight` ...)."""

    def __init__(self, dim: int = 768):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(dim, 1024), nn.Dropout(0.2), nn.Linear(1024, 128), nn.Dropout(0.2),
                                    nn.Linear(128, 64), nn.Dropout(0.1), nn.Linear(64, 16), nn.Linear(16, 1))

    def forward(self, embeds: torch.Tensor) -> torch.Tensor:
        return self.layers(embeds)


def _load_clip(name: str, folder: Path, device, extra: tuple = ()):
    require_files(name, folder, CLIP_FILES + extra, HINTS[name])
    from transformers import CLIPModel, CLIPProcessor

    model = CLIPModel.from_pretrained(folder).to(device).eval().requires_grad_(False)
    return model, CLIPProcessor.from_pretrained(folder)


def _embeds(model, processor, images, prompts, device):
    pixels = processor_pixels(processor.image_processor, images).to(device, model.dtype)
    img = model.get_image_features(pixel_values=pixels)
    img = img if isinstance(img, torch.Tensor) else img.pooler_output
    img = img / img.norm(dim=-1, keepdim=True)
    if prompts is None:
        return img, None
    tok = processor.tokenizer(list(prompts), padding=True, truncation=True, return_tensors="pt").to(device)
    txt = model.get_text_features(**tok)
    txt = txt if isinstance(txt, torch.Tensor) else txt.pooler_output
    return img, txt / txt.norm(dim=-1, keepdim=True)


def _similarity_factory(name: str, logit_scaled: bool):
    def factory(device="cpu", *, root=None, weights_dir=None):
        device = torch.device(device)
        model, processor = _load_clip(name, _wd(name, root, weights_dir), device)

        @torch.no_grad()
        def reward(images: torch.Tensor, prompts: list[str]) -> torch.Tensor:
            check_batch(images, prompts)
            img, txt = _embeds(model, processor, images, prompts, device)
            cos = (img * txt).sum(-1)
            return (model.logit_scale.exp() * cos if logit_scaled else cos).float()

        reward.__name__ = name
        return reward

    factory.__doc__ = f"{name} of each (image, prompt). {SCALES[name]} Weights: {HINTS[name]}"
    return factory


def _wd(name, root, explicit):
    return weights_dir(name, root, explicit)  # the factories' `weights_dir` argument shadows the helper


pickscore = _similarity_factory("pickscore", logit_scaled=True)
clipscore = _similarity_factory("clipscore", logit_scaled=False)
hpsv2 = _similarity_factory("hpsv2", logit_scaled=False)


def _load_head(folder: Path, dim: int, device) -> AestheticMLP:
    head = AestheticMLP(dim)
    if (folder / AESTHETIC_HEADS[0]).is_file():
        from safetensors.torch import load_file

        state = load_file(folder / AESTHETIC_HEADS[0])
    else:
        state = torch.load(folder / AESTHETIC_HEADS[1], map_location="cpu", weights_only=True)
    head.load_state_dict(state, strict=True)
    return head.to(device).eval().requires_grad_(False)


def aesthetic(device="cpu", *, root=None, weights_dir=None):
    """LAION aesthetic score of each image (prompts are ignored). Scale: the predictor's rating, about 1-10 (about
    5-6 on SD images); the paper reports it as a held-out judge (the ReCAST release does not train on it)."""
    device = torch.device(device)
    folder = _wd("aesthetic", root, weights_dir)
    model, processor = _load_clip("aesthetic", folder, device, extra=(AESTHETIC_HEADS,))
    head = _load_head(folder, model.config.projection_dim, device)

    @torch.no_grad()
    def reward(images: torch.Tensor, prompts: list[str]) -> torch.Tensor:
        check_batch(images, prompts)
        img, _ = _embeds(model, processor, images, None, device)
        return head(img.float())[:, 0].float()

    return reward
