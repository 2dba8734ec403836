"""Batch planning over GPUs, the accelerate configs and launch script, and a tensorboard tracker through accelerate."""

import os
import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from recast.distributed import plan_batches

ROOT = Path(__file__).resolve().parents[1]


def test_plan_matches_diffusionnft_on_eight_gpus():
    plan = plan_batches(group_size=24, prompts_per_iter=48, num_gpus=8, max_per_gpu=9)
    assert (plan.prompts_per_gpu, plan.images_per_gpu, plan.micro_batch, plan.grad_accum, plan.global_images) == \
        (6, 144, 9, 16, 1152)
    assert "8 GPU(s) x 6 prompts x 24 samples = 144 images per GPU" in str(plan)


@given(st.integers(2, 32), st.integers(1, 16), st.integers(1, 8), st.integers(1, 64))
def test_plan_arithmetic(G, prompts_per_gpu, gpus, max_per_gpu):
    plan = plan_batches(G, prompts_per_gpu * gpus, gpus, max_per_gpu)
    assert plan.micro_batch * plan.grad_accum == plan.images_per_gpu == prompts_per_gpu * G
    assert plan.global_images == prompts_per_gpu * gpus * G and 1 <= plan.micro_batch <= max_per_gpu
    bigger = [d for d in range(plan.micro_batch + 1, max_per_gpu + 1) if plan.images_per_gpu % d == 0]
    assert not bigger  # the largest micro-batch that fits


@pytest.mark.parametrize("args,match", [((1, 8, 1, 4), "group_size"), ((4, 0, 1, 4), "prompts_per_iter"),
                                        ((4, 8, 0, 4), "num_gpus"), ((4, 8, 1, 0), "max_per_gpu"),
                                        ((4, 8.0, 1, 4), "prompts_per_iter"),
                                        ((4, 10, 4, 4), "use 8 or 12"), ((4, 3, 4, 4), "use 4$")])
def test_plan_errors(args, match):
    with pytest.raises(ValueError, match=match):
        plan_batches(*args)


@pytest.mark.parametrize("name,kind,procs", [("single_gpu", "NO", 1), ("ddp_8gpu", "MULTI_GPU", 8),
                                             ("fsdp_8gpu", "FSDP", 8)])
def test_accelerate_configs_load(name, kind, procs):
    from accelerate.commands.config.config_args import load_config_from_file

    cfg = load_config_from_file(str(ROOT / "configs" / "accelerate" / f"{name}.yaml"))
    assert cfg.distributed_type == kind and cfg.num_processes == procs and cfg.mixed_precision == "bf16"
    if kind == "FSDP":
        assert cfg.fsdp_config["fsdp_transformer_layer_cls_to_wrap"] == "JointTransformerBlock"


def test_launch_script(tmp_path):
    script = ROOT / "scripts" / "launch.sh"
    bad = subprocess.run([str(script), "nope"], capture_output=True, text=True)
    assert bad.returncode == 2 and "ddp_8gpu" in bad.stderr and "fsdp_8gpu" in bad.stderr
    env = {**os.environ, "ACCELERATE": "echo", "ACCELERATE_ARGS": "--num_processes 2"}
    ok = subprocess.run([str(script), "ddp_8gpu", "--seed", "3"], capture_output=True, text=True, env=env, check=True)
    assert ok.stdout.split()[:1] == ["launch"] and ok.stdout.rstrip().endswith(
        "ddp_8gpu.yaml --num_processes 2 -m recast train --seed 3")


def test_tensorboard_tracker_round_trip(tmp_path):
    pytest.importorskip("tensorboard", reason="tensorboard is an optional extra: pip install -e '.[tensorboard]'")
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    try:
        acc = Accelerator(cpu=True, log_with="tensorboard", project_dir=str(tmp_path))
        acc.init_trackers("recast", config={"lr": 3e-4, "method": "recast"})
        for step in range(3):
            acc.log({"loss": 1.0 / (step + 1), "reward/pickscore": 20.0 + step}, step=step)
        acc.end_training()
    finally:
        AcceleratorState._reset_state(True)  # leave no accelerate singleton behind for other tests
    events = list(tmp_path.rglob("events.out.tfevents.*"))
    assert events
    ea = EventAccumulator(str(events[0].parent))
    ea.Reload()
    assert [(e.step, round(e.value, 6)) for e in ea.Scalars("loss")] == [(0, 1.0), (1, 0.5), (2, 0.333333)]
    assert [e.value for e in ea.Scalars("reward/pickscore")] == [20.0, 21.0, 22.0]
