"""The best leak any test can reach against Gaussian noise (the Neyman-Pearson lemma; for DP-SGD's Gaussian
mechanism as a hypothesis test: Dong, Roth and Su, "Gaussian Differential Privacy", JRSS-B 2022). A site
telling one row's two possible gradients apart, N(mu_0, sigma^2 I) or N(mu_1, sigma^2 I) with
|mu_1 - mu_0| = sensitivity, does best with the likelihood-ratio test, the projection on mu_1 - mu_0; its
ROC curve has AUC Phi(sensitivity / (sigma sqrt 2)), and `releases` independent looks at the row multiply the
distance by sqrt(releases). With rows clipped to C and noise std z C, the sensitivity of a row's gradient to
its label is 2C: one release reaches at most Phi(sqrt(2) / z). Beside it, a measured leak says how much of
that bound the attacks actually take."""

from __future__ import annotations

import math

CHANNEL = "gradients"


def gaussian_optimal_leak(sensitivity: float, sigma: float, releases: int = 1) -> float:
    """AUC of the optimal test between two Gaussians `sensitivity` apart with std `sigma`, over `releases`
    independent releases: Phi(sqrt(releases) x sensitivity / (sigma sqrt 2))."""
    if sigma <= 0 or sensitivity < 0 or releases < 1:
        raise ValueError(f"need sigma > 0, sensitivity >= 0, releases >= 1: got {sigma}, {sensitivity}, {releases}")
    x = math.sqrt(releases) * sensitivity / (sigma * math.sqrt(2.0))
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


def clipped_gradient_bound(clip: float, noise: float, releases: int = 1) -> float:
    """The bound for gradients clipped to `clip` with noise std noise x clip: sensitivity 2 clip."""
    return gaussian_optimal_leak(2.0 * clip, noise * clip, releases)
