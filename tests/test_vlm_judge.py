"""Pairwise VLM judge: verdict parsing, order randomisation, aggregation, and the OpenAI-compatible endpoint path
against a stub server on 127.0.0.1."""

import base64
import io
import json
import math
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest
import torch

from recast.winrate import aggregate_verdicts
from recast.worlds.sd3.vlm_judge import JUDGE_PROMPT, OpenAIChatBackend, PairwiseVLMJudge, parse_verdict


@pytest.mark.parametrize("answer,want", [
    ("Verdict: A", "A"), ("verdict: b", "B"), ("Verdict: tie", "tie"), ("**Verdict:** B", "B"),
    ("Final answer: Image A", "A"), ("Winner = image 2", "B"), ("B", "B"), ("a.", "A"), ("Tie", "tie"),
    ("Image B is better.", "B"), ("I prefer the first image.", "A"), ("Both are equally good.", "tie"),
    ("Image A has a typo but image B misses the dog. Verdict: A", "A"),
    ("Verdict: B\n", "B"), ("The answer is: second", "B"),
    ("", None), ("I cannot tell.", None), ("Image A and image B both have merits", None), ("lorem ipsum", None),
    (None, None),
])
def test_parse_verdict(answer, want):
    assert parse_verdict(answer) == want


def test_aggregation_counts_and_wilson_interval():
    r = aggregate_verdicts([1, 1, 1, -1, 0, None, None])
    assert (r.wins, r.losses, r.ties, r.abstained, r.n) == (3, 1, 1, 2, 5)
    assert r.win_rate == pytest.approx(3.5 / 5)
    assert r.ci_low < r.win_rate < r.ci_high
    # Wilson, closed form at p = 0.7, n = 5, z = 1.95996
    z, p, n = 1.959963984540054, 0.7, 5
    centre, half = (p + z * z / (2 * n)) / (1 + z * z / n), z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (
        1 + z * z / n)
    assert (r.ci_low, r.ci_high) == pytest.approx((centre - half, centre + half))
    assert aggregate_verdicts([1] * 50).ci_low > aggregate_verdicts([1] * 5).ci_low  # more pairs, tighter
    assert math.isnan(aggregate_verdicts([None]).win_rate)
    with pytest.raises(ValueError, match="verdicts"):
        aggregate_verdicts([2])


class _Stub(BaseHTTPRequestHandler):
    """Says which image is brighter, as a position-biased model would word it; garbage for prompts with 'garble'."""

    requests = []

    def do_POST(self):  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _Stub.requests.append((self.path, self.headers.get("Authorization"), body))
        content = body["messages"][0]["content"]
        from PIL import Image

        means = [np.asarray(Image.open(io.BytesIO(base64.b64decode(c["image_url"]["url"].split(",", 1)[1])))).mean()
                 for c in content if c["type"] == "image_url"]
        text = "sorry, what?" if "garble" in content[0]["text"] else (
            "Verdict: tie" if abs(means[0] - means[1]) < 1 else f"Verdict: {'A' if means[0] > means[1] else 'B'}")
        reply = json.dumps({"choices": [{"message": {"role": "assistant", "content": text}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args):
        pass


@pytest.fixture()
def server():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Stub)
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/v1"
    srv.shutdown()
    srv.server_close()


def test_endpoint_judge_cancels_position_and_counts_abstentions(server):
    _Stub.requests.clear()
    backend = OpenAIChatBackend(server, "stub-vlm", api_key="k")
    judge = PairwiseVLMJudge(backend, seed=0)
    n = 12
    bright, dark = torch.full((n, 3, 8, 8), 0.8), torch.full((n, 3, 8, 8), 0.2)
    prompts = [f"prompt {i}" for i in range(n - 2)] + ["garble 1", "garble 2"]
    verdicts = judge.judge(bright, dark, prompts)
    swapped = [v.swapped for v in verdicts]
    assert any(swapped) and not all(swapped)  # both orders were shown
    assert [v.verdict for v in verdicts] == [1] * (n - 2) + [None, None]  # mapped back: bright always wins
    r = judge.win_rate(bright, dark, prompts)
    assert (r.wins, r.losses, r.ties, r.abstained) == (n - 2, 0, 0, 2) and r.win_rate == 1.0
    tie = judge.win_rate(bright[:3], bright[:3].clone(), prompts[:3])
    assert (tie.ties, tie.win_rate) == (3, 0.5)
    path, auth, body = _Stub.requests[0]
    assert path == "/v1/chat/completions" and auth == "Bearer k" and body["model"] == "stub-vlm"
    assert body["messages"][0]["content"][0]["text"] == JUDGE_PROMPT.replace("{prompt}", "prompt 0")
    assert body["temperature"] == 0.0


def test_bad_input():
    with pytest.raises(ValueError, match="{prompt}"):
        PairwiseVLMJudge(lambda t, i: "A", prompt_template="no placeholder")
    with pytest.raises(ValueError, match="mismatched"):
        PairwiseVLMJudge(lambda t, i: "A").judge(torch.zeros(2, 3, 4, 4), torch.zeros(1, 3, 4, 4), ["a", "b"])


def test_transformers_backend_on_a_tiny_llava(tmp_path):
    """The local-model path end to end (chat template, two images, greedy generation) on a random tiny LLaVA."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import (CLIPImageProcessor, LlavaConfig, LlavaForConditionalGeneration, LlavaProcessor,
                              PreTrainedTokenizerFast)

    from recast.worlds.sd3.vlm_judge import TransformersBackend

    words = ["<pad>", "<unk>", "<s>", "</s>", "<image>", "user:", "assistant:"] + [f"w{i}" for i in range(20)]
    core = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", unk_token="<unk>", bos_token="<s>",
                                  eos_token="</s>", extra_special_tokens={"image_token": "<image>"})
    template = ("{% for m in messages %}user: {% for c in m['content'] %}{% if c['type'] == 'image' %}<image> "
                "{% else %}{{ c['text'] }} {% endif %}{% endfor %}{% endfor %}assistant:")
    image_processor = CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})
    LlavaProcessor(image_processor=image_processor, tokenizer=tok, patch_size=8, chat_template=template,
                   vision_feature_select_strategy="default", num_additional_image_tokens=1).save_pretrained(tmp_path)
    torch.manual_seed(0)
    LlavaForConditionalGeneration(LlavaConfig(
        vision_config=dict(model_type="clip_vision_model", image_size=32, patch_size=8, hidden_size=16,
                           intermediate_size=32, num_hidden_layers=1, num_attention_heads=2),
        text_config=dict(model_type="llama", vocab_size=len(words), hidden_size=16, intermediate_size=32,
                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,
                         max_position_embeddings=128, pad_token_id=0, bos_token_id=2, eos_token_id=3),
        image_token_index=4, vision_feature_layer=-1)).save_pretrained(tmp_path)
    backend = TransformersBackend(str(tmp_path), "cpu", max_new_tokens=3, dtype=torch.float32)
    images = torch.rand(2, 3, 40, 40, generator=torch.Generator().manual_seed(0))
    verdicts = PairwiseVLMJudge(backend).judge(images, images.flip(0), ["w1 w2", "w3"])
    assert all(v.answer and set(v.answer.split()) <= set(words) for v in verdicts)  # random model: random words
    assert all(v.verdict is None for v in verdicts)  # ... which the parser refuses to read as a verdict
    with pytest.raises(FileNotFoundError, match="config.json"):
        TransformersBackend(str(tmp_path / "absent"))
