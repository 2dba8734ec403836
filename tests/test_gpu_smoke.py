"""benchmarks/gpu_smoke.py: runs tiny on CPU, refuses full size without CUDA, runs full size on a GPU."""

import importlib.util
import json
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


def _module():
    spec = importlib.util.spec_from_file_location("gpu_smoke", ROOT / "benchmarks" / "gpu_smoke.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_tiny_smoke_runs_on_cpu_and_counts_flops(tmp_path):
    out = tmp_path / "smoke.json"
    r = _module().main(["--tiny", "--device", "cpu", "--dtype", "fp32", "--batch", "2", "--steps", "2",
                        "--lora-rank", "4", "--peak-tflops", "1.0", "--out", str(out)])
    assert json.loads(out.read_text()) == r
    assert r["losses_finite"] and r["images_per_s"] > 0 and r["tflops_per_step"] > 0
    assert 0 < r["mfu"] == pytest.approx(r["achieved_tflops"] / 1.0)
    assert 0 < r["params_trainable"] < r["params_total"]


def test_full_size_refuses_without_cuda():
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(SystemExit, match="needs a CUDA GPU"):
        _module().main(["--device", "cpu"])


def test_config_is_sd35_medium():
    cfg = _module().SD35_MEDIUM
    assert (cfg["num_layers"], cfg["num_attention_heads"], cfg["attention_head_dim"], cfg["patch_size"]) == \
        (24, 24, 64, 2)
    assert cfg["dual_attention_layers"] == tuple(range(13)) and cfg["pos_embed_max_size"] == 384


@pytest.mark.gpu
def test_full_size_two_steps_on_gpu(tmp_path):
    r = _module().main(["--batch", "2", "--steps", "2", "--out", str(tmp_path / "smoke.json")])
    assert r["losses_finite"] and r["size"] == "sd3.5-medium" and 2.0e9 < r["params_total"] < 3.0e9
