"""The README's generated parts: its results tables follow from the committed data, and its code runs.

Nothing here compares prose. The tables between ``<!-- table:NAME -->`` markers are regenerated from
`research/tables` by `scripts/readme_tables.py` and compared as data; the Python blocks of "ReCAST in your own
trainer" are executed as written.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"


def _tables_module():
    spec = importlib.util.spec_from_file_location("readme_tables", ROOT / "scripts" / "readme_tables.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _section(text: str, heading: str) -> str:
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end > 0 else None]


def test_readme_tables_are_regenerated_from_the_committed_data():
    """Every marked table is exactly what `readme_tables.render` makes of research/tables (run `make readme-tables`
    after changing a committed table)."""
    mod = _tables_module()
    text = README.read_text()
    names = re.findall(r"<!-- table:([\w-]+) -->", text)
    assert names and set(names) <= set(mod.TABLE_FUNCS), names
    assert mod.render(text) == text, "README tables are stale: run `python scripts/readme_tables.py`"
    assert mod.main(["--check"]) == 0


def test_render_refuses_an_unknown_table():
    mod = _tables_module()
    with pytest.raises(ValueError, match="unknown table 'nope'"):
        mod.render("<!-- table:nope -->\nx\n<!-- /table:nope -->\n")


def test_holm_column_keeps_only_what_survives_the_family(tmp_path):
    """`with_holm` on a synthetic family: p-values come back from the intervals, and Holm's thresholds α/m, α/(m−1),
    ... decide which per-cell verdicts stay (closed form on three cells of n = 5 pairs)."""
    from scipy.stats import t

    mod = _tables_module()
    q = float(t.ppf(0.975, 4))
    # se = 1 for every cell: the t statistic is the difference itself, p = 2 sf(|d|, 4)
    rows = [dict(n=5, diff=d, ci_low=d - q, ci_high=d + q, verdict="win" if d - q > 0 else "tie", fam="a")
            for d in (10.0, 3.0, 0.5)]
    out = mod.with_holm(rows, ("fam",))
    ps = [2 * float(t.sf(abs(r["diff"]), 4)) for r in rows]
    assert [pytest.approx(p) for p in ps] == [r["p"] for r in out]
    assert ps[0] < 0.05 / 3 and ps[1] > 0.05 / 2 and ps[1] < 0.05  # so the second is a win per cell, not after Holm
    assert [r["verdict"] for r in out] == ["win", "win", "tie"]
    assert [r["holm"] for r in out] == ["win", "tie", "tie"]


def test_study_f_table_leaves_the_sensitivity_check_to_the_study_page(tmp_path):
    """The README's stage-F table lists the arms' comparisons, each with its Holm verdict, and not the kl_beta
    check's pair (`recast_kl2 − reading_kl2`), which the study page reads beside the comparison it checks."""
    mod = _tables_module()
    out = tmp_path / "study" / "results" / "F"
    out.mkdir(parents=True)
    head = "setting,arm,baseline,metric,n,diff,ci_low,ci_high,wins,verdict_holm\n"
    rows = ["compose,recast,reading,P1 judge composite,18,0.5,0.3,0.7,16,win",
            "compose,recast_kl2,reading_kl2,P1 judge composite,3,-0.1,-0.9,0.7,1,tie",
            "quality,recast,reading,P2 reward/weighted,15,-0.01,-0.02,-0.001,3,loss"]
    (out / "primary.csv").write_text(head + "\n".join(rows) + "\n")
    table = mod.study_f_table(tmp_path / "tables").splitlines()
    assert len(table) == 4 and not any("kl2" in line for line in table)
    assert table[2] == ("| compose | recast − reading | P1 judge composite | 18 | +0.500 [+0.300, +0.700] | 16/18 | "
                        "**recast better** |")
    assert table[3].endswith("| 3/15 | *recast worse* |")


def test_the_integration_code_in_the_readme_runs_as_written():
    """The blocks a user copies into their own trainer run unchanged (in a fresh namespace, on CPU)."""
    blocks = re.findall(r"```python\n(.*?)```", _section(README.read_text(), "ReCAST in your own trainer"), re.S)
    assert blocks
    for code in blocks:
        namespace: dict = {}
        exec(compile(code, "README.md", "exec"), namespace)


def test_readme_links_resolve():
    """Every relative link in the README names a file or folder of the repository."""
    text = README.read_text()
    missing = [link for link in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text)
               if not re.match(r"[a-z]+://", link) and not (ROOT / link).exists()]
    assert not missing, missing
