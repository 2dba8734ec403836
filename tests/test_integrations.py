"""ReCAST inside someone else's loop: the worked examples in examples/ over a tiny SD3 pipeline saved as a diffusers
folder, each against the same loop without ReCAST on identical seeds."""

import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    from recast.worlds.sd3.tiny import save_tiny_pipeline

    return str(save_tiny_pipeline(tmp_path_factory.mktemp("sd3") / "tiny"))


@pytest.fixture(scope="module")
def examples():
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        import grpo_sd3
        import nft_sd3

        yield {"nft": nft_sd3, "grpo": grpo_sd3}
    finally:
        sys.path.remove(str(ROOT / "examples"))


@pytest.fixture(scope="module")
def tables(model, tmp_path_factory):
    """Weight tables for the examples' rewards on the tiny pipeline's 6-step grid: one reward (W = λ/T, forced by the
    marginals), and two rewards whose profiles differ (brightness early, edges late), from synthetic density ratios."""
    import numpy as np
    from diffusers import FlowMatchEulerDiscreteScheduler

    from recast.archives import DensityProfile, save_table, table_from_profile

    sched = FlowMatchEulerDiscreteScheduler.from_pretrained(model, subfolder="scheduler")
    sched.set_timesteps(6)
    sigmas = sched.sigmas.double().numpy()
    early = np.linspace(1.0, 2.0, 6)[None] ** np.r_[4, 1, 1, 1, 1, 1][None] * np.ones((8, 1))
    late = np.ones((8, 6))
    late[:, -1] = np.r_[0.2, 1.8, 0.4, 1.6, 0.6, 1.4, 0.8, 1.2]
    prof = DensityProfile(sigmas, {"brightness": early * np.r_[0.5, 1.5, 0.7, 1.3, 0.9, 1.1, 1.0, 1.0][:, None],
                                   "edges": late})
    out = tmp_path_factory.mktemp("tables")
    save_table(table_from_profile(prof, [1.0], reward_names=["brightness"]), out / "one.npz")
    save_table(table_from_profile(prof, [0.7, 0.3]), out / "two.npz")
    return {"one": str(out / "one.npz"), "two": str(out / "two.npz")}


@pytest.mark.parametrize("kind", ["nft", "grpo"])
def test_with_one_reward_the_loop_with_recast_is_bit_identical_to_the_loop_without(model, examples, tables, kind):
    """One reward: the marginals force W = λ/T, so the paper's ReCAST (from a table) trains exactly as the loop's own
    static baseline, bit for bit."""
    kw = dict(rewards=("brightness",), iterations=3, log=lambda r: None)
    plain = examples[kind].train(model, plain=True, **kw)
    mine = examples[kind].train(model, table=tables["one"], **kw)
    assert all(torch.equal(a, b) for a, b in zip(mine["params"], plain["params"]))
    assert [h["brightness"] for h in mine["history"]] == [h["brightness"] for h in plain["history"]]
    assert any(not torch.equal(a, torch.zeros_like(a)) for a in plain["params"])


@pytest.mark.parametrize("kind", ["nft", "grpo"])
def test_with_two_rewards_recast_and_the_plain_loop_share_seeds_and_differ_in_credit(model, examples, tables, kind):
    kw = dict(rewards=("brightness", "edges"), iterations=3, log=lambda r: None)
    plain = examples[kind].train(model, plain=True, lam=[0.7, 0.3], **kw)
    first = lambda run: {n: run["history"][0][n] for n in ("brightness", "edges")}  # noqa: E731
    for mode in (dict(table=tables["two"]), dict(live=True, lam=[0.7, 0.3])):
        mine = examples[kind].train(model, **mode, **kw)
        assert first(mine) == first(plain)  # the same rollouts before any update
        W = torch.tensor(mine["history"][-1]["W"], dtype=torch.float64)
        torch.testing.assert_close(W.sum(1), torch.tensor([0.7, 0.3], dtype=torch.float64), atol=1e-6, rtol=0)
        torch.testing.assert_close(W.sum(0), torch.full((6,), 1 / 6, dtype=torch.float64), atol=1e-6, rtol=0)
        assert not all(torch.equal(a, b) for a, b in zip(mine["params"], plain["params"])), mode
    assert mine["credit"].iteration == 3  # live: one observe per iteration
    table_W = torch.tensor(examples[kind].train(model, table=tables["two"], **kw)["history"][-1]["W"])
    assert not torch.allclose(table_W, torch.tensor([[0.7 / 6] * 6, [0.3 / 6] * 6], dtype=table_W.dtype))


def test_examples_stay_short_and_use_only_the_public_credit_api():
    for name, limit in (("nft_sd3.py", 155), ("grpo_sd3.py", 155)):  # three modes each: table, live, plain
        text = (ROOT / "examples" / name).read_text()
        assert len(text.splitlines()) <= limit, name
        imports = [line for line in text.splitlines() if line.startswith(("import recast", "from recast"))]
        assert imports == ["from recast.credit import Credit  # ReCAST"], (name, imports)


def test_example_cli_runs_from_the_repository_root(model):
    import subprocess

    out = subprocess.run([sys.executable, "examples/nft_sd3.py", "--model", model, "--iterations", "1"],
                         capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "'iteration': 1" in out.stdout
