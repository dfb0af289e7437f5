import numpy as np
import pytest

from vflflare.algorithms.blocks.kmeans import kmeans_on_gradients
from vflflare.attacks.leak import cluster_label_agreement


def _blobs(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    centers = np.eye(3, 8) * 5
    labels = rng.integers(0, 3, size=300)
    return centers[labels] + rng.normal(scale=0.5, size=(300, 8)), labels


def test_recovers_separated_directions():
    grads, labels = _blobs(0)
    clusters = kmeans_on_gradients(grads, 3, seed=1)
    assert clusters.dtype == np.int64 and clusters.shape == (300,)
    assert cluster_label_agreement(clusters, labels) == 1.0


def test_scale_does_not_matter_only_direction():
    rng = np.random.default_rng(2)
    v = rng.normal(size=6)
    signs = rng.choice([-1.0, 1.0], size=200)
    grads = (signs * rng.uniform(0.01, 3.0, size=200))[:, None] * v
    clusters = kmeans_on_gradients(grads, 2, seed=0)
    assert cluster_label_agreement(clusters, (signs > 0).astype(int)) == 1.0


def test_deterministic_for_a_seed():
    grads, _ = _blobs(3)
    noisy = grads + np.random.default_rng(4).normal(scale=3.0, size=grads.shape)
    assert np.array_equal(kmeans_on_gradients(noisy, 3, seed=5), kmeans_on_gradients(noisy, 3, seed=5))


def test_rejects_bad_input():
    with pytest.raises(ValueError):
        kmeans_on_gradients(np.zeros((3, 2)), 4, seed=0)
    with pytest.raises(ValueError):
        kmeans_on_gradients(np.array([[np.nan, 1.0], [1.0, 2.0], [0.0, 1.0]]), 2, seed=0)
