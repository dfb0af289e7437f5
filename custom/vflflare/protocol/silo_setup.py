"""Setup for plug-ins on a silo space (CFL, paper 003, Definition 4 and Sec. 4.1), instead of
setup.py's aligned-rows setup: every silo holds its own rows and labels, so nothing is intersected and
no label party is chosen. The coordinator forms the *union* of the silos' salted training-ID digests in
a canonical order from the job's seed, and tells each silo, for every union position, which of its own
rows it is (or -1: a row it lacks, which it trains on as a null representation, a zero row)."""

from __future__ import annotations

import numpy as np

from vflflare.config import JobConfig
from vflflare.data.checks import collect_checks, describe_checks
from vflflare.protocol.alignment import canonical_order
from vflflare.protocol.setup import alignment_salt
from vflflare.protocol.transport import Transport
from vflflare.tracking import Tracker


def union_positions(digests: list[str], union: list[str]) -> np.ndarray:
    index = {d: i for i, d in enumerate(digests)}
    return np.asarray([index.get(d, -1) for d in union], dtype=np.int64)


def setup_silo_space(net: Transport, cfg: JobConfig, tracker: Tracker) -> tuple[None, dict[str, int], dict]:
    """Returns (no label party, row counts, the union report)."""
    salt = alignment_salt(cfg.seed)
    with net.ledger.phase("setup"):
        replies = net.exchange(
            "setup", {s: {"config": cfg.to_dict(), "sites": net.sites, "salt": salt} for s in net.sites}
        )
        train = {s: list(replies[s]["train_ids"]) for s in net.sites}
        union = canonical_order(set().union(*map(set, train.values())), cfg.seed, "union")
        net.exchange("align", {s: {"union": union_positions(train[s], union)} for s in net.sites})
    every = set.intersection(*map(set, train.values()))
    report = {"union": len(union), "in_every_silo": len(every), "per_site": {s: len(d) for s, d in train.items()}}
    collect_checks(report, replies, net.sites)
    tracker.info(
        f"silo space: {len(union)} training rows in the union, {len(every)} in every silo; rows per silo "
        + ", ".join(f"{s}: {n}" for s, n in report["per_site"].items())
    )
    for site, checks in report.get("data_checks", {}).items():
        for line in describe_checks(f"site {site!r}", checks):
            tracker.info(line)
    return None, {"union": len(union), "in_every_silo": len(every)}, report
