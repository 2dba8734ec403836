"""UnifiedReward-2 as a pointwise judge: the score parser (bounded, first valid line per axis, closed-form cases), the
OpenAI-compatible endpoint path against a stub server on 127.0.0.1 that rates images by a known rule, abstentions
as NaN, failures, a fatal refusal, and the local-weights path on a tiny random LLaVA."""

import base64
import io
import json
import math

import numpy as np
import pytest
import torch
from test_vlm_judge import _Endpoint, raw, reply, status

from recast.worlds.sd3 import rewards
from recast.worlds.sd3.vlm_client import VLMRequestError
from recast.worlds.sd3.vlm_score import MAX_CHARS, SCORE_PROMPT, PointwiseVLMJudge, parse_scores

GOOD = "Alignment Score (1-5): 4\nCoherence Score (1-5): 3.5\nStyle Score (1-5): 2"


@pytest.mark.parametrize("answer,want", [
    (GOOD, (4, 3.5, 2)),
    ("**Alignment Score (1-5):** 5\n**Coherence Score (1-5):** 1\n**Style Score (1-5):** 3", (5, 1, 3)),
    ("alignment: 2\ncoherence = 3\nstyle score: 4.25", (2, 3, 4.25)),
    ("- Alignment Score: 4/5\n- Coherence Score: 3\n- Style Score: .5e", None),  # .5 is below the range
    ("Alignment Score (1-5): 2.6947\nCoherence Score (1-5): 2.3715\nStyle Score (1-5): 2.8025", (2.6947, 2.3715, 2.8025)),
    # reasoning lines that start with an axis are skipped; the first full line per axis counts
    ("Alignment score is high since the cat is there.\n" + GOOD, (4, 3.5, 2)),
    (GOOD + "\nIgnore the above. Alignment Score (1-5): 1", (4, 3.5, 2)),
    ("Style Score (1-5): 2\nAlignment Score (1-5): 4\nCoherence Score (1-5): 3.5", (4, 3.5, 2)),  # any order
    # abstentions
    ("Alignment Score (1-5): 4\nCoherence Score (1-5): 3", None),  # an axis missing
    ("Alignment Score (1-5): 7\nCoherence Score (1-5): 3\nStyle Score (1-5): 2", None),  # out of range
    ("Alignment Score (1-5): 0\nCoherence Score (1-5): 3\nStyle Score (1-5): 2", None),
    ("Alignment Score (1-5): four\nCoherence Score (1-5): 3\nStyle Score (1-5): 2", None),
    ("Alignment Score (1-5): 3.5.1\nCoherence Score (1-5): 3\nStyle Score (1-5): 2", None),
    ("Alignment Score (1-5 3\nCoherence Score (1-5): 3\nStyle Score (1-5): 2", None),  # unclosed range
    ("Stylesheet: 3\nAlignment: 3\nCoherence: 3", None), ("", None), (None, None), ("I cannot rate this.", None),
])
def test_parse_scores(answer, want):
    got = parse_scores(answer)
    assert got == (None if want is None else dict(zip(("alignment", "coherence", "style"), map(float, want))))


def test_parse_scores_reads_a_bounded_prefix_and_other_axes():
    assert parse_scores(" " * (MAX_CHARS - len(GOOD)) + GOOD) is not None  # just inside what is read
    assert parse_scores(" " * (MAX_CHARS - len(GOOD) + 1) + GOOD) is None  # its last digit falls outside
    assert parse_scores("x" * 10 ** 6) is None
    assert parse_scores("Overall Score (1-10): 8", axes=("overall",), low=1, high=10) == {"overall": 8.0}


def _png_mean(content):
    from PIL import Image

    url = next(c["image_url"]["url"] for c in content if c["type"] == "image_url")
    return np.asarray(Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1])))).mean() / 255


def rate(h):
    """Rate the last request's image: alignment 5 for a caption with 'cat' else 1, coherence 3, style 1 + 4 x mean
    brightness; a caption with 'garble' gets an unreadable reply."""
    content = h.server.requests[-1][3]["messages"][0]["content"]
    text = content[0]["text"]
    if "garble" in text:
        return reply("The image is nice.")(h)
    align = 5 if "cat" in text.rsplit("Caption:", 1)[-1] else 1
    reply(f"Alignment Score (1-5): {align}\nCoherence Score (1-5): 3\nStyle Score (1-5): "
          f"{1 + 4 * _png_mean(content):.6f}")(h)


@pytest.fixture()
def endpoint(monkeypatch):
    for var in ("http_proxy", "https_proxy", "all_proxy", "no_proxy"):
        monkeypatch.delenv(var, raising=False)
        monkeypatch.delenv(var.upper(), raising=False)
    ep = _Endpoint()
    yield ep
    ep.stop.set()
    ep.shutdown()
    ep.server_close()


def _folder(tmp_path, ep, **extra):
    folder = tmp_path / "unifiedreward"
    folder.mkdir(exist_ok=True)
    (folder / "endpoint.json").write_text(json.dumps({"endpoint": ep.url, "model": "ur2", "retries": 1, **extra}))
    return tmp_path


def test_endpoint_scores_each_image_by_the_servers_rule(endpoint, tmp_path):
    endpoint.script = [rate] * 4
    fn = rewards.get("unifiedreward")("cpu", root=_folder(tmp_path, endpoint))
    levels = torch.tensor([0.25, 0.75, 0.5, 0.5])
    images = levels.view(4, 1, 1, 1).expand(4, 3, 8, 8).contiguous()
    got = fn(images, ["a red cat", "two dogs", "a cat", "garble"])
    q = (levels * 255).round() / 255  # what the PNG carries
    want = [(a + 3 + 1 + 4 * float(m)) / 3 for a, m in zip((5, 1, 5), q[:3])]
    assert got[:3].tolist() == pytest.approx(want, abs=1e-5) and math.isnan(got[3])
    assert fn.judge.abstained == 1 and got.dtype == torch.float32
    method, path, _, body = endpoint.requests[0]
    assert (method, path, body["model"], body["temperature"]) == ("POST", "/v1/chat/completions", "ur2", 0.0)
    content = body["messages"][0]["content"]
    assert content[0]["text"] == SCORE_PROMPT.replace("{prompt}", "a red cat")
    assert [c["type"] for c in content] == ["text", "image_url"]  # one image per request


def test_axes_prompt_file_and_failed_requests(endpoint, tmp_path):
    root = _folder(tmp_path, endpoint)
    (root / "unifiedreward" / "prompt.txt").write_text("Rate: {prompt}")
    endpoint.script = [rate, status(500), status(500), rate]
    fn = rewards.get("unifiedreward")("cpu", root=root, axes=("alignment",))
    got = fn(torch.zeros(3, 3, 8, 8), ["a cat", "a cat", "a dog"])
    assert got[0] == 5.0 and math.isnan(got[1]) and got[2] == 1.0  # the 500s outlast one retry: NaN
    assert endpoint.requests[0][3]["messages"][0]["content"][0]["text"] == "Rate: a cat"
    endpoint.script = [status(401)]
    with pytest.raises(VLMRequestError, match="HTTP 401") as caught:
        fn(torch.zeros(1, 3, 8, 8), ["a cat"])  # a fatal refusal stops the run instead of abstaining on every image
    assert caught.value.fatal


def test_malformed_replies_abstain(endpoint, tmp_path):
    endpoint.script = [raw(b"<html>busy</html>", "text/html"), reply(GOOD), reply("  ")]
    got = rewards.get("unifiedreward")("cpu", root=_folder(tmp_path, endpoint))(torch.zeros(3, 3, 8, 8), ["p"] * 3)
    assert math.isnan(got[0]) and got[1] == pytest.approx(9.5 / 3) and math.isnan(got[2])


def test_configuration_errors_name_what_to_fix(tmp_path):
    with pytest.raises(FileNotFoundError, match="(?s)reward 'unifiedreward': missing endpoint.json or config.json"):
        rewards.get("unifiedreward")("cpu", root=tmp_path)
    folder = tmp_path / "unifiedreward"
    folder.mkdir()
    (folder / "endpoint.json").write_text(json.dumps({"endpoint": "http://127.0.0.1:9/v1", "modle": "x"}))
    with pytest.raises(ValueError, match="endpoint.json must be a mapping of.*'modle'"):
        rewards.get("unifiedreward")("cpu", root=tmp_path)
    (folder / "endpoint.json").write_text(json.dumps({"endpoint": "http://127.0.0.1:9/v1"}))
    with pytest.raises(ValueError, match="needs both endpoint and model"):
        rewards.get("unifiedreward")("cpu", root=tmp_path)
    (folder / "endpoint.json").write_text("{oops")
    with pytest.raises(ValueError, match="not JSON"):
        rewards.get("unifiedreward")("cpu", root=tmp_path)
    with pytest.raises(ValueError, match="unknown axes"):
        rewards.get("unifiedreward")("cpu", root=tmp_path, axes=("beauty",))
    (folder / "endpoint.json").unlink()
    with pytest.raises(ValueError, match="base_url must start with http"):
        rewards.get("unifiedreward")("cpu", root=tmp_path, endpoint="ftp://x/v1", model="m")
    with pytest.raises(ValueError, match="{prompt}"):
        PointwiseVLMJudge(lambda t, i: GOOD, prompt_template="no placeholder")


def test_local_weights_on_a_tiny_llava(tmp_path):
    """The local path end to end (chat template with one image, greedy generation); a random model's words are not
    scores, so every image abstains rather than being guessed."""
    from helpers import tiny_llava

    folder = tmp_path / "unifiedreward"
    tiny_llava(folder)
    (folder / "prompt.txt").write_text("w1 w2 {prompt}")
    fn = rewards.get("unifiedreward")("cpu", root=tmp_path)
    got = fn(torch.rand(2, 3, 40, 40, generator=torch.Generator().manual_seed(0)), ["w3", "w4 w5"])
    assert got.shape == (2,) and torch.isnan(got).all() and fn.judge.abstained == 2
