"""The palette round (research/rounds/02-palette.md): the equal-energy world `research/worlds/probe_equal_energy`, its
audit, where its base model settles each colour's quadrant, and what position_flat alone does to colour there. Each
committed table is re-derived where CI can afford it, and read for exactly what that page says of it."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest

from tests.helpers import load_script

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "research" / "tables"
WORLD = ROOT / "research" / "worlds" / "probe_equal_energy"


def _probe_rows(name: str) -> dict[tuple[str, str], dict]:
    with open(RESULTS / name, newline="") as f:
        return {(r["part"], r["colour"]): {k: float(v) for k, v in r.items() if k not in ("part", "colour")}
                for r in csv.DictReader(f)}


def test_the_palette_world_s_audit_is_reproduced_and_what_the_readme_reads_from_it():
    """256 test prompts, ODE 10 steps, seed 0, as the committed base's audit. Every band holds but speckle (0.195,
    just under 0.2); of the setting rewards' agreements digit (0.795) and realism_centred (0.714) fall under 0.8."""
    from recast.worlds.digits import data
    from recast.worlds.digits.audit import audit_world, out_of_band
    from recast.worlds.digits.rewards import SETTINGS
    from recast.worlds.digits.model import load_world

    world = load_world(WORLD)
    assert world.palette == "equal_energy" and data.palette_name() == "equal_energy"
    audit = audit_world(world, n=256, split="test", num_steps=10, seed=0)
    committed = json.loads((RESULTS / "audit_equal_energy.json").read_text())
    for part in ("judges", "agreement"):
        fresh = getattr(audit, part)
        assert fresh.keys() == committed[part].keys()
        for k, v in committed[part].items():
            assert math.isclose(fresh[k], v, abs_tol=1e-6), (part, k)
    assert set(out_of_band(audit)) == {"defect_speckle"} and 0.19 < audit.judges["defect_speckle"] < 0.2
    setting = {name for rewards in SETTINGS.values() for name in rewards}
    assert {k for k in setting if audit.agreement[k] < 0.8} == {"digit", "realism_centred"}
    assert 0.79 < audit.agreement["digit"] < 0.8


def test_the_measurement_is_colour_blind_in_the_equal_energy_palette_and_was_not_quite_in_the_primary_one():
    """The probe's ``real`` rows (the same glyphs, defects and noise in each colour), re-derived in the palette
    probe's palette: the position judge passes every canvas and position_flat differs by colour by under 0.001. In
    the primary palette yellow's real canvases score 0.011 higher than the others (the max over two noisy inked
    channels), so the measurement itself leaned to yellow a little there."""
    from recast.worlds.digits import data

    probe = load_script("position_colour_probe")
    with data.palette("equal_energy"):
        fresh = probe.real_rows(4096, 5)
    committed = _probe_rows("position_colour_probe_equal_energy.csv")
    for row in fresh:
        want = committed["real", row["colour"]]
        for k in ("position judge", "position_flat", "position", "digit judge", "size judge"):
            assert math.isclose(row[k], want[k], abs_tol=1e-6), (row["colour"], k)
    flat = [r["position_flat"] for r in fresh]
    assert all(r["position judge"] == 1.0 for r in fresh) and max(flat) - min(flat) < 0.001
    primary = _probe_rows("position_colour_probe.csv")
    lean = primary["real", "yellow"]["position_flat"] - max(primary["real", c]["position_flat"]
                                                             for c in ("red", "green", "blue"))
    assert 0.01 < lean < 0.012


def _drawn(name: str) -> dict[str, dict[str, float]]:
    """policy -> its row of a committed `research/probes/alone_colour_probe.py` table."""
    with open(RESULTS / name, newline="") as f:
        return {r["policy"]: {k: float(v) for k, v in r.items() if k != "policy"} for r in csv.DictReader(f)}


def test_committed_alone_tables_position_flat_s_colour_cost_halves_and_ties_the_placebo_s():
    """position_flat, colour and the placebo alone on the palette world (uniform, cpu preset, seeds 0-4, 256 samples
    per policy), beside position_flat and the placebo re-trained on the committed world in the same session.
    On the committed world position_flat's rows equal the committed peak-clipping round's (its placebo, whose reward
    hashes pixels, does not: see `test_the_placebo_runs_are_machine_dependent_and_position_flat_s_are_not`). On the
    palette world the colour cost halves (-0.077 -> -0.038) and equals the placebo's own drift (-0.037), but still
    exceeds one seed-std (0.032), so position_flat fails the rule there, as does the placebo; colour passes."""
    from tests.test_alone import _committed_alone_table, _verdicts, _vs_placebo, _worse_judges

    runs, table = _committed_alone_table("alone_equal_energy_reeval256")
    primary_runs, primary = _committed_alone_table("alone_primary_position_reeval256")
    assert _verdicts(table) == {"position_flat": False, "color": True, "placebo": False}
    assert _worse_judges(table) == {"position_flat": ["judge/color"], "placebo": ["judge/color"]}
    assert _verdicts(primary) == {"position_flat": False, "placebo": False}
    assert _worse_judges(primary) == {"position_flat": ["judge/color"], "placebo": ["judge/defect_speckle"]}
    cost = {name: {(r["reward"], r["judge"]): r for r in t} for name, t in (("palette", table), ("primary", primary))}
    pal, pri = cost["palette"]["position_flat", "judge/color"], cost["primary"]["position_flat", "judge/color"]
    assert pri["delta"] == pytest.approx(-0.0773, abs=1e-4) and pal["delta"] == pytest.approx(-0.0383, abs=1e-4)
    assert pal["seed_std"] < -pal["delta"] < 1.25 * pal["seed_std"]  # fails by a hair
    placebo = cost["palette"]["placebo", "judge/color"]
    assert abs(pal["delta"] - placebo["delta"]) < 0.002 and -placebo["delta"] > placebo["seed_std"]
    assert cost["palette"]["position_flat", "judge/position"]["delta"] > 0.35  # the matching judge still rises
    vs, vs_primary = _vs_placebo(runs), _vs_placebo(primary_runs)
    assert vs["position_flat", "judge/color"] == vs_primary["position_flat", "judge/color"] == "tie"
    assert vs["color", "judge/color"] == "better" and vs["position_flat", "judge/position"] == "better"
    assert not [k for k, v in vs.items() if v == "worse"]


def test_the_placebo_runs_are_machine_dependent_and_position_flat_s_are_not():
    """The re-trained committed-world runs: position_flat's judges equal the peak-clipping round's exactly (its
    Fréchet distance to 1e-5 relative), while the placebo's differ, because its reward hashes the pixels quantised to
    1/255 and one last-bit difference re-draws it. The placebo stays a valid null draw, not a reproducible one."""
    from recast.io import read_csv

    old = {(r["budget"], r["seed"]): r for r in read_csv(RESULTS / "alone_clipped_reeval256_runs.csv")}
    new = {(r["budget"], r["seed"]): r for r in read_csv(RESULTS / "alone_primary_position_reeval256_runs.csv")}
    assert {k[0] for k in new} == {"position_flat", "placebo"} and len(new) == 10
    moved = 0
    for key, row in new.items():
        judges = [k for k in row if k.startswith(("judge/", "base:judge/"))]
        for k in judges:
            a, b = float(row[k]), float(old[key][k])
            if key[0] == "placebo" and not k.startswith("base:"):
                moved += a != b
            elif k.endswith("fid"):
                assert a == pytest.approx(b, rel=1e-5), (key, k)
            else:
                assert a == b, (key, k)
    assert moved >= 25  # of the placebo's 45 final judges


def test_committed_drawn_colours_the_yellow_collapse_weakens_in_the_equal_energy_palette():
    """`research/probes/alone_colour_probe.py` on the four sets of runs (256 test prompts, one noise for every policy):
    position_flat alone draws yellow in 0.54 of samples on average on the committed world (base 0.28; every seed
    above 0.37) and 0.35 on the palette world (base 0.23; seeds 1 and 2 above 0.45, seeds 0 and 4 at the base's
    share). The placebos stay within 0.05 of their base's yellow share on average."""
    def mean_share(table, colour="yellow"):
        return sum(r[f"drawn {colour}"] for p, r in table.items() if p != "base model") / 5

    primary = _drawn("alone_colour_primary_position_flat.csv")
    palette = _drawn("alone_colour_equal_energy_position_flat.csv")
    assert len(primary) == len(palette) == 6
    assert mean_share(primary) == pytest.approx(0.535, abs=0.002) and primary["base model"]["drawn yellow"] < 0.29
    assert min(r["drawn yellow"] for p, r in primary.items() if p != "base model") > 0.37
    assert mean_share(palette) == pytest.approx(0.351, abs=0.002) and palette["base model"]["drawn yellow"] < 0.23
    assert [p for p, r in palette.items() if p != "base model" and r["drawn yellow"] > 0.45] == ["seed 1", "seed 2"]
    for name in ("alone_colour_primary_placebo.csv", "alone_colour_equal_energy_placebo.csv"):
        placebo = _drawn(name)
        assert abs(mean_share(placebo) - placebo["base model"]["drawn yellow"]) < 0.05, name


def test_committed_model_rows_equal_energy_removes_most_of_the_settling_spread():
    """4,096 base samples per world (seed 5), by drawn colour: the earliest-to-latest spread of the mean settled step
    shrinks from 1.81 to 0.32 steps; yellow no longer leads red by more than the standard error of their difference
    (it led every colour by a step, more than nine standard errors), blue stays last by about three; yellow's
    position judge lead is 1.0 to 1.6 standard errors over each colour."""
    primary = {c: r for (part, c), r in _probe_rows("position_colour_probe.csv").items() if part == "model"}
    palette = {c: r for (part, c), r in _probe_rows("position_colour_probe_equal_energy.csv").items()
               if part == "model"}
    spread = {name: max(r["settled step"] for r in rows.values()) - min(r["settled step"] for r in rows.values())
              for name, rows in (("primary", primary), ("palette", palette))}
    assert spread["primary"] == pytest.approx(1.81, abs=0.005) and spread["palette"] == pytest.approx(0.32, abs=0.005)

    def se(rows, a, b, key="settled step s.e."):
        return math.hypot(rows[a][key], rows[b][key])

    assert all(primary["yellow"]["settled step"] + 9 * se(primary, "yellow", c) < primary[c]["settled step"]
               for c in ("red", "green", "blue"))
    assert 0 < palette["red"]["settled step"] - palette["yellow"]["settled step"] < se(palette, "red", "yellow")
    assert 2.5 < (palette["blue"]["settled step"] - palette["yellow"]["settled step"]) / se(palette, "blue", "yellow")
    lead = [(palette["yellow"]["position judge"] - palette[c]["position judge"])
            / se(palette, "yellow", c, "position judge s.e.") for c in ("red", "green", "blue")]
    assert all(1.0 < z < 1.6 for z in lead)


def test_committed_pooled_table_position_flat_passes_on_512_samples_and_the_placebo_fails_on_colour():
    """The palette world's runs on two draws of 256 pooled (`research/probes/alone_draws.py`): position_flat passes the rule
    (colour -0.023 +- 0.034), the placebo still fails on colour (-0.029 +- 0.023), and against the placebo
    position_flat's colour is a tie centred near zero. The committed world's pooled table fails position_flat, while
    against the placebo it calls only speck_free's blur worse."""
    from recast.experiments.alone import alone_table, pool_draws
    from recast.io import read_csv
    from tests.test_alone import _verdicts, _vs_placebo, _worse_judges

    rows = read_csv(RESULTS / "alone_equal_energy_pooled512_runs.csv")
    assert sorted({int(r["draw"]) for r in rows}) == [0, 1] and len(rows) == 30
    pooled = pool_draws(rows)
    table = alone_table(pooled)
    committed = read_csv(RESULTS / "alone_equal_energy_pooled512.csv")
    assert [(r["reward"], r["judge"], r["improved"], r["worse"]) for r in table] == \
        [(r["reward"], r["judge"], r["improved"], r["worse"]) for r in committed]
    assert _verdicts(table) == {"position_flat": True, "color": True, "placebo": False}
    assert _worse_judges(table) == {"placebo": ["judge/color"]}
    colour = {r["reward"]: r for r in table if r["judge"] == "judge/color"}
    assert colour["position_flat"]["delta"] == pytest.approx(-0.0230, abs=1e-4)
    assert colour["placebo"]["delta"] == pytest.approx(-0.0289, abs=1e-4)
    vs = _vs_placebo(pooled)
    assert vs["position_flat", "judge/color"] == "tie" and not [k for k, v in vs.items() if v == "worse"]
    primary = {(r["reward"], r["judge"]): r for r in read_csv(RESULTS / "alone_clipped_pooled512.csv")}
    assert primary["position_flat", "judge/color"]["worse"] in (True, "True")
    # the committed world against its placebo instead: only speck_free's blur is worse, at 256 and at 512 samples
    for name in ("alone_clipped_reeval256_vs_placebo.csv", "alone_clipped_pooled512_vs_placebo.csv"):
        worse = [(r["reward"], r["judge"]) for r in read_csv(RESULTS / name) if r["verdict"] == "worse"]
        assert worse == [("speck_free", "judge/defect_blur")], name
