"""The utility metric of the papers: AUC for binary tasks (credit default), accuracy otherwise."""

from __future__ import annotations

import numpy as np

# what scoring imports on first use, slowly (scikit-learn, scipy: about 1.2 s); sites never score, and a
# label party at the coordinator imports them while it waits for the sites (torch_runtime.prepare_torch)
LAZY_IMPORTS = ("sklearn.metrics", "scipy.stats")


def metric_name(num_classes: int) -> str:
    return "auc" if num_classes == 2 else "accuracy"


def score(probs: np.ndarray, labels: np.ndarray, num_classes: int) -> tuple[str, float]:
    """(name, value) of the metric for class probabilities probs [n, C] against integer labels [n]."""
    probs = np.asarray(probs)
    labels = np.asarray(labels)
    if probs.ndim != 2 or probs.shape != (len(labels), num_classes):
        raise ValueError(f"probs must have shape ({len(labels)}, {num_classes}), got {probs.shape}")
    name = metric_name(num_classes)
    if name == "auc":
        from sklearn.metrics import roc_auc_score  # scikit-learn takes ~1 s to import; sites never score

        if len(np.unique(labels)) < 2:
            raise ValueError(f"AUC needs rows of both classes; got {len(labels)} rows all labeled {labels[:1]}")
        return name, float(roc_auc_score(labels, probs[:, 1]))
    return name, float(np.mean(probs.argmax(axis=1) == labels))


def _auc_along(labels: np.ndarray, scores: np.ndarray, axis: int = -1) -> np.ndarray:
    """AUC of binary `labels` by `scores` along `axis` (Mann-Whitney U with tied scores' ranks averaged, as
    scikit-learn's roc_auc_score): one value per resample of a bootstrap."""
    from scipy.stats import rankdata

    labels, scores = np.moveaxis(labels, axis, -1), np.moveaxis(scores, axis, -1)
    positive = labels == 1
    n1 = positive.sum(axis=-1)
    n0 = labels.shape[-1] - n1
    with np.errstate(divide="ignore", invalid="ignore"):  # a resample of one class has no AUC: nan
        return ((rankdata(scores, axis=-1) * positive).sum(axis=-1) - n1 * (n1 + 1) / 2) / (n1 * n0)


def gain_interval(
    labels: np.ndarray,
    probs: np.ndarray,
    baseline: np.ndarray,
    num_classes: int,
    *,
    seed: int,
    resamples: int = 1000,
    level: float = 0.95,
) -> tuple[float, float, float]:
    """(gain, low, high): the metric of `probs` minus that of `baseline` on these rows, and its paired
    percentile bootstrap interval (scipy.stats.bootstrap, rows resampled with replacement)."""
    from scipy.stats import bootstrap

    labels = np.asarray(labels)
    if metric_name(num_classes) == "auc":
        data = (labels, np.asarray(probs)[:, 1], np.asarray(baseline)[:, 1])

        def statistic(y: np.ndarray, p: np.ndarray, b: np.ndarray, axis: int = -1) -> np.ndarray:
            return _auc_along(y, p, axis) - _auc_along(y, b, axis)
    else:
        data = ((np.asarray(probs).argmax(1) == labels).astype(float) - (np.asarray(baseline).argmax(1) == labels),)

        def statistic(d: np.ndarray, axis: int = -1) -> np.ndarray:
            return d.mean(axis=axis)

    gain = float(statistic(*(d[None] for d in data))[0])
    interval = bootstrap(
        data,
        statistic,
        n_resamples=resamples,
        batch=100,
        vectorized=True,
        paired=True,
        confidence_level=level,
        method="percentile",
        rng=np.random.default_rng(seed),
    ).confidence_interval
    return gain, float(interval.low), float(interval.high)
