"""The figures' layout defects stay fixed: the W heatmap's row sums clear its colour bar, the demo's Fréchet-distance
interval has its own axis instead of setting the judges' shared scale, and the study's primary figure explains its
colours; every figure recipe names commands and parameters that exist."""

from __future__ import annotations

import importlib.util
import re
import shlex
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def _extent(artist, renderer):
    return artist.get_window_extent(renderer)


@pytest.mark.parametrize("K,T,sigmas", [(5, 6, True), (3, 10, False), (2, 4, True)])
def test_w_heatmap_labels_clear_the_colour_bar_and_carry_the_row_sums(K, T, sigmas):
    from recast.plotting import plot_weights

    rng = np.random.default_rng(0)
    W = rng.random((K, T))
    W = W / W.sum(1, keepdims=True) / K  # rows 1/K
    names = ["position_flat", "size_half_max", "digit", "color", "sharpness"][:K]
    fig, axes = plt.subplots(1, 3, figsize=(16, 3))
    ax = plot_weights(W, names, sigmas=np.linspace(1, 0, T + 1) if sigmas else None, ax=axes[1])
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    cbar = ax.collections[0].colorbar.ax
    labels = [t for t in (*ax.get_yticklabels(), *ax.texts) if t.get_text()]
    clash = [t.get_text() for t in labels if _extent(t, renderer).overlaps(_extent(cbar, renderer))]
    assert not clash, clash
    sums = [re.search(r"Σ=([\d.]+)", t.get_text()) for t in ax.get_yticklabels()]
    assert [float(m.group(1)) for m in sums] == pytest.approx(W.sum(1), abs=5e-4)
    plt.close(fig)


def test_w_heatmap_column_sums_stay_clear_of_the_axis_label_on_short_panels():
    """Two rows of small panels (K = 5 over T = 6, as stage F's figures draw them): the column sums are part of the
    step axis's label, so the layout places them below the tick labels and nothing written on the panel overlaps."""
    from recast.plotting import plot_weights

    W = np.full((5, 6), 1 / 30)
    W[0, 0], W[1, 0] = 0.05, 1 / 30 - (0.05 - 1 / 30)  # the column sums stay equal; their spread is 0
    fig, axes = plt.subplots(2, 3, figsize=(9, 5.2), constrained_layout=True)
    for ax in axes.flat:
        plot_weights(W, ["a", "b", "c", "d", "e"], ax=ax, annotate=False, cbar=False)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for ax in axes.flat:
        label = ax.xaxis.label
        assert label.get_text().splitlines() == ["denoising step j  (0 = noisiest)",
                                                 "column sums 0.1667 (spread 0.0e+00)"]
        ticks = [t for t in ax.get_xticklabels() if t.get_text()]
        near = [t.get_text() for t in (*ticks, *ax.texts) if _extent(t, renderer).overlaps(_extent(label, renderer))]
        assert not near, near
        below = [other for other in axes.flat if other.get_position().y1 < ax.get_position().y0]
        assert not [o for o in below if _extent(o.title, renderer).overlaps(_extent(label, renderer))]
    plt.close(fig)


def _pair(baseline, metric, diff, half):
    return {"method": "recast", "baseline": baseline, "metric": metric, "n": 5, "diff": diff,
            "ci_low": diff - half, "ci_high": diff + half, "verdict": "tie"}


def test_the_frechet_interval_gets_its_own_axis_and_the_rates_keep_a_readable_scale():
    """Differences of ±0.05 in pass rates and ±300 in the Fréchet distance: the rates' axis spans a few tenths, the
    Fréchet distance is drawn (negated: up is better) on the other axis only."""
    from recast.experiments.demo import plot_paired_judges

    pairs = [_pair(b, m, d, h) for b in ("uniform", "reward_sum")
             for m, d, h in (("judge/strict", 0.04, 0.03), ("judge/color", -0.02, 0.05), ("judge/defect_blur", 0.01, 0.02),
                             ("judge/fid", 120.0, 300.0))]
    fig, (ax, ax_fid) = plt.subplots(1, 2)
    plot_paired_judges(ax, ax_fid, pairs, "EMA of the weights")
    low, high = ax.get_ylim()
    assert high - low < 0.5 and low < -0.07 and high > 0.07  # every rate interval visible, none dwarfed
    points = np.concatenate([line.get_ydata() for line in ax.lines if line.get_marker() == "o"])
    assert np.abs(points).max() < 0.1
    assert [t.get_text() for t in ax.get_xticklabels()] == ["strict", "color", "defect_blur (−)"]
    fid_points = np.concatenate([line.get_ydata() for line in ax_fid.lines if line.get_marker() == "o"])
    assert sorted(fid_points) == [-120.0, -120.0]  # lower is better: drawn negated
    assert ax_fid.get_ylim()[0] < -420 and ax_fid.get_ylim()[1] > 180
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["ReCAST − uniform", "ReCAST − reward_sum"]
    plt.close(fig)


def test_without_a_frechet_distance_its_axis_is_off():
    from recast.experiments.demo import plot_paired_judges

    fig, (ax, ax_fid) = plt.subplots(1, 2)
    plot_paired_judges(ax, ax_fid, [_pair("uniform", "judge/strict", 0.1, 0.05)])
    assert not ax_fid.axison and ax.axison
    plt.close(fig)


@pytest.mark.slow
def test_the_study_primary_figure_has_a_key_for_every_colour_it_draws(tmp_path, monkeypatch):
    from matplotlib.colors import to_rgba
    from matplotlib.figure import Figure

    from recast.experiments import study

    saved = {}
    real = Figure.savefig
    target = []  # the file the package's one writer (`atomic_write`) is filling: savefig sees only its temp file
    writer = study.atomic_write
    monkeypatch.setattr(study, "atomic_write", lambda path, write: (target.append(Path(path).name),
                                                                        writer(path, write))[1])
    monkeypatch.setattr(Figure, "savefig", lambda self, path, *a, **k: (saved.__setitem__(
        target[-1] if not isinstance(path, (str, Path)) else Path(path).name, self), real(self, path, *a, **k))[1])
    rows = study.stage_rows(study.STUDY_DIR / "data")
    study.figures(rows, study.analyse(rows), tmp_path)
    fig = saved["study_primary.png"]
    (legend,) = fig.legends
    keys = {(to_rgba(h.get_color()), to_rgba(h.get_markerfacecolor())): t.get_text()
            for h, t in zip(legend.legend_handles, legend.get_texts())}
    drawn = {(to_rgba(line.get_color()), to_rgba(line.get_markerfacecolor()))
             for ax in fig.axes for line in ax.lines if line.get_marker() == "o"}
    assert drawn and drawn <= set(keys), (drawn, keys)
    assert sorted(keys.values()) == ["ReCAST better (after Holm)", "ReCAST worse (after Holm)", "tie after Holm"]


def _figures_script():
    spec = importlib.util.spec_from_file_location("figures_script", ROOT / "scripts" / "figures.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _documented_commands() -> list[str]:
    """The commands of scripts/figures.py's recipes and those quoted in figures/README.md."""
    recipes = [c for cmds, _ in _figures_script().RECIPES.values() for c in cmds]
    text = re.sub(r"\s*\n\s*", " ", (ROOT / "figures" / "README.md").read_text())
    quoted = re.findall(r"`((?:python -m recast|papermill) [^`]+)`", text)
    return recipes + quoted


def _notebook_parameters(path: Path) -> set[str]:
    import ast
    import json

    nb = json.loads(path.read_text())
    cell = next(c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", []))
    return {n.target.id for n in ast.parse("".join(cell["source"])).body if isinstance(n, ast.AnnAssign)}


def test_every_figure_command_names_a_command_and_parameters_that_exist():
    """A recipe or a page naming a demo option, a subcommand or a notebook parameter that is gone fails here, not in
    the middle of `make figures`."""
    from recast.cli import build_parser

    commands = _documented_commands()
    assert any(c.startswith("python -m recast demo") for c in commands)
    for command in commands:
        words = shlex.split(command)
        if words[:3] == ["python", "-m", "recast"]:
            build_parser().parse_args(words[3:])  # exits (SystemExit) on an unknown option
        elif words[0] == "papermill" and words[1].endswith(".ipynb"):
            names = {words[i + 1] for i, w in enumerate(words) if w == "-p"}
            names |= {words[i + 1].split(":")[0] for i, w in enumerate(words) if w == "-y"}
            unknown = names - _notebook_parameters(ROOT / words[1])
            assert not unknown, (command, unknown)


def _listed_as_older() -> dict[str, str]:
    """{recipe: reason} under figures/README.md's "Figures older than their code"."""
    text = (ROOT / "figures" / "README.md").read_text()
    section = text.split("## Figures older than their code", 1)[1].split("\n## ", 1)[0]
    return dict(re.findall(r"^- `([\w]+)`: (.+)$", section, re.M))


def test_every_committed_figure_is_drawn_by_todays_code_or_listed_as_older():
    """Issue 71: figures/demo_compose.png came from older code and nothing said so. Each recipe records the hash of
    its drawing code when it runs (figures/provenance.json); a recipe whose code changed since is listed, with its
    reason, or regenerated (`make figures FIGURES=NAME`)."""
    figures = _figures_script()
    stale, listed = set(figures.stale()), _listed_as_older()
    assert stale <= set(listed), f"drawing code changed for {sorted(stale - set(listed))}: regenerate them " \
                                 "(make figures FIGURES=...) or list them in figures/README.md with the reason"
    assert set(listed) <= stale, f"{sorted(set(listed) - stale)} are current: take them off the list"
    assert all(len(reason) > 20 for reason in listed.values())


def test_the_drawing_code_hash_follows_code_cells_not_text_or_outputs(tmp_path, monkeypatch):
    import json

    figures = _figures_script()
    nb = {"cells": [{"cell_type": "markdown", "source": ["# a"]}, {"cell_type": "code", "source": ["x = 1"],
                                                                     "outputs": []}]}
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "recast").mkdir()
    (tmp_path / "recast" / "plotting.py").write_text("def f(): pass\n")
    path = tmp_path / "notebooks" / "n.ipynb"
    monkeypatch.setattr(figures, "ROOT", tmp_path)
    monkeypatch.setattr(figures, "RECIPES", {"n": (("papermill notebooks/n.ipynb out.ipynb -p a 1",), "n")})

    def digest(cells):
        path.write_text(json.dumps({"cells": cells}))
        return figures.drawing_code("n")

    base = digest(nb["cells"])
    assert figures.drawing_sources("n") == [path, tmp_path / "recast" / "plotting.py"]
    assert digest([{**nb["cells"][0], "source": ["# b"]}, nb["cells"][1]]) == base  # text does not draw
    assert digest([nb["cells"][0], {**nb["cells"][1], "outputs": [{"text": "2"}]}]) == base
    assert digest([nb["cells"][0], {**nb["cells"][1], "source": ["x = 2"]}]) != base
    digest(nb["cells"])
    (tmp_path / "recast" / "plotting.py").write_text("def f(): return 1\n")
    assert figures.drawing_code("n") != base
    assert figures.stale({"n": {"code": figures.drawing_code("n")}}) == [] and figures.stale({}) == ["n"]
