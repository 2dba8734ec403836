"""A killed-and-resumed run continues bit-exactly as an uninterrupted one (ci preset, 4 = 2 + resume + 2)."""

import pytest
import torch

from recast.config import preset
from recast.trainer import Trainer, load_run


def _strip(records):
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in records]


@pytest.mark.parametrize("backend, method", [("nft", "recast"), ("grpo", "recast"), ("nft", "recast_live"),
                                             ("grpo", "recast_live"), ("nft", "reward_sum")])
def test_resume_is_bit_exact(tmp_path, backend, method):
    cfg = preset("ci", backend=backend, method=method, iterations=4, rewards=("color", "size"), train_columns=2,
                 kl_beta=0.1 if backend == "nft" else 0.0)
    straight = Trainer(cfg, tmp_path / "straight")
    straight.run()
    first = Trainer(cfg.replace(iterations=2), tmp_path / "split")
    first.run()
    # a killed run may have logged past its checkpoint: resume must drop those records
    (tmp_path / "split" / "metrics.jsonl").open("a").write('{"iteration": 3, "junk": 1}\n')
    second = Trainer(cfg, tmp_path / "split", resume=True)
    assert second.iteration == 2
    second.run()
    for name in ("params", "old", "ema"):
        for a, b in zip(getattr(straight.policy, name), getattr(second.policy, name)):
            assert torch.equal(a, b), name
    assert torch.equal(straight.W, second.W)
    a, b = load_run(tmp_path / "straight"), load_run(tmp_path / "split")
    assert _strip(a.metrics) == _strip(b.metrics)
    assert a.weights == b.weights
