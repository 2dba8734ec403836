"""The old policy's decay is read with the optimiser updates done so far, the one just made included, as the release
does: d = 0.5 * min(updates / 500, 1), so 0.001 after the first update and 0.5 from update 500 (issue 69, item 1;
docs/method.md §4). Earlier stages' updates (`initialize_from`) and a resumed run's continue the count."""

from __future__ import annotations

import pytest

from recast.config import preset
from recast.trainer import Trainer
from recast.trainer.policy import Policy, old_decay


def test_old_decay_is_the_releases_schedule_of_the_updates_done():
    assert old_decay(1) == 0.001  # after the first update (the 0-based iteration gave 0 here)
    assert old_decay(499) == pytest.approx(0.499, abs=1e-12) and old_decay(499) < 0.5
    assert old_decay(500) == 0.5 and old_decay(501) == 0.5 and old_decay(10_000) == 0.5
    for updates in range(0, 1001):
        assert old_decay(updates) == pytest.approx(0.5 * min(updates / 500, 1), abs=1e-12)


@pytest.fixture
def decays(monkeypatch):
    """Every d the trainer hands `Policy.update_old`, in order."""
    seen, update_old = [], Policy.update_old

    def record(self, decay):
        seen.append(decay)
        return update_old(self, decay)

    monkeypatch.setattr(Policy, "update_old", record)
    return seen


def test_the_trainer_counts_the_update_it_just_made(tmp_path, decays):
    Trainer(preset("ci", iterations=2, rewards=("color",)), tmp_path / "a").run()
    assert decays == [0.001, 0.002]


def test_the_decay_reaches_its_cap_at_update_500_not_501(tmp_path, decays):
    tr = Trainer(preset("ci", iterations=2, rewards=("color",)), tmp_path / "a")
    tr.update_offset = 498  # as if an earlier stage had made 498 updates: this run's updates are 499 and 500
    tr.run()
    assert decays[0] == pytest.approx(0.499, abs=1e-12) and decays[0] < 0.5 and decays[1] == 0.5


def test_a_resumed_run_and_a_later_stage_continue_the_count(tmp_path, decays):
    cfg = preset("ci", iterations=3, checkpoint_every=1, rewards=("color",))
    tr = Trainer(cfg.replace(iterations=2), tmp_path / "s1")  # stops after update 2 (checkpointed) ...
    tr.run()
    tr = Trainer(cfg, tmp_path / "s1", resume=True)  # ... and resumes at update 3
    assert tr.iteration == 2
    tr.run()
    assert decays == pytest.approx([0.001, 0.002, 0.003], abs=1e-12)
    # a second stage from the first's 3 updates makes updates 4 and 5; resumed after the 4th, it makes the 5th
    cfg2 = preset("ci", iterations=2, checkpoint_every=1, rewards=("color",), initialize_from=str(tmp_path / "s1"))
    tr = Trainer(cfg2.replace(iterations=1), tmp_path / "s2")
    assert tr.update_offset == 3
    tr.run()
    tr = Trainer(cfg2, tmp_path / "s2", resume=True)
    assert tr.update_offset == 3 and tr.iteration == 1
    tr.run()
    assert decays == pytest.approx([0.001, 0.002, 0.003, 0.004, 0.005], abs=1e-12)
