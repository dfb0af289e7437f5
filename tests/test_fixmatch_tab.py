import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from vflflare.data.types import FeatureBlock
from vflflare.ssl.augment import AddGaussianNoise, MaskToLocalMean, TabularBatch, fixmatch_tab_views
from vflflare.ssl.fixmatch import FixMatchLoss

torch.set_num_threads(1)


def _block(n: int = 4000) -> FeatureBlock:
    rng = np.random.default_rng(0)
    numeric = rng.normal(loc=[1.0, -2.0, 5.0], scale=[1.0, 3.0, 0.5], size=(n, 3)).astype(np.float32)
    categorical = np.stack([rng.choice(4, size=n, p=[0.1, 0.6, 0.2, 0.1]), rng.choice(3, size=n, p=[0.2, 0.3, 0.5])], 1)
    return FeatureBlock(numeric, categorical.astype(np.int64), [4, 3])


def test_weak_masks_rate_entries_with_local_means_and_modes():
    block = _block()
    weak = MaskToLocalMean.from_block(block, rate=0.2, generator=torch.Generator().manual_seed(0))
    batch = TabularBatch.from_block(block)
    out = weak(batch)
    means = block.numeric.mean(axis=0)
    changed = out.numeric != batch.numeric
    assert abs(changed.float().mean().item() - 0.2) < 0.015
    cols = torch.nonzero(changed)[:, 1]
    np.testing.assert_allclose(out.numeric[changed].numpy(), means[cols.numpy()], rtol=1e-6)
    # categorical: masked entries become the most frequent index (1 and 2); the changed share is
    # rate * P(value != mode)
    cat_changed = out.categorical != batch.categorical
    assert set(out.categorical[:, 0][cat_changed[:, 0]].tolist()) == {1}
    assert set(out.categorical[:, 1][cat_changed[:, 1]].tolist()) == {2}
    assert abs(cat_changed[:, 0].float().mean().item() - 0.2 * 0.4) < 0.02


def test_strong_is_weak_plus_gaussian_noise_with_the_same_mask():
    block = _block()
    views = fixmatch_tab_views(block, mask_rate=0.2, noise_std=0.1, generator=torch.Generator().manual_seed(1))
    weak, strong = views(TabularBatch.from_block(block))
    diff = (strong.numeric - weak.numeric).flatten()
    assert abs(diff.mean().item()) < 0.005
    assert abs(diff.std().item() - 0.1) < 0.005
    assert torch.equal(strong.categorical, weak.categorical)


def test_augmentations_repeat_under_the_same_generator_seed():
    batch = TabularBatch.from_block(_block(100))
    noise_a = AddGaussianNoise(0.1, torch.Generator().manual_seed(3))(batch)
    noise_b = AddGaussianNoise(0.1, torch.Generator().manual_seed(3))(batch)
    assert torch.equal(noise_a.numeric, noise_b.numeric)


def test_fixmatch_loss_hand_computed():
    logits_l = torch.tensor([[2.0, 0.0], [0.0, 1.0]])
    targets = torch.tensor([0, 1])
    # weak row 0: p = softmax(4, 0) = 0.982 >= 0.95 -> pseudo-label 0; row 1: p = 0.731 < 0.95 -> masked out
    logits_w = torch.tensor([[4.0, 0.0], [1.0, 0.0]])
    logits_s = torch.tensor([[1.0, 1.0], [0.0, 3.0]])
    loss = FixMatchLoss(2, threshold=0.95, lambda_u=2.0)(logits_l, targets, logits_w, logits_s)
    l_s = 0.5 * (math.log(1 + math.exp(-2.0)) + math.log(1 + math.exp(-1.0)))
    l_u = 0.5 * math.log(2.0)  # CE of (1, 1) against class 0, averaged over both unlabeled rows
    assert loss.item() == pytest.approx(l_s + 2.0 * l_u, rel=1e-6)


def test_fixmatch_loss_without_unlabeled_rows_is_supervised_loss():
    logits_l = torch.tensor([[2.0, 0.0]])
    empty = torch.zeros(0, 2)
    loss = FixMatchLoss(2)(logits_l, torch.tensor([0]), empty, empty)
    assert loss.item() == pytest.approx(F.cross_entropy(logits_l, torch.tensor([0])).item())


def test_distribution_alignment_rescales_towards_labeled_marginal():
    loss = FixMatchLoss(2, threshold=0.62, class_balance="distribution_alignment", labeled_marginal=[0.5, 0.5])
    probs = torch.tensor([[0.8, 0.2], [0.6, 0.4]])
    pseudo, mask = loss.pseudo_labels(torch.log(probs))
    # running predicted marginal (0.7, 0.3): q ~ p * 0.5 / (0.7, 0.3), renormalised
    aligned = probs / torch.tensor([0.7, 0.3])
    aligned = aligned / aligned.sum(1, keepdim=True)
    assert pseudo.tolist() == aligned.argmax(1).tolist() == [0, 1]
    assert mask.tolist() == (aligned.max(1).values >= 0.62).float().tolist() == [1.0, 0.0]


def test_balanced_threshold_follows_flexmatch_learning_status():
    loss = FixMatchLoss(2, threshold=0.9, class_balance="balanced_threshold", num_unlabeled=4)
    # warm-up: nothing learned yet -> beta = 0 -> every threshold 0
    assert loss.class_thresholds().tolist() == [0.0, 0.0]
    strong = torch.log(torch.tensor([[0.95, 0.05], [0.96, 0.04], [0.3, 0.7]]))
    pseudo, mask = loss.pseudo_labels(strong, torch.tensor([0, 1, 2]))
    assert mask.tolist() == [1.0, 1.0, 1.0]
    # rows 0 and 1 confidently class 0, row 2 not confident, row 3 unseen: sigma = (2, 0), unused = 2
    assert loss.confident_class.tolist() == [0, 0, -1, -1]
    assert loss.class_thresholds().tolist() == pytest.approx([0.9, 0.0])
    _, mask = loss.pseudo_labels(torch.log(torch.tensor([[0.85, 0.15], [0.4, 0.6]])), torch.tensor([2, 3]))
    assert mask.tolist() == [0.0, 1.0]  # class 0 now needs 0.9, class 1 (not learned) accepts anything


def test_unknown_class_balance_is_rejected():
    with pytest.raises(ValueError):
        FixMatchLoss(2, class_balance="oversample")


@pytest.mark.parametrize("columns", [1, 7, 64, 65, 68, 71, 72, 129, 132, 200, 1500])
def test_statistics_over_some_rows_are_a_copys_to_the_bit_without_the_copy(columns):
    """The views read a site's rows in place (issue 41: the copy was most of one-shot's 2.8x memory); the local
    means, modes and SCARF draws must equal what a copy of those rows gives, or the defaults' numbers move."""
    rng = np.random.default_rng(columns)
    n = 20000
    numeric = (rng.normal(size=(n, columns)) * rng.uniform(0.1, 100, columns)).astype(np.float32)
    block = FeatureBlock(numeric, rng.integers(0, 5, size=(n, 3)).astype(np.int64), [5, 5, 5])
    rows = torch.as_tensor(np.sort(rng.choice(n, 15000, replace=False)))
    copy = block.take(rows.numpy())
    in_place = MaskToLocalMean.from_block(block, 0.2, torch.Generator(), rows.numpy())
    copied = MaskToLocalMean.from_block(copy, 0.2, torch.Generator())
    assert torch.equal(in_place.numeric_mean, torch.as_tensor(copy.numeric).mean(dim=0))  # the old whole-table mean
    assert torch.equal(in_place.numeric_mean, copied.numeric_mean)
    assert torch.equal(in_place.categorical_mode, copied.categorical_mode)
    batch = TabularBatch.from_block(block).take(torch.arange(500))
    for scarf_rate in (None, 0.4):
        views = fixmatch_tab_views(block, 0.2, 0.1, torch.Generator().manual_seed(5), scarf_rate, rows)
        before = fixmatch_tab_views(copy, 0.2, 0.1, torch.Generator().manual_seed(5), scarf_rate)
        for got, want in zip(views(batch), before(batch)):
            assert torch.equal(got.numeric, want.numeric) and torch.equal(got.categorical, want.categorical)
