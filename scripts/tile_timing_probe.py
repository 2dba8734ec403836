"""Does a low-frequency carrier move colour and position into the noisiest third? The tile probe (issue 8, item 3).

On the committed world colour and position are carried by the glyph's strokes alone, and the ground truth decides
them at grid column 2.06 and 2.13 of 0..5, where the thirds need ≤ 1.5. A noisy canvas reveals a signal once its
energy against the noise is large enough, and a glyph's ink is a few dozen pixels of unknown shape. The tile world
(`recast.digits.data.render(tile=s)`) adds a plate of the prompted colour under the glyph, filling its quadrant: 144
pixels of known shape carrying exactly colour and position. This probe measures, on base models fine-tuned with the
committed stage-4 recipe plus ``--tile s``, whether that moves the attributes' gains earlier and the textures' not.

    python scripts/tile_timing_probe.py rewards            # do the rewards and judges still read tiled canvases? 1 min
    python scripts/tile_timing_probe.py timing runs/tile_ends/tile0 runs/tile_ends/tile0.2 runs/tile_ends/tile0.4

``rewards`` renders real canvases at each tile level and writes ``data/results/tile_rewards.csv``: for each reward,
its mean on correct canvases and the AUC with which it separates them from canvases that are wrong on its attribute
(another colour, another quadrant, another size, another digit) or carry its defect (blur, speckle, fade); and each
held-out judge's pass rate on the correct canvases. ``timing`` scores the ends that ``scripts/timing_cache.py record
--world runs/base_tile<s>`` stored (one folder per world, batches ``seed_<k>.pt``) and writes
``data/results/tile_timing.csv``: the centre of mass of every reward's gains with its 5-95 % bootstrap band, per world
and batch, beside the thirds' bounds.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

# reward -> how a canvas is made wrong for it: an attribute to change, or a defect of recast.digits.corruption.DEFECTS
WRONG: dict[str, str] = {
    "color": "color", "position_flat": "position", "size_half_max": "size", "digit": "digit",
    "sharpness": "blur", "speck_free": "speckle", "contrast": "fade",
}
JUDGES: tuple[str, ...] = ("color", "position", "size", "digit", "not_blur", "not_speckle", "not_fade")
TIMING_REWARDS: tuple[str, ...] = ("color", "position_flat", "size_half_max", "digit", "sharpness", "speck_free",
                                   "verdict:not_blur", "verdict:not_speckle")


def wrong_canvases(prompts: list[str], what: str, tile: float, seed: int):
    """Canvases of ``prompts`` that are wrong on attribute ``what`` (a uniformly random other value), or that carry
    defect ``what`` at its `DEFECTS` strength; the glyph and jitter draws are those of the correct canvases."""
    import torch

    from recast.digits import corruption, data

    gen = torch.Generator().manual_seed(seed)
    if what in corruption.DEFECTS:
        clean = data.render(prompts, generator=gen, tile=tile)
        rates = corruption.Corruption(**{what: 1.0})
        return corruption.inject_defects(clean, rates, torch.Generator().manual_seed(seed + 1))[0]
    rates = corruption.Corruption(**{what: 1.0})
    specs = corruption.corrupt_specs([data.parse_prompt(p) for p in prompts], rates,
                                     torch.Generator().manual_seed(seed + 1))
    return data.render(specs, generator=gen, tile=tile)


def reward_rows(tiles: list[float], n: int = 512, seed: int = 0) -> list[dict]:
    """The ``rewards`` table: one row per (tile, reward) and per (tile, judge)."""
    import torch
    from sklearn.metrics import roc_auc_score

    from recast.digits import data
    from recast.digits.judges.agreement import judge_verdicts
    from recast.digits.rewards import get

    prompts = data.sample_prompts(n, split="train", generator=torch.Generator().manual_seed(seed))
    rows = []
    for tile in tiles:
        right = data.render(prompts, generator=torch.Generator().manual_seed(seed), tile=tile)
        verdicts = judge_verdicts(right, prompts)
        for name, what in WRONG.items():
            fn = get(name)("cpu")
            r_right = fn(right, prompts).double()
            r_wrong = fn(wrong_canvases(prompts, what, tile, seed), prompts).double()
            scores = torch.cat([r_right, r_wrong]).numpy()
            labels = [1] * n + [0] * n
            rows.append({"tile": tile, "kind": "reward", "name": name, "against": what,
                         "mean_right": float(r_right.mean()), "mean_wrong": float(r_wrong.mean()),
                         "auc": float(roc_auc_score(labels, scores)), "n": n})
        for key in JUDGES:
            rows.append({"tile": tile, "kind": "judge", "name": key, "against": "",
                         "mean_right": float(verdicts[key].float().mean()), "mean_wrong": float("nan"),
                         "auc": float("nan"), "n": n})
    return rows


def timing_rows(folders: list[str], names=TIMING_REWARDS, seeds: str = "0,1") -> list[dict]:
    """The ``timing`` table: `timing_cache.py score` of every folder, with the folder and its world."""
    import timing_cache

    from recast.informativeness.ends import RolloutEnds

    rows = []
    for folder in folders:
        have = [s for s in seeds.split(",") if (Path(folder) / f"seed_{s}.pt").is_file()]
        if not have:
            raise FileNotFoundError(f"{folder}: no seed_<k>.pt for seeds {seeds} (record them with "
                                    "scripts/timing_cache.py record --world ...)")
        world = RolloutEnds.load(Path(folder) / f"seed_{have[0]}.pt").meta.get("world", "data/digit_base")
        print(f"\n{folder} ({world})")
        for row in timing_cache.main(["score", *names, "--dir", str(folder), "--seeds", ",".join(have)]):
            rows.append({"world": world, "folder": Path(folder).name, **row})
    return rows


def main(argv: list[str] | None = None) -> list[dict]:
    from recast.io import write_csv
    from recast.sweep import results_dir

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    rw = sub.add_parser("rewards", help="rewards and judges on real tiled canvases")
    rw.add_argument("--tiles", default="0,0.2,0.4")
    rw.add_argument("--n", type=int, default=512)
    rw.add_argument("--csv", default="tile_rewards.csv")
    tm = sub.add_parser("timing", help="the ground truth's centres of mass on stored ends of each world")
    tm.add_argument("folders", nargs="+")
    tm.add_argument("--seeds", default="0,1")
    tm.add_argument("--csv", default="tile_timing.csv")
    a = ap.parse_args(argv)
    if a.cmd == "rewards":
        tiles = [float(t) for t in a.tiles.split(",")]
        if any(not 0 <= t < 1 for t in tiles):
            ap.error(f"--tiles must lie in [0, 1), got {a.tiles}")
        rows = reward_rows(tiles, n=a.n)
        print("| tile | reward or judge | against | mean on correct | mean on wrong | AUC |")
        print("|---|---|---|---|---|---|")
        for r in rows:
            print(f"| {r['tile']} | {r['name']} | {r['against']} | {r['mean_right']:.3f} | {r['mean_wrong']:.3f} | "
                  f"{r['auc']:.3f} |")
    else:
        rows = timing_rows(a.folders, seeds=a.seeds)
    if a.csv:
        write_csv(Path(a.csv) if Path(a.csv).is_absolute() else results_dir() / a.csv, rows)
    return rows


if __name__ == "__main__":
    main()
