"""Reliability, third round (issue 60): configs and their bounds, world settings, notebook parameters, the VLM judge's
stops and the min-norm solver. Each bad case of ../shared/reliability-r3.md has a regression test named after it;
each poor kind has tests for representative cases. Runs, checkpoints and files: test_reliability_r3_runs.py;
conversion scripts: test_reliability_r3_scripts.py."""

from __future__ import annotations

import math
import threading

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from recast.bounded import count_nodes, load_yaml, short_repr
from recast.config import check_field_types, parse_overrides, preset
from recast.configfile import layered_config, load_config_files
from recast.trainer.validate import validate_config


def returns_within(seconds: float, fn, *args, **kwargs):
    """`fn(*args)`'s result or exception, failing the test if it has not returned within `seconds` (a hang guard for
    the cases that used to hang; not a timing)."""
    box: dict = {}

    def run():
        try:
            box["value"] = fn(*args, **kwargs)
        except BaseException as err:  # noqa: BLE001 - handed to the caller
            box["error"] = err

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), f"{getattr(fn, '__name__', fn)} did not return within {seconds} s (a hang)"
    if "error" in box:
        raise box["error"]
    return box["value"]


def alias_bomb(levels: int = 9, width: int = 10) -> str:
    """YAML of ``width ** levels`` leaves in a few hundred bytes: each level an anchored list of the one below."""
    rows = [f"  - &l0 [{', '.join(['x'] * width)}]"]
    rows += [f"  - &l{i} [{', '.join([f'*l{i - 1}'] * width)}]" for i in range(1, levels)]
    return "\n".join(rows)


def flow_bomb(levels: int = 9, width: int = 10) -> str:
    """`alias_bomb` on one line (a flow list), as a ``--set`` value or a notebook parameter carries it."""
    return "[" + ", ".join(line.strip()[2:] for line in alias_bomb(levels, width).splitlines()) + "]"


def shared_bomb(levels: int = 9, width: int = 10) -> list:
    """The same as Python data: one list object per level, shared width times by the level above."""
    node: list = ["x"] * width
    for _ in range(levels - 1):
        node = [node] * width
    return node


# ------------------------------------------------------------------------------ Y09, Y09b: alias bombs (bad)
def test_Y09_alias_bomb_in_vlm_judge_is_refused_as_the_file_is_read(tmp_path):
    path = tmp_path / "y09.yaml"
    path.write_text(f"world: sd3-tiny\nrewards: [jpeg]\nworld_settings:\n  vlm_judge:\n    timeout: {flow_bomb()}\n")
    assert path.stat().st_size < 1000
    with pytest.raises(ValueError, match=r"y09.yaml: holds more than 100,000 values with its aliases expanded") as e:
        returns_within(60, layered_config, "ci", str(path))
    assert len(str(e.value)) < 400


def test_Y09_a_nested_vlm_judge_value_is_refused_before_the_settings_are_copied():
    """The Python API skips the YAML loader: the settings check each vlm_judge value's type before `asdict`."""
    from recast.world import world_settings

    bomb = shared_bomb(levels=10)  # 10^10 leaves if anything walked it
    with pytest.raises(ValueError, match=r"vlm_judge.timeout: expected a number of seconds > 0, got \[\[\[") as e:
        returns_within(60, world_settings, "sd3-tiny", "composition",
                       {"vlm_judge": {"endpoint": "http://127.0.0.1:1/v1", "model": "m", "timeout": bomb}},
                       rewards=("jpeg",))
    assert len(str(e.value)) < 300


def test_Y09b_alias_bomb_in_rewards_is_refused_and_the_type_message_is_bounded(tmp_path):
    path = tmp_path / "y09b.yaml"
    path.write_text(f"rewards:\n{alias_bomb()}\n")
    with pytest.raises(ValueError, match="y09b.yaml: holds more than"):
        returns_within(60, load_config_files, str(path))
    cfg = preset("ci").replace(rewards=tuple(shared_bomb(levels=10)))  # past the loader: the message stays short
    with pytest.raises(ValueError, match=r"config field rewards: expected tuple\[str, \.\.\.\], got \(\[\[") as e:
        returns_within(60, check_field_types, cfg)
    assert len(str(e.value)) < 300


def test_count_nodes_counts_shared_structure_at_every_place_and_refuses_cycles():
    assert count_nodes(shared_bomb(levels=3, width=4)) == 1 + 4 * (1 + 4 * (1 + 4))  # 4^3 leaves, 21 lists
    assert count_nodes({"a": [1, 2], "b": 3}) == 1 + (1 + 3) + (1 + 1)  # keys count as values
    loop: list = []
    loop.append(loop)
    with pytest.raises(ValueError, match="contains itself"):
        count_nodes(loop)
    with pytest.raises(ValueError, match="recursive YAML alias"):
        load_yaml("&a [*a]", "--set x")
    assert load_yaml("{a: [1, 2], b: {c: d}}", "x") == {"a": [1, 2], "b": {"c": "d"}}


def test_short_repr_is_bounded_whatever_the_value():
    assert short_repr("abc") == "'abc'" and short_repr(0.0003) == "0.0003"
    assert len(short_repr("x" * 10**6)) <= 200 and len(short_repr(shared_bomb(levels=12))) <= 200


# ------------------------------------------------------------------------------ config files (poor)
def test_Y10_an_oversized_config_file_is_refused_before_parsing(tmp_path):
    path = tmp_path / "y10.yaml"
    path.write_text("log_with: [" + ", ".join(["tensorboard"] * 30_000) + "]\n")  # 390 KB
    with pytest.raises(ValueError, match=r"y10.yaml: larger than 262,144 bytes, too large for a config file"):
        load_config_files(str(path))


def test_Y10_a_tracker_named_twice_is_refused_naming_log_with():
    with pytest.raises(ValueError, match=r"log_with: \['tensorboard'\] named more than once \(3 entries\)"):
        validate_config(preset("ci", log_with=("tensorboard",) * 3))


def test_Y15_a_duplicate_key_is_refused_naming_it_and_both_lines(tmp_path):
    path = tmp_path / "y15.yaml"
    path.write_text("iterations: 2\nlr: 0.001\niterations: 3\n")
    with pytest.raises(ValueError, match=r"duplicate key 'iterations' \(first on line 1, again on line 3\)"):
        load_config_files(str(path))
    nested = tmp_path / "nested.yaml"
    nested.write_text("world_settings:\n  resolution: 32\n  resolution: 64\n")
    with pytest.raises(ValueError, match="duplicate key 'resolution'"):
        load_config_files(str(nested))
    with pytest.raises(ValueError, match=r"^world_settings.x: duplicate key 'a' \(first on line 1, again on line 1"):
        parse_overrides(["world_settings.x={a: 1, a: 2}"])
    merged = tmp_path / "merge.yaml"  # a YAML merge key overridden on purpose is not a duplicate
    merged.write_text("world_settings: {<<: {resolution: 32, dtype: float32}, resolution: 64}\n")
    assert load_config_files(str(merged))["world_settings"] == {"resolution": 64, "dtype": "float32"}


@pytest.mark.parametrize("text, ok", [("sweep: [1, 2]\niterations: 1\n", False), ("sweep:\niterations: 1\n", True),
                                      ("sweep: {seeds: [0, 1], colour: 2}\n", False), ("preset: [ci]\n", False)])
def test_Y17_Y17b_N05_sections_of_a_config_are_checked_as_it_is_read(tmp_path, text, ok):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    if ok:
        assert layered_config("ci", str(path)).iterations == 1
        return
    with pytest.raises(ValueError, match=r"c.yaml: (the sweep section is a mapping|preset must be a preset's name)"):
        layered_config(None, str(path))


def test_Y27_a_config_file_whose_name_holds_a_comma_is_read_as_one_file(tmp_path):
    (tmp_path / "a,b.yaml").write_text("iterations: 7\n")
    (tmp_path / "c.yaml").write_text("lr: 0.001\n")
    assert layered_config("ci", str(tmp_path / "a,b.yaml")).iterations == 7
    both = layered_config("ci", f"{tmp_path / 'c.yaml'},{tmp_path / 'c.yaml'}")
    assert both.lr == 0.001
    with pytest.raises(FileNotFoundError, match=r"--config .*/nope.yaml: no such file \(--config .* was read as 2 "):
        load_config_files(f"{tmp_path / 'c.yaml'},{tmp_path / 'nope.yaml'}")


def test_S13_a_yaml_error_in_a_set_value_names_the_field():
    with pytest.raises(ValueError, match=r"^world_settings: not valid YAML"):
        parse_overrides(["world_settings={a: [1"])
    with pytest.raises(ValueError, match="world_settings.vlm_judge: holds more than"):
        returns_within(60, parse_overrides, [f"world_settings.vlm_judge={{timeout: {flow_bomb()}}}"])
    assert parse_overrides(["world_settings.prompt_files=a: b"]) == {"world_settings": {"prompt_files": {"a": "b"}}}


# ------------------------------------------------------------------------------ absurd values, named (poor)
@pytest.mark.parametrize("over, field", [
    (dict(shift=1e300), "shift"),  # S33: blamed the reward
    (dict(lora_alpha=1e300), "lora_alpha"),  # S36: blamed the reward
    (dict(adv_clip_max=1e-300), "adv_clip_max"),  # S35: "lower lr"
    (dict(adv_clip_max=1e30), "adv_clip_max"),  # p = 0.5 everywhere, silently
    (dict(noise_level=1e300, backend="grpo", sde_type="flow_grpo"), "noise_level"),  # S34: OverflowError
    (dict(eval_prompts=100_000_000), "eval_prompts"),  # S19: after training
    (dict(num_threads=100_000), "num_threads"),  # S27: blamed the world
])
def test_S19_S27_S33_to_S36_absurd_values_are_refused_naming_the_field(over, field):
    with pytest.raises(ValueError, match=f"^config field {field}: "):
        validate_config(preset("ci", **over))


def test_the_bounds_leave_every_preset_and_usual_values_alone():
    for name in ("ci", "cpu"):
        validate_config(preset(name))
    validate_config(preset("ci", shift=10.0, lora_alpha=64.0, adv_clip_max=1.0, eval_prompts=256, num_threads=8))


def test_S11_budgets_whose_sum_overflows_are_named_as_overflowing_not_as_zero():
    from recast.solver import check_budgets

    with pytest.raises(ValueError, match="lam sum past the largest float"):
        check_budgets([1e308] * 5, name="lam")
    with pytest.raises(ValueError, match="lam sum past the largest float"):
        validate_config(preset("ci", rewards=("color", "size"), lam=(1e308, 1e308)))


# ------------------------------------------------------------------------------ SD3 world settings (poor)
@pytest.mark.parametrize("over, msg", [
    ({"resolution": 100_000}, r"resolution: 100000 must be a multiple of 4 .* from 4 to 64"),  # Y28
    ({"resolution": 33}, r"resolution: 33 must be a multiple of 4 \(VAE factor 2 x patch 2\)"),  # Y29
    ({"max_sequence_length": -1}, r"max_sequence_length: -1 must be from 1 to 512"),  # Y31
    ({"vlm_judge": {"endpoint": "ftp://127.0.0.1/x", "model": "m"}}, r"vlm_judge.endpoint: expected an http"),  # Y30
    ({"vlm_judge": {"endpoint": "http://h/v1", "model": "m", "timeout": "abc"}}, r"vlm_judge.timeout: expected"),
    ({"vlm_judge": {"endpoint": "http://h/v1", "model": "m", "retries": -5}}, r"vlm_judge.retries: expected an int"),
    ({"vlm_judge": {"endpoint": "http://h/v1", "model": "m", "max_failures": 0}}, r"vlm_judge.max_failures"),
    ({"prompt_files": {"train": [1, 2]}}, r"prompt_files: each split names a file"),
])
def test_Y28_to_Y31_sd3_settings_are_checked_before_the_world_loads(over, msg):
    from recast.world import world_settings

    with pytest.raises(ValueError, match=msg):
        world_settings("sd3-tiny", "composition", over, rewards=("jpeg",))


def test_sd3_tiny_geometry_is_the_tiny_pipelines_own():
    from recast.worlds.sd3.settings import TINY_GEOMETRY
    from recast.worlds.sd3.tiny import build_tiny_pipeline
    from recast.world import world_settings

    pipe = build_tiny_pipeline(0)
    cfg = pipe.transformer.config
    assert TINY_GEOMETRY == (pipe.vae_scale_factor, cfg.patch_size, cfg.pos_embed_max_size)
    for res in (4, 32, 64):  # every multiple of 4 up to the token grid's 16 x 2 x 2 is accepted
        assert world_settings("sd3-tiny", "composition", {"resolution": res}, rewards=("jpeg",))[0].resolution == res


def test_sd3_geometry_is_read_from_a_pipeline_folder_without_its_weights(tmp_path):
    from recast.worlds.sd3.settings import SD3_GEOMETRY, _geometry

    (tmp_path / "vae").mkdir()
    (tmp_path / "transformer").mkdir()
    (tmp_path / "vae" / "config.json").write_text('{"block_out_channels": [128, 256, 512, 512]}')
    (tmp_path / "transformer" / "config.json").write_text('{"patch_size": 2, "pos_embed_max_size": 384}')
    assert _geometry(tmp_path) == (8, 2, 384)
    assert _geometry("stabilityai/stable-diffusion-3.5-medium") == SD3_GEOMETRY  # a hub id: the defaults


# ------------------------------------------------------------------------------ notebook parameters
def _notebook(params_cell: str, injected: str, **kwargs):
    """Run a parameters cell, papermill's injected cell and `typed_parameters` in an IPython shell, as a kernel does."""
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell()
    try:
        for cell in (params_cell, injected, "from recast.nbparams import typed_parameters\n"
                                            f"typed_parameters(globals(), **{kwargs!r})"):
            result = shell.run_cell(cell)
            if result.error_in_exec is not None:
                raise result.error_in_exec
        return {k: shell.user_ns[k] for k in shell.user_ns.get("__annotations__", {})}
    finally:
        shell.cleanup()
        InteractiveShell.clear_instance()


def test_P13_papermills_string_false_is_false_for_a_bool_parameter(tmp_path):
    cell = 'overwrite: bool = False  # replace\nseed: int = -1  # run seed\nout_dir: str = "x"  # where\n'
    got = _notebook(cell, f'overwrite = "false"\nseed = 5\nout_dir = "{tmp_path / "o"}"\n', outputs=["out_dir"])
    assert got["overwrite"] is False and got["seed"] == 5
    for word, value in (("TRUE", True), ("yes", True), ("0", False), ("No", False)):
        assert _notebook(cell, f'overwrite = "{word}"', figures=False)["overwrite"] is value
    with pytest.raises(ValueError, match=r"notebook parameter overwrite: expected a boolean .*, got 'flase'"):
        _notebook(cell, 'overwrite = "flase"', figures=False)


def test_P01_P03_notebook_values_are_parsed_by_their_declared_type():
    from recast.nbparams import parse_parameter

    with pytest.raises(ValueError, match=r"notebook parameter T: expected an integer, got 'abc'"):
        parse_parameter("T", int, "abc")
    assert parse_parameter("T", int, "12") == 12 and parse_parameter("lr", float, "3e-4") == 3e-4
    assert parse_parameter("lam", list, "[0.5, 0.5]") == [0.5, 0.5]  # P03: the documented -p lam "[0.4, 0.6]"
    assert parse_parameter("seeds", list, "0,1,2") == [0, 1, 2] and parse_parameter("seeds", list, 3) == [3]
    assert parse_parameter("lam", list, "") == [] and parse_parameter("lam", str, 0.5) == "0.5"
    assert parse_parameter("overrides", dict, "{kl_beta: 2}") == {"kl_beta": 2}
    with pytest.raises(ValueError, match="notebook parameter overrides: expected a mapping"):
        parse_parameter("overrides", dict, "[1, 2]")
    with pytest.raises(ValueError, match="notebook parameter iterations: expected an integer, got True"):
        parse_parameter("iterations", int, True)
    with pytest.raises(ValueError, match="notebook parameter settings: holds more than"):
        returns_within(60, parse_parameter, "settings", list, flow_bomb())


def test_P06_P08_outputs_and_the_figures_folder_are_checked_before_compute(tmp_path, monkeypatch):
    cell = 'out_dir: str = "x"  # where\n'
    with pytest.raises(PermissionError, match=r"notebook parameter out_dir: /proc/recast_01 cannot be created"):
        _notebook(cell, 'out_dir = "/proc/recast_01"', outputs=["out_dir"], figures=False)
    blocker = tmp_path / "figfile"
    blocker.write_text("a file")
    monkeypatch.setenv("RECAST_FIGURES_DIR", str(blocker))
    with pytest.raises(FileExistsError, match=f"RECAST_FIGURES_DIR={blocker} is not a folder"):
        _notebook(cell, f'out_dir = "{tmp_path / "o"}"', outputs=["out_dir"])


def test_every_notebook_parses_its_parameters_before_anything_else():
    import json

    from helpers import ROOT

    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        code = [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]
        first_line = "".join(code[2]["source"]).splitlines()[0]
        assert first_line.startswith("typed_parameters(globals(), outputs=["), path.name


# ------------------------------------------------------------------------------ N03: one data root
def test_N03_a_data_root_without_the_base_model_is_refused_not_half_honoured(tmp_path):
    import subprocess
    import sys

    code = "from recast.config import resolve_world; print(resolve_world('data/digit_base'))"
    env = {"RECAST_DATA_ROOT": str(tmp_path / "dr"), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert proc.returncode != 0 and f"under RECAST_DATA_ROOT={tmp_path / 'dr'}" in proc.stderr


# ------------------------------------------------------------------------------ V17: the VLM judge stops
class _DeadServer:
    """A backend whose every request fails after its retries (what a server that never answers gives)."""

    def __init__(self, clock=None, cost: float = 0.0):
        self.calls, self.clock, self.cost = 0, clock, cost

    def __call__(self, text, images):
        from recast.worlds.sd3.vlm_judge import VLMRequestError

        self.calls += 1
        if self.clock is not None:
            self.clock.now += self.cost
        raise VLMRequestError("http://127.0.0.1:9/v1/chat/completions: TimeoutError; gave up after 2 attempt(s)")


class _Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_V17_the_judge_stops_after_consecutive_failures_keeping_what_it_judged():
    from recast.worlds.sd3.vlm_judge import PairwiseVLMJudge, VLMRequestError

    images = torch.rand(64, 3, 8, 8)
    dead = _DeadServer()
    with pytest.raises(VLMRequestError, match=r"stopped after 3 of 64 pairs: 3 pairs in a row failed") as e:
        PairwiseVLMJudge(dead).judge(images, images, ["a cat"] * 64)
    assert dead.calls == 3 and e.value.fatal and len(e.value.partial) == 3


def test_V17_a_failure_streak_is_reset_by_an_answer_and_the_deadline_ends_the_judging():
    from recast.worlds.sd3.vlm_judge import PairwiseVLMJudge, VLMRequestError

    answers = iter(["Verdict: A", "boom", "boom", "Verdict: B", "boom", "boom", "Verdict: tie"])

    def flaky(text, images):
        a = next(answers)
        if a == "boom":
            raise VLMRequestError("HTTP 500")
        return a

    verdicts = PairwiseVLMJudge(flaky, max_failures=3).judge(*(torch.rand(7, 3, 8, 8),) * 2, ["p"] * 7)
    assert [v.error is not None for v in verdicts] == [False, True, True, False, True, True, False]
    clock = _Clock()
    slow = _DeadServer(clock, cost=247.0)  # the default settings' cost per pair against a dead server
    judge = PairwiseVLMJudge(slow, max_failures=None, deadline=600.0, clock=clock)
    with pytest.raises(VLMRequestError, match="its deadline of 600 s passed") as e:
        judge.judge(*(torch.rand(64, 3, 8, 8),) * 2, ["p"] * 64)
    assert slow.calls == 3 and len(e.value.partial) == 3  # 3 x 247 s > 600 s: no fourth pair starts
    with pytest.raises(ValueError, match="max_failures must be an integer >= 1"):
        PairwiseVLMJudge(flaky, max_failures=0)


# ------------------------------------------------------------------------------ the min-norm solver
def _vertices(a: torch.Tensor) -> list[torch.Tensor]:
    """The corners of {c on the simplex, c·a = 0}: points on the edges e_i–e_j with a_i, a_j of opposite signs (and
    the vertices e_i with a_i = 0)."""
    K, out = len(a), []
    for i in range(K):
        if a[i] == 0:
            out.append(torch.nn.functional.one_hot(torch.tensor(i), K).double())
        for j in range(i + 1, K):
            if a[i] * a[j] < 0:
                c = torch.zeros(K, dtype=torch.float64)
                c[i], c[j] = a[j] / (a[j] - a[i]), a[i] / (a[i] - a[j])
                out.append(c)
    return out


@given(st.lists(st.floats(-3, 3), min_size=2, max_size=6), st.integers(0, 50))
@example([0.125, -2.0, -0.5], 0)  # issue 60's flaky draw
@settings(max_examples=60, deadline=None)
def test_min_norm_is_the_exact_projection_of_the_prior_onto_the_zero_set(a, seed):
    """The projection c of the prior p onto the polytope {simplex, c·a = 0} (the hull of `_vertices`) satisfies
    (p − c)·(v − c) <= 0 for every vertex v, and lies on the zero set to rounding."""
    from recast.credit.step import min_norm_coefficients

    A = torch.tensor(a, dtype=torch.float64)
    if (A >= 0).all() or (A <= 0).all():
        return
    g = torch.Generator().manual_seed(seed)
    prior = torch.rand(len(a), generator=g, dtype=torch.float64) + 0.05
    prior = prior / prior.sum()
    c = min_norm_coefficients(A[:, None], prior)[0]
    scale = float(A.abs().max())
    assert abs(float(c @ A)) <= 1e-12 * scale and abs(float(c.sum()) - 1) < 1e-12 and (c >= 0).all()
    assert all(float((prior - c) @ (v - c)) <= 1e-9 for v in _vertices(A))


def test_min_norm_batches_agree_with_single_samples():
    from recast.credit.step import min_norm_coefficients

    g = torch.Generator().manual_seed(3)
    A = torch.randn(4, 32, generator=g, dtype=torch.float64)
    prior = torch.tensor([0.4, 0.3, 0.2, 0.1], dtype=torch.float64)
    batch = min_norm_coefficients(A, prior)
    single = torch.cat([min_norm_coefficients(A[:, i:i + 1], prior) for i in range(32)])
    torch.testing.assert_close(batch, single, rtol=0, atol=1e-12)
    assert math.isclose(float((batch.sum(-1) - 1).abs().max()), 0.0, abs_tol=1e-12)


def test_writable_folder_makes_the_folder_or_names_why_not(tmp_path):
    from recast.io import writable_folder

    assert writable_folder(tmp_path / "a" / "b", "x").is_dir()
    (tmp_path / "f").write_text("a file")
    with pytest.raises(FileExistsError, match="^the out folder is a file, not a folder$"):
        writable_folder(tmp_path / "f", "the out folder")
    with pytest.raises(PermissionError, match=r"^here cannot be created \("):
        writable_folder(tmp_path / "f" / "below", "here")


def test_writable_folder_refuses_a_folder_this_process_cannot_write(tmp_path):
    import os

    from recast.io import writable_folder

    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        if os.access(ro, os.W_OK):  # root writes anywhere: nothing to refuse
            pytest.skip("this process can write to a read-only folder (root)")
        with pytest.raises(PermissionError, match="^ro is not writable$"):
            writable_folder(ro, "ro")
    finally:
        ro.chmod(0o700)
