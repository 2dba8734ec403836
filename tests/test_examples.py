import pytest
import torch

from recast.examples import synthetic_discriminability
from recast.informativeness import telescoping_gains


def test_synthetic_curves_are_monotone_and_telescope_to_total():
    D = synthetic_discriminability(10, ("early", "mid", "late", "flat"), total=[1.0, 2.0, 0.5, 3.0])
    assert D.shape == (4, 11) and torch.all(D[:, 0] == 0)
    torch.testing.assert_close(D[:, -1], torch.tensor([1.0, 2.0, 0.5, 3.0], dtype=torch.float64))
    g = telescoping_gains(D)
    assert torch.equal(g, torch.diff(D, dim=1))  # already monotone: gains are the plain differences
    torch.testing.assert_close(g[3], torch.full((10,), 0.3, dtype=torch.float64))
    early, mid, late = g[0].argmax(), g[1].argmax(), g[2].argmax()
    assert early < mid < late


def test_synthetic_bad_kind():
    with pytest.raises(ValueError, match="unknown profile kind"):
        synthetic_discriminability(5, ("sideways",))
