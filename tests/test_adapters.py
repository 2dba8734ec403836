"""The adapter a run leaves behind: diffusers' LoRA format, raw and EMA, read back by stock `load_lora_weights`."""

import pytest
import torch

from recast.config import preset

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    from recast.trainer import Trainer

    out = tmp_path_factory.mktemp("run")
    tr = Trainer(preset("ci", world="sd3-tiny", rewards=("jpeg", "colour_entropy"), iterations=3, ema_decay=0.5), out)
    tr.run()
    return tr, out


@pytest.mark.parametrize("which, companion", [("raw", None), ("ema", "ema")])
def test_stock_load_lora_weights_reproduces_the_trainers_velocities(run, tmp_path, which, companion):
    from recast.cli import main
    from recast.sampling import predict_velocity
    from recast.worlds.sd3.tiny import build_tiny_pipeline

    tr, out = run
    x = torch.randn(2, *tr.world.sample_shape, generator=torch.Generator().manual_seed(0))
    e = tr.world.encode_prompts(["a red circle", "two dogs"])
    with torch.no_grad():
        if companion:
            with tr.policy.use(companion) as m:
                want = predict_velocity(m, x, 0.5, e)
        else:
            want = predict_velocity(tr.world.transformer, x, 0.5, e)
        for folder in (out / "adapters" / which, tmp_path / "exported"):
            if folder.name == "exported":
                assert main(["export", str(out), str(folder), "--which", which]) == 0
            pipe = build_tiny_pipeline(tr.cfg.seed)
            base = predict_velocity(pipe.transformer, x, 0.5, e)
            pipe.load_lora_weights(folder)
            got = predict_velocity(pipe.transformer, x, 0.5, e)
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
            assert float((got - base).abs().max()) > 1e-4  # so the match is the adapter's, not the base model's


def test_raw_and_ema_differ_and_export_refuses_bad_input(run, tmp_path, capsys):
    from safetensors.torch import load_file

    from recast.cli import main

    _, out = run
    raw, ema = (load_file(out / "adapters" / w / "pytorch_lora_weights.safetensors") for w in ("raw", "ema"))
    assert raw.keys() == ema.keys() and any(not torch.equal(raw[k], ema[k]) for k in raw)
    assert main(["export", str(out), str(tmp_path / "x"), "--which", "ema"]) == 0
    assert main(["export", str(out), str(tmp_path / "x")]) == 2  # not empty
    assert "is not empty" in capsys.readouterr().err
    assert main(["export", str(tmp_path), str(tmp_path / "y")]) == 2
    assert "not a run directory" in capsys.readouterr().err
