"""Does a low-frequency carrier move colour and position into the noisiest third? The tile probe (issue 8, item 3).

On the committed world colour and position are carried by the glyph's strokes alone, and the ground truth decides
them at grid column 2.06 and 2.13 of 0..5, where the thirds need ≤ 1.5. A noisy canvas reveals a signal once its
energy against the noise is large enough, and a glyph's ink is a few dozen pixels of unknown shape. The tile world
(`recast.worlds.digits.data.render(tile=s)`) adds a plate of the prompted colour under the glyph, filling its quadrant: 144
pixels of known shape carrying exactly colour and position. This probe measures, on base models fine-tuned with the
committed stage-4 recipe plus ``--tile s`` (data/README.md, "The tile probe"), whether that moves the attributes'
gains earlier and the textures' not, and what it costs the bands and the agreement.

    python research/probes/tile_timing_probe.py rewards            # do the rewards and judges still read tiled canvases? 8 s
    python research/probes/tile_timing_probe.py bands data/digit_base runs/base_tile0.2 research/worlds/probe_tile0.4      # 40 s
    python research/probes/tile_timing_probe.py timing runs/tile_ends/tile0 runs/tile_ends/tile0.2 runs/tile_ends/tile0.4

The rewards and judges that read the glyph were built on plate-free canvases. `unplate` removes a plate of known
level, ``clamp((x - s) / (1 - s), 0, 1)``, and ``unplated:<name>@<s>`` is reward (or ``verdict:<judge>``) ``name``
read through it; colour and position read the raw canvas, since the plate is their carrier.

``rewards`` renders real canvases at each tile level and writes ``research/tables/tile_rewards.csv``: for each reward,
raw and (glyph rewards) unplated, its mean on correct canvases and the AUC with which it separates them from canvases
that are wrong on its attribute (another colour, another quadrant, another size, another digit) or carry its defect
(blur, speckle, fade); and each held-out judge's pass rate on the correct canvases. ``bands`` samples each model
folder as `recast.worlds.digits.audit` does and writes ``research/tables/tile_bands.csv``. ``timing`` scores the ends that
``research/probes/timing_cache.py record --world <model folder>`` stored (one folder per world, batches ``seed_<k>.pt``) and
writes ``research/tables/tile_timing.csv``: the centre of mass of every reward's gains with its 5-95 % bootstrap band,
per world and batch, raw and unplated.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "research" / "probes"))

# reward -> how a canvas is made wrong for it: an attribute to change, or a defect of recast.worlds.digits.corruption.DEFECTS
WRONG: dict[str, str] = {
    "color": "color", "position_flat": "position", "size_half_max": "size", "digit": "digit",
    "sharpness": "blur", "speck_free": "speckle", "contrast": "fade",
}
JUDGES: tuple[str, ...] = ("color", "position", "size", "digit", "not_blur", "not_speckle", "not_fade")
TIMING_REWARDS: tuple[str, ...] = ("color", "position_flat", "size_half_max", "digit", "sharpness", "speck_free",
                                   "verdict:not_blur", "verdict:not_speckle")
# the rewards that read the glyph, not its colour or place: in a tile world they (and every judge) need the plate
# removed first, which ``unplated:<name>@<tile>`` does
GLYPH_REWARDS: tuple[str, ...] = ("size_half_max", "digit", "sharpness", "speck_free")
# the rewards whose agreement `bands` reports: those with a matching judge when the probe ran (2026-12-03); later
# candidates (contrast_flat, wash_free) are not scored, so the committed tile_bands.csv stays the probe's record
BAND_REWARDS: tuple[str, ...] = ("digit", "color", "position", "position_flat", "size", "size_half_max", "sharpness",
                                 "clean", "clean_mass", "speck_free", "speck_free_abs", "sharpness_steep",
                                 "sharpness_steep_hinged", "contrast", "realism")


def unplate(images, tile: float):
    """Remove a tile world's plate: ``clamp((x - tile) / (1 - tile), 0, 1)`` per channel.

    On a real tiled canvas (pure-primary colours, ``ink = colour * max(tile, glyph)``) this returns the plain
    canvas with every glyph value below ``tile`` set to 0, and leaves pixels off the plate at 0; at ``tile = 0`` it
    is the identity (after the judges' own clamp to [0, 1])."""
    if not 0.0 <= tile < 1.0:
        raise ValueError(f"tile must be in [0, 1), got {tile!r}")
    return _remove_level(images, tile)


def _remove_level(images, level):
    """``clamp((x - level) / (1 - level), 0, 1)``: a float level, or one per canvas shaped ``(B, 1, 1, 1)``."""
    return ((images - level) / (1.0 - level)).clamp(0.0, 1.0)


def plate_levels(images):
    """The plate level each canvas draws: the largest over the four quadrants of the 10 % quantile of the ink
    intensity (`recast.worlds.digits.data.ink_intensity`). On a real tiled canvas fewer than 90 % of the quadrant's pixels
    carry glyph ink above the plate, so this is exactly the tile level; on a plain canvas it is 0. A model's samples
    draw their plates at varying levels, which `unplate_drawn` removes one by one; the quantile, not the minimum,
    keeps a sample's pixel noise from setting the level."""
    import torch

    from recast.worlds.digits import data

    ink = data.ink_intensity(images.float())
    low = [ink[:, y0:y1, x0:x1].flatten(1).quantile(0.1, dim=1) for (y0, x0, y1, x1) in data.POSITIONS.values()]
    return torch.stack(low, dim=1).amax(dim=1)


def unplate_drawn(images, levels=None, cap: float = 0.95):
    """`unplate` at each canvas' own level (``levels``, `plate_levels` by default; capped below 1) instead of the
    nominal tile level."""
    levels = plate_levels(images) if levels is None else levels
    return _remove_level(images.float(), levels.clamp(0.0, cap)[:, None, None, None])


def unplated(name: str, tile: float):
    """Reward or ``verdict:<judge>`` ``name`` read on `unplate`d canvases: ``(images, prompts) -> float (B,)``."""
    import torch

    from recast.worlds.digits.judges.agreement import verdict_reward
    from recast.worlds.digits.rewards import get

    if not 0.0 <= tile < 1.0:
        raise ValueError(f"tile must be in [0, 1), got {tile!r}")
    fn = verdict_reward(name.split(":", 1)[1]) if name.startswith("verdict:") else get(name)(torch.device("cpu"))

    def reward(images, prompts):
        return fn(unplate(images.float(), tile), prompts)

    reward.__name__ = f"unplated:{name}@{tile:g}"
    return reward


def __getattr__(attr: str):
    """``unplated:<name>@<tile>`` as a module attribute, so ``timing_cache.py score --module tile_timing_probe``
    scores it by name."""
    if attr.startswith("unplated:") and "@" in attr:
        name, tile = attr[len("unplated:"):].rsplit("@", 1)
        return unplated(name, float(tile))
    raise AttributeError(attr)


def wrong_canvases(prompts: list[str], what: str, tile: float, seed: int):
    """Canvases of ``prompts`` that are wrong on attribute ``what`` (a uniformly random other value), or that carry
    defect ``what`` at its `DEFECTS` strength; the glyph and jitter draws are those of the correct canvases."""
    import torch

    from recast.worlds.digits import corruption, data

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
    """The ``rewards`` table: one row per (tile, reward) and per (tile, judge), raw (``front="raw"``) and, for the
    glyph rewards and every judge, read through `unplate` (``front="unplated"``)."""
    import torch
    from sklearn.metrics import roc_auc_score

    from recast.worlds.digits import data
    from recast.worlds.digits.judges.agreement import judge_verdicts
    from recast.worlds.digits.rewards import get

    prompts = data.sample_prompts(n, split="train", generator=torch.Generator().manual_seed(seed))
    rows = []
    for tile in tiles:
        right = data.render(prompts, generator=torch.Generator().manual_seed(seed), tile=tile)
        for front in ("raw", "unplated"):
            view = (lambda x: x) if front == "raw" else (lambda x, t=tile: unplate(x, t))
            verdicts = judge_verdicts(view(right), prompts)
            for name, what in WRONG.items():
                if front == "unplated" and name not in GLYPH_REWARDS:
                    continue
                fn = get(name)("cpu")
                r_right = fn(view(right), prompts).double()
                r_wrong = fn(view(wrong_canvases(prompts, what, tile, seed)), prompts).double()
                scores = torch.cat([r_right, r_wrong]).numpy()
                labels = [1] * n + [0] * n
                rows.append({"tile": tile, "front": front, "kind": "reward", "name": name, "against": what,
                             "mean_right": float(r_right.mean()), "mean_wrong": float(r_wrong.mean()),
                             "auc": float(roc_auc_score(labels, scores)), "n": n})
            for key in JUDGES:
                rows.append({"tile": tile, "front": front, "kind": "judge", "name": key, "against": "",
                             "mean_right": float(verdicts[key].float().mean()), "mean_wrong": float("nan"),
                             "auc": float("nan"), "n": n})
    return rows


def timing_rows(folders: list[str], names=TIMING_REWARDS, seeds: str = "0,1", unplated_too: bool = True) -> list[dict]:
    """The ``timing`` table: `timing_cache.py score` of every folder, with the folder and its world; for a tile
    world (``meta["tile"]`` or a folder named ``tile<s>``) also the glyph rewards and judge verdicts read through
    `unplate` (``unplated:<name>@<s>``)."""
    import timing_cache

    from recast.informativeness.ends import RolloutEnds

    rows = []
    for folder in folders:
        have = [s for s in seeds.split(",") if (Path(folder) / f"seed_{s}.pt").is_file()]
        if not have:
            raise FileNotFoundError(f"{folder}: no seed_<k>.pt for seeds {seeds} (record them with "
                                    "research/probes/timing_cache.py record --world ...)")
        world = RolloutEnds.load(Path(folder) / f"seed_{have[0]}.pt").meta.get("world", "data/digit_base")
        tile = world_tile(world)
        extra = [f"unplated:{n}@{tile:g}" for n in names
                 if n in GLYPH_REWARDS or n.startswith("verdict:")] if unplated_too and tile > 0 else []
        print(f"\n{folder} ({world}, tile {tile:g})")
        for row in timing_cache.main(["score", *names, *extra, "--module", "tile_timing_probe", "--dir", str(folder),
                                      "--seeds", ",".join(have)]):
            rows.append({"world": world, "tile": tile, "folder": Path(folder).name, **row})
    return rows


def band_rows(folders: list[str], n: int = 256, seed: int = 0, split: str = "test") -> list[dict]:
    """The ``bands`` table: `recast.worlds.digits.audit`'s judge accuracies and defect rates of each world's ODE samples
    (10 steps, shift 3) beside `BANDS`, the judges reading `unplate`d samples (and, on a tile world, the raw ones,
    and ``front="drawn"``: `unplate_drawn` at each sample's own plate level, whose mean and s.d. are the
    ``kind="plate"`` rows); and every reward's AUC against the unplated judges, raw and (glyph rewards) unplated.
    On the committed world (tile 0) every row equals `python -m recast.worlds.digits.audit data/digit_base --n 256`."""
    from recast.worlds.digits import rewards as R
    from recast.worlds.digits.audit import BANDS, sample_world
    from recast.worlds.digits.judges.agreement import reward_judge_agreement
    from recast.worlds.digits.judges.attributes import judge_report
    from recast.worlds.digits.judges.defects import defect_report
    from recast.world import load_world

    rows = []
    for folder in folders:
        path = Path(folder) if Path(folder).is_absolute() else ROOT / folder
        if not (path / "world.json").is_file():
            raise FileNotFoundError(f"{folder}: no digit-world model there (world.json missing)")
        tile = world_tile(folder)
        images, prompts = sample_world(load_world(f"digits:{path}"), n=n, split=split, seed=seed)
        clamped = images.clamp(0, 1)
        view = unplate(clamped, tile)
        fronts = [("unplated", view)]
        if tile > 0:  # on the committed world both are the unplated canvases
            levels = plate_levels(clamped)
            fronts += [("raw", images), ("drawn", unplate_drawn(clamped, levels))]
            for k, v in (("level_mean", levels.double().mean()), ("level_sd", levels.double().std())):
                rows.append({"world": folder, "tile": tile, "kind": "plate", "name": k, "front": "raw",
                             "value": float(v), "band_lo": float("nan"), "band_hi": float("nan"), "n": n})
        for front, canvases in fronts:
            judges = {k: v for k, v in judge_report(canvases, prompts).as_dict().items() if k != "n"}
            judges.update({f"defect_{k}": v for k, v in defect_report(canvases).as_dict().items() if k != "n"})
            for k, v in judges.items():
                lo, hi = BANDS.get(k, (float("nan"), float("nan")))
                rows.append({"world": folder, "tile": tile, "kind": "judge", "name": k, "front": front,
                             "value": float(v), "band_lo": lo, "band_hi": hi, "n": n})
        for front, canvases in (("raw", images), ("unplated", view)):
            names = [m for m in BAND_REWARDS if front == "raw" or m in GLYPH_REWARDS]
            scores = {m: R.get(m)("cpu")(canvases, prompts) for m in names}
            # the judges read the unplated samples in both rows: only the reward's front differs
            for m, a in reward_judge_agreement(view, prompts, scores).items():
                rows.append({"world": folder, "tile": tile, "kind": "agreement", "name": m, "front": front,
                             "value": float(a.auc), "band_lo": 0.8, "band_hi": 1.0, "n": n})
    return rows


def world_tile(world: str) -> float:
    """The tile level of a model folder: ``tile`` in its ``pretrain_history.json`` config when it records one, else
    the number after ``tile`` in its name (``runs/base_tile0.4``), else 0 (the committed world)."""
    import json
    import re

    path = Path(world) if Path(world).is_absolute() else ROOT / world
    hist = path / "pretrain_history.json"
    if hist.is_file():
        config = json.loads(hist.read_text()).get("config", {})
        if "tile" in config:
            return float(config["tile"])
    m = re.search(r"tile([0-9.]+)$", path.name)
    return float(m.group(1)) if m else 0.0


def main(argv: list[str] | None = None) -> list[dict]:
    from recast.io import write_csv
    from recast.experiments.sweep import results_dir

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    rw = sub.add_parser("rewards", help="rewards and judges on real tiled canvases")
    rw.add_argument("--tiles", default="0,0.2,0.4")
    rw.add_argument("--n", type=int, default=512)
    rw.add_argument("--csv", default="tile_rewards.csv")
    bd = sub.add_parser("bands", help="judge accuracies, defect rates and agreement of each world's ODE samples")
    bd.add_argument("folders", nargs="+", help="model folders, e.g. data/digit_base runs/base_tile0.4")
    bd.add_argument("--n", type=int, default=256)
    bd.add_argument("--seed", type=int, default=0)
    bd.add_argument("--csv", default="tile_bands.csv")
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
            print(f"| {r['tile']} {r['front']} | {r['name']} | {r['against']} | {r['mean_right']:.3f} | {r['mean_wrong']:.3f} | "
                  f"{r['auc']:.3f} |")
    elif a.cmd == "bands":
        rows = band_rows(a.folders, n=a.n, seed=a.seed)
        print("| world | tile | judge accuracy / defect rate, or reward AUC | front | value | band |")
        print("|---|---|---|---|---|---|")
        for r in rows:
            print(f"| {r['world']} | {r['tile']:g} | {r['kind']} {r['name']} | {r['front']} | {r['value']:.3f} | "
                  f"{r['band_lo']:g}-{r['band_hi']:g} |")
    else:
        rows = timing_rows(a.folders, seeds=a.seeds)
    if a.csv:
        write_csv(Path(a.csv) if Path(a.csv).is_absolute() else results_dir() / a.csv, rows)
    return rows


if __name__ == "__main__":
    main()
