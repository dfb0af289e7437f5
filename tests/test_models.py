import pytest
import torch

from vflflare.models.heads import MLPHead
from vflflare.models.tabular import TabularEncoder, embedding_dim
from vflflare.seeding import seeded_init

torch.set_num_threads(1)


def test_encoder_shapes_with_numeric_and_categorical():
    enc = TabularEncoder(numeric_dim=3, cardinalities=[4, 30], hidden=[64], rep_dim=32)
    numeric = torch.randn(5, 3)
    categorical = torch.tensor([[0, 1], [3, 29], [2, 0], [1, 5], [0, 0]])
    assert enc(numeric, categorical).shape == (5, 32)
    first = enc.mlp[0]
    assert first.in_features == 3 + embedding_dim(4) + embedding_dim(30)
    assert first.out_features == 64


def test_encoder_numeric_only_and_categorical_only():
    assert TabularEncoder(4, [])(torch.randn(2, 4), torch.zeros(2, 0, dtype=torch.int64)).shape == (2, 32)
    assert TabularEncoder(0, [3], rep_dim=8)(torch.zeros(2, 0), torch.tensor([[1], [2]])).shape == (2, 8)


def test_encoder_rejects_empty_input():
    with pytest.raises(ValueError):
        TabularEncoder(0, [])


def test_heads():
    linear = MLPHead(10, 3)
    assert isinstance(linear.net, torch.nn.Linear)
    assert linear(torch.randn(4, 10)).shape == (4, 3)
    deep = MLPHead(10, 3, hidden=16)
    assert deep(torch.randn(4, 10)).shape == (4, 3)
    assert sum(p.numel() for p in deep.parameters()) == 10 * 16 + 16 + 16 * 3 + 3


def test_seeded_init_is_reproducible_and_leaves_global_rng_alone():
    torch.manual_seed(123)
    expected_next = torch.rand(1)
    torch.manual_seed(123)
    with seeded_init(7):
        a = TabularEncoder(3, [4])
    assert torch.equal(torch.rand(1), expected_next)
    with seeded_init(7):
        b = TabularEncoder(3, [4])
    for pa, pb in zip(a.parameters(), b.parameters()):
        assert torch.equal(pa, pb)
