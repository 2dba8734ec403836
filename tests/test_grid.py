"""Sample grids: tiles land where they should, the last row is padded, and the PNG round-trips."""

import numpy as np
import torch
from PIL import Image

from recast.trainer.metrics import image_grid, write_grid


def test_grid_places_tiles_row_major_and_pads_with_white():
    x = torch.rand(5, 3, 4, 6, generator=torch.Generator().manual_seed(0))
    g = image_grid(x, ncol=3)
    assert g.shape == (8, 18, 3) and g.dtype == np.uint8
    tile = (x.permute(0, 2, 3, 1).numpy() * 255).round().astype(np.uint8)
    for i in range(5):
        r, c = divmod(i, 3)
        assert np.array_equal(g[4 * r:4 * r + 4, 6 * c:6 * c + 6], tile[i])
    assert (g[4:8, 12:18] == 255).all()
    assert image_grid(x[:2], ncol=8).shape == (4, 12, 3)  # fewer images than columns: one row of two


def test_write_grid_upscales_and_round_trips(tmp_path):
    x = torch.rand(4, 3, 4, 4, generator=torch.Generator().manual_seed(1))
    path = write_grid(tmp_path / "g.png", x, ncol=2, scale=3)
    img = np.asarray(Image.open(path))
    assert img.shape == (24, 24, 3)
    assert np.array_equal(img[::3, ::3], image_grid(x, ncol=2))
