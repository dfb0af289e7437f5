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


class ResampledAUC:
    """`_auc_along(labels[rows], scores[rows])` of a resample of the rows, to the last bit, from how often it drew
    each row (`counts`) instead of a sort per resample: the scores are sorted once into tie groups, where a
    group's resampled rows share one midrank. Rank sums are whole or half numbers below 2^53, so summing them in
    integers gives the float64 rankdata sum exactly, and the AUC is then formed by the same expression. A
    bootstrap on 330,000 test rows took 66 s and 2 GB with a rankdata per resample."""

    def __init__(self, labels: np.ndarray, scores: np.ndarray) -> None:
        self.order = np.argsort(scores, kind="stable")
        ordered = np.asarray(scores)[self.order]
        self.positive = (np.asarray(labels) == 1)[self.order].astype(np.int64)
        self.ends = np.flatnonzero(np.r_[ordered[1:] != ordered[:-1], True])  # each tie group's last row

    def __call__(self, counts: np.ndarray) -> float:
        drawn = counts[self.order]
        upto = np.cumsum(drawn)[self.ends]  # resampled rows up to each group's end
        tied = np.diff(upto, prepend=0)
        positives = np.diff(np.cumsum(drawn * self.positive)[self.ends], prepend=0)
        rank_sum = int((positives * (2 * (upto - tied) + tied + 1)).sum()) / 2
        n1, n = np.int64(positives.sum()), int(tied.sum())
        with np.errstate(divide="ignore", invalid="ignore"):  # a resample of one class has no AUC: nan
            return float((rank_sum - n1 * (n1 + 1) / 2) / (n1 * (n - n1)))


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
        p, b = np.asarray(probs)[:, 1], np.asarray(baseline)[:, 1]
        gain = float((_auc_along(labels[None], p[None]) - _auc_along(labels[None], b[None]))[0])
        of_p, of_b = ResampledAUC(labels, p), ResampledAUC(labels, b)

        def statistic(rows: np.ndarray, axis: int = -1) -> np.ndarray:
            drawn = (np.bincount(r, minlength=len(labels)) for r in rows)
            return np.array([of_p(counts) - of_b(counts) for counts in drawn])
    else:
        d = (np.asarray(probs).argmax(1) == labels).astype(float) - (np.asarray(baseline).argmax(1) == labels)
        gain = float(d.mean())

        def statistic(rows: np.ndarray, axis: int = -1) -> np.ndarray:
            return d[rows].mean(axis=axis)

    # paired: the rows' positions are resampled, as scipy's own paired=True does (the same draws)
    interval = bootstrap(
        (np.arange(len(labels)),),
        statistic,
        n_resamples=resamples,
        batch=10,  # resamples at a time: the same draws as any other batch (the generator keeps its state)
        vectorized=True,
        confidence_level=level,
        method="percentile",
        rng=np.random.default_rng(seed),
    ).confidence_interval
    return gain, float(interval.low), float(interval.high)
