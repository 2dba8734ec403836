"""`recast.credit.Credit`, the public credit API a foreign training loop feeds (docs/credit.md): the per_reward
methods (uniform, reward_sum) and the live estimate of our first reading (recast_live). The paper's recipe (recast,
static, the archives) is tested in tests/test_paper_recipe.py."""

from __future__ import annotations

import io
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from recast.advantages import group_advantages, reward_to_p, step_signal
from recast.credit import Credit, group_index
from recast.informativeness import InformativenessTracker


def _feed(credit: Credit, it: int, B: int = 32, G: int = 4, m: int = 3, seed: int = 0):
    """One synthetic iteration: rewards, per-sample trained columns, and x̂_0 rewards correlated with the clean ones
    more strongly at later columns (so the rewards' profiles differ). Returns (sample, column, signal)."""
    g = torch.Generator().manual_seed(seed * 1000 + it)
    K, T = credit.K, credit.T
    R = torch.rand(K, B, generator=g)
    credit.normalise(R, [f"prompt {i // G}" for i in range(B)])
    cols = torch.rand(B, T, generator=g).argsort(1)[:, :m]
    sample = torch.arange(B).repeat_interleave(m)
    column = cols.flatten()
    sig = credit.signal(sample, column)
    frac = (column.double() / T)[None]  # how much of the clean reward each column's x̂_0 reveals
    speed = torch.linspace(0.5, 4.0, K, dtype=torch.float64)[:, None]
    keep = frac ** speed
    noise = torch.rand(K, sample.numel(), generator=g, dtype=torch.float64)
    R_hat = (keep * R[:, sample].double() + (1 - keep) * noise).float()
    credit.observe(sample, column, R_hat)
    return sample, column, sig


def test_group_index_orders_by_first_appearance_and_detects_contiguous_groups():
    idx, G = group_index(["a", "a", "b", "b", "c", "c"], 6)
    assert idx.tolist() == [0, 0, 1, 1, 2, 2] and G == 2
    idx, G = group_index(torch.tensor([7, 3, 7, 3]), 4)
    assert idx.tolist() == [0, 1, 0, 1] and G is None
    assert group_index([1, 1, 1, 2, 2], 5)[1] is None  # unequal groups
    with pytest.raises(ValueError, match="one id per sample"):
        group_index([1, 2], 3)
    with pytest.raises(ValueError, match="hashable"):
        group_index([[1], [2]], 2)


def test_contiguous_groups_normalise_as_group_advantages_does():
    R = torch.randn(3, 24, generator=torch.Generator().manual_seed(0))
    for scope in ("global", "group"):
        c = Credit(["a", "b", "c"], 6, std_scope=scope, method="uniform")
        got = c.normalise(R, torch.arange(24) // 4).adv
        want = group_advantages(R.double(), 4, std_scope=scope)
        torch.testing.assert_close(got.A, want.A, rtol=0, atol=1e-12)
        torch.testing.assert_close(got.p, want.p, rtol=0, atol=1e-12)


@pytest.mark.parametrize("scope", ["global", "group"])
def test_shuffled_or_uneven_groups_follow_the_closed_form(scope):
    g = torch.Generator().manual_seed(1)
    ids = torch.tensor([0, 1, 0, 2, 1, 0, 2, 2, 2, 1])
    R = torch.randn(2, ids.numel(), generator=g)
    batch = Credit(["a", "b"], 4, std_scope=scope, adv_clip_max=100.0, method="uniform").normalise(R, ids)
    for k in range(2):
        for grp in ids.unique():
            sel = ids == grp
            mu = R[k, sel].mean()
            sd = R[k].std(unbiased=False) if scope == "global" else R[k, sel].std(unbiased=False)
            torch.testing.assert_close(batch.adv.A[k, sel], ((R[k, sel] - mu) / (sd + 1e-4)).double())
    torch.testing.assert_close(batch.adv.p, 0.5 + batch.adv.A / 200)


def test_uniform_signal_is_the_budget_weighted_sum_of_p():
    c = Credit(["a", "b", "c"], 5, lam=[2.0, 1.0, 1.0], method="uniform")
    R = torch.rand(3, 8, generator=torch.Generator().manual_seed(2))
    p = c.normalise(R, torch.arange(8) // 2).adv.p
    sample, column = torch.arange(8), torch.arange(8) % 5
    torch.testing.assert_close(c.signal(sample, column), (torch.tensor([0.5, 0.25, 0.25])[:, None] * p).sum(0))
    assert torch.equal(c.W, torch.tensor([0.5, 0.25, 0.25], dtype=torch.float64)[:, None].expand(3, 5) / 5)


@given(st.integers(1, 40))
@settings(max_examples=20, deadline=None)
def test_one_reward_gives_p_itself_bit_for_bit_at_any_T(T):
    R = torch.rand(1, 12, generator=torch.Generator().manual_seed(T))
    sample = torch.arange(12)
    for method in ("uniform", "recast_live"):
        c = Credit(["only"], T, method=method)
        p = c.normalise(R, torch.arange(12) // 3).adv.p
        assert torch.equal(c.signal(sample, sample % T), p[0])


def test_grpo_signal_is_the_advantage_and_reward_sum_normalises_the_sum():
    R = torch.rand(2, 8, generator=torch.Generator().manual_seed(3))
    c = Credit(["a", "b"], 3, signal="grpo", method="uniform")
    A = c.normalise(R, torch.arange(8) // 4).adv.A
    torch.testing.assert_close(c.signal(torch.arange(8), torch.zeros(8, dtype=torch.long)), A.mean(0))
    s = Credit(["a", "b"], 3, lam=[0.75, 0.25], method="reward_sum")
    b = s.normalise(R, torch.arange(8) // 4)
    R64 = R.double()
    want = group_advantages((0.75 * R64[0] + 0.25 * R64[1])[None], 4).p[0]
    for col in range(3):  # the same signal at every step
        torch.testing.assert_close(s.signal(torch.arange(8), torch.full((8,), col)), want, rtol=0, atol=1e-12)
    assert torch.equal(s.W, torch.tensor([[0.25] * 3, [0.25 / 3] * 3], dtype=torch.float64)) and \
        b.train.p.shape == (1, 8)


def test_observe_feeds_the_tracker_the_layout_it_documents():
    """The (sample, column, rewards) triples become the (K, T+1, N) p layout, NaN away from the trained pairs and
    mapped with the clean batch's group mean and scale; W then equals a hand-fed tracker's exactly."""
    K, T, B = 2, 6, 16
    c = Credit(["a", "b"], T, window=4, min_pairs=0, bootstrap=0, method="recast_live")
    hand = InformativenessTracker(K, T, window=4, min_pairs=0, bootstrap=0)
    g = torch.Generator().manual_seed(4)
    for it in range(3):
        R = torch.rand(K, B, generator=g, dtype=torch.float64)
        adv = c.normalise(R, torch.arange(B) // 4).adv
        sample = torch.arange(B).repeat(2)
        column = torch.cat([torch.randint(1, T, (B,), generator=g), torch.zeros(B, dtype=torch.long)])
        R_hat = torch.rand(K, 2 * B, generator=g, dtype=torch.float64)
        c.observe(sample, column, R_hat)
        _, p_hat = reward_to_p(R_hat[:, :B], adv.mean, adv.std, 5.0)
        layout = torch.full((K, T + 1, B), float("nan"), dtype=torch.float64)
        layout[:, column[:B], torch.arange(B)] = p_hat.double()
        hand.add(adv.p.double(), layout)
        assert torch.equal(c.W, hand.weights(torch.tensor([0.5, 0.5], dtype=torch.float64)))
    assert not torch.equal(c.W, torch.full((K, T), 0.5 / T, dtype=torch.float64))


@given(K=st.integers(2, 4), T=st.integers(2, 12), m=st.integers(1, 4), seed=st.integers(0, 10))
@settings(max_examples=15, deadline=None)
def test_any_T_and_any_trained_subset_keep_the_marginals(K, T, m, seed):
    lam = torch.rand(K, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) + 0.1
    c = Credit([f"r{k}" for k in range(K)], T, lam=lam, min_pairs=4, bootstrap=8, window=3, method="recast_live")
    for it in range(4):
        _, _, sig = _feed(c, it, m=min(m, T), seed=seed)
        assert ((sig >= 0) & (sig <= 1)).all()
    torch.testing.assert_close(c.W.sum(1), lam / lam.sum(), atol=1e-9, rtol=0)
    torch.testing.assert_close(c.W.sum(0), torch.full((T,), 1.0 / T, dtype=torch.float64), atol=1e-9, rtol=0)


def test_recast_moves_weight_towards_each_reward_s_informative_columns():
    """The synthetic rewards reveal themselves at different speeds over the columns: the slow one's weight sits later."""
    c = Credit(["fast", "slow"], 6, window=8, min_pairs=32, bootstrap=16, method="recast_live")
    for it in range(8):
        _feed(c, it, B=64)
    cols = torch.arange(6, dtype=torch.float64)
    centre = (c.W * cols).sum(1) / c.W.sum(1)
    assert centre[0] < centre[1]


def test_resume_from_a_state_dict_continues_bit_exactly():
    live = dict(min_pairs=16, bootstrap=8, recast_every=2, method="recast_live")
    straight = Credit(["a", "b", "c"], 6, **live)
    for it in range(6):
        _feed(straight, it)
    first = Credit(["a", "b", "c"], 6, **live)
    for it in range(3):
        _feed(first, it)
    buf = io.BytesIO()
    torch.save(first.state_dict(), buf)
    buf.seek(0)
    resumed = Credit(["a", "b", "c"], 6, **live)
    resumed.load_state_dict(torch.load(buf, weights_only=True))
    for it in range(3, 6):
        _feed(resumed, it)
    assert torch.equal(resumed.W, straight.W) and torch.equal(resumed.D, straight.D)
    assert not torch.equal(straight.W, torch.full((3, 6), 1 / 18, dtype=torch.float64))
    with pytest.raises(ValueError, match="rewards, T, method"):
        Credit(["a", "b"], 6, method="recast_live").load_state_dict(first.state_dict())
    with pytest.raises(ValueError, match="budgets"):
        Credit(["a", "b", "c"], 6, lam=[1, 2, 3], method="recast_live").load_state_dict(first.state_dict())


@pytest.mark.parametrize("kwargs, msg", [
    (dict(reward_names=["a", "a"]), r"distinct.*repeated: \['a'\]"),
    (dict(reward_names=[]), "empty"),
    (dict(reward_names="ab"), "sequence of non-empty names"),
    (dict(num_steps=0), "num_steps"),
    (dict(lam=[1.0]), "lam"),
    (dict(lam=[1.0, -1.0]), ">= 0"),
    (dict(method="magic"), "method"),
    (dict(signal="ppo"), "signal"),
    (dict(method="fixed"), "needs weights="),
    (dict(fixed_W=[[0.25, 0.25], [0.25, 0.25]]), "weights= is for methods"),
    (dict(method="recast"), "needs weights="),
    (dict(method="recast", weights=[[0.5, 0.5]]), "must be a WeightTable"),
    (dict(method="fixed", fixed_W=[[0.5, 0.0], [0.25, 0.25]]), "column sums"),
    (dict(recast_every=0), "recast_every"),
    (dict(adv_clip_max=0), "adv_clip_max"),
    (dict(std_scope="batch"), "std_scope"),
    (dict(trained_columns=3), "trained_columns"),
])
def test_bad_construction_is_refused_naming_the_argument(kwargs, msg):
    args = {"reward_names": ["a", "b"], "num_steps": 2, "method": "uniform", **kwargs}
    with pytest.raises(ValueError, match=msg):
        Credit(**args)


def test_bad_iteration_input_is_refused_naming_it():
    c = Credit(["a", "b"], 4, method="recast_live")
    with pytest.raises(RuntimeError, match="normalise"):
        c.signal([0], [0])
    with pytest.raises(ValueError, match=r"\(K=2, N\)"):
        c.normalise(torch.rand(3, 4), [0, 0, 1, 1])
    with pytest.raises(ValueError, match=r"missing \['b'\]"):
        c.normalise({"a": torch.rand(4), "c": torch.rand(4)}, [0, 0, 1, 1])
    with pytest.raises(ValueError, match=r"rewards \['b'\] contain NaN"):
        c.normalise(torch.tensor([[0.1, 0.2, 0.3, 0.4], [0.1, float("nan"), 0.3, 0.4]]), [0, 0, 1, 1])
    with pytest.raises(ValueError, match="one id per sample"):
        c.normalise(torch.rand(2, 4), [0, 0, 1])
    c.normalise({"b": torch.rand(4), "a": torch.rand(4)}, ["x", "x", "y", "y"])  # a mapping in any order
    with pytest.raises(ValueError, match="columns must lie in 0..3"):
        c.signal([0], [4])
    with pytest.raises(ValueError, match="sample indices must lie in 0..3"):
        c.signal([4], [0])
    with pytest.raises(ValueError, match="same length"):
        c.signal([0, 1], [0])
    with pytest.raises(ValueError, match="once per iteration"):
        c.observe([0, 0], [1, 1], torch.rand(2, 2))
    with pytest.raises(ValueError, match="must hold 2 values"):
        c.observe([0, 1], [1, 1], torch.rand(2, 3))
    with pytest.raises(ValueError, match="one of clean_samples"):
        c.observe([0, 3], [1, 1], torch.rand(2, 2), clean_samples=[0, 1])


def test_trainer_assigns_credit_through_the_public_object(tmp_path):
    from recast.config import preset
    from recast.io import read_jsonl
    from recast.trainer import Trainer

    tr = Trainer(preset("ci", iterations=2, recast_every=1, method="recast_live"), tmp_path)
    tr.run()
    assert isinstance(tr.credit, Credit) and tr.tracker is tr.credit.tracker
    last = read_jsonl(tmp_path / "weights.jsonl")[-1]
    assert torch.equal(torch.tensor(last["W"], dtype=torch.float64), tr.credit.W)
    assert tr.credit.iteration == 2


PROFILE = str(Path(__file__).resolve().parents[1] / "data" / "profiles" / "tiny_renderings_T4.npz")
BLOCKED = ("diffusers", "transformers", "accelerate", "peft", "scipy", "sklearn", "matplotlib", "seaborn",
           "safetensors", "PIL", "pandas")


def test_credit_imports_and_runs_with_torch_and_numpy_alone():
    """A full loop through `recast.credit` with every heavy package made unimportable."""
    code = textwrap.dedent(f"""
        import importlib.abc, sys
        BLOCKED = {BLOCKED!r}
        class Block(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in BLOCKED:
                    raise ImportError("blocked: " + name)
        sys.meta_path.insert(0, Block())
        import torch
        import recast.credit
        c = recast.credit.Credit(["a", "b"], 5, lam=[0.6, 0.4], min_pairs=8, bootstrap=4, method="recast_live")
        g = torch.Generator().manual_seed(0)
        for it in range(6):
            R = torch.rand(2, 16, generator=g)
            c.normalise(R, [i // 4 for i in range(16)])
            s, col = torch.arange(16), torch.randint(0, 5, (16,), generator=g)
            p = c.signal(s, col)
            c.observe(s, col, R * torch.rand(2, 16, generator=g))
        state = c.state_dict()
        assert c.W.shape == (2, 5) and p.shape == (16,)
        from recast.archives import load_profile, save_table, table_from_profile   # the paper's path, file to signal
        prof = load_profile({PROFILE!r}, ["color", "sharpness"])
        save_table(table_from_profile(prof, [2.0, 1.0]), sys.argv[1])
        t = recast.credit.Credit.from_table(sys.argv[1])
        t.normalise(torch.rand(2, 8, generator=g), [i // 4 for i in range(8)])
        assert t.signal_matrix().shape == (8, 4) and t.observe() is None
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
        assert not loaded, loaded
        print("ok", c.iteration)
    """)
    import tempfile

    table = str(Path(tempfile.mkdtemp()) / "t.npz")
    out = subprocess.run([sys.executable, "-c", code, table], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["ok", "6"]


def test_cli_names_the_extra_a_missing_package_belongs_to():
    """On a core install (torch and numpy only) a command that needs more says which extra to install."""
    code = textwrap.dedent("""
        import importlib.abc, sys
        class Block(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] == "diffusers":
                    raise ModuleNotFoundError("No module named 'diffusers'", name="diffusers")
        sys.meta_path.insert(0, Block())
        from recast.cli import main
        sys.exit(main(["train", "--preset", "ci", "--out", sys.argv[1]]))
    """)
    import tempfile

    out = subprocess.run([sys.executable, "-c", code, tempfile.mkdtemp()], capture_output=True, text=True)
    assert out.returncode == 2, out.stderr[-2000:]
    assert "pip install -e '.[train]' in a clone" in out.stderr and "Traceback" not in out.stderr
