"""`recast.credit.Credit` refuses what would give meaningless signals, naming the argument, before anything is
computed (the credit cases of the third reliability round, ../shared/reliability-r3.md C05-C25)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from recast.credit import Credit

GROUPS = [i // 4 for i in range(8)]


def _live(**kw):
    return Credit(["a", "b"], 4, lam=[0.5, 0.5], method="recast_live", min_pairs=2, bootstrap=8, **kw)


def test_groups_of_one_and_empty_batches_are_refused():  # C06, C05
    c = Credit(["a", "b"], 4, method="uniform")
    with pytest.raises(ValueError, match="at least 2 samples"):
        c.normalise(torch.rand(2, 8), list(range(8)))
    with pytest.raises(ValueError, match="no samples"):
        c.normalise(torch.zeros(2, 0), [])


@pytest.mark.parametrize("W, msg", [
    (torch.full((2, 4), float("nan"), dtype=torch.float64), "finite"),  # C15
    (torch.ones(2, 7, dtype=torch.float64), "shape"),  # C15b
    (torch.tensor([[5.0, -4.0, 0.0, 0.0], [0.0, 0.0, 0.5, 0.5]], dtype=torch.float64), ">= 0"),  # C15c
    (torch.tensor([[0.5, 0.0, 0.0, 0.0], [0.0, 0.25, 0.125, 0.125]], dtype=torch.float64), "column sums"),
])
def test_a_tampered_state_is_refused_naming_the_entry(W, msg):
    c = _live()
    c.normalise(torch.rand(2, 8), GROUPS)
    s = c.state_dict()
    s["W"] = W
    with pytest.raises(ValueError, match=f"entry 'W'.*{msg}"):
        _live().load_state_dict(s)


@pytest.mark.parametrize("edit, msg", [
    (lambda s: s.pop("tracker"), r"lacks \['tracker'\]"),  # C15d
    (lambda s: s.update(iteration="abc"), "entry 'iteration' must be an int"),  # C15e
    (lambda s: s.update(tracker={"bogus": 1}), "entry 'tracker' is not a tracker state"),  # C15f
    (lambda s: s.update(D=torch.ones(2, 3)), "entry 'D' must be a finite"),
    (lambda s: s.update(lam="x"), "entry 'lam' is not a numeric vector"),
])
def test_tampered_state_entries_are_named(edit, msg):
    c = _live()
    s = c.state_dict()
    edit(s)
    with pytest.raises(ValueError, match=msg):
        _live().load_state_dict(s)
    with pytest.raises(ValueError, match=r"lacks \['lam', 'iteration'"):  # C15g
        _live().load_state_dict({"reward_names": ["a", "b"], "T": 4, "method": "recast_live"})


def test_indices_must_be_integers():  # C19, C19b
    c = Credit(["a", "b"], 4, method="uniform")
    c.normalise(torch.rand(2, 8), GROUPS)
    with pytest.raises(ValueError, match="sample must be integer indices, got a bool mask"):
        c.signal(torch.tensor([True, False] * 4), torch.ones(8, dtype=torch.long))
    with pytest.raises(ValueError, match="column must be integer indices, got torch.float32"):
        c.signal(torch.tensor([0, 1, 2]), torch.tensor([1.9, 2.9, 3.5]))
    with pytest.raises(ValueError, match="exactly one of column"):
        c.signal([0], [0], sigma=[0.5])


@pytest.mark.parametrize("kw, msg", [
    (dict(adv_clip_max=float("inf")), "adv_clip_max must be > 0 and finite"),  # C24l
    (dict(adv_clip_max=float("nan")), "adv_clip_max"),
    (dict(lam=[1e308, 1e308]), "lam sum past the largest float"),  # C10d
    (dict(lam="0.5,0.5"), "lam must be numbers"),  # C10e
    (dict(num_steps=True), "num_steps must be an int"),  # C12b
    (dict(num_steps=10**8), "num_steps must be in 1..4096"),  # C13
    (dict(floor=-1.0), "floor must be > 0"),  # C24k
    (dict(alpha=float("nan")), "alpha must be"),  # C25
    (dict(temperature=-1.0), "temperature must be"),
])
def test_bad_construction_is_refused_before_anything_is_computed(kw, msg):
    args = {"reward_names": ["a", "b"], "num_steps": 4, "method": "recast_live", **kw}
    with pytest.raises(ValueError, match=msg):
        Credit(**args)


def test_a_numpy_int_is_an_int_and_meta_tensors_are_named():  # C12c, C17
    c = Credit(["a", "b"], np.int64(6), method="uniform")
    assert c.T == 6
    with pytest.raises(ValueError, match="meta device"):
        c.normalise(torch.rand(2, 8).to("meta"), GROUPS)


def test_observe_checks_its_inputs_and_runs_once_per_batch():  # C20c, C20d, C20f
    c = _live()
    c.normalise(torch.rand(2, 8), GROUPS)
    s, col = torch.arange(4), torch.ones(4, dtype=torch.long)
    with pytest.raises(ValueError, match="clean_samples must lie in 0..7"):
        c.observe(s, col, torch.rand(2, 4), clean_samples=[0, 1, 2, 3, 99])
    with pytest.raises(ValueError, match="proxy_rewards is None"):
        c.observe(s, col, None)
    assert c.iteration == 0  # a refused call changed nothing
    c.observe(s, col, torch.rand(2, 4))
    with pytest.raises(RuntimeError, match="once per normalise"):
        c.observe(s, col, torch.rand(2, 4))
    assert c.iteration == 1


def test_a_reward_mapping_with_extra_keys_is_accepted_naming_what_it_ignores():
    c = Credit(["a", "b"], 4, method="static")
    rewards = {"a": torch.rand(8), "b": torch.rand(8), "avg": torch.rand(8), "accuracy/x": torch.rand(8)}
    c.normalise(rewards, GROUPS)
    assert c.ignored == ["accuracy/x", "avg"]
    with pytest.raises(ValueError, match=r"missing \['b'\]"):
        c.normalise({"a": torch.rand(8)}, GROUPS)
