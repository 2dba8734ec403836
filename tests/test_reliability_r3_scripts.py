"""Reliability, third round (issue 60): the reward-model conversion scripts refuse bad files, configs and outputs in
one line (exit 2) before converting (cases X04-X25 of ../shared/reliability-r3.md). A full conversion's output is
tested in test_convert_rewards.py."""

from __future__ import annotations

import json
import os

import pytest
import torch

from helpers import load_script

hps = load_script("convert_hpsv2", "scripts")
irw = load_script("convert_imagereward", "scripts")


def _refused(capsys, code: int, *needles: str) -> str:
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, err
    return err


@pytest.fixture()
def files(tmp_path):
    """Broken inputs: an empty, a random and a truncated .safetensors; a plain checkpoint; configs; a tokenizer
    folder that need not hold a tokenizer (every refusal here comes before one is loaded)."""
    from safetensors.torch import save_file

    save_file({"w": torch.ones(64, 64)}, tmp_path / "ok.safetensors")
    data = (tmp_path / "ok.safetensors").read_bytes()
    (tmp_path / "trunc.safetensors").write_bytes(data[: len(data) // 2])
    (tmp_path / "empty.safetensors").write_bytes(b"")
    (tmp_path / "garbage.safetensors").write_bytes(os.urandom(4096))
    torch.save({"w": torch.ones(2)}, tmp_path / "src.pt")
    (tmp_path / "list.json").write_text("[1, 2, 3]")
    (tmp_path / "latin1.json").write_bytes('{"embed_dim": 16, "name": "caf\xe9"}'.encode("latin-1"))
    (tmp_path / "tok").mkdir()
    return tmp_path


def _args(files, src, out, *extra):
    return [str(files / src), str(out), "--processor-from", str(files / "tok"), *extra]


@pytest.mark.parametrize("name, needle", [("empty.safetensors", "truncated or not a safetensors file (0 bytes)"),  # X04
                                          ("garbage.safetensors", "not a readable .safetensors file"),  # X05
                                          ("trunc.safetensors", "truncated")])  # X06
@pytest.mark.parametrize("script", [hps, irw], ids=["hpsv2", "imagereward"])  # X24: ImageReward's random bytes
def test_X04_X05_X06_X24_broken_safetensors_are_refused_naming_the_file(files, capsys, script, name, needle):
    out = files / "out"
    _refused(capsys, script.main(_args(files, name, out)), name, needle)
    assert not out.exists()


def test_X09_X10_a_config_that_is_not_a_utf8_json_object_is_refused(files, capsys):
    out = files / "out"
    _refused(capsys, hps.main(_args(files, "src.pt", out, "--config", str(files / "list.json"))),
             "list.json: expected a JSON object (an open_clip model config), got a list")
    _refused(capsys, hps.main(_args(files, "src.pt", out, "--config", str(files / "latin1.json"))),
             "latin1.json: not a UTF-8 text file")
    (files / "nested.json").write_text(json.dumps({"model_cfg": {"vision_cfg": [1]}}))
    _refused(capsys, hps.main(_args(files, "src.pt", out, "--config", str(files / "nested.json"))),
             "vision_cfg must be an object, got list")
    assert not out.exists()


@pytest.mark.parametrize("script", [hps, irw], ids=["hpsv2", "imagereward"])
def test_X11_X25_X13_X18_outputs_that_cannot_take_the_model_are_refused_before_converting(files, capsys, script,
                                                                                          monkeypatch):
    def fail_to_load(path):
        raise AssertionError("the state dict was read before the output was checked")

    monkeypatch.setattr(script, "load_state_dict", fail_to_load)
    (files / "outfile").write_text("mine")
    _refused(capsys, script.main(_args(files, "src.pt", files / "outfile")), "outfile is a file, not a folder")
    assert (files / "outfile").read_text() == "mine"  # X11, X25
    theirs = files / "theirs"
    theirs.mkdir()
    (theirs / "tokenizer.json").write_text('{"mine": true}')
    (theirs / "notes.txt").write_text("notes")
    for extra in ((), ("--overwrite",)):  # X13: never converted into, even with --overwrite
        _refused(capsys, script.main(_args(files, "src.pt", theirs, *extra)), "holds files a conversion does not "
                                                                             "write (notes.txt)")
    assert (theirs / "tokenizer.json").read_text() == '{"mine": true}'
    _refused(capsys, script.main(_args(files, "src.pt", "/proc/hps_out")), "/proc/hps_out: cannot write in /proc")
    (files / "link").symlink_to(files / "elsewhere")
    _refused(capsys, script.main(_args(files, "src.pt", files / "link")), "is a symbolic link")
    assert not (files / "elsewhere").exists()


@pytest.mark.parametrize("script", [hps, irw], ids=["hpsv2", "imagereward"])
def test_X17_a_head_count_of_zero_is_refused_not_read_as_not_given(files, capsys, script):
    with pytest.raises(SystemExit) as e:
        script.main(_args(files, "src.pt", files / "out", "--vision-heads", "0"))
    assert e.value.code == 2 and "--vision-heads: expected an integer >= 1, got 0" in capsys.readouterr().err
    assert script.positive_int("16") == 16
