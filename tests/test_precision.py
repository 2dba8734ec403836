"""Mixed precision follows the config, else accelerate's own configuration; it is never silently overridden.

Accelerate's state is one per process, so each case runs in its own process."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.slow

SCRIPT = textwrap.dedent("""
    import json, sys
    from recast.config import preset
    from recast.trainer import Trainer
    tr = Trainer(preset("ci", mixed_precision=sys.argv[2]), sys.argv[1])
    print(json.dumps([str(tr.acc.mixed_precision), json.load(open(sys.argv[1] + "/config.json"))["_run"]["mixed_precision"]]))
    tr.release()
""")


@pytest.mark.parametrize("env, field, want", [(None, "auto", "no"), ("bf16", "auto", "bf16"), ("bf16", "no", "no"),
                                              (None, "bf16", "bf16")])
def test_the_config_or_accelerate_decides_and_the_run_records_it(tmp_path, env, field, want):
    environ = {k: v for k, v in os.environ.items() if k != "ACCELERATE_MIXED_PRECISION"}
    if env:
        environ["ACCELERATE_MIXED_PRECISION"] = env
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "run"), field], capture_output=True, text=True,
                         env=environ)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [want, want]


def test_a_run_made_when_the_default_was_no_resumes_under_auto(tmp_path, monkeypatch):
    from recast.config import preset
    from recast.trainer import Trainer, train

    monkeypatch.delenv("ACCELERATE_MIXED_PRECISION", raising=False)
    train(preset("ci", iterations=1, mixed_precision="no"), tmp_path)
    Trainer(preset("ci", iterations=2, mixed_precision="auto"), tmp_path, resume=True).release()
