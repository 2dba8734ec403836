"""A new stage from another run's last checkpoint (`initialize_from`, `--initialize-from`): the paper trains its
four-reward settings as a second stage started from the three-reward first."""

from __future__ import annotations

import pytest
import torch

from recast.config import preset
from recast.trainer import Trainer


def test_a_stage_starts_from_the_last_checkpoint_and_keeps_the_update_count(tmp_path):
    s1 = Trainer(preset("ci", iterations=2, rewards=("color", "size")), tmp_path / "s1")
    s1.run()
    cfg2 = preset("ci", iterations=1, rewards=("color", "size", "digit"), lam=(2.0, 1.0, 1.0),
                  initialize_from=str(tmp_path / "s1"))
    s2 = Trainer(cfg2, tmp_path / "s2")
    for name in ("params", "old", "ema"):  # the stage begins where the last one ended
        assert all(torch.equal(a, b) for a, b in zip(getattr(s1.policy, name), getattr(s2.policy, name))), name
    a, b = s1.optimizer.state_dict()["state"], s2.optimizer.state_dict()["state"]
    assert all(torch.equal(a[k]["exp_avg"], b[k]["exp_avg"]) for k in a) and s2.update_offset == 2
    assert s2.iteration == 0 and s2.reward_names == ("color", "size", "digit")
    s2.run()
    marker = __import__("json").loads((tmp_path / "s2" / "config.json").read_text())["_run"]
    assert marker["initialized_from"] == {"run": str(tmp_path / "s1"), "updates": 2}
    # resuming the second stage keeps its offset
    s3 = Trainer(cfg2.replace(iterations=2), tmp_path / "s2", resume=True)
    assert s3.update_offset == 2 and s3.iteration == 1
    s3.release()


def test_an_incompatible_earlier_stage_is_refused_naming_the_difference(tmp_path):
    Trainer(preset("ci", iterations=1, rewards=("color",)), tmp_path / "s1").run()
    with pytest.raises(ValueError, match="lora_rank: 4 there vs 2 here"):
        Trainer(preset("ci", iterations=1, rewards=("color",), lora_rank=2, initialize_from=str(tmp_path / "s1")),
                tmp_path / "a")
    with pytest.raises(ValueError, match="another base model"):  # the tiny world is seeded: another seed, another base
        Trainer(preset("ci", iterations=1, rewards=("color",), seed=3, initialize_from=str(tmp_path / "s1")),
                tmp_path / "b")
    with pytest.raises(ValueError, match="holds no checkpoint.pt"):
        Trainer(preset("ci", iterations=1, initialize_from=str(tmp_path / "nowhere")), tmp_path / "c")
    assert not (tmp_path / "c").exists()
