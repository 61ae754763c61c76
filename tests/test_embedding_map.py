"""aiayn.pages.embedding_map on small hand-made tables: neighbours, ranks, analogies, the PCA map, bad input."""

from __future__ import annotations

import pytest
import torch

from aiayn.model import Transformer, TransformerConfig
from aiayn.pages.embedding_map import (
    analogy,
    nearest,
    pca_2d,
    rank_of,
    unit_table,
)

# five unit vectors in 3-D: 1 is next to 0, 2 further, 3 opposite, 4 a mix
UNIT = torch.nn.functional.normalize(
    torch.tensor([[1.0, 0, 0], [0.9, 0.1, 0], [0.5, 0.5, 0], [-1.0, 0, 0], [0.0, 1, 1]]), dim=1
)


def test_nearest_leaves_the_piece_out_and_keeps_to_the_pool():
    assert [i for i, _ in nearest(UNIT, 0, 3)] == [1, 2, 4]
    assert [i for i, _ in nearest(UNIT, 0, 2, pool=[0, 3, 4])] == [4, 3]
    (_, cosine), *_ = nearest(UNIT, 0, 1)
    assert cosine == pytest.approx(float(UNIT[0] @ UNIT[1]))


def test_rank_of_counts_the_closer_pieces():
    assert [rank_of(UNIT, 0, j) for j in (1, 2, 4, 3)] == [1, 2, 3, 4]


def test_analogy_adds_the_offset_and_leaves_the_three_out():
    # the step from 0 to 1, taken from 2, lands nearest 3 (4 points the other way)
    table = torch.nn.functional.normalize(
        torch.tensor([[1.0, 0], [0.0, 1], [-1.0, 0], [-0.8, 0.6], [0.6, -0.8]]), dim=1
    )
    assert analogy(table, 0, 1, 2, k=2) == [3, 4]


def test_pca_2d_finds_the_spread_and_fixes_the_sign():
    g = torch.Generator().manual_seed(0)
    points = torch.randn(50, 1, generator=g) * torch.tensor([[3.0, 0, 0]])
    points += torch.randn(50, 3, generator=g) * 0.01
    xy, share = pca_2d(points)
    assert xy.shape == (50, 2) and share[0] > 0.99 > share[1]
    assert torch.allclose(xy[:, 0].abs(), (points[:, 0] - points[:, 0].mean()).abs().double(), atol=0.05)
    assert xy[xy[:, 0].abs().argmax(), 0] > 0  # the largest coordinate is positive
    again, _ = pca_2d(-points)  # a mirrored cloud gives the same map
    torch.testing.assert_close(again, xy)


def test_unit_table_wants_one_shared_table():
    shared = Transformer(TransformerConfig(11, 11, d_model=8, d_ff=16, h=2, N=1, share_embeddings=True))
    assert torch.allclose(unit_table(shared).norm(dim=1), torch.ones(11))
    apart = Transformer(TransformerConfig(11, 11, d_model=8, d_ff=16, h=2, N=1, share_embeddings=False))
    with pytest.raises(ValueError, match="one shared embedding table"):
        unit_table(apart)
