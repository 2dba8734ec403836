"""The notebooks as a researcher runs them (issue 71): papermill typos are errors, reruns with other parameters get
their own folders, progress shows one line per iteration in papermill's log and a widget in JupyterLab, outputs land
under the clone's runs/, and a successful run ends without a KeyboardInterrupt line."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from recast.nbparams import clone_root, injected_parameters, make_run_name, typed_parameters
from recast.trainer.progress import IterationProgress, progress_style

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "RECAST_FIGURES_DIR": "", "RECAST_RESULTS_DIR": ""}
for _key in ("RECAST_FIGURES_DIR", "RECAST_RESULTS_DIR", "RECAST_RUN_NAME", "RECAST_PROGRESS", "JPY_SESSION_NAME"):
    ENV.pop(_key, None)


def _papermill(notebook: str, out: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "papermill", str(ROOT / "notebooks" / notebook), str(out), "--log-output",
           "--cwd", str(cwd), *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=600)


# ------------------------------------------------------------------------------ the parts, in closed form
def test_injected_parameters_read_papermills_last_injected_cell():
    history = ["", "x: int = 1  # a\n", "# Parameters\niterations = 3\npreset = \"cpu\"\nlam = [0.6, 0.4]\n",
               "typed_parameters(globals())"]
    assert injected_parameters(history) == {"iterations": "3", "preset": '"cpu"', "lam": "[0.6, 0.4]"}
    assert injected_parameters(["x = 1"]) == {} and injected_parameters(None) == {}
    assert injected_parameters(["# Parameters\nx = 1\n", "# Parameters\ny = 2\n"]) == {"y": "2"}


def test_a_run_name_is_made_from_the_parameters_given_in_their_order():
    assert make_run_name({}) == "default"
    assert make_run_name({"preset": '"cpu"', "method": "'uniform'", "iterations": "30"}) == \
        "preset-cpu_method-uniform_iterations-30"
    assert make_run_name({"lam": "[0.6, 0.2, 0.2]"}) == "lam-0.6,0.2,0.2"
    # where it goes and how much of the machine it uses are not part of what the run is
    assert make_run_name({"out_dir": '"/x"', "num_threads": "2", "jobs": "2", "overwrite": "True"}) == "default"
    long = {f"p{i}": '"' + "v" * 20 + '"' for i in range(8)}
    name = make_run_name(long)
    assert len(name) == 80 and name != make_run_name({**long, "p0": '"w"'})
    assert name == make_run_name(dict(long))  # the same parameters, the same folder
    assert "/" not in make_run_name({"profile": '"data/profiles/x.npz"'})


def test_the_clone_root_is_found_from_inside_the_clone_only(tmp_path):
    assert clone_root(ROOT / "notebooks") == ROOT and clone_root(ROOT) == ROOT
    assert clone_root(tmp_path) is None


def test_in_a_kernel_typed_parameters_fill_run_name_and_point_figures_there(tmp_path, monkeypatch):
    import recast.trainer.rundir as rundir
    from recast.plotting import figures_dir

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RECAST_RUN_NAME", "")
    monkeypatch.delenv("RECAST_FIGURES_DIR", raising=False)
    monkeypatch.setattr(rundir, "OVERWRITE_HINT", rundir.OVERWRITE_HINT)
    ns = {"__annotations__": {"iterations": int, "run_name": str, "out_dir": str, "overwrite": bool},
          "iterations": 3, "run_name": "", "out_dir": "runs/03_train/{run_name}", "overwrite": False,
          "In": ["# Parameters\niterations = 3\n"]}
    got = typed_parameters(ns, outputs=["out_dir"], kernel=True)
    assert got["run_name"] == "iterations-3" and ns["out_dir"] == "runs/03_train/iterations-3"
    assert (tmp_path / "runs/03_train/iterations-3").is_dir()
    assert figures_dir() == tmp_path / "runs" / "figures" / "iterations-3"
    assert rundir.OVERWRITE_HINT.startswith("overwrite = True (papermill: -p overwrite True)")
    ns.update(run_name="mine", out_dir="runs/03_train/{run_name}", In=[])
    assert typed_parameters(ns, outputs=["out_dir"], kernel=True)["run_name"] == "mine"
    for bad in ("../x", "a/b", ".."):
        ns.update(run_name=bad)
        with pytest.raises(ValueError, match="notebook parameter run_name: .* is not a folder name"):
            typed_parameters(ns, kernel=True, figures=False)


def test_outside_a_kernel_typed_parameters_leave_the_process_as_it_is(tmp_path, monkeypatch):
    import recast.trainer.rundir as rundir

    monkeypatch.chdir(ROOT / "notebooks")
    monkeypatch.delenv("RECAST_RUN_NAME", raising=False)
    ns = {"__annotations__": {"run_name": str, "overwrite": bool}, "run_name": "", "overwrite": False}
    assert typed_parameters(ns, figures=False)["run_name"] == "default"
    assert Path.cwd() == ROOT / "notebooks" and "RECAST_RUN_NAME" not in os.environ
    assert rundir.OVERWRITE_HINT == "--overwrite"


def test_an_undeclared_parameter_names_the_nearest_declared_one():
    ns = {"__annotations__": {"iterations": int, "preset": str}, "iterations": 3, "preset": "ci",
          "In": ["# Parameters\niteratoins = 3\n"]}
    with pytest.raises(ValueError, match=r"notebook parameter iteratoins: this notebook has no such parameter; "
                                         r"did you mean iterations\? its parameters: iterations, preset"):
        typed_parameters(ns, figures=False, kernel=False)
    ns["In"] = ["# Parameters\nzzz = 3\n"]
    with pytest.raises(ValueError, match=r"parameter zzz: this notebook has no such parameter; its parameters"):
        typed_parameters(ns, figures=False, kernel=False)


def test_the_progress_style_follows_where_the_run_is_read(monkeypatch):
    class Tty(io.StringIO):
        def isatty(self):
            return True

    assert progress_style({}, in_kernel=False, stream=Tty()) == "bar"
    assert progress_style({}, in_kernel=False, stream=io.StringIO()) == "lines"  # a batch job's log
    assert progress_style({}, in_kernel=True) == "lines"  # papermill, nbmake
    assert progress_style({"JPY_SESSION_NAME": "03_train.ipynb"}, in_kernel=True) == "widget"  # JupyterLab
    assert progress_style({"RECAST_PROGRESS": "off"}, in_kernel=True) == "off"
    with pytest.raises(ValueError, match="RECAST_PROGRESS='loud': expected one of bar, widget, lines, off"):
        progress_style({"RECAST_PROGRESS": "loud"})


def test_lines_progress_prints_one_line_per_iteration_with_its_time():
    clock = iter([0.0, 2.5, 6.5]).__next__
    out = io.StringIO()
    bar = IterationProgress(initial=0, total=2, desc="recast/nft", style="lines", stream=out, clock=clock)
    assert bar.update(reward="0.5") == "[train] recast/nft: iteration 1/2 (2.5 s/iteration, reward 0.5)"
    bar.update(reward="0.6", loss="0.1")
    bar.close()
    assert out.getvalue().splitlines() == ["[train] recast/nft: iteration 1/2 (2.5 s/iteration, reward 0.5)",
                                           "[train] recast/nft: iteration 2/2 (4.0 s/iteration, reward 0.6, loss 0.1)"]
    resumed = io.StringIO()
    IterationProgress(initial=5, total=9, desc="d", style="lines", stream=resumed)
    assert resumed.getvalue() == "[train] d: continuing from iteration 5/9\n"
    quiet = io.StringIO()
    assert IterationProgress(initial=0, total=2, desc="d", enabled=False, stream=quiet).update() is None
    assert quiet.getvalue() == ""


# ------------------------------------------------------------------------------ as a researcher runs them
def test_a_papermill_typo_fails_naming_the_parameter_and_the_nearest_one(tmp_path):
    done = _papermill("01_weight_solver.ipynb", tmp_path / "o.ipynb", "-p", "lamm", "[0.5, 0.5]", cwd=tmp_path)
    assert done.returncode != 0
    assert "notebook parameter lamm: this notebook has no such parameter; did you mean lam?" in done.stderr
    assert not (tmp_path / "runs" / "01_weight_solver").exists()  # refused before anything was written


def test_two_reruns_with_other_parameters_get_their_own_folders_and_show_progress(tmp_path):
    logs = {}
    for n in (2, 3):
        done = _papermill("03_train.ipynb", tmp_path / f"{n}.ipynb", "-p", "iterations", str(n), cwd=tmp_path)
        assert done.returncode == 0, done.stderr[-3000:]
        logs[n] = done.stdout + done.stderr
    for n in (2, 3):
        run = tmp_path / "runs" / "03_train" / f"iterations-{n}"
        assert (run / "metrics.jsonl").read_text().count("\n") == n
        assert (tmp_path / "runs" / "figures" / f"iterations-{n}" / "03_train.png").is_file()
        # one line per iteration in papermill's log, as the trainer finishes each
        assert [f"iteration {i}/{n}" in logs[n] for i in range(1, n + 1)] == [True] * n
        assert "KeyboardInterrupt" not in logs[n]
    assert not (tmp_path / "runs" / "figures" / "03_train.png").exists()  # no run wrote over another's figure
    # the same folder asked for with other settings: refused, naming this notebook's own knob
    clash = _papermill("03_train.ipynb", tmp_path / "c.ipynb", "-p", "iterations", "4", "-p", "run_name",
                       "iterations-2", "-p", "seed", "7", cwd=tmp_path)
    assert clash.returncode != 0
    assert "or pass overwrite = True (papermill: -p overwrite True) or another run_name" in clash.stderr
    assert "--overwrite" not in clash.stderr.split("or pass overwrite")[1][:200]


def test_a_kernel_started_in_notebooks_writes_under_the_clones_runs(tmp_path):
    name = f"pytest-{os.getpid()}-{time.time_ns()}"
    target = ROOT / "runs" / "01_weight_solver" / name
    try:
        done = _papermill("01_weight_solver.ipynb", tmp_path / "o.ipynb", "-p", "run_name", name,
                          cwd=ROOT / "notebooks")
        assert done.returncode == 0, done.stderr[-3000:]
        assert target.is_dir() and any(target.iterdir())
        assert not (ROOT / "notebooks" / "runs" / "01_weight_solver" / name).exists()
        assert (ROOT / "runs" / "figures" / name / "01_weight_solver.png").is_file()
    finally:
        import shutil

        shutil.rmtree(target, ignore_errors=True)
        shutil.rmtree(ROOT / "runs" / "figures" / name, ignore_errors=True)


def test_in_a_kernel_sigint_still_interrupts_a_cell_and_is_ignored_between_cells():
    from jupyter_client.manager import start_new_kernel

    km, kc = start_new_kernel(kernel_name="python3", env=ENV, cwd=str(ROOT))
    try:
        def run(code, timeout=60):
            reply = kc.execute_interactive(code, timeout=timeout, output_hook=lambda msg: None)
            return reply["content"]

        assert run("from recast.nbparams import quiet_interrupts_between_cells\n"
                   "assert quiet_interrupts_between_cells()")["status"] == "ok"
        msg_id = kc.execute("import time\nfor _ in range(600): time.sleep(0.1)")
        time.sleep(2.0)
        km.interrupt_kernel()
        reply = kc.get_shell_msg(timeout=30)
        while reply["parent_header"].get("msg_id") != msg_id:
            reply = kc.get_shell_msg(timeout=30)
        assert reply["content"]["status"] == "error" and reply["content"]["ename"] == "KeyboardInterrupt"
        km.interrupt_kernel()  # between cells: ignored, the kernel stays up and answers
        time.sleep(1.0)
        assert km.is_alive() and run("1 + 1")["status"] == "ok"
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def test_in_a_kernel_jupyterlab_started_training_progress_is_a_widget():
    """JupyterLab's server starts kernels with JPY_SESSION_NAME set; there the bar is tqdm's notebook widget, which
    papermill's log cannot show (there it is one line per iteration: the test above)."""
    from jupyter_client.manager import start_new_kernel

    km, kc = start_new_kernel(kernel_name="python3", env={**ENV, "JPY_SESSION_NAME": "notebooks/03_train.ipynb"},
                              cwd=str(ROOT))
    seen = []
    try:
        reply = kc.execute_interactive(
            "from recast.trainer.progress import IterationProgress, progress_style\n"
            "print(progress_style())\n"
            "bar = IterationProgress(initial=0, total=2, desc='recast/nft')\n"
            "bar.update(reward='0.5'); bar.update(reward='0.6'); bar.close()",
            timeout=60, output_hook=seen.append)
        assert reply["content"]["status"] == "ok", reply["content"]
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    text = "".join(m["content"].get("text", "") for m in seen if m["msg_type"] == "stream")
    assert text.splitlines()[0] == "widget" and "iteration 1/2" not in text
    assert any("application/vnd.jupyter.widget-view+json" in m["content"].get("data", {})
               for m in seen if m["msg_type"] == "display_data")
