"""Alignment "psi" without NVFlare: the PSI output format, the canonical order every party derives
locally, the label party's one-round match against the intersection, label restriction, and the
errors for stale, differing, missing and empty PSI outputs. The PSI outputs here are written by
hand from the split's true overlap; tests/test_psi_simulator.py makes them with NVFlare's DH-PSI."""

from __future__ import annotations

import csv
import filecmp
from functools import partial
from pathlib import Path

import numpy as np
import pytest

from vflflare.data.loading import DataRequest, load_label_tables
from vflflare.data.sources import load_source
from vflflare.data.split import split_table, write_split
from vflflare.jobs import PSI_JOB, job_files, write_psi_job
from vflflare.protocol.alignment import (
    PSI_FILE,
    AlignmentError,
    LabelMatchClient,
    answer_label_match,
    canonical_order,
    read_psi_file,
    tag_items,
    untag_items,
    write_psi_file,
)
from vflflare.protocol.inprocess import InProcessTransport, run_inprocess
from vflflare.protocol.setup import SetupInputs
from vflflare.protocol.site_runtime import SiteRuntime
from vflflare.registry import get_algorithm, make_config
from vflflare.tracking import LogTracker

SITES = ["site-1", "site-2"]
JOBS = Path(__file__).resolve().parents[1] / "jobs"


def read_ids(path: Path, column: str = "id") -> list[str]:
    with open(path, newline="") as handle:
        return [row[column] for row in csv.DictReader(handle)]


def true_intersection(root: Path) -> list[str]:
    """What PSI must find: the split's overlap (overlap_ids.csv) and the shared test rows."""
    return tag_items(read_ids(root / "overlap_ids.csv"), read_ids(root / "site-1" / "test.csv"))


def write_true_psi(root: Path, sites=SITES) -> None:
    for site in sites:
        write_psi_file(root / site / PSI_FILE, true_intersection(root))


def make_root(tmp_path: Path, label_owner: str = "server", name: str = "root") -> Path:
    frame, labels, ids, categorical, _ = load_source("breast_cancer", None)
    result = split_table(frame, labels, ids, SITES, overlap=150, seed=0, categorical=categorical)
    root = tmp_path / name
    write_split(result, root, label_owner=label_owner)
    return root


def setup_only(root: Path | None, cfg):
    """Run the setup phase in-process (root None: the embedded default); returns the site runtimes,
    the label party, the aligned row counts and the transport."""
    data_root = str(root) if root else None
    runtimes = {s: SiteRuntime(s, data_root) for s in SITES}
    net = InProcessTransport(runtimes)
    plugin = get_algorithm(cfg.algorithm)
    loader = partial(load_label_tables, "server", DataRequest(SITES, data_root, cfg.seed))
    label, counts, _ = plugin.setup.coordinator(SetupInputs(net, cfg, plugin.Label, loader, LogTracker("test")))
    return runtimes, label, counts, net


def aligned_ids(runtime: SiteRuntime, part: str) -> list[str]:
    view = runtime.party.view
    ids = view.test_ids if part == "test" else view.train_ids
    return [ids[int(i)] for i in runtime.party.rows_of(part)]


# ------------------------------------------------------------------------------- format and order
def test_psi_file_round_trip_and_tags(tmp_path):
    items = tag_items(["a", "b,with comma", "c:colon"], ["t1"])
    path = write_psi_file(tmp_path / "site-1" / PSI_FILE, items)
    assert read_psi_file(path, "site 'site-1'") == items
    assert untag_items(items) == (["a", "b,with comma", "c:colon"], ["t1"])
    with pytest.raises(AlignmentError, match="not tagged"):
        untag_items(["a"])


def test_missing_psi_output_says_what_to_run(tmp_path):
    with pytest.raises(AlignmentError, match=r"no PSI output at .*jobs/psi.*--psi"):
        read_psi_file(tmp_path / "site-1" / PSI_FILE, "site 'site-1'")


def test_canonical_order_is_local_seeded_and_ignores_file_order():
    ids = [f"id-{i}" for i in range(50)]
    order = canonical_order(ids, seed=0, part="train")
    assert canonical_order(list(reversed(ids)), seed=0, part="train") == order
    assert sorted(order) == sorted(ids) and order != sorted(ids)
    assert canonical_order(ids, seed=1, part="train") != order


def test_label_match_finds_exactly_the_label_ids_in_the_intersection():
    intersection = tag_items([f"s{i}" for i in range(100)], [f"t{i}" for i in range(20)])
    labels = tag_items([f"s{i}" for i in range(50, 180)], [f"t{i}" for i in range(10)] + ["t-other"])
    client = LabelMatchClient(labels)
    matched = client.matches(answer_label_match(intersection, client.request()))
    assert sorted(matched) == sorted(set(labels) & set(intersection))


# ------------------------------------------------------------------------- jobs/psi and the flag
def test_committed_psi_job_matches_the_generator(tmp_path):
    write_psi_job(tmp_path)
    generated = sorted(p.relative_to(tmp_path / PSI_JOB) for p in (tmp_path / PSI_JOB).rglob("*") if p.is_file())
    committed = sorted(p.relative_to(JOBS / PSI_JOB) for p in (JOBS / PSI_JOB).rglob("*") if p.is_file())
    assert generated == committed
    for rel in generated:
        assert filecmp.cmp(tmp_path / PSI_JOB / rel, JOBS / PSI_JOB / rel, shallow=False), rel


def test_psi_flag_prepends_nvflare_dh_psi_and_sets_alignment():
    files = job_files("x", {"algorithm": "oneshot", "seed": 3}, psi=True)
    server, client = files["app/config/config_fed_server.json"], files["app/config/config_fed_client.json"]
    assert [w["id"] for w in server["workflows"]] == ["psi_controller", "vfl_controller"]
    assert server["workflows"][1]["args"]["config"]["alignment"] == "psi"
    assert client["executors"][0]["tasks"] == ["PSI"]
    paths = {c["id"]: c["path"] for c in client["components"]}
    assert paths["dh_psi"] == "vflflare.flare.psi.ExactDhPSITaskHandler"
    assert next(c for c in client["components"] if c["id"] == "local_psi")["args"]["seed"] == 3
    with pytest.raises(ValueError, match="alignment must be 'psi'"):
        job_files("x", {"algorithm": "oneshot", "alignment": "hash"}, psi=True)


# ------------------------------------------------------------------------------ alignment "psi"
def hashed_and_psi_runs(tmp_path, **cfg):
    """The same in-process job on one split, aligned by salted hashes and by the true PSI output."""
    root = make_root(tmp_path, cfg["label_owner"])
    write_true_psi(root)
    hashed = run_inprocess(make_config(**cfg), SITES, str(root))
    return hashed, run_inprocess(make_config(alignment="psi", **cfg), SITES, str(root))


@pytest.mark.parametrize("label_owner", ["server", "site-1"])
def test_psi_alignment_gives_the_hash_alignment_rows(tmp_path, label_owner):
    hashed, psi = hashed_and_psi_runs(
        tmp_path, algorithm="oneshot", label_owner=label_owner, ssl_epochs=1, classifier_epochs=5
    )
    assert psi["rows"] == hashed["rows"] == {"aligned_train": 120, "val": 30, "test": 114}
    # the setup phase sends no payload either way; PSI sends no IDs or digests, so far fewer bytes
    assert psi["communication"]["per_phase"]["setup"]["uploads"] == 0
    assert (
        psi["communication"]["per_phase"]["setup"]["wire_bytes"]
        < hashed["communication"]["per_phase"]["setup"]["wire_bytes"]
    )
    assert psi["metrics"]["test_auc"] > 0.9


def test_every_party_uses_the_same_canonical_rows(tmp_path):
    root = make_root(tmp_path)
    write_true_psi(root)
    runtimes, label, counts, _ = setup_only(root, make_config(alignment="psi"))
    for part in ("aligned", "val", "test"):
        assert aligned_ids(runtimes["site-1"], part) == aligned_ids(runtimes["site-2"], part)
    overlap = set(read_ids(root / "overlap_ids.csv"))
    assert set(aligned_ids(runtimes["site-1"], "aligned")) | set(aligned_ids(runtimes["site-1"], "val")) == overlap
    # the label party's labels follow the same order
    truth = dict(
        zip(read_ids(root / "server" / "train_labels.csv"), read_ids(root / "server" / "train_labels.csv", "label"))
    )
    assert label.part_labels("aligned").tolist() == [int(truth[i]) for i in aligned_ids(runtimes["site-1"], "aligned")]


def _edit_labels(path: Path, drop: set[str], extra: list[str]) -> None:
    """Drop the labels of some IDs and add labels for IDs outside the intersection."""
    with open(path, newline="") as handle:
        rows = list(csv.reader(handle))
    kept = [rows[0]] + [r for r in rows[1:] if r[0] not in drop] + [[i, "0"] + [""] * (len(rows[0]) - 2) for i in extra]
    with open(path, "w", newline="") as handle:
        csv.writer(handle, lineterminator="\n").writerows(kept)


def test_server_label_party_is_restricted_to_the_intersection(tmp_path):
    root = make_root(tmp_path)
    write_true_psi(root)
    overlap = read_ids(root / "overlap_ids.csv")
    unaligned = [i for i in read_ids(root / "site-1" / "train.csv") if i not in set(overlap)][:40]
    dropped = set(overlap[:10])
    _edit_labels(root / "server" / "train_labels.csv", dropped, unaligned + ["never-seen-1", "never-seen-2"])
    runtimes, label, counts, net = setup_only(root, make_config(alignment="psi"))
    assert counts["aligned_train"] + counts["val"] == 140 and counts["test"] == 114
    used = set(aligned_ids(runtimes["site-2"], "aligned")) | set(aligned_ids(runtimes["site-2"], "val"))
    assert used == set(overlap) - dropped
    assert len(label.part_labels("aligned")) == counts["aligned_train"]
    # the hash alignment agrees on the counts
    _, _, hashed, _ = setup_only(root, make_config(alignment="hash"))
    assert hashed == counts


def test_site_label_party_is_restricted_locally_and_sends_only_masks(tmp_path):
    root = make_root(tmp_path, label_owner="site-1")
    write_true_psi(root)
    overlap = read_ids(root / "overlap_ids.csv")
    dropped = set(overlap[-7:])
    _edit_labels(root / "site-1" / "train_labels.csv", dropped, ["never-seen"])
    cfg = make_config(alignment="psi", label_owner="site-1")
    runtimes, label, counts, net = setup_only(root, cfg)
    assert counts["aligned_train"] + counts["val"] == 143
    used = set(aligned_ids(runtimes["site-2"], "aligned")) | set(aligned_ids(runtimes["site-2"], "val"))
    assert used == set(overlap) - dropped
    assert len(runtimes["site-1"].label.part_labels("aligned")) == counts["aligned_train"]
    _, _, hashed, _ = setup_only(root, make_config(alignment="hash", label_owner="site-1"))
    assert hashed == counts


def test_psi_outputs_of_other_data_or_other_runs_are_errors(tmp_path):
    root = make_root(tmp_path)
    items = true_intersection(root)
    write_psi_file(root / "site-1" / PSI_FILE, items)
    write_psi_file(root / "site-2" / PSI_FILE, items[1:])
    with pytest.raises(AlignmentError, match="PSI outputs differ.*site-1: 150 train.*site-2: 149 train"):
        setup_only(root, make_config(alignment="psi"))
    write_psi_file(root / "site-2" / PSI_FILE, items + ["train:not-in-the-table"])
    with pytest.raises(AlignmentError, match="site 'site-2'.*not in its train table.*rerun the PSI job"):
        setup_only(root, make_config(alignment="psi"))


def test_empty_and_one_element_psi_outputs(tmp_path):
    root = make_root(tmp_path)
    write_true_psi(root)
    for site in SITES:
        write_psi_file(root / site / PSI_FILE, [])
    with pytest.raises(AlignmentError, match="PSI intersection is empty: the sites share no IDs"):
        setup_only(root, make_config(alignment="psi"))
    one = read_ids(root / "overlap_ids.csv")[0]
    for site in SITES:
        write_psi_file(root / site / PSI_FILE, [f"train:{one}"])
    with pytest.raises(AlignmentError, match=r"share no test rows \(test rows per party: site-1 114, site-2 114"):
        setup_only(root, make_config(alignment="psi"))
    for site in SITES:
        write_psi_file(root / site / PSI_FILE, tag_items([one], read_ids(root / "site-1" / "test.csv")))
    with pytest.raises(AlignmentError, match=r"only 0 aligned labeled rows for training \(1 shared, 1 held out"):
        setup_only(root, make_config(alignment="psi"))


def test_unknown_alignment_is_an_error(tmp_path):
    root = make_root(tmp_path)
    with pytest.raises(
        ValueError, match="algorithm 'oneshot': alignment must be one of \\['hash', 'psi'\\], got 'psy'"
    ):
        setup_only(root, make_config(alignment="psy"))


def test_masks_over_canonical_order_reveal_no_ids():
    """What a label site sends the coordinator: booleans in canonical order, nothing else."""
    from vflflare.protocol.alignment import PSIView

    view = PSIView.of(tag_items(["a", "b", "c"], ["t"]), seed=0, source="x")
    train_mask, test_mask = view.masks_for(["a", "c", "zzz"], ["t"])
    assert train_mask.dtype == np.bool_ and train_mask.sum() == 2 and test_mask.tolist() == [True]
    assert view.labeled(train_mask, None).train == [i for i in view.train if i in {"a", "c"}]


@pytest.mark.parametrize("alignment", ["hash", "psi"])
def test_sites_learn_the_same_aligned_rows_without_a_label(tmp_path, alignment):
    """FedHSSL pretrains on aligned rows nobody labeled: both alignments tell every site the same ones, in one
    order, and none of them is labeled or validation."""
    root = make_root(tmp_path)
    write_true_psi(root)
    runtimes, label, counts, _ = setup_only(
        root, make_config(algorithm="fedhssl", alignment=alignment, labeled_fraction=0.5)
    )
    first, second = (aligned_ids(runtimes[s], "aligned_unlabeled") for s in SITES)
    assert first == second and counts["aligned_unlabeled"] == len(first) == 150 - 75
    labeled = set(aligned_ids(runtimes["site-1"], "aligned")) | set(aligned_ids(runtimes["site-1"], "val"))
    assert not labeled & set(first) and labeled | set(first) == set(read_ids(root / "overlap_ids.csv"))


def test_the_dh_psi_server_is_exact_where_a_bloom_filter_is_not():
    """NVFlare's DH-PSI server sends a Bloom filter, which got about 1 % of intersections wrong at fpr 1e-11
    (3 of 300 trials of 417 x 416 IDs, one shared); ExactPSIServer's RAW setup gets none of 60 wrong."""
    import random

    from nvflare.app_opt.psi.dh_psi.dh_psi_client import PSIClient
    from nvflare.app_opt.psi.dh_psi.dh_psi_server import PSIServer

    from vflflare.flare.psi import ExactDhPSITaskHandler, ExactPSIServer

    rng = random.Random(0)
    for _ in range(60):
        ids = {side: [f"train:{side}{rng.random()}" for _ in range(416)] + ["train:shared"] for side in "cs"}
        server, client = ExactPSIServer(ids["s"][1:], 1e-11), PSIClient(ids["c"])
        client.receive_setup(server.setup(len(ids["c"])))
        assert client.get_intersection(server.process_request(client.get_request(ids["c"]))) == ["train:shared"]
    handler = ExactDhPSITaskHandler(local_psi_id="local_psi")
    handler.psi_server = PSIServer(["a"], 1e-11)  # what NVFlare's handler does at each step
    assert isinstance(handler.psi_server, ExactPSIServer) and handler.psi_server.items == ["a"]
