"""Phase 0, shared by every algorithm: sites load and check their data, the parties are aligned,
and the coordinator gets a handle on the label party wherever it lives."""
from __future__ import annotations

import hashlib
from typing import Callable

from vflflare.algorithms.alignment import align, hash_ids
from vflflare.algorithms.label_party import LabelParty
from vflflare.algorithms.label_proxy import RemoteLabelParty
from vflflare.algorithms.transport import Transport
from vflflare.config import VFLConfig
from vflflare.data.types import LabelTables
from vflflare.tracking import Tracker

SERVER = "server"


def alignment_salt(seed: int) -> str:
    """Derived from the job seed, not random: the canonical order (and so the validation split) must be
    the same for the same seed. The coordinator knows the salt either way; PSI will replace this."""
    return hashlib.sha256(f"vflflare-align:{seed}".encode()).hexdigest()


def setup_parties(
    net: Transport, cfg: VFLConfig, load_server_labels: Callable[[], LabelTables], tracker: Tracker
) -> tuple[LabelParty | RemoteLabelParty, dict[str, int]]:
    """Returns the label party handle and the row counts of the aligned parts."""
    if cfg.label_owner != SERVER and cfg.label_owner not in net.sites:
        raise ValueError(f"label_owner '{cfg.label_owner}' is neither 'server' nor one of the sites {net.sites}")
    salt = alignment_salt(cfg.seed)
    with net.ledger.phase("setup"):
        replies = net.exchange(
            "setup", {s: {"config": cfg.to_dict(), "sites": net.sites, "salt": salt} for s in net.sites}
        )
        train = {s: replies[s]["train_ids"] for s in net.sites}
        test = {s: replies[s]["test_ids"] for s in net.sites}
        if cfg.label_owner == SERVER:
            tables = load_server_labels()
            label: LabelParty | RemoteLabelParty = LabelParty(tables, net.sites, cfg, tracker)
            label_train, label_test = hash_ids(tables.train_ids, salt), hash_ids(tables.test_ids, salt)
            num_classes = tables.num_classes
        else:
            info = replies[cfg.label_owner]["label"]
            label_train, label_test, num_classes = info["train_ids"], info["test_ids"], int(info["num_classes"])
            label = RemoteLabelParty(net, cfg.label_owner, num_classes)
        label_key = "label:" + cfg.label_owner
        rows = align(
            {**train, label_key: label_train},
            {**test, label_key: label_test},
            num_classes=num_classes,
            val_fraction=cfg.val_fraction,
            seed=cfg.seed,
            label_party=cfg.label_owner,
        )
        payloads = {s: {"train": rows[s].train, "val": rows[s].val, "test": rows[s].test} for s in net.sites}
        label_rows = rows[label_key]
        if cfg.label_owner == SERVER:
            label.align(label_rows.train, label_rows.val, label_rows.test)
        else:
            payloads[cfg.label_owner]["label"] = {"train": label_rows.train, "val": label_rows.val, "test": label_rows.test}
        net.exchange("align", payloads)
    counts = {"aligned_train": len(label_rows.train), "val": len(label_rows.val), "test": len(label_rows.test)}
    return label, counts
