"""ImageReward: BLIP image-grounded text encoder + MLP head, standardised with the authors' mean and std.

score = (MLP(text_encoder(prompt | image)[CLS]) - 0.16717) / 1.03358, as in ImageReward's `score()`. The model is a
transformers `BlipForImageTextRetrieval` folder plus the head `imagereward_mlp.safetensors` (keys `layers.*`).
"""

from __future__ import annotations

import torch

from recast.worlds.sd3.rewards._common import check_batch, processor_pixels, require_files, weights_dir as _wd
from recast.worlds.sd3.rewards.clip import AestheticMLP

MEAN, STD = 0.16717362830052426, 1.0333394966054072  # ImageReward's reward standardisation
MAX_TOKENS = 35  # ImageReward's prompt length
FILES = ("config.json", ("model.safetensors", "pytorch_model.bin"),
         ("preprocessor_config.json", "processor_config.json"),
         ("tokenizer.json", "vocab.txt"), "imagereward_mlp.safetensors")
HINT = ("ImageReward: the authors ship ImageReward.pt (THUDM/ImageReward); convert it with `python "
        "scripts/convert_imagereward.py ImageReward.pt DIR --processor-from TOKENIZER_DIR` (BLIP's BERT tokenizer, "
        "e.g. that of Salesforce/blip-itm-large-coco; the 224 px image processor is written by the script).")


def imagereward(device="cpu", *, root=None, weights_dir=None):
    """ImageReward score of each (image, prompt). Scale: the authors' standardised score (their `score()`), roughly
    standard normal on SD images; a held-out judge of the paper, not a ReCAST release reward."""
    folder = _wd("imagereward", root, weights_dir)
    require_files("imagereward", folder, FILES, HINT)
    from safetensors.torch import load_file
    from transformers import AutoImageProcessor, AutoTokenizer, BlipForImageTextRetrieval

    device = torch.device(device)
    blip = BlipForImageTextRetrieval.from_pretrained(folder).to(device).eval().requires_grad_(False)
    image_processor, tokenizer = AutoImageProcessor.from_pretrained(folder), AutoTokenizer.from_pretrained(folder)
    head = AestheticMLP(blip.config.text_config.hidden_size)
    head.load_state_dict(load_file(folder / "imagereward_mlp.safetensors"), strict=True)
    head = head.to(device).eval().requires_grad_(False)

    @torch.no_grad()
    def reward(images: torch.Tensor, prompts: list[str]) -> torch.Tensor:
        check_batch(images, prompts)
        pixels = processor_pixels(image_processor, images).to(device, blip.dtype)
        image_embeds = blip.vision_model(pixel_values=pixels).last_hidden_state
        tok = tokenizer(list(prompts), padding="max_length", truncation=True, max_length=MAX_TOKENS,
                        return_tensors="pt").to(device)
        text = blip.text_encoder(input_ids=tok["input_ids"], attention_mask=tok["attention_mask"],
                                 encoder_hidden_states=image_embeds,
                                 encoder_attention_mask=torch.ones(image_embeds.shape[:-1], dtype=torch.long,
                                                                   device=device)).last_hidden_state
        return ((head(text[:, 0].float())[:, 0] - MEAN) / STD).float()

    return reward
