"""Label differential privacy accounted in code, with Google's dp-accounting (privacy loss distributions):
what (epsilon, delta) each label-dependent stream of a run spent, and which channels no guarantee covers.

Neighbouring datasets differ in one row's label (replace-one).
- Randomized response on the aligned training labels (defenses.randomized_response) is eps-label-DP for
  everything computed from them; the library's exact PLD of K-ary randomized response confirms eps.
- Clipping each gradient row to C and adding N(0, (z C)^2) is the Gaussian mechanism. A changed label moves a
  clipped row by at most 2C, which is the library's replace-one sensitivity for a norm bound C, so z is its
  noise multiplier. A row's gradient is released once per pass over the aligned rows, to every site without
  labels, so one site sees `passes` releases and the K-1 sites together see `passes x (K-1)`. The per-row
  accounting holds only where the gradients come from a head not trained on the labels (one-shot's partial
  gradients). A split-NN top model is trained in the clear on every label, so later rows' gradients carry
  earlier labels, and that channel has no guarantee.
"""

from __future__ import annotations

import math
from typing import Any

DEFAULT_DELTA = 1e-5


def _accountant():
    import dp_accounting  # imported here: only the label party accounts, and only with a defense on
    from dp_accounting.pld import pld_privacy_accountant

    return dp_accounting, pld_privacy_accountant.PLDAccountant(dp_accounting.NeighboringRelation.REPLACE_ONE)


def randomized_response_epsilon(epsilon: float, num_classes: int) -> float:
    """Pure-DP epsilon of K-ary randomized response that keeps a label with probability e^eps / (e^eps + K - 1):
    the library's mechanism outputs a uniform class with probability p = K / (e^eps + K - 1)."""
    dp, accountant = _accountant()
    accountant.compose(dp.RandomizedResponseDpEvent(num_classes / (math.exp(epsilon) + num_classes - 1), num_classes))
    return float(accountant.get_epsilon(0.0))


def gaussian_epsilon(noise_multiplier: float, releases: int, delta: float = DEFAULT_DELTA) -> float:
    """Epsilon at `delta` of `releases` Gaussian releases of a clipped row with std noise_multiplier x C."""
    if releases <= 0:
        return 0.0
    dp, accountant = _accountant()
    accountant.compose(dp.GaussianDpEvent(noise_multiplier), releases)
    return float(accountant.get_epsilon(delta))


def noise_for_epsilon(epsilon: float, releases: int, delta: float = DEFAULT_DELTA) -> float:
    """A noise multiplier whose `releases` Gaussian releases spend at most (epsilon, delta): calibrated with the
    RDP accountant, which is fast and a little conservative, so the PLD epsilon the run records is at most
    the target."""
    import dp_accounting
    from dp_accounting.rdp import rdp_privacy_accountant

    try:  # the RDP accountant's Gaussian has sensitivity 1: a label moves a row by 2C, so z / 2 per unit
        return 2.0 * float(
            dp_accounting.calibrate_dp_mechanism(
                rdp_privacy_accountant.RdpAccountant,
                lambda half: dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(half), max(releases, 1)),
                epsilon,
                delta,
                dp_accounting.ExplicitBracketInterval(0.025, 5e3),
                tol=1e-4,
            )
        )
    except ValueError as error:
        raise ValueError(
            f"gradient_dp_epsilon {epsilon} at delta {delta} over {releases} passes needs a noise "
            f"multiplier outside [0.05, 10000]: {error}"
        ) from error


def account(
    cfg: Any, num_classes: int, aligned_rows: int, released: dict[str, int], receivers: int, noise_multiplier: float
) -> dict[str, Any]:
    """The run's DP record. released: gradient rows the label party sent each receiving site, by the head
    they came from ("fresh": a head untrained on labels; "trained": a split-NN top model); receivers: the
    sites without labels that got them; noise_multiplier: the z the label party used (0: no noise)."""
    streams: dict[str, dict[str, Any]] = {}
    uncovered = ["validation early stopping and the reported scores: computed on the true validation and test labels"]
    if cfg.label_dp_epsilon > 0:
        streams["labels"] = {
            "mechanism": "randomized response",
            "epsilon": randomized_response_epsilon(cfg.label_dp_epsilon, num_classes),
            "delta": 0.0,
            "covers": "everything computed from the aligned training labels (gradients, p^, heads)",
        }
    passes = {kind: math.ceil(rows / aligned_rows) for kind, rows in released.items() if rows}
    if passes and noise_multiplier > 0 and cfg.gradient_clip > 0:
        delta = cfg.gradient_dp_delta
        total = sum(passes.values())
        streams["gradients"] = {
            "mechanism": "Gaussian (clip C, noise z x C)",
            "noise_multiplier": noise_multiplier,
            "delta": delta,
            "passes": total,
            "epsilon": gaussian_epsilon(noise_multiplier, total, delta),
            "epsilon_colluding_sites": gaussian_epsilon(noise_multiplier, total * receivers, delta),
            "covers": "each row's own gradient, to one site and to all sites without labels together",
        }
    if passes and cfg.label_dp_epsilon == 0:
        if noise_multiplier == 0 or cfg.gradient_clip == 0:
            uncovered.append("gradients: sent without clipping and Gaussian noise")
        if "trained" in passes:
            uncovered.append(
                "split NN's top model: trained in the clear on every label, it carries earlier labels "
                "into later rows' gradients"
            )
        if cfg.gradient_marvell:
            uncovered.append("Marvell: noise optimised against the attacks, no DP guarantee")
        if getattr(cfg, "iso_gradients", 0.0):
            uncovered.append("ISO: noise scaled to the batch's largest gradient row, no clipping, no DP guarantee")
    if "probabilities" in cfg.privacy_channels and cfg.label_dp_epsilon == 0:
        uncovered.append("few-shot's p^: pseudo-label probabilities from a classifier trained on the labels")
    return {"streams": streams, "no_guarantee": uncovered}


def describe(dp: dict[str, Any]) -> list[str]:
    """The DP record as the results table prints it."""
    lines = []
    for name, stream in dp.get("streams", {}).items():
        line = f"  label DP, {name}: eps {stream['epsilon']:.3f} at delta {stream['delta']:g} ({stream['mechanism']}"
        if "passes" in stream:
            line += (
                f", z {stream['noise_multiplier']:.3f}, {stream['passes']} pass(es); all sites without labels "
                f"together: eps {stream['epsilon_colluding_sites']:.3f}"
            )
        lines.append(line + ")")
    lines += [f"  no DP guarantee: {channel}" for channel in dp.get("no_guarantee", [])]
    return lines
