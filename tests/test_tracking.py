"""What a tracker receives: scalars every iteration, and at each evaluation the judges, W and a grid of samples."""

import pytest

from recast.config import preset


@pytest.mark.slow
def test_tensorboard_gets_scalars_judges_the_w_heatmap_and_samples(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from recast.trainer import train

    train(preset("ci", iterations=2, eval_every=1, eval_prompts=4, log_with=("tensorboard",)), tmp_path)
    events = [p for p in tmp_path.rglob("events.out.tfevents.*")]
    assert events
    acc = EventAccumulator(str(events[0].parent), size_guidance={"images": 0, "scalars": 0})
    acc.Reload()
    scalars, images = set(acc.Tags()["scalars"]), set(acc.Tags()["images"])
    assert {"reward/weighted", "loss/loss", "eval/judge/strict", "eval/reward/weighted"} <= scalars
    assert {"eval/W", "eval/samples"} <= images
    assert [e.step for e in acc.Scalars("eval/judge/strict")] == [0, 1, 2]


def test_a_tracker_that_is_not_installed_is_refused_before_compute(tmp_path, monkeypatch):
    import importlib.util

    from recast.trainer import Trainer

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    with pytest.raises(ValueError, match=r"'wandb' is not installed here; pip install -e '\.\[wandb\]' in a clone"):
        Trainer(preset("ci", log_with=("wandb",)), tmp_path)
    with pytest.raises(ValueError, match="unknown tracker 'mlflow'"):
        Trainer(preset("ci", log_with=("mlflow",)), tmp_path)
    assert not (tmp_path / "config.json").exists()
