"""The paper-scale path as a GPU user takes it, on CPU with a tiny SD3 pipeline saved as a diffusers folder in place
of SD3.5-Medium and tiny reward models in place of the real ones: the README's commands verbatim, notebooks 05 and 06
on an SD3 world with the VLM judge against a fake OpenAI-compatible endpoint, and a killed papermill run of notebook
07 that continues when rerun."""

from __future__ import annotations

import http.server
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    from recast.worlds.sd3.tiny import save_tiny_pipeline, save_tiny_rewards

    base = tmp_path_factory.mktemp("paper")
    return {"SD35": str(save_tiny_pipeline(base / "sd35")), "REWARDS": str(save_tiny_rewards(base / "reward_ckpts"))}


class _FakeVLM(http.server.BaseHTTPRequestHandler):
    """An OpenAI-compatible chat endpoint that always answers "A", counting requests."""

    count = 0

    def do_POST(self):  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        type(self).count += 1
        body = json.dumps({"choices": [{"message": {"role": "assistant", "content": "A"}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def vlm():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _FakeVLM)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()


def _env(folders, tmp_path, **extra):
    return {**os.environ, **folders, "CONFIGS": "configs/sd35_composition.yaml,configs/smoke.yaml",
            "OUT": str(tmp_path / "runs"), "RECAST_RESULTS_DIR": str(tmp_path / "results"),
            "RECAST_FIGURES_DIR": str(tmp_path / "figures"), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
            **extra}


def readme_block(heading: str) -> str:
    text = (ROOT / "README.md").read_text()
    section = text[text.index(f"\n## {heading}\n"):]
    section = section[:section.find("\n## ", 1)]
    return re.search(r"```bash\n(.*?)```", section, re.S).group(1)


def _clone(tmp_path: Path) -> Path:
    """A working directory as a fresh clone is after the two set-up commands: this checkout's configs/, data/ and notebooks/,
    and .venv, the environment running this test (or, outside a venv, an activate script that puts it first)."""
    work = tmp_path / "clone"
    work.mkdir()
    for name in ("configs", "data", "notebooks"):
        (work / name).symlink_to(ROOT / name)
    if (Path(sys.prefix) / "bin" / "activate").is_file():
        (work / ".venv").symlink_to(Path(sys.prefix))
    else:
        (work / ".venv" / "bin").mkdir(parents=True)
        (work / ".venv" / "bin" / "activate").write_text(f'export PATH="{Path(sys.executable).parent}:$PATH"\n')
    return work


def test_the_readme_paper_scale_block_runs_verbatim_from_a_plain_shell(tmp_path):
    """The README's paper-scale block, as written, in a shell that has nothing of ours on its PATH and none of the
    block's variables: it activates .venv, writes the tiny folders itself, and every table and figure it makes lands
    under $OUT (none under ./runs named for the notebooks' CI defaults)."""
    block = readme_block("Paper scale")
    assert "recast tiny-sd3" in block and "$SD35" in block and "--initialize-from" in block and "paper-eval" in block
    work = _clone(tmp_path)
    ours = str(Path(sys.executable).parent)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RECAST_") and k not in (
        "SD35", "REWARDS", "OUT", "CONFIGS", "VIRTUAL_ENV", "PROPOSALS", "SMOKE", "W")}
    env["PATH"] = os.pathsep.join(d for d in os.environ["PATH"].split(os.pathsep) if d != ours)
    out = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=work, capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    runs = work / "runs" / "paper"
    from recast.archives import load_profile

    prof = load_profile(runs / "profile.npz")
    assert set(prof.reward_names) == {"clipscore", "hpsv2", "pickscore", "ocr", "geneval"}
    assert prof.meta["offsets"] == {"clipscore": 1.0, "hpsv2": 1.0, "pickscore": 100.0}
    for stage, names in (("stage1", 3), ("stage_ocr/equal", 4), ("stage_geneval/equal", 4)):
        for method in ("recast", "static"):
            run = runs / stage / method / "seed_0"
            cfg = json.loads((run / "config.json").read_text())
            assert len(cfg["_run"]["reward_names"]) == names and cfg["method"] == method
            evals = [json.loads(line) for line in (run / "eval.jsonl").read_text().splitlines()]
            judges = {k for k in evals[-1] if k.startswith("judge/")}
            assert {"judge/imagereward", "judge/aesthetic", "judge/hpsv3"} <= judges, (stage, judges)
            if stage != "stage1":  # a second stage: started from the first's last checkpoint
                assert cfg["_run"]["initialized_from"]["updates"] == 2
        assert (runs / stage / "recast" / "seed_0" / "recast_weights.npz").is_file()
    tables = json.loads((runs / "eval" / "paper_eval.json").read_text())
    assert tables and (runs / "eval" / "paper_stage_ocr.md").is_file() and (runs / "eval" / "paper_stage_geneval.md").is_file()
    again = subprocess.run(["bash", "-c", "source .venv/bin/activate && recast tiny-sd3 runs/tiny_sd3"], cwd=work,
                           env=env, capture_output=True, text=True)
    assert again.returncode == 0 and again.stdout.startswith("kept "), again.stdout + again.stderr


def test_notebooks_05_and_06_run_on_an_sd3_world_with_the_vlm_judge(folders, tmp_path, vlm):
    import papermill

    sweep = dict(world=f"sd3:{folders['SD35']}", config="configs/sd3_tiny.yaml", settings=["composition"],
                 budgets=["uniform"], methods=["recast_live", "uniform"], seeds=[0, 1], preset="ci", iterations=1,
                 eval_every=1, eval_prompts=2, jobs=1, out_root=str(tmp_path / "sweep"),
                 world_settings={"resolution": 32, "max_sequence_length": 16, "dtype": "float32",
                                 "judges": ["jpeg", "colour_entropy"]})
    env = _env(folders, tmp_path)
    old = dict(os.environ)
    os.environ.update({k: env[k] for k in ("RECAST_RESULTS_DIR", "RECAST_FIGURES_DIR")})
    try:
        papermill.execute_notebook(str(ROOT / "notebooks/05_lambda_sweep.ipynb"), str(tmp_path / "05.ipynb"),
                                   parameters={**sweep, "results_name": "sd3_sweep", "figure_name": "05_sd3",
                                               "null_seeds": 2}, cwd=str(ROOT), progress_bar=False)
        papermill.execute_notebook(str(ROOT / "notebooks/06_judge_eval.ipynb"), str(tmp_path / "06.ipynb"),
                                   parameters={**sweep, "num_prompts": 2, "results_name": "sd3_judges",
                                               "figure_name": "06_sd3",
                                               "judge_settings": {"vlm_judge": {"endpoint": vlm, "model": "fake",
                                                                                "retries": 0}}},
                                   cwd=str(ROOT), progress_bar=False)
    finally:
        os.environ.clear()
        os.environ.update(old)
    results = tmp_path / "results"
    assert (results / "sd3_sweep_paired.csv").is_file()
    from recast.io import read_csv

    wins = read_csv(results / "sd3_judges.csv")
    assert wins and all(int(r["wins"]) + int(r["ties"]) + int(r["losses"]) + int(r["abstained"]) > 0 for r in wins)
    assert _FakeVLM.count > 0
    judged = read_csv(results / "sd3_judges_judges.csv")
    assert {"jpeg", "colour_entropy"} <= set(judged[0])


def _papermill_07(out_dir: Path, log: Path, iterations: int) -> list[str]:
    return [sys.executable, "-m", "papermill", str(ROOT / "notebooks/07_sd35_train.ipynb"), str(log),
            "-p", "iterations", str(iterations), "-p", "out_dir", str(out_dir),
            "-y", "overrides: {checkpoint_every: 1, eval_prompts: 2}", "--cwd", str(ROOT),
            "-y", "world_settings: {resolution: 32, max_sequence_length: 16, dtype: float32, judges: [jpeg]}"]


def test_a_killed_papermill_run_of_notebook_07_continues_bit_exactly_when_rerun(folders, tmp_path):
    """Run notebook 07 over the saved pipeline folder, kill it after its first checkpoint, rerun the same command:
    it resumes, and its weights equal an uninterrupted run's."""
    world = ["-p", "world", f"sd3:{folders['SD35']}"]
    killed, straight = tmp_path / "killed", tmp_path / "straight"
    cmd = _papermill_07(killed, tmp_path / "a.ipynb", 6) + world
    proc = subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 240
    while not (killed / "checkpoint.pt").is_file() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    assert (killed / "checkpoint.pt").is_file(), "no checkpoint before the deadline"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    done_before = len((killed / "metrics.jsonl").read_text().splitlines())
    assert done_before < 6
    rerun = subprocess.run(cmd, capture_output=True, text=True)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    subprocess.run(_papermill_07(straight, tmp_path / "b.ipynb", 6) + world, check=True, capture_output=True)
    from recast.trainer.checkpoint import load_checkpoint

    a, b = load_checkpoint(killed)["policy"], load_checkpoint(straight)["policy"]
    worst = max(float((a["params"][n] - b["params"][n]).abs().max()) for n in a["names"])
    assert worst == 0.0, f"resumed weights differ from the straight run's by {worst} (killed after {done_before})"
    assert all(torch.equal(a["params"][n], b["params"][n]) and torch.equal(a["ema"][n], b["ema"][n])
               for n in a["names"])
    lines = [json.loads(line)["iteration"] for line in (killed / "metrics.jsonl").read_text().splitlines()]
    assert lines == list(range(1, 7))
    # the same command with other settings is refused, naming the difference, and deletes nothing
    other = subprocess.run(_papermill_07(killed, tmp_path / "c.ipynb", 6) + ["-p", "world", "sd3-tiny"],
                           capture_output=True, text=True)
    assert other.returncode != 0 and "world" in (other.stderr + other.stdout)
    assert (killed / "checkpoint.pt").is_file()
