"""Sample alignment: the rows every party has, in one canonical order, and the validation hold-out.

Two modes (JobConfig.alignment):

- ``hash`` (default): parties send salted SHA-256 digests of their IDs; the coordinator intersects
  digests and returns to each party only positions into its own table. The coordinator learns the
  set sizes and, knowing the salt, could test guessed IDs.
- ``psi``: the sites' intersection comes from NVFlare's DH-PSI workflow (jobs/psi, or the PSI workflow run
  first in the same job, see vflflare.flare.psi; with two sites its tasks run the one-exchange ECDH-PSI of
  vflflare.protocol.ecdh_psi) and is stored on each site. Every party derives the
  same canonical order locally by sorting the IDs by a seeded hash (`canonical_order`), so no ID or
  digest goes to the coordinator. A label party on the coordinator, which is not a PSI participant,
  learns which of its own label IDs are in the intersection by a second, one-round OpenMined PSI
  with one site (`LabelMatchClient` / `answer_label_match`), and nothing else.

The PSI items are the site's train and test IDs tagged ``train:<id>`` and ``test:<id>``, so one
PSI run aligns both tables. The intersection is stored as ``psi_intersection.csv`` (columns
``part,id``) in ``<psi root>/<site>/``.
"""

from __future__ import annotations

import csv
import hashlib
import io
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vflflare.data.errors import PartyError
from vflflare.seeding import derive_seed


class AlignmentError(PartyError):
    """The parties' IDs do not give a usable aligned set. Its `public` form (PartyError) is what may
    reach the coordinator: counts, never IDs."""


def hash_ids(ids: list[str], salt: str) -> list[str]:
    return [hashlib.sha256(f"{salt}\x00{i}".encode()).hexdigest()[:32] for i in ids]


@dataclass
class PartyRows:
    train: np.ndarray  # positions of the aligned labeled rows in the party's train table
    val: np.ndarray  # positions of the validation rows in the party's train table
    test: np.ndarray  # positions of the test rows in the party's test table


def unmatched_positions(ids: Sequence[str], common: set[str]) -> np.ndarray:
    """Positions (file order) of a party's rows that are not in the intersection."""
    return np.asarray([i for i, row_id in enumerate(ids) if row_id not in common], dtype=np.int64)


def positions_of(digests: list[str], order: list[str]) -> np.ndarray:
    index = {d: i for i, d in enumerate(digests)}
    return np.asarray([index[d] for d in order], dtype=np.int64)


def aligned_order(
    train_digests: dict[str, list[str]], test_digests: dict[str, list[str]], seed: int
) -> tuple[list[str], list[str]]:
    """The rows every party has (the label party's train digests are its labeled rows): the train
    intersection as sorted digests shuffled by the job seed, so the order reveals nothing about any
    party's file order, and the test intersection sorted."""
    common_train = set.intersection(*(set(d) for d in train_digests.values()))
    common_test = set.intersection(*(set(d) for d in test_digests.values()))
    if not common_train:
        sizes = ", ".join(f"{p}: {len(d)}" for p, d in train_digests.items())
        raise AlignmentError(f"the parties share no training rows (train rows per party: {sizes})")
    if not common_test:
        raise AlignmentError("the parties share no test rows; every party's test file must hold the same IDs")
    order = sorted(common_train)
    np.random.default_rng(seed).shuffle(order)
    return order, sorted(common_test)


def aligned_unlabeled(
    train_digests: dict[str, list[str]], sites: list[str], labeled: Sequence[str], seed: int
) -> list[str]:
    """The training rows every site has but the label party cannot label here: rows it has no label for,
    and labeled rows that labeled_fraction leaves out. Shuffled by the job seed like the labeled rows;
    FedHSSL's cross-party SSL pretrains on them."""
    common = set.intersection(*(set(train_digests[s]) for s in sites)) - set(labeled)
    order = sorted(common)
    np.random.default_rng(derive_seed(seed, "aligned-unlabeled")).shuffle(order)
    return order


def align(
    train_digests: dict[str, list[str]],
    test_digests: dict[str, list[str]],
    labels: dict[str, int],
    num_classes: int,
    val_fraction: float,
    seed: int,
    label_party: str,
    labeled_fraction: float = 1.0,
) -> dict[str, PartyRows]:
    """Every party's positions of the aligned train, validation and test rows, with a label party that
    knows the `labels` of its train digests (the validation split is stratified by them)."""
    order, test = aligned_order(train_digests, test_digests, seed)
    sizes = ", ".join(f"{p}: {len(d)}" for p, d in train_digests.items())
    train, val = holdout(
        order,
        [labels[d] for d in order],
        val_fraction,
        num_classes,
        label_party,
        f"train rows per party: {sizes}",
        labeled_fraction,
    )
    return {
        p: PartyRows(
            positions_of(train_digests[p], train),
            positions_of(train_digests[p], val),
            positions_of(test_digests[p], test),
        )
        for p in train_digests
    }


def labeled_rows(order: list, labeled_fraction: float) -> list:
    """The first ceil(labeled_fraction * n) rows of the canonical order are the labeled ones; the others
    are left to the sites as unlabeled rows (labeled-fraction benchmarks, SS-VFL paper Fig. 3)."""
    return order[: int(np.ceil(labeled_fraction * len(order)))] if labeled_fraction < 1.0 else list(order)


def stratified_val_mask(labels: Sequence[int] | np.ndarray, val_fraction: float) -> np.ndarray:
    """Which labeled rows (in canonical order) are validation rows: ceil(val_fraction * n) of them, each
    class contributing in proportion to its count (largest remainder), its first rows in canonical
    order. Stratified so that a rare class is not missing from validation by chance."""
    labels = np.asarray(labels, dtype=np.int64).reshape(-1)
    mask = np.zeros(len(labels), dtype=bool)
    n_val = int(np.ceil(val_fraction * len(labels))) if val_fraction > 0 else 0
    if n_val == 0:
        return mask
    classes, counts = np.unique(labels, return_counts=True)
    quota = counts * n_val / len(labels)
    take = np.floor(quota).astype(np.int64)
    for i in np.argsort(-(quota - take), kind="stable")[: n_val - int(take.sum())]:
        take[i] += 1
    for c, k in zip(classes, take):
        mask[np.flatnonzero(labels == c)[:k]] = True
    return mask


def split_by_mask(
    labeled: list,
    val_mask: np.ndarray,
    num_classes: int,
    label_party: str,
    context: str,
    n_order: int,
    labeled_fraction: float = 1.0,
) -> tuple[list, list]:
    """(train, val) of the labeled rows; fails when fewer training rows than classes remain."""
    val_mask = np.asarray(val_mask, dtype=bool).reshape(-1)
    if len(val_mask) != len(labeled):
        raise AlignmentError(f"validation mask has {len(val_mask)} entries for {len(labeled)} labeled rows")
    train = [row for row, v in zip(labeled, val_mask) if not v]
    val = [row for row, v in zip(labeled, val_mask) if v]
    if len(train) < num_classes:
        kept = (
            f", labeled_fraction {labeled_fraction} keeps {len(labeled)} of {n_order}" if labeled_fraction < 1.0 else ""
        )
        raise AlignmentError(
            f"only {len(train)} aligned labeled rows for training ({n_order} shared{kept}, {len(val)} held out for "
            f"validation) but the task has {num_classes} classes; party '{label_party}' needs at least one "
            f"labeled row per class ({context})"
        )
    return train, val


def holdout(
    order: list,
    labels: Sequence[int],
    val_fraction: float,
    num_classes: int,
    label_party: str,
    context: str,
    labeled_fraction: float = 1.0,
) -> tuple[list, list]:
    """(train, val) of the canonical `order` whose rows have `labels`: validation comes out of the labeled
    rows, stratified, so that a scarce-label run does not select its model on more labels than it
    trains on."""
    labeled = labeled_rows(order, labeled_fraction)
    mask = stratified_val_mask(list(labels)[: len(labeled)], val_fraction)
    return split_by_mask(labeled, mask, num_classes, label_party, context, len(order), labeled_fraction)


# ---------------------------------------------------------------------------------------------- PSI
PSI_FILE = "psi_intersection.csv"
PSI_ROOT_ENV = "VFLFLARE_PSI_ROOT"
PARTS = ("train", "test")
_ORDER_DOMAIN = "vflflare-order"


def tag_items(train_ids: Iterable[str], test_ids: Iterable[str]) -> list[str]:
    """PSI items of one party: its train IDs and test IDs, tagged, so one PSI run aligns both tables."""
    return [f"train:{i}" for i in train_ids] + [f"test:{i}" for i in test_ids]


def untag_items(items: Iterable[str], source: str = "PSI result") -> tuple[list[str], list[str]]:
    parts: dict[str, list[str]] = {"train": [], "test": []}
    for item in items:
        part, sep, value = str(item).partition(":")
        if not sep or part not in parts:
            problem = "is not tagged 'train:<id>' or 'test:<id>'"
            raise AlignmentError(f"{source}: item {item!r} {problem}", f"{source}: an item {problem}")
        parts[part].append(value)
    return parts["train"], parts["test"]


def psi_root(data_root: str | None, override: str | None = None) -> str | None:
    """Where PSI outputs live: `override` (a component argument or the site's configuration), else
    VFLFLARE_PSI_ROOT, else the data root (next to the site's data), else None."""
    return override or os.environ.get(PSI_ROOT_ENV) or data_root or None


def psi_file(root: str | os.PathLike[str], site: str) -> Path:
    return Path(root) / site / PSI_FILE


def write_psi_file(path: str | os.PathLike[str], items: Sequence[str]) -> Path:
    """Store a PSI intersection (tagged items) as CSV with columns part,id; written atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    train, test = untag_items(items, str(path))
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["part", "id"])
    writer.writerows([("train", i) for i in train] + [("test", i) for i in test])
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(buffer.getvalue(), encoding="utf-8")
    os.replace(tmp, path)
    return path


def read_psi_file(path: str | os.PathLike[str], owner: str) -> list[str]:
    """The tagged items of a PSI output written by `write_psi_file`."""
    path = Path(path)
    if not path.is_file():
        raise AlignmentError(
            f"{owner}: no PSI output at {path}; run the PSI job (jobs/psi) with the same data first, or "
            f"generate the VFL job with `vflflare jobs --psi` so PSI runs as its first phase"
        )
    with open(path, newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle))
    if not rows or rows[0] != ["part", "id"]:
        raise AlignmentError(f"{owner}: {path}: expected the header 'part,id' of a PSI output")
    items = []
    for line, row in enumerate(rows[1:], start=2):
        if len(row) != 2 or row[0] not in PARTS:
            place = f"{owner}: {path} line {line}: expected 'train,<id>' or 'test,<id>'"
            raise AlignmentError(f"{place}, got {row}", f"{place}, got {len(row)} fields")
        items.append(f"{row[0]}:{row[1]}")
    return items


def order_key(seed: int, part: str, row_id: str) -> str:
    """The canonical position of an aligned row is given by this seeded hash of its ID: every party
    that knows the ID computes the same order locally, and the order says nothing about file order."""
    return hashlib.sha256(f"{_ORDER_DOMAIN}:{seed}\x00{part}:{row_id}".encode()).hexdigest()[:32]


def canonical_order(ids: Iterable[str], seed: int, part: str) -> list[str]:
    return sorted(ids, key=lambda i: order_key(seed, part, i))


def intersection_fingerprint(seed: int, train_order: Sequence[str], test_order: Sequence[str]) -> str:
    """One digest of the whole intersection: lets the coordinator check that every site uses the same
    PSI output (a stale file from other data is an error) without learning any ID."""
    digest = hashlib.sha256(f"{_ORDER_DOMAIN}-fingerprint:{seed}".encode())
    for part, order in (("train", train_order), ("test", test_order)):
        for row_id in order:
            digest.update(f"\x00{part}:{row_id}".encode())
    return digest.hexdigest()[:32]


def positions_in(table_ids: Sequence[str], ordered: Sequence[str], owner: str, table: str) -> np.ndarray:
    """Positions of `ordered` IDs in a party's table; an ID the table lacks means the PSI output does
    not belong to this data."""
    index = {row_id: row for row, row_id in enumerate(table_ids)}
    missing = [row_id for row_id in ordered if row_id not in index]
    if missing:
        head = f"{owner}: the PSI output lists {len(missing)} {table} IDs that are not in its {table} table"
        tail = "; it was computed on other data: rerun the PSI job (jobs/psi)"
        raise AlignmentError(f"{head}, e.g. {missing[0]!r}{tail}", head + tail)
    return np.asarray([index[row_id] for row_id in ordered], dtype=np.int64)


@dataclass
class PSIView:
    """One party's view of the intersection, in canonical order."""

    train: list[str]
    test: list[str]

    @classmethod
    def of(cls, items: Sequence[str], seed: int, source: str) -> PSIView:
        train, test = untag_items(items, source)
        return cls(canonical_order(train, seed, "train"), canonical_order(test, seed, "test"))

    def items(self) -> list[str]:
        return tag_items(self.train, self.test)

    def labeled(self, train_keep: np.ndarray | None, test_keep: np.ndarray | None) -> PSIView:
        """Restrict to the rows the label party has labels for (boolean masks over the canonical order;
        None keeps every row)."""

        def keep(order: list[str], mask: np.ndarray | None) -> list[str]:
            if mask is None:
                return list(order)
            mask = np.asarray(mask, dtype=bool).reshape(-1)
            if len(mask) != len(order):
                raise AlignmentError(f"label mask has {len(mask)} entries for {len(order)} aligned rows")
            return [row_id for row_id, k in zip(order, mask) if k]

        return PSIView(keep(self.train, train_keep), keep(self.test, test_keep))

    def unmatched(self, train_ids: Sequence[str], test_ids: Sequence[str]) -> dict[str, np.ndarray]:
        """Positions of a party's train and test rows that are not in the intersection."""
        return {
            "train": unmatched_positions(train_ids, set(self.train)),
            "test": unmatched_positions(test_ids, set(self.test)),
        }

    def masks_for(self, train_ids: Iterable[str], test_ids: Iterable[str]) -> tuple[np.ndarray, np.ndarray]:
        """Which canonical rows a label party with these label IDs has labels for."""
        train_ids, test_ids = set(train_ids), set(test_ids)
        return (
            np.asarray([i in train_ids for i in self.train], dtype=bool),
            np.asarray([i in test_ids for i in self.test], dtype=bool),
        )

    def masks_from_keys(
        self, seed: int, train_keys: Sequence[str] | None, test_keys: Sequence[str] | None
    ) -> tuple[np.ndarray | None, np.ndarray | None]:
        """Masks from the order keys of the rows a coordinator-hosted label party has labels for."""

        def mask(part: str, order: list[str], keys: Sequence[str] | None) -> np.ndarray | None:
            if keys is None:
                return None
            wanted = set(keys)
            return np.asarray([order_key(seed, part, i) in wanted for i in order], dtype=bool)

        return mask("train", self.train, train_keys), mask("test", self.test, test_keys)


# A coordinator-hosted label party is not a participant of NVFlare's DH-PSI (which runs among sites).
# It learns which of its own label IDs are in the sites' intersection by one more round of the same
# OpenMined DH-PSI, with itself as PSI client and one site as PSI server. The site learns only the
# number of label IDs; the coordinator learns only which of its label IDs are in the intersection
# (and the intersection's size). RAW setup: exact, no Bloom-filter false positives. The request and the
# response are OpenMined's messages byte for byte, computed in chunks on the party's cores (ecdh_psi's
# CommutativeCipher with the party's own key); the setup and the final match run in one call each.


def _psi():
    import private_set_intersection.python as psi  # noqa: PLC0415 - optional native dependency

    return psi


class LabelMatchClient:
    """The label party's side: a request over its tagged label IDs, then the matched items."""

    def __init__(self, items: Sequence[str]) -> None:
        psi = _psi()
        self.items = list(items)
        self._client = psi.client.CreateWithNewKey(True)

    def request(self) -> dict:
        from vflflare.protocol.ecdh_psi import CommutativeCipher, split_points  # noqa: PLC0415 - needs OpenMined

        points = CommutativeCipher(key=self._client.GetPrivateKeyBytes()).encrypt(self.items)  # = CreateRequest
        request = _psi().Request(encrypted_elements=split_points(points), reveal_intersection=True)
        return {"request": request.SerializeToString(), "num_items": len(self.items)}

    def matches(self, answer: dict) -> list[str]:
        psi = _psi()
        setup, response = psi.ServerSetup(), psi.Response()
        setup.ParseFromString(bytes(answer["setup"]))
        response.ParseFromString(bytes(answer["response"]))
        return [self.items[i] for i in sorted(self._client.GetIntersection(setup, response))]


def answer_label_match(intersection: Sequence[str], request: dict) -> dict:
    """A site's side: answer the label party's request against the site's PSI intersection."""
    psi = _psi()
    if not intersection:
        raise AlignmentError("cannot match labels against an empty PSI intersection")
    server = psi.server.CreateWithNewKey(True)
    setup = server.CreateSetupMessage(1e-9, int(request["num_items"]), list(intersection), psi.DataStructure.RAW)
    message = psi.Request()
    message.ParseFromString(bytes(request["request"]))
    if not message.reveal_intersection:
        raise AlignmentError("the label match request must ask for the intersection's elements")
    from vflflare.protocol.ecdh_psi import CommutativeCipher, split_points  # noqa: PLC0415 - needs OpenMined

    cipher = CommutativeCipher(key=server.GetPrivateKeyBytes())  # = ProcessRequest, in chunks on every core
    response = psi.Response(encrypted_elements=split_points(cipher.reencrypt(b"".join(message.encrypted_elements))))
    return {"setup": setup.SerializeToString(), "response": response.SerializeToString()}
