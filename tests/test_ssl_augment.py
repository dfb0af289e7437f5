import numpy as np
import pytest
import torch

from vflflare.data.types import FeatureBlock
from vflflare.ssl.augment import RandomFeatureReplacement, ScarfCorruption, TabularBatch, TwoViews

torch.set_num_threads(1)


def _block(n: int = 4000) -> FeatureBlock:
    rng = np.random.default_rng(0)
    numeric = rng.normal(loc=[1.0, -2.0, 5.0], scale=[1.0, 3.0, 0.5], size=(n, 3)).astype(np.float32)
    categorical = np.stack(
        [rng.choice([0, 2, 5], size=n, p=[0.1, 0.6, 0.3]), rng.choice(3, size=n, p=[0.2, 0.3, 0.5])], 1
    )
    return FeatureBlock(numeric, categorical.astype(np.int64), [6, 3])


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_scarf_replaces_rate_of_entries_with_draws_from_the_column_marginal():
    block = _block()
    reference = TabularBatch.from_block(block)
    batch = reference.take(torch.arange(2000))
    out = ScarfCorruption(reference, rate=0.6, generator=_gen())(batch)
    changed = out.numeric != batch.numeric
    # a numeric draw equals the original only when it picks the row itself (prob 1/4000)
    assert abs(changed.float().mean().item() - 0.6) < 0.02
    for j in range(3):
        column = set(reference.numeric[:, j].tolist())
        assert set(out.numeric[:, j][changed[:, j]].tolist()) <= column
        # the replacements follow the marginal: their mean and spread match the column's
        replaced = out.numeric[:, j][changed[:, j]]
        column_values = reference.numeric[:, j]
        assert abs(replaced.mean().item() - column_values.mean().item()) < 0.1 * column_values.std().item()
    # categorical: a replacement keeps its value with prob p(value), so the changed share is rate * (1 - sum p^2)
    cat_changed = (out.categorical != batch.categorical).float().mean(dim=0)
    for j, p in enumerate([[0.1, 0.6, 0.3], [0.2, 0.3, 0.5]]):
        assert abs(cat_changed[j].item() - 0.6 * (1 - sum(q * q for q in p))) < 0.03
        assert set(out.categorical[:, j].tolist()) <= set(reference.categorical[:, j].tolist())
    # the share of category 2 in column 0 stays the marginal 0.6
    assert abs((out.categorical[:, 0] == 2).float().mean().item() - 0.6) < 0.03


def test_scarf_leaves_untouched_entries_unchanged_and_is_seeded():
    reference = TabularBatch.from_block(_block())
    batch = reference.take(torch.arange(500))
    a = ScarfCorruption(reference, 0.3, _gen(7))(batch)
    b = ScarfCorruption(reference, 0.3, _gen(7))(batch)
    c = ScarfCorruption(reference, 0.3, _gen(8))(batch)
    assert torch.equal(a.numeric, b.numeric) and torch.equal(a.categorical, b.categorical)
    assert not torch.equal(a.numeric, c.numeric)
    kept = a.numeric == batch.numeric
    assert kept.float().mean().item() > 0.6
    assert torch.equal(ScarfCorruption(reference, 0.0, _gen())(batch).numeric, batch.numeric)
    assert (ScarfCorruption(reference, 1.0, _gen())(batch).numeric != batch.numeric).float().mean() > 0.99
    assert a.numeric.dtype == torch.float32 and a.categorical.dtype == torch.int64


def test_random_feature_replacement_draws_within_local_min_max_and_observed_indices():
    block = _block()
    reference = TabularBatch.from_block(block)
    batch = reference.take(torch.arange(2000))
    out = RandomFeatureReplacement(reference, rate=0.3, generator=_gen())(batch)
    changed = out.numeric != batch.numeric
    assert abs(changed.float().mean().item() - 0.3) < 0.02
    low, high = reference.numeric.min(0).values, reference.numeric.max(0).values
    assert bool(((out.numeric >= low) & (out.numeric <= high)).all())
    for j in range(3):
        # uniform on [min, max]: the replacements' mean is the range midpoint, not the column mean
        replaced = out.numeric[:, j][changed[:, j]]
        midpoint, width = (low[j] + high[j]).item() / 2, (high[j] - low[j]).item()
        assert abs(replaced.mean().item() - midpoint) < 0.03 * width
        assert replaced.std().item() == pytest.approx(width / np.sqrt(12), rel=0.1)
    # categorical: uniform over the observed indices {0, 2, 5}: never the unobserved 1, 3, 4
    cat_changed = out.categorical != batch.categorical
    assert set(out.categorical[:, 0].tolist()) == {0, 2, 5}
    drawn_share = cat_changed[:, 0].float().mean().item()
    assert abs(drawn_share - 0.3 * (2 / 3)) < 0.03  # a uniform draw keeps the value with prob 1/3
    counts = np.bincount(out.categorical[:, 1][cat_changed[:, 1]].numpy(), minlength=3)
    assert counts.min() > 0
    assert torch.equal(out.categorical[~cat_changed], batch.categorical[~cat_changed])


def test_random_feature_replacement_defaults_and_seeding():
    reference = TabularBatch.from_block(_block())
    batch = reference.take(torch.arange(300))
    aug = RandomFeatureReplacement(reference, generator=_gen(3))
    assert aug.rate == 0.3
    a, b = aug(batch), RandomFeatureReplacement(reference, generator=_gen(3))(batch)
    assert torch.equal(a.numeric, b.numeric) and torch.equal(a.categorical, b.categorical)
    a2 = aug(batch)  # the generator advances: a second call draws a new view
    assert not torch.equal(a.numeric, a2.numeric)
    assert torch.equal(RandomFeatureReplacement(reference, 0.0, _gen())(batch).categorical, batch.categorical)


def test_augmentations_handle_missing_column_kinds_and_bad_rates():
    numeric_only = TabularBatch(torch.randn(50, 2), torch.zeros(50, 0, dtype=torch.int64))
    categorical_only = TabularBatch(torch.zeros(50, 0), torch.randint(4, (50, 2)))
    for cls in (ScarfCorruption, RandomFeatureReplacement):
        for ref in (numeric_only, categorical_only):
            out = cls(ref, 0.5, _gen())(ref)
            assert out.numeric.shape == ref.numeric.shape and out.categorical.shape == ref.categorical.shape
        with pytest.raises(ValueError):
            cls(numeric_only, 1.5, _gen())
        with pytest.raises(ValueError):
            cls(numeric_only.take(torch.arange(0)), 0.5, _gen())


def test_from_block_constructors():
    block = _block(100)
    batch = TabularBatch.from_block(block)
    assert ScarfCorruption.from_block(block, 0.5, _gen())(batch).numeric.shape == (100, 3)
    assert RandomFeatureReplacement.from_block(block, 0.5, _gen())(batch).categorical.shape == (100, 2)


def test_two_views_applies_each_transform_once_and_is_generic():
    reference = TabularBatch.from_block(_block(200))
    views = TwoViews(ScarfCorruption(reference, 0.5, _gen()))
    v1, v2 = views(reference)
    assert isinstance(v1, TabularBatch) and not torch.equal(v1.numeric, v2.numeric)  # two independent draws
    calls = []
    asym = TwoViews(lambda x: calls.append("a") or x + 1, lambda x: calls.append("b") or x * 10)
    assert asym(2) == (3, 20) and calls == ["a", "b"]
    assert TwoViews(lambda s: s.upper())("x") == ("X", "X")
