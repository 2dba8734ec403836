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


@pytest.mark.parametrize("kind", ["nft", "grpo"])
def test_with_one_reward_the_loop_with_recast_is_bit_identical_to_the_loop_without(model, examples, kind):
    kw = dict(rewards=("brightness",), iterations=3, log=lambda r: None)
    mine = examples[kind].train(model, **kw)
    plain = examples[kind].train(model, plain=True, **kw)
    assert all(torch.equal(a, b) for a, b in zip(mine["params"], plain["params"]))
    assert [h["brightness"] for h in mine["history"]] == [h["brightness"] for h in plain["history"]]
    assert any(not torch.equal(a, torch.zeros_like(a)) for a in mine["params"])


@pytest.mark.parametrize("kind", ["nft", "grpo"])
def test_with_two_rewards_recast_and_the_plain_loop_share_seeds_and_differ_in_credit(model, examples, kind):
    kw = dict(rewards=("brightness", "edges"), lam=[0.7, 0.3], iterations=3, log=lambda r: None)
    mine = examples[kind].train(model, **kw)
    plain = examples[kind].train(model, plain=True, **kw)
    first = lambda run: {n: run["history"][0][n] for n in ("brightness", "edges")}  # noqa: E731
    assert first(mine) == first(plain)  # the same rollouts before any update
    W = torch.tensor(mine["history"][-1]["W"], dtype=torch.float64)
    torch.testing.assert_close(W.sum(1), torch.tensor([0.7, 0.3], dtype=torch.float64))
    torch.testing.assert_close(W.sum(0), torch.full((6,), 1 / 6, dtype=torch.float64))
    assert mine["credit"].iteration == 3
    assert not all(torch.equal(a, b) for a, b in zip(mine["params"], plain["params"]))


def test_examples_stay_short_and_use_only_the_public_credit_api():
    for name, limit in (("nft_sd3.py", 150), ("grpo_sd3.py", 150)):
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
