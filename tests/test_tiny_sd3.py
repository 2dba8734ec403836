"""`recast tiny-sd3 OUT` writes the tiny SD3 pipeline and reward folders the paper-scale block reads, never a half
folder, and a rerun keeps what is there (the README's block runs it for real: tests/test_paper_path.py)."""

from __future__ import annotations

import json

import pytest

import recast.worlds.sd3.tiny as tiny
from recast.cli import main
from recast.worlds.sd3.folders import PIPELINE, REWARDS, write_folders

CALLS: list[tuple[str, int]] = []


def _fake_saver(kind: str, fail: bool = False):
    def save(path, seed=0):
        CALLS.append((kind, seed))
        path.mkdir(parents=True)
        (path / "weights.bin").write_text(f"{kind} {seed}")
        if fail:
            raise KeyboardInterrupt  # killed halfway through writing
        return path

    return save


@pytest.fixture
def fakes(monkeypatch):
    """Quick stand-ins for the two builders (the real ones are exercised by the paper-path tests)."""
    CALLS.clear()
    monkeypatch.setattr(tiny, "save_tiny_pipeline", _fake_saver("pipeline"))
    monkeypatch.setattr(tiny, "save_tiny_rewards", _fake_saver("rewards"))
    return monkeypatch


def test_writes_both_folders_then_a_rerun_keeps_them(fakes, tmp_path, capsys):
    assert main(["tiny-sd3", str(tmp_path / "t"), "--seed", "3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == [f"wrote {tmp_path / 't' / PIPELINE} (a tiny random SD3 pipeline)",
                     f"wrote {tmp_path / 't' / REWARDS} (tiny random reward models)",
                     f"SD35={tmp_path / 't' / PIPELINE} REWARDS={tmp_path / 't' / REWARDS}"]
    assert CALLS == [("pipeline", 3), ("rewards", 3)]
    assert (tmp_path / "t" / PIPELINE / "weights.bin").read_text() == "pipeline 3"
    assert main(["tiny-sd3", str(tmp_path / "t"), "--seed", "3"]) == 0
    assert capsys.readouterr().out.startswith(f"kept {tmp_path / 't' / PIPELINE}")
    assert CALLS == [("pipeline", 3), ("rewards", 3)]  # nothing built again
    assert sorted(p.name for p in (tmp_path / "t").iterdir()) == sorted([PIPELINE, REWARDS, "tiny_sd3.json"])


def test_a_killed_write_leaves_no_half_folder_and_the_rerun_finishes_it(fakes, tmp_path):
    fakes.setattr(tiny, "save_tiny_rewards", _fake_saver("rewards", fail=True))
    with pytest.raises(KeyboardInterrupt):
        write_folders(tmp_path / "t")
    assert (tmp_path / "t" / PIPELINE).is_dir() and not (tmp_path / "t" / REWARDS).exists()
    fakes.setattr(tiny, "save_tiny_rewards", _fake_saver("rewards"))
    paths = write_folders(tmp_path / "t")
    assert paths["written"] == [REWARDS] and (paths[REWARDS] / "weights.bin").read_text() == "rewards 0"
    assert not list((tmp_path / "t").glob(".*partial"))
    assert json.loads((tmp_path / "t" / "tiny_sd3.json").read_text()) == {"seed": 0, "written": [PIPELINE, REWARDS]}


@pytest.mark.parametrize("prepare,message", [
    (lambda out: (out / PIPELINE).mkdir(parents=True), "was not written by tiny-sd3"),
    (lambda out: out.write_text("x"), "is a file"),
    (lambda out: (out.mkdir(), (out / "tiny_sd3.json").write_text('{"seed": 1, "written": []}')), "made with seed 1"),
])
def test_refuses_what_it_did_not_make_before_building_anything(fakes, tmp_path, capsys, prepare, message):
    out = tmp_path / "t"
    prepare(out)
    assert main(["tiny-sd3", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0]
    assert CALLS == []
