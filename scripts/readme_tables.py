"""The README's generated tables: the results, from the committed tables in research/tables, and the test tiers'
counts, from pytest's collection (never typed by hand).

    python scripts/readme_tables.py            # rewrite the tables between the README's <!-- table:NAME --> markers
    python scripts/readme_tables.py --check    # exit 1 if the README's tables differ from the committed data
    python scripts/readme_tables.py --check --live    # also the test tiers' counts, collected now (about 15 s)

Every comparison is paired over seeds (same seeds, base model, prompts and sample budget). A cell is a win or a loss
at 95 % when its t-interval excludes zero; read many judges at once and some cells pass by chance, so each family
(one baseline, one setting) is also read with Holm's correction at family-wise 5 %, the p-values recovered from the
committed intervals (`recast.stats.interval_p_value`).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TABLES = ROOT / "research" / "tables"
MARK = re.compile(r"(<!-- table:(?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /table:(?P=name) -->)", re.S)
NAMES = {"method": "ReCAST", "recast": "ReCAST", "fixed": "fixed W", "uniform": "uniform", "reward_sum": "reward_sum"}


def _rows(path: Path) -> list[dict]:
    from recast.io import read_csv

    return read_csv(path)


def with_holm(rows: list[dict], family: tuple[str, ...]) -> list[dict]:
    """``rows`` (paired-difference rows: n, diff, ci_low, ci_high, verdict) with ``p`` and ``holm`` ("win", "loss"
    or "tie" after Holm's correction within each group of equal ``family`` columns) added."""
    from recast.stats import holm, interval_p_value

    out = [dict(r, p=interval_p_value(float(r["diff"]), float(r["ci_low"]), float(r["ci_high"]), int(r["n"])))
           for r in rows]
    groups: dict[tuple, list[int]] = {}
    for i, r in enumerate(out):
        groups.setdefault(tuple(r[c] for c in family), []).append(i)
    for idx in groups.values():
        for i, keep in zip(idx, holm([out[i]["p"] for i in idx])):
            out[i]["holm"] = out[i]["verdict"] if keep else "tie"
    return out


def _fmt(r: dict) -> str:
    f = "{:+.1f} [{:+.1f}, {:+.1f}]" if r["metric"].endswith("fid") else "{:+.3f} [{:+.3f}, {:+.3f}]"
    cell = f.format(float(r["diff"]), float(r["ci_low"]), float(r["ci_high"]))
    mark = {"win": " **W**", "loss": " *L*"}.get(r["verdict"], "")
    return cell + mark + (" (Holm)" if r["holm"] != "tie" else "")


def demo_table(results: Path = TABLES) -> str:
    """The demo's 5-seed paired table per setting: ReCAST − uniform and ReCAST − reward_sum on every held-out judge."""
    out = []
    for setting in ("compose", "quality"):
        rows = [r for r in _rows(results / f"demo5_{setting}_paired.csv") if r["metric"].startswith("judge/")]
        rows = with_holm(rows, ("baseline",))
        baselines = list(dict.fromkeys(r["baseline"] for r in rows))
        n = rows[0]["n"]
        out += [f"**{setting}** ({n} seeds, `research/tables/demo5_{setting}_paired.csv`)", "",
                "| judge | " + " | ".join(f"ReCAST − {b} [95 % CI]" for b in baselines) + " |",
                "|---|" + "---|" * len(baselines)]
        for metric in dict.fromkeys(r["metric"] for r in rows):
            by = {r["baseline"]: r for r in rows if r["metric"] == metric}
            lower = " (lower is better)" if metric.startswith(("judge/fid", "judge/defect_")) else ""
            out.append(f"| {metric.removeprefix('judge/')}{lower} | " + " | ".join(_fmt(by[b]) for b in baselines)
                       + " |")
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def _tally(rows: list[dict], key: str) -> str:
    return " / ".join(str(sum(r[key] == v for r in rows)) for v in ("win", "tie", "loss"))


def sweep_table(results: Path = TABLES) -> str:
    """The λ-sweep on 1,024 judged samples per run (3 seeds): win / tie / loss of each comparison per setting, at
    95 % per cell and after Holm within the family; then every cell that survives Holm."""
    sources = [("judge_eval_1024_compare.csv", None), ("fixed_w_glyph_compose_compare.csv", None)]
    rows = []
    for name, _ in sources:
        for r in _rows(results / name):
            rows.append(dict(r, source=name))
    rows = with_holm(rows, ("source", "method", "baseline", "setting"))
    fam = list(dict.fromkeys((r["source"], r["method"], r["baseline"], r["setting"]) for r in rows))
    out = ["| comparison | setting | cells | win / tie / loss at 95 % per cell | expected by chance | win / tie / loss "
           "after Holm | source |", "|---|---|---|---|---|---|---|"]
    survivors = []
    for source, method, baseline, setting in fam:
        cells = [r for r in rows if (r["source"], r["method"], r["baseline"], r["setting"]) ==
                 (source, method, baseline, setting)]
        out.append(f"| {NAMES[method]} − {NAMES[baseline]} | {setting} | {len(cells)} | {_tally(cells, 'verdict')} | "
                   f"{0.05 * len(cells):.1f} | {_tally(cells, 'holm')} | `{source}` |")
        survivors += [(NAMES[method], NAMES[baseline], c) for c in cells if c["holm"] != "tie"]
    out.append("")
    if survivors:
        out.append("Cells that survive Holm:")
        out.append("")
        for m, b, c in survivors:
            out.append(f"- {m} − {b}, {c['setting']} / {c['budget']} / {c['metric'].removeprefix('judge/')}: "
                       f"{_fmt(c)} ({c['holm']})")
    else:
        out.append("No cell survives Holm.")
    return "\n".join(out).rstrip() + "\n"


def study_table(results: Path = TABLES) -> str:
    """Stage A of the pre-registered study (research/study/results/primary.csv, written by
    `python -m recast.experiments.study analyse` from the committed per-seed data): our first reading of ReCAST
    (recast_live, called "recast" in the stage's data) against each arm on each setting's primary endpoint, with its
    interval and Holm's verdict over the six comparisons. The otca arm is left out here: as implemented it cancels the
    reward signal on most samples, so a verdict against it says little about OTCA (research/study/README.md)."""
    path = results.parent / "study" / "results" / "primary.csv"
    rows = [r for r in _rows(path) if r["baseline"] != "otca"]
    out = ["| setting (primary endpoint) | baseline | seeds | recast_live − baseline [95 % CI] | after Holm (over six) |",
           "|---|---|---|---|---|"]
    for r in rows:
        fid = r["metric"].endswith("fid")
        f = "{:+.1f} [{:+.1f}, {:+.1f}]" if fid else "{:+.3f} [{:+.3f}, {:+.3f}]"
        cell = f.format(float(r["diff"]), float(r["ci_low"]), float(r["ci_high"]))
        name = r["metric"].removeprefix("judge/") + (", lower is better" if fid else "")
        verdict = {"win": "**recast_live better**", "loss": "*recast_live worse*"}.get(r["verdict_holm"], "tie")
        out.append(f"| {r['setting']} ({name}) | {r['baseline']} | {r['n']} | {cell} | {verdict} |")
    return "\n".join(out) + "\n"


def study_f_table(results: Path = TABLES) -> str:
    """Stage F, the paper's own comparison (research/study/results/F/primary.csv, `python -m
    recast.experiments.study_f_analysis analyse` from the committed run records): ReCAST − each arm on P1 (the
    held-out-judge composite) and P2 (the aggregate training reward), paired over (budget, seed), Holm over the two.
    The arms' comparisons only: the kl_beta sensitivity check (the arms of `study_f.SENSITIVITY`) is read on
    the study page."""
    path = results.parent / "study" / "results" / "F" / "primary.csv"
    if not path.is_file():
        return "*Not yet analysed: the stage's runs are in progress (`python -m recast.experiments.study_f list`).*\n"
    out = ["| setting | comparison | endpoint | pairs | difference [95 % CI] | wins | after Holm (P1, P2) |",
           "|---|---|---|---|---|---|---|"]
    from recast.experiments.study_f import SENSITIVITY

    for r in _rows(path):
        if r["arm"] in SENSITIVITY:
            continue
        cell = "{:+.3f} [{:+.3f}, {:+.3f}]".format(float(r["diff"]), float(r["ci_low"]), float(r["ci_high"]))
        verdict = {"win": f"**{r['arm']} better**", "loss": f"*{r['arm']} worse*"}.get(r["verdict_holm"], "tie")
        out.append(f"| {r['setting']} | {r['arm']} − {r['baseline']} | {r['metric']} | {r['n']} | {cell} | "
                   f"{r['wins']}/{r['n']} | {verdict} |")
    return "\n".join(out) + "\n"


# ------------------------------------------------------------------------------------------------ the test tiers

TIERS_TIMES = ROOT / "benchmarks" / "results" / "test_tiers.json"  # measured wall times of the tiers
# tier -> (the command a user types, what it checks); what each runs is read from the Makefile
TIERS = {
    "all (CI)": ("make test", "every tier below"),
    "unit": ("make test-fast", "the library's properties and closed forms"),
    "slow": ("make test-slow", "library tests that train, spawn processes, build the wheel, run the paper path"),
    "research": ("make test-research", "pins the committed research tables, probe scripts and probe worlds"),
    "notebook": ("make test-notebooks", "every notebook end to end with its CPU-small defaults"),
    "gpu": ("pytest -m gpu", "CUDA-only checks, skipped without a GPU"),
}


def tier_selection(command: str, makefile: Path = ROOT / "Makefile") -> tuple[tuple[str, ...], str]:
    """The folders a tier's command collects and its marker expression ("" = every test), from the Makefile's
    recipe for ``make TARGET`` or from a ``pytest -m EXPR`` command.

    Raises:
        ValueError: a make target without a pytest recipe.
    """
    if command.startswith("pytest"):
        args = command
    else:
        target = command.split()[1]
        recipe = re.search(rf"^{re.escape(target)}:[^\n]*\n((?:\t[^\n]*\n)+)", makefile.read_text(), re.M)
        args = next((line for line in (recipe.group(1).splitlines() if recipe else []) if "pytest" in line), None)
        if args is None:
            raise ValueError(f"{makefile}: no pytest command in the recipe of {target!r}")
    args = args.split("pytest", 1)[1]  # pytest's own arguments (not `python -m pytest`'s -m)
    expr = re.search(r'-m\s+"([^"]+)"|-m\s+(\w+)', args)
    paths = tuple(w for w in args.split() if w in ("tests", "notebooks")) or ("tests",)
    return paths, (expr.group(1) or expr.group(2)) if expr else ""


def collect_markers(root: Path = ROOT) -> list[tuple[str, frozenset[str]]]:
    """(node id, marker names) of every test `make test` collects, as collected (tests/conftest.py adds the tier
    markers). Runs pytest's collection in this process: about 15 s."""
    import pytest

    class Record:
        items: list = []

        def pytest_collection_finish(self, session):
            Record.items = [(i.nodeid, frozenset(m.name for m in i.iter_markers())) for i in session.items]

    sys.path.insert(0, str(root))  # as `python -m pytest` from the root has it: tests import tests.helpers
    try:
        code = pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", "--nbmake", "--rootdir", str(root),
                            str(root / "tests"), str(root / "notebooks")], plugins=[Record()])
    finally:
        sys.path.remove(str(root))
    if code != 0:
        raise RuntimeError(f"pytest could not collect the tests (exit {int(code)})")
    return Record.items


class _Markers(dict):
    """Marker names as booleans for a marker expression (absent markers are False)."""

    def __missing__(self, key):
        return False


def tier_counts(items: list[tuple[str, frozenset[str]]], makefile: Path = ROOT / "Makefile") -> dict[str, int]:
    """Tier -> the number of its tests among ``items`` (`collect_markers`), each tier selected as its command
    selects (`tier_selection`)."""
    out = {}
    for tier, (command, _) in TIERS.items():
        paths, expr = tier_selection(command, makefile)
        out[tier] = sum(node.startswith(tuple(f"{p}/" for p in paths)) and
                        (not expr or eval(expr, {"__builtins__": {}}, _Markers(dict.fromkeys(marks, True))))
                        for node, marks in items)
    return out


def _duration(seconds: float, about: bool) -> str:
    text = f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min".replace(".0 min", " min")
    return f"about {text}" if about else text


def tests_table(results: Path = TABLES, counts: dict[str, int] | None = None) -> str:
    """The test tiers with their counts as collected now and their measured times (`TIERS_TIMES`); a time measured
    when the tier held another number of tests says so."""
    import json

    counts = counts if counts is not None else tier_counts(collect_markers())
    times = json.loads(TIERS_TIMES.read_text())
    out = ["| tier | command | what | tests | time on 2 cores |", "| --- | --- | --- | --- | --- |"]
    for tier, (command, what) in TIERS.items():
        t = times.get(tier)
        when = ""
        if t:
            notes = [t["on"]] if t.get("on") else []
            if t.get("tests") is None:
                notes.append("its count then not recorded")
            elif t["tests"] != counts[tier]:
                notes.append(f"timed at {t['tests']:,} tests")
            when = _duration(t["seconds"], t.get("about", False)) + (f" ({'; '.join(notes)})" if notes else "")
        out.append(f"| {tier} | `{command}` | {what} | {counts[tier]:,} | {when} |")
    return "\n".join(out) + "\n"


TABLE_FUNCS = {"demo": demo_table, "sweep": sweep_table, "study": study_table, "study_f": study_f_table,
               "tests": tests_table}
LIVE = ("tests",)  # tables made from the working tree, not from committed data: slow, so rendered only on request


def render(text: str, results: Path = TABLES, *, live: bool = False) -> str:
    """``text`` with the body between each ``<!-- table:NAME -->`` / ``<!-- /table:NAME -->`` pair regenerated
    (the `LIVE` tables only with ``live``; otherwise they are left as they are).

    Raises:
        ValueError: a marker naming no table.
    """
    def fill(m: re.Match) -> str:
        if m["name"] not in TABLE_FUNCS:
            raise ValueError(f"unknown table {m['name']!r}; known: {', '.join(TABLE_FUNCS)}")
        if m["name"] in LIVE and not live:
            return m.group(0)
        return m.group(1) + TABLE_FUNCS[m["name"]](results) + m.group(4)

    return MARK.sub(fill, text)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="only compare; exit 1 when the README is stale")
    p.add_argument("--live", action="store_true", help="with --check, also the tables made from the working tree "
                   "(the test counts: about 15 s); writing always regenerates them")
    p.add_argument("--readme", default=str(ROOT / "README.md"))
    a = p.parse_args(argv)
    path = Path(a.readme)
    text = path.read_text()
    new = render(text, live=a.live or not a.check)
    if a.check:
        if new != text:
            print(f"{path}: tables differ from research/tables; run python scripts/readme_tables.py", file=sys.stderr)
            return 1
        return 0
    if new != text:
        path.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
