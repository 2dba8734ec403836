"""Write the example prompt files in data/prompts/ (deterministic; our own templates, no external data).

    python scripts/make_prompts.py

compose_{train,test}.jsonl: GenEval-style metadata whose prompts also quote a short text, so every reward of the
composition setting (geneval, ocr, pickscore, clipscore) can score every prompt. quality_{train,test}.txt: plain
prompts for the quality setting. Test prompts use object classes and texts that never appear in train.
"""

import json
import random
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "data" / "prompts"
# COCO classes (GenEval's detector vocabulary), split so test objects are unseen in train.
TRAIN_OBJECTS = ["bench", "cat", "dog", "bicycle", "car", "cup", "chair", "clock", "umbrella", "horse", "vase",
                 "backpack", "bus", "apple", "teddy bear", "potted plant"]
TEST_OBJECTS = ["giraffe", "toaster", "suitcase", "kite", "banana", "laptop"]
COLORS = ["red", "orange", "yellow", "green", "blue", "purple", "pink", "brown", "black", "white"]
RELATIONS = ["left of", "right of", "above", "below"]
TRAIN_TEXTS = ["open", "hello", "sale", "cafe", "exit", "recast", "north", "fresh bread"]
TEST_TEXTS = ["closed", "welcome", "museum", "wifi"]
NUMBERS = {2: "two", 3: "three", 4: "four"}
SUBJECTS_TRAIN = ["a lighthouse on a cliff", "a bowl of ramen", "an old library", "a fox in the snow",
                  "a glass teapot", "a mountain village", "a jazz trio", "a koi pond", "a desert road at dusk",
                  "a vintage typewriter", "a greenhouse full of ferns", "a harbour at dawn"]
SUBJECTS_TEST = ["a clockmaker's workshop", "a tram in the rain", "a field of sunflowers", "a paper crane"]
STYLES = ["photograph, soft light", "watercolour painting", "oil painting, impasto", "studio photo, 85mm",
          "isometric illustration", "film still, golden hour"]


def plural(obj: str, n: int) -> str:
    return obj if n == 1 else (obj + "es" if obj.endswith(("s", "ch")) else obj + "s")


def compose_items(objects, texts, n, rng):
    items = []
    for _ in range(n):
        tag = rng.choice(["single_object", "two_object", "counting", "colors", "position", "color_attr"])
        a, b = rng.sample(objects, 2)
        text = rng.choice(texts)
        sign = f'with a sign that says "{text}"'
        if tag == "single_object":
            prompt, include = f"a photo of a {a} {sign}", [{"class": a, "count": 1}]
        elif tag == "two_object":
            prompt, include = f"a photo of a {a} and a {b} {sign}", [{"class": a, "count": 1}, {"class": b, "count": 1}]
        elif tag == "counting":
            k = rng.choice(list(NUMBERS))
            prompt, include = f"a photo of {NUMBERS[k]} {plural(a, k)} {sign}", [{"class": a, "count": k}]
        elif tag == "colors":
            c = rng.choice(COLORS)
            prompt, include = f"a photo of a {c} {a} {sign}", [{"class": a, "count": 1, "color": c}]
        elif tag == "position":
            r = rng.choice(RELATIONS)
            prompt = f"a photo of a {b} {r} a {a} {sign}"
            include = [{"class": a, "count": 1}, {"class": b, "count": 1, "position": [r, 0]}]
        else:
            c1, c2 = rng.sample(COLORS, 2)
            prompt = f"a photo of a {c1} {a} and a {c2} {b} {sign}"
            include = [{"class": a, "count": 1, "color": c1}, {"class": b, "count": 1, "color": c2}]
        items.append({"tag": tag, "prompt": prompt, "include": include})
    return items


def main():
    rng = random.Random(0)
    OUT.mkdir(parents=True, exist_ok=True)
    for name, objects, texts, n in (("train", TRAIN_OBJECTS, TRAIN_TEXTS, 48), ("test", TEST_OBJECTS, TEST_TEXTS, 16)):
        lines = [json.dumps(d) for d in compose_items(objects, texts, n, rng)]
        (OUT / f"compose_{name}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    for name, subjects in (("train", SUBJECTS_TRAIN), ("test", SUBJECTS_TEST)):
        prompts = [f"{s}, {st}" for s in subjects for st in rng.sample(STYLES, 3)]
        header = "# quality-setting prompts written for ReCAST (scripts/make_prompts.py)\n"
        (OUT / f"quality_{name}.txt").write_text(header + "\n".join(prompts) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
