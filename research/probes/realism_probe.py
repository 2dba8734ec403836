"""Why does the realism reward miss its agreement target (AUC >= 0.8 against the defect-free judge)?

    python research/probes/realism_probe.py              # about 4 min on 2 cores; prints a markdown table

Two parts, on the audit's batch (`recast.worlds.digits.audit.sample_world`: 256 test prompts, ODE, 10 steps, seed 0):

1. **What the committed realism CNN sees**: its AUC against each defect verdict separately (blur, speckle, fade) and
   against the union (defect-free, the matching judge); beside it the three rewards dedicated to one defect each
   (sharpness, clean, contrast) and their product, a realism score assembled from them.
2. **Redesigns of the realism net**, each trained like the committed one (`recast.worlds.digits.rewards.nets.fit`, 1,500
   Adam steps, seed 0, base-split glyphs) and scored by the same AUC:
   - ``vs_base_samples``: a discriminator of real canvases against 2,048 base-model samples on *train* prompts (what a
     GAN discriminator or a learned "realism" model fitted to the model's own output would be);
   - ``graded``: real vs degraded with a soft target ``1 - strength`` (a severity regressor instead of a classifier);
   - ``per_defect``: one logit per taught defect (`recast.worlds.digits.corruption.DEFECTS`, each injected with
     probability 0.4, independently), scored as ``sum_d log(1 - p_d)``, the log-probability that no defect is present.

Nothing here is committed as a reward; research/rounds/25-base-model.md quotes the table.
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F


def _auc(verdict: torch.Tensor, score: torch.Tensor) -> float:
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(verdict.numpy(), score.detach().float().numpy()))


def _prompts(gen: torch.Generator, n: int):
    from recast.worlds.digits import data

    specs = data.all_specs()
    return [specs[i] for i in torch.randint(len(specs), (n,), generator=gen).tolist()]


def vs_base_samples(fake: torch.Tensor):
    """Real base-glyph canvases (1) against the base model's own samples (0)."""
    from recast.worlds.digits import data
    from recast.worlds.digits.rewards import nets

    def batch(gen: torch.Generator, n: int = 128):
        real = data.render(_prompts(gen, n // 2), glyph_split="base", generator=gen)
        idx = torch.randint(len(fake), (n - n // 2,), generator=gen)
        x = torch.cat([real, fake[idx]])
        return nets.realism_input(x), torch.cat([torch.ones(n // 2), torch.zeros(n - n // 2)])

    torch.manual_seed(0)
    net = nets.fit(nets.realism_net(), batch, lambda z, y: F.binary_cross_entropy_with_logits(z[:, 0], y),
                   steps=1500, seed=0)
    return lambda x: net(nets.realism_input(x))[:, 0]


def graded():
    """Severity regression: a quarter real, the rest degraded by a random kind at a random strength s in [0, 1],
    target 1 - s."""
    from recast.worlds.digits import data
    from recast.worlds.digits.rewards import nets
    from recast.worlds.digits.rewards.degrade import KINDS, degrade

    def batch(gen: torch.Generator, n: int = 128):
        images = data.render(_prompts(gen, n), glyph_split="base", generator=gen)
        kinds = torch.randint(len(KINDS), (n,), generator=gen)
        s = torch.rand(n, generator=gen)
        s[: n // 4] = 0.0
        out = images.clone()
        for k, kind in enumerate(KINDS):
            idx = torch.nonzero(kinds == k).flatten()
            if len(idx):
                out[idx] = degrade(images[idx], kind, s[idx], gen)
        return nets.realism_input(out), 1.0 - s

    torch.manual_seed(0)
    net = nets.fit(nets.realism_net(), batch, lambda z, y: F.binary_cross_entropy_with_logits(z[:, 0], y),
                   steps=1500, seed=0)
    return lambda x: net(nets.realism_input(x))[:, 0]


def per_defect(q: float = 0.4):
    """One detector per taught defect; score = log P(no defect) = sum_d log(1 - p_d). Also returns the heads."""
    from recast.worlds.digits import data
    from recast.worlds.digits.corruption import DEFECTS, Corruption, inject_defects
    from recast.worlds.digits.rewards import nets

    names = list(DEFECTS)

    def batch(gen: torch.Generator, n: int = 128):
        images = data.render(_prompts(gen, n), glyph_split="base", generator=gen)
        out, applied = inject_defects(images, Corruption(**{d: q for d in names}), gen)
        return nets.realism_input(out), torch.stack([applied[d] for d in names], 1).float()

    torch.manual_seed(0)
    net = nets.fit(nets.SmallCNN(3, len(names)), batch, F.binary_cross_entropy_with_logits, steps=1500, seed=0)
    return lambda x: F.logsigmoid(-net(nets.realism_input(x))).sum(1), lambda x: net(nets.realism_input(x)), names


def main(argv: list[str] | None = None) -> dict:
    from recast.worlds.digits import rewards as R
    from recast.worlds.digits.audit import sample_world
    from recast.worlds.digits.judges.agreement import judge_verdicts
    from recast.worlds.digits.model import load_world

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--world", default="data/digit_base")
    p.add_argument("--fakes", type=int, default=2048, help="base-model samples for the vs_base_samples net")
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    t0 = time.time()
    world = load_world(a.world)
    x, prompts = sample_world(world, n=256, split="test", seed=0)
    V = judge_verdicts(x, prompts)
    cols = ("not_blur", "not_speckle", "not_fade", "defect_free")
    rows: dict[str, dict[str, float]] = {}
    with torch.no_grad():
        scores = {k: R.get(k)("cpu")(x, prompts) for k in ("realism", "sharpness", "clean", "contrast")}
    rows["committed realism CNN"] = {c: _auc(V[c], scores["realism"]) for c in cols}
    for k in ("sharpness", "clean", "contrast"):
        rows[f"{k} reward (dedicated to one defect)"] = {c: _auc(V[c], scores[k]) for c in cols}
    prod = scores["sharpness"] * scores["clean"] * scores["contrast"]
    rows["sharpness × clean × contrast"] = {c: _auc(V[c], prod) for c in cols}
    fake, _ = sample_world(world, n=a.fakes, split="train", seed=123)
    score, heads, names = per_defect()
    trained = (("vs_base_samples", vs_base_samples(fake)), ("graded", graded()), ("per_defect", score))
    with torch.no_grad():
        for name, fn in trained:
            rows[name] = {c: _auc(V[c], fn(x)) for c in cols}
        z = heads(x)
    head_rows = {d: {"mean P(defect)": float(torch.sigmoid(z[:, i]).mean()),
                     "AUC vs its own verdict": _auc(V[f"not_{d}"], -z[:, i])} for i, d in enumerate(names)}
    print("| realism score | AUC vs not blurred | not speckled | not faded | **defect-free** (the target) |")
    print("| --- | --- | --- | --- | --- |")
    for name, r in rows.items():
        print(f"| {name} | " + " | ".join(f"{r[c]:.3f}" for c in cols) + " |")
    print("\n| per_defect head | mean P(defect) on base samples | AUC vs its own verdict |\n| --- | --- | --- |")
    for d, r in head_rows.items():
        print(f"| {d} | {r['mean P(defect)']:.3f} | {r['AUC vs its own verdict']:.3f} |")
    print(f"\ndefect-free rate of the batch: {float(V['defect_free'].float().mean()):.3f}; {time.time() - t0:.0f} s")
    return {"auc": rows, "heads": head_rows}


if __name__ == "__main__":
    main()
