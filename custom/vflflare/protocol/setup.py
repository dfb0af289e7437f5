"""Phase 0, shared by every algorithm: sites load and check their data, the parties are aligned,
and the coordinator gets a handle on the label party wherever it lives.

alignment "hash": sites send salted ID digests, the coordinator intersects them.
alignment "psi": the sites already hold their DH-PSI intersection; each derives the canonical order
locally, and the coordinator only checks that all sites hold the same intersection (sizes and one
fingerprint) and tells them which aligned rows the label party has labels for.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from vflflare.config import SERVER, JobConfig
from vflflare.data.checks import collect_checks
from vflflare.data.types import LabelTables
from vflflare.privacy.enforcement import collect_enforced
from vflflare.privacy.private_randomness import PrivateRandomness, collect_sources
from vflflare.protocol.alignment import (
    AlignmentError,
    LabelMatchClient,
    aligned_order,
    aligned_unlabeled,
    canonical_order,
    hash_ids,
    labeled_rows,
    order_key,
    positions_in,
    positions_of,
    split_by_mask,
    stratified_val_mask,
    tag_items,
    unmatched_positions,
    untag_items,
)
from vflflare.protocol.alignment_report import (
    check_min_aligned,
    check_shared,
    hash_report,
    id_variants,
    lacking_counts,
    lacking_test,
    partial_test,
    progress_line,
    raise_partial_test,
    summarize,
    test_labels_source,
    unlabeled_test,
)
from vflflare.protocol.label_party import LabelParty
from vflflare.protocol.label_proxy import RemoteLabelParty
from vflflare.protocol.transport import Transport
from vflflare.tracking import Tracker


def alignment_salt(seed: int) -> str:
    """Derived from the job seed, not random: the canonical order (and so the validation split) must be
    the same for the same seed. The coordinator knows the salt either way; alignment "psi" avoids this."""
    return hashlib.sha256(f"vflflare-align:{seed}".encode()).hexdigest()


@dataclass
class SetupInputs:
    """What phase 0 needs at the coordinator. Label: the plug-in's label party class; private: the coordinator's
    private source, for a label party hosted there; label_cfg: that label party's config, the job's with the
    defenses the server's local configuration enforces (default: the job's). model_id: the ID the sites save
    their models under at the job's end (model_ids.py), announced to them outside the counted messages."""

    net: Transport
    cfg: JobConfig
    Label: type[LabelParty]
    load_server_labels: Callable[[], LabelTables]
    tracker: Tracker
    private: PrivateRandomness | None = None
    label_cfg: JobConfig | None = None
    model_id: str | None = None


def setup_parties(
    inputs: SetupInputs, *, unlabeled_part: bool = False
) -> tuple[LabelParty | RemoteLabelParty, dict[str, int], dict]:
    """Returns the label party handle (the plug-in's Label here, or a proxy of the one on the label-owning site),
    the row counts of the aligned parts and the alignment report (alignment_report.py). unlabeled_part: also
    tell each site its aligned rows without a label (part "aligned_unlabeled")."""
    net, cfg, tracker = inputs.net, inputs.cfg, inputs.tracker
    if cfg.label_owner != SERVER and cfg.label_owner not in net.sites:
        raise ValueError(f"label_owner '{cfg.label_owner}' is neither 'server' nor one of the sites {net.sites}")
    if cfg.alignment == "psi":
        return _setup_with_psi(inputs, unlabeled_part)
    salt = alignment_salt(cfg.seed)
    if inputs.model_id:
        net.announce_model(inputs.model_id)
    with net.ledger.phase("setup"):
        replies = net.exchange(
            "setup", {s: {"config": cfg.to_dict(), "sites": net.sites, "salt": salt} for s in net.sites}
        )
        train = {s: replies[s]["train_ids"] for s in net.sites}
        test = {s: replies[s]["test_ids"] for s in net.sites}
        variants = {s: replies[s].get("variants") for s in net.sites}
        label_key = "label:" + cfg.label_owner
        if cfg.label_owner == SERVER:
            tables = inputs.load_server_labels()
            label: LabelParty | RemoteLabelParty = inputs.Label(
                tables, net.sites, inputs.label_cfg or cfg, tracker, private=inputs.private
            )
            train[label_key], test[label_key] = hash_ids(tables.train_ids, salt), hash_ids(tables.test_ids, salt)
            variants[label_key] = id_variants(tables.train_ids, tables.test_ids, salt, cfg.id_normalize)
            num_classes = tables.num_classes
        else:
            info = replies[cfg.label_owner]["label"]
            train[label_key], test[label_key], num_classes = (
                info["train_ids"],
                info["test_ids"],
                int(info["num_classes"]),
            )
            variants[label_key] = info.get("variants")
            label = RemoteLabelParty(net, cfg.label_owner, num_classes, inputs.Label.label_channels())
            label.classes = info.get("classes")
        report, common_train, common_test = hash_report(train, test, variants)
        collect_checks(report, replies, net.sites)
        collect_sources(report, replies, net.sites)
        collect_enforced(report, replies, net.sites)
        tracker.info(progress_line(report))
        check_shared(report)
        check_min_aligned(len(common_train), cfg.min_aligned, report, net.sites)
        order, test_order = aligned_order(train, test, cfg.seed)
        # sent only where a party lacks test rows, so a clean run's messages are unchanged
        lacking = {p: {"lacking": n} for p, n in lacking_counts(test).items() if n}
        labeled = labeled_rows(order, cfg.labeled_fraction)

        def rows_of(party: str, part: list[str], digests: dict = train) -> np.ndarray:
            return positions_of(digests[party], part)

        def unmatched(party: str) -> dict:
            return summarize(
                {
                    part: unmatched_positions(digests[party], common)
                    for part, digests, common in (("train", train, common_train), ("test", test, common_test))
                }
            )

        blame, problems, replies = [], [], {}
        extra = {}  # positions of the aligned rows without a label, for plug-ins that pretrain on them
        if unlabeled_part:
            unlabeled = aligned_unlabeled(train, net.sites, labeled, cfg.seed)
            extra = {s: {"aligned_unlabeled": rows_of(s, unlabeled)} for s in net.sites}
        if cfg.label_owner == SERVER:
            label_of = dict(zip(train[label_key], tables.train_labels.tolist()))
            val_mask = stratified_val_mask([label_of[d] for d in labeled], cfg.val_fraction)
        else:
            # the label site splits its labeled rows into training and validation rows, stratified by class,
            # before the other sites learn which of their rows are which
            owner = cfg.label_owner
            replies = net.exchange(
                "align",
                {
                    owner: {
                        **extra.get(owner, {}),
                        "labeled": rows_of(owner, labeled),
                        "test": rows_of(owner, test_order, test),
                        "unmatched": unmatched(owner),
                        **lacking.get(owner, {}),
                        "label": {
                            "labeled": rows_of(label_key, labeled),
                            "test": rows_of(label_key, test_order, test),
                            "unmatched": unmatched(label_key),
                            **lacking.get(label_key, {}),
                        },
                    }
                },
            )
            val_mask = replies[owner]["val_mask"]
        sizes = ", ".join(f"{p}: {len(d)}" for p, d in train.items())
        train_rows, val_rows = split_by_mask(
            labeled,
            val_mask,
            num_classes,
            cfg.label_owner,
            f"train rows per party: {sizes}",
            len(order),
            cfg.labeled_fraction,
        )
        if cfg.label_owner == SERVER:
            who, file = "label party 'server'", test_labels_source(tables)
            blame = lacking_test(
                who, file, lacking.get(label_key, {}).get("lacking", 0), cfg.allow_partial_test, tracker.info
            )
            problems = partial_test(
                who, file, tables.test_ids, unmatched(label_key)["test"], cfg.allow_partial_test, tracker.info
            )
            label.align(
                rows_of(label_key, train_rows), rows_of(label_key, val_rows), rows_of(label_key, test_order, test)
            )
        replies.update(
            net.exchange(
                "align",
                {
                    s: {
                        "train": rows_of(s, train_rows),
                        "val": rows_of(s, val_rows),
                        "test": rows_of(s, test_order, test),
                        "unmatched": unmatched(s),
                        **extra.get(s, {}),
                        **lacking.get(s, {}),
                    }
                    for s in net.sites
                    if s not in replies
                },
            )
        )

        def collected(key: str) -> list[str]:
            return [p for s in net.sites for p in replies[s].get(key, [])]

        # the parties that lack rows every other party has come first: theirs is the file to fix
        raise_partial_test(collected("lacking") + blame + collected("problems") + problems, report["hint"])
    counts = {"aligned_train": len(train_rows), "val": len(val_rows), "test": len(test_order)}
    if unlabeled_part:
        counts["aligned_unlabeled"] = len(unlabeled)
    report.update(counts)
    return label, counts, report


def _setup_with_psi(
    inputs: SetupInputs, unlabeled_part: bool
) -> tuple[LabelParty | RemoteLabelParty, dict[str, int], dict]:
    """Sites read their PSI intersection and order it locally. What reaches the coordinator: each
    site's intersection sizes and fingerprint; from a label site, boolean masks over the canonical
    order (which aligned rows are labeled); for a label party on the coordinator, one OpenMined PSI
    round with the first site, after which it knows which of its label IDs are aligned."""
    net, cfg, tracker = inputs.net, inputs.cfg, inputs.tracker
    with net.ledger.phase("setup"):
        if inputs.model_id:
            net.announce_model(inputs.model_id)
        replies = net.exchange("setup", {s: {"config": cfg.to_dict(), "sites": net.sites} for s in net.sites})
        views = {s: replies[s]["psi"] for s in net.sites}
        problems = [p for s in net.sites for p in replies[s].get("problems", [])]
        n_train, n_test = _check_same_intersection(views)
        context = "PSI intersection: " + f"{n_train} train and {n_test} test IDs shared by sites {', '.join(net.sites)}"
        report: dict = {
            "parties": {
                s: {
                    "train": {"rows": int(views[s]["rows"]["train"]), "matched": n_train},
                    "test": {"rows": int(views[s]["rows"]["test"]), "matched": n_test},
                }
                for s in net.sites
            }
        }
        collect_checks(report, replies, net.sites)
        collect_sources(report, replies, net.sites)
        collect_enforced(report, replies, net.sites)
        keep: dict = {"train_keys": None, "test_keys": None, "train_mask": None, "test_mask": None, "val_mask": None}
        if cfg.label_owner == SERVER:
            tables = inputs.load_server_labels()
            label: LabelParty | RemoteLabelParty = inputs.Label(
                tables, net.sites, inputs.label_cfg or cfg, tracker, private=inputs.private
            )
            num_classes = tables.num_classes
            # one more DH-PSI round, coordinator = PSI client, first site = PSI server over the intersection
            client = LabelMatchClient(tag_items(tables.train_ids, tables.test_ids))
            first = net.sites[0]
            answer = net.exchange("psi_labels", {first: client.request()})[first]
            train_ids, test_ids = untag_items(client.matches(answer), "label match")
            if len(train_ids) < n_train:
                keep["train_keys"] = [order_key(cfg.seed, "train", i) for i in train_ids]
            if len(test_ids) < n_test:
                keep["test_keys"] = [order_key(cfg.seed, "test", i) for i in test_ids]
            report["parties"]["label:server"] = {
                "train": {"rows": len(tables.train_ids), "matched": len(train_ids)},
                "test": {"rows": len(tables.test_ids), "matched": len(test_ids)},
            }
            tracker.info(progress_line(report))
            who, file = "label party 'server'", test_labels_source(tables)
            problems += partial_test(
                who,
                file,
                tables.test_ids,
                summarize({"test": unmatched_positions(tables.test_ids, set(test_ids))})["test"],
                cfg.allow_partial_test,
                tracker.info,
            )
            problems += unlabeled_test(who, file, n_test - len(test_ids), n_test, cfg.allow_partial_test, tracker.info)
            raise_partial_test(problems)
            check_shared(report)
            check_min_aligned(len(train_ids), cfg.min_aligned, report, net.sites)
            labeled = labeled_rows(canonical_order(train_ids, cfg.seed, "train"), cfg.labeled_fraction)
            label_of = dict(zip(tables.train_ids, tables.train_labels.tolist()))
            keep["val_mask"] = stratified_val_mask([label_of[i] for i in labeled], cfg.val_fraction)
            train, val = split_by_mask(
                labeled,
                keep["val_mask"],
                num_classes,
                cfg.label_owner,
                _labeled(context, len(train_ids), len(test_ids)),
                len(train_ids),
                cfg.labeled_fraction,
            )
            test = canonical_order(test_ids, cfg.seed, "test")
            label.align(
                positions_in(tables.train_ids, train, "label party 'server'", "train labels"),
                positions_in(tables.train_ids, val, "label party 'server'", "train labels"),
                positions_in(tables.test_ids, test, "label party 'server'", "test labels"),
            )
            counts = {"aligned_train": len(train), "val": len(val), "test": len(test)}
        else:
            info = replies[cfg.label_owner]["label"]
            num_classes = int(info["num_classes"])
            label = RemoteLabelParty(net, cfg.label_owner, num_classes, inputs.Label.label_channels())
            label.classes = info.get("classes")
            train_mask, test_mask = np.asarray(info["train_mask"], bool), np.asarray(info["test_mask"], bool)
            n_labeled, n_labeled_test = int(train_mask.sum()), int(test_mask.sum())
            report["parties"][f"label:{cfg.label_owner}"] = {
                "train": {"rows": int(info["rows"]["train"]), "matched": n_labeled},
                "test": {"rows": int(info["rows"]["test"]), "matched": n_labeled_test},
            }
            tracker.info(progress_line(report))
            raise_partial_test(problems)
            check_shared(report)
            check_min_aligned(n_labeled, cfg.min_aligned, report, net.sites)
            keep["val_mask"] = np.asarray(info["val_mask"], dtype=bool)
            train, val = split_by_mask(
                labeled_rows(list(range(n_labeled)), cfg.labeled_fraction),
                keep["val_mask"],
                num_classes,
                cfg.label_owner,
                _labeled(context, n_labeled, n_labeled_test),
                n_labeled,
                cfg.labeled_fraction,
            )
            keep["train_mask"] = None if n_labeled == n_train else train_mask
            keep["test_mask"] = None if n_labeled_test == n_test else test_mask
            counts = {"aligned_train": len(train), "val": len(val), "test": n_labeled_test}
        aligned = net.exchange("align", {s: {"psi": keep} for s in net.sites})
        for site in net.sites:
            got = {k: int(v) for k, v in aligned[site]["counts"].items()}
            if got != counts:
                raise AlignmentError(f"site '{site}' aligned {got} rows, the label party {counts}")
        if unlabeled_part:
            unlabeled_counts = {s: int(aligned[s]["aligned_unlabeled"]) for s in net.sites}
            if len(set(unlabeled_counts.values())) != 1:
                raise AlignmentError(
                    f"the sites found different numbers of aligned rows without a label: {unlabeled_counts}"
                )
            counts["aligned_unlabeled"] = unlabeled_counts[net.sites[0]]
    report.update(counts)
    return label, counts, report


def _check_same_intersection(views: dict[str, dict]) -> tuple[int, int]:
    sizes = ", ".join(f"{s}: {int(v['train'])} train + {int(v['test'])} test IDs" for s, v in views.items())
    if len({(int(v["train"]), int(v["test"]), v["fingerprint"]) for v in views.values()}) != 1:
        raise AlignmentError(
            f"the sites' PSI outputs differ ({sizes}); they come from different PSI runs or data: rerun the PSI job"
        )
    view = next(iter(views.values()))
    n_train, n_test = int(view["train"]), int(view["test"])
    if n_train == 0 and n_test == 0:
        raise AlignmentError(f"the PSI intersection is empty: the sites share no IDs ({sizes})")
    return n_train, n_test


def _labeled(context: str, n_train: int, n_test: int) -> str:
    return f"{context}; the label party has labels for {n_train} train and {n_test} test IDs of it"
