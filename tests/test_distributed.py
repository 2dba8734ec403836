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


@pytest.mark.parametrize("name,kind,procs", [("single_gpu", "NO", 1), ("ddp_8gpu", "MULTI_GPU", 8)])
def test_accelerate_configs_load(name, kind, procs):
    from accelerate.commands.config.config_args import load_config_from_file

    cfg = load_config_from_file(str(ROOT / "configs" / "accelerate" / f"{name}.yaml"))
    assert cfg.distributed_type == kind and cfg.num_processes == procs and cfg.mixed_precision == "bf16"


def test_no_accelerate_config_asks_for_accelerate_fsdp():
    # the trainer shards with torch's fully_shard itself (config field fsdp) and refuses accelerate's FSDP wrapping
    for path in (ROOT / "configs" / "accelerate").glob("*.yaml"):
        assert "FSDP" not in path.read_text().split("distributed_type:")[1].splitlines()[0], path


def test_launch_script(tmp_path):
    script = ROOT / "scripts" / "launch.sh"
    bad = subprocess.run([str(script), "nope"], capture_output=True, text=True)
    assert bad.returncode == 2 and "ddp_8gpu" in bad.stderr and "single_gpu" in bad.stderr
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


# ---------------------------------------------------------------------------------------- several processes, in one
class _Pool:
    """A world with only a prompt pool (all `sample_prompts` reads)."""

    def __init__(self, n):
        self.pool = [f"prompt {i}" for i in range(n)]

    def prompts(self, split):
        return list(self.pool)


def test_one_rank_draws_as_before_the_sharding():
    import torch

    from recast.world import sample_prompts

    world = _Pool(11)
    want = [world.pool[i] for i in torch.randint(11, (9,), generator=torch.Generator().manual_seed(4)).tolist()]
    for kwargs in ({}, {"rank": 0, "num_ranks": 1, "shard_seed": 123}):
        assert sample_prompts(world, 9, generator=torch.Generator().manual_seed(4), **kwargs) == want


@pytest.mark.parametrize("ranks", [2, 3, 7])
def test_ranks_draw_from_a_partition_of_the_pool(ranks):
    import torch

    from recast.world import sample_prompts, shard_seed

    world = _Pool(7)
    for it in range(5):
        seed = shard_seed(3, it)
        parts = [set(sample_prompts(world, 400, generator=torch.Generator().manual_seed(r), rank=r, num_ranks=ranks,
                                    shard_seed=seed)) for r in range(ranks)]
        assert sum(len(p) for p in parts) == 7 and set().union(*parts) == set(world.pool)  # disjoint, covering
        assert sorted(len(p) for p in parts) == sorted(len(range(r, 7, ranks)) for r in range(ranks))
        again = set(sample_prompts(world, 400, generator=torch.Generator().manual_seed(9), rank=0, num_ranks=ranks,
                                   shard_seed=seed))
        assert again == parts[0]  # the partition is the shared seed's alone, not the process's generator's


def test_each_prompt_keeps_its_chance_under_the_partition():
    # P(prompt p fills one slot of rank r) = P(p in part r) / |part r| = (|part r| / P) / |part r| = 1 / P
    import torch

    from recast.world import sample_prompts, shard_seed

    world, draws = _Pool(5), 4000
    for rank in (0, 1):
        counts = torch.zeros(5)
        for it in range(draws):
            p = sample_prompts(world, 1, generator=torch.Generator().manual_seed(it), rank=rank, num_ranks=2,
                               shard_seed=shard_seed(0, it))[0]
            counts[world.pool.index(p)] += 1
        sd = (draws * 0.2 * 0.8) ** 0.5
        assert (counts - draws / 5).abs().max() < 5 * sd, counts


def test_partition_seeds_and_errors():
    import torch

    from recast.world import sample_prompts, shard_seed

    assert shard_seed(0, 1) == shard_seed(0, 1) and len({shard_seed(s, i) for s in range(4) for i in range(50)}) == 200
    g = torch.Generator().manual_seed(0)
    with pytest.raises(ValueError, match=r"prompts \(3\) cannot be split over 4 processes"):
        sample_prompts(_Pool(3), 1, generator=g, rank=0, num_ranks=4)
    for rank, n in ((2, 2), (-1, 2), (0, 0)):
        with pytest.raises(ValueError, match="rank must lie"):
            sample_prompts(_Pool(3), 1, generator=g, rank=rank, num_ranks=n)


def test_global_batch_of_a_plan():
    from recast.distributed import global_batch

    assert global_batch(plan_batches(24, 48, 8, 9)) == {"num_processes": 8, "global_batch": {"prompts": 48,
                                                                                            "images": 1152}}


@pytest.mark.parametrize("env,refused", [
    ({"ACCELERATE_USE_CPU": "True", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}, True),  # the trap
    ({"ACCELERATE_USE_CPU": "False", "MASTER_ADDR": "127.0.0.1"}, True),  # --num_processes 2, no GPU, no --multi_gpu
    ({"ACCELERATE_USE_CPU": "True"}, False),  # accelerate launch of one process
    ({"MASTER_ADDR": "10.0.0.1", "WORLD_SIZE": "1"}, False),  # torchrun of one process
    ({"ACCELERATE_USE_CPU": "True", "MASTER_ADDR": "127.0.0.1", "WORLD_SIZE": "2"}, False), ({}, False)])
def test_the_one_process_launch_trap_is_refused(env, refused):
    from recast.distributed import check_launch

    if refused:
        with pytest.raises(ValueError, match="asked for several processes but started one.*--multi_gpu"):
            check_launch(1, env)
    else:
        check_launch(1, env)
    check_launch(2, env)  # several processes started: nothing to say


def test_launches_that_cannot_shard_are_refused():
    from recast.distributed import check_launch

    with pytest.raises(ValueError, match="accelerate's own FSDP .* --set fsdp=true"):
        check_launch(8, {}, distributed_type="DistributedType.FSDP")
    with pytest.raises(ValueError, match="config field fsdp: sharding needs several processes"):
        check_launch(1, {}, fsdp=True)
    check_launch(2, {}, fsdp=True, distributed_type="DistributedType.MULTI_CPU")


def _marker_run(tmp_path, marker):
    from recast.io import write_json

    write_json(tmp_path / "config.json", {"_run": marker})
    return tmp_path


def test_resume_on_another_process_count_is_refused_naming_both(tmp_path):
    from recast.config import preset
    from recast.trainer.ranks import check_processes, marker_processes

    cfg = preset("ci")  # 4 images per process
    run = _marker_run(tmp_path, {"num_processes": 2})
    assert marker_processes(run) == 2
    check_processes(run, cfg, 2, False)
    check_processes(run, cfg, 1, True)  # asked for
    with pytest.raises(ValueError, match=r"trained on 2 processes \(8 images per iteration\) and this launch has 1 "
                                         r"process \(4\); launch 2, or pass --change-processes"):
        check_processes(run, cfg, 1, False)
    assert marker_processes(_marker_run(tmp_path, {})) == 1  # a run from before the count was recorded
    with pytest.raises(ValueError, match="num_processes must be an integer >= 1"):
        marker_processes(_marker_run(tmp_path, {"num_processes": "2"}))


class _FakeAcc:
    """Stands in for `accelerate.Accelerator` on `num_processes` processes: `gather` concatenates this process's
    tensor with those the other processes would send (given up front), in rank order."""

    def __init__(self, others=(), rank=0):
        self.num_processes, self.process_index, self.device = 1 + len(others), rank, "cpu"
        self.others = list(others)

    def gather(self, t):
        import torch

        parts = [o(t) if callable(o) else o for o in self.others]
        parts.insert(self.process_index, t)
        return torch.cat(parts)


def test_proxies_are_gathered_in_one_layout_whatever_a_process_drew():
    import torch

    from recast.trainer.backends import OptOutput
    from recast.trainer.ranks import gather_proxies

    K, T, B = 2, 3, 4
    subset = torch.tensor([0, 3])

    def score(x, s):  # reward k of a proxy = its image's value + 10 k (one-pixel "images")
        return torch.stack([x.flatten() + 10 * k for k in range(K)])

    mine = OptOutput({}, proxy_x0=torch.tensor([[1.0], [2.0], [3.0]]), proxy_sample=torch.tensor([0, 3, 3]),
                     proxy_row=torch.tensor([1, 1, 2]))
    s, c, R, everyone = gather_proxies(_FakeAcc(), mine, subset, K, T, B, score)
    assert sorted(zip(s.tolist(), c.tolist(), R[0].tolist(), R[1].tolist())) == [
        (0, 1, 1.0, 11.0), (3, 1, 2.0, 12.0), (3, 2, 3.0, 13.0)] and everyone.tolist() == [0, 3]
    empty = OptOutput({})
    assert gather_proxies(_FakeAcc(), empty, subset, K, T, B, score) is None
    # two processes, the other with no x̂_0: this one's pairs keep their indices, the other's subset joins as r·B + i
    nothing = torch.full((2, K, T + 1), float("nan"))
    s, c, R, everyone = gather_proxies(_FakeAcc([nothing]), mine, subset, K, T, B, score)
    assert sorted(s.tolist()) == [0, 3, 3] and everyone.tolist() == [0, 3, 4, 7]
    # and the other way round: this process (rank 1) has none, and still joins the gather
    theirs = gather_proxies(_FakeAcc([], rank=0), mine, subset, K, T, B, score)[2]
    layout = torch.full((2, K, T + 1), float("nan"))
    layout[0, :, 1], layout[1, :, 1], layout[1, :, 2] = theirs[:, 0], theirs[:, 1], theirs[:, 2]
    s, c, R, everyone = gather_proxies(_FakeAcc([layout], rank=1), empty, subset, K, T, B, score)
    assert sorted(zip(s.tolist(), c.tolist())) == [(0, 1), (3, 1), (3, 2)] and everyone.tolist() == [0, 3, 4, 7]


def test_logged_numbers_reduce_over_processes():
    import torch

    from recast.trainer.ranks import max_over_ranks, mean_over_ranks

    other = torch.tensor([[3.0, 10.0]], dtype=torch.float64)  # the other process's (sorted keys: loss, sampling)
    acc = _FakeAcc([other])
    assert mean_over_ranks(acc, {"sampling": 2.0, "loss": 1.0}) == {"loss": 2.0, "sampling": 6.0}
    assert max_over_ranks(acc, {"sampling": 2.0, "loss": 1.0}) == {"loss": 3.0, "sampling": 10.0}
    assert mean_over_ranks(_FakeAcc(), {"loss": 1.5}) == {"loss": 1.5}  # one process: as it is


def test_each_rank_restores_its_own_random_state():
    import torch

    from recast.trainer.checkpoint import capture_rng
    from recast.trainer.ranks import derived_seed, restore_rank_rng

    gens = [torch.Generator().manual_seed(s) for s in (5, 6)]
    for g in gens:
        torch.rand(3, generator=g)
    state = {"iteration": 7, "rng": capture_rng({"train": gens[0]}),
             "rng_ranks": [capture_rng({"train": g}) for g in gens]}
    want = [torch.rand(4, generator=g) for g in gens]
    for rank in (0, 1):
        g = torch.Generator().manual_seed(99)
        assert restore_rank_rng(state, {"train": g}, rank, seed=0) == "saved"
        assert torch.equal(torch.rand(4, generator=g), want[rank])
    g = torch.Generator()
    assert restore_rank_rng(state, {"train": g}, 2, seed=0) == "derived"  # a rank the run did not have
    assert torch.equal(torch.rand(4, generator=g), torch.rand(4, generator=torch.Generator().manual_seed(
        derived_seed(0, 2, 7))))
    one = {"iteration": 7, "rng": state["rng"]}  # a one-process checkpoint holds "rng" alone
    g = torch.Generator()
    assert restore_rank_rng(one, {"train": g}, 0, seed=0) == "saved" and torch.equal(torch.rand(4, generator=g),
                                                                                     want[0])
    assert len({derived_seed(0, r, i) for r in range(8) for i in range(100)}) == 800
