import math

import numpy as np
import pytest

from vflflare.algorithms.blocks.representation_estimation import (
    class_thresholds,
    estimate_joint_representations,
    estimate_missing_representations,
    pseudo_label_probabilities,
)


def test_sdpa_hand_computed_2x2():
    h_u_a = np.array([[1.0, 0.0], [0.0, 2.0]])
    h_o_a = np.array([[1.0, 1.0], [2.0, 0.0]])
    h_o_b = np.array([[10.0, 0.0], [0.0, 10.0]])
    # d = 2: row 0 scores (1, 2)/sqrt(2), row 1 scores (2, 0)/sqrt(2)
    w0 = 1 / (1 + math.exp(1 / math.sqrt(2)))  # weight of aligned row 0 for unaligned row 0
    w1 = 1 / (1 + math.exp(-2 / math.sqrt(2)))  # weight of aligned row 0 for unaligned row 1
    expected = np.array([[10 * w0, 10 * (1 - w0)], [10 * w1, 10 * (1 - w1)]])
    out = estimate_missing_representations(h_u_a, h_o_a, h_o_b)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, expected, rtol=1e-6)


def test_estimated_rows_are_convex_combinations_of_aligned_rows():
    rng = np.random.default_rng(0)
    h_u, h_o, h_other = rng.normal(size=(5, 4)), rng.normal(size=(7, 4)), rng.uniform(1, 2, size=(7, 3))
    out = estimate_missing_representations(h_u, h_o, h_other)
    assert out.shape == (5, 3) and np.all(out >= 1 - 1e-6) and np.all(out <= 2 + 1e-6)


def test_joint_estimate_keeps_own_slot_and_matches_pairwise_estimates():
    rng = np.random.default_rng(1)
    aligned = [rng.normal(size=(6, 2)), rng.normal(size=(6, 3)), rng.normal(size=(6, 4))]
    h_u = rng.normal(size=(5, 3))
    joint = estimate_joint_representations(1, h_u, aligned)
    assert joint.shape == (5, 9)
    np.testing.assert_allclose(joint[:, 2:5], h_u, rtol=1e-6)
    np.testing.assert_allclose(joint[:, :2], estimate_missing_representations(h_u, aligned[1], aligned[0]), rtol=1e-5)
    np.testing.assert_allclose(joint[:, 5:], estimate_missing_representations(h_u, aligned[1], aligned[2]), rtol=1e-5)


def test_pseudo_label_probability_cases():
    local = np.array([[0.9, 0.1], [0.9, 0.1], [0.55, 0.45], [0.2, 0.8], [0.3, 0.7]])
    glob = np.array([[0.8, 0.2], [0.3, 0.7], [0.9, 0.1], [0.1, 0.9], [0.4, 0.6]])
    p = pseudo_label_probabilities(local, glob, threshold=0.6)
    # agree & both confident -> max global; disagree -> 0; local not confident -> 0;
    # agree & both confident -> 0.9; global at exactly t -> 0 (strict inequality)
    np.testing.assert_allclose(p, [0.8, 0.0, 0.0, 0.9, 0.0])


def test_pseudo_label_probabilities_need_matching_shapes():
    with pytest.raises(ValueError):
        pseudo_label_probabilities(np.ones((2, 2)) / 2, np.ones((3, 2)) / 2, 0.5)


def test_prior_relative_thresholds_hand_computed_and_equal_to_global_when_balanced():
    # t = 0.6, C = 2: s = 0.2; t_c = pi_c + (1 - pi_c) * 0.2
    np.testing.assert_allclose(class_thresholds(0.6, 2, "prior_relative", np.array([0.8, 0.2])), [0.84, 0.36])
    np.testing.assert_allclose(class_thresholds(0.6, 4, "prior_relative", np.full(4, 0.25)), np.full(4, 0.6))
    np.testing.assert_allclose(class_thresholds(0.6, 3, "global"), np.full(3, 0.6))


def test_per_class_thresholds_pick_the_agreed_class():
    local = np.array([[0.8, 0.2], [0.9, 0.1], [0.4, 0.6], [0.3, 0.7]])
    glob = np.array([[0.82, 0.18], [0.88, 0.12], [0.45, 0.55], [0.3, 0.7]])
    # t_c = (0.85, 0.5): majority rows need > 0.85 from both, minority rows > 0.5 from both
    p = pseudo_label_probabilities(local, glob, np.array([0.85, 0.5]))
    np.testing.assert_allclose(p, [0.0, 0.88, 0.55, 0.7], rtol=1e-6)
    # the paper's single t = 0.6 passes both majority rows and drops the 0.55 minority row
    np.testing.assert_allclose(pseudo_label_probabilities(local, glob, 0.6), [0.82, 0.88, 0.0, 0.7], rtol=1e-6)


def test_threshold_mode_and_prior_are_checked():
    with pytest.raises(ValueError, match="mode"):
        class_thresholds(0.6, 2, "per_class")
    with pytest.raises(ValueError, match="prior"):
        class_thresholds(0.6, 2, "prior_relative")
    with pytest.raises(ValueError, match="prior"):
        class_thresholds(0.6, 2, "prior_relative", np.array([0.5, 0.6]))
