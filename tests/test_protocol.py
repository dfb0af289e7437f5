"""The pieces every flow relies on: wire codec, payload accounting, ledger, alignment."""

import numpy as np
import pytest

from vflflare import wire
from vflflare.protocol.alignment import AlignmentError, align, hash_ids, stratified_val_mask
from vflflare.protocol.ledger import CommLedger
from vflflare.protocol.payload import payload_bytes


def test_wire_round_trip_keeps_dtypes_shapes_and_structure():
    payload = {
        "h": np.arange(6, dtype=np.float32).reshape(3, 2),
        "rows": np.array([3, 1]),
        "n": 2,
        "nested": {"site-1": np.ones((2, 2), np.float16)},
        "names": ["a", "b"],
    }
    back = wire.loads(wire.dumps(payload))
    assert back["h"].dtype == np.float32 and back["h"].shape == (3, 2)
    np.testing.assert_array_equal(back["h"], payload["h"])
    assert back["rows"].dtype == np.int64 and back["n"] == 2 and back["names"] == ["a", "b"]
    assert back["nested"]["site-1"].dtype == np.float16


def test_wire_refuses_objects_it_cannot_load_safely():
    with pytest.raises(TypeError, match="cannot put"):
        wire.dumps({"x": object()})


def test_payload_bytes_count_float_tensors_only():
    payload = {"h": np.zeros((10, 32), np.float32), "rows": np.arange(10), "k": 3}
    assert payload_bytes(payload) == 10 * 32 * 4


def test_ledger_counts_payload_messages_and_control_separately():
    ledger = CommLedger()
    with ledger.phase("reps"):
        ledger.record("site-1", "up", {"h": np.zeros(8, np.float32)}, 100)
        ledger.record("site-1", "down", {"rows": np.arange(3)}, 50)  # control only
    summary = ledger.summary()
    assert summary["per_site"]["site-1"] == {"uploads": 1, "downloads": 0, "payload_bytes": 32, "wire_bytes": 150}
    assert summary["per_phase"]["reps"]["uploads"] == 1
    assert summary["per_phase_site"]["reps"]["site-1"]["uploads"] == 1
    assert [p["name"] for p in ledger.phases] == ["reps"]


def _digests(ids):
    return hash_ids([str(i) for i in ids], "salt")


def test_alignment_gives_each_party_its_own_positions_in_one_order():
    a, b, lab = [5, 1, 2, 3, 9], [9, 3, 2, 7, 1], [1, 2, 3, 9, 11]
    rows = align(
        {"a": _digests(a), "b": _digests(b), "label": _digests(lab)},
        {"a": _digests([20, 21]), "b": _digests([21, 20]), "label": _digests([20, 21])},
        labels=dict(zip(_digests(lab), [0, 1, 0, 1, 0])),
        num_classes=2,
        val_fraction=0.25,
        seed=0,
        label_party="server",
    )
    ids = {
        p: [x[i] for i in np.concatenate([rows[p].val, rows[p].train])] for p, x in (("a", a), ("b", b), ("label", lab))
    }
    assert ids["a"] == ids["b"] == ids["label"] and sorted(ids["a"]) == [1, 2, 3, 9]
    assert len(rows["a"].val) == 1 and len(rows["a"].train) == 3
    assert [[20, 21][i] for i in rows["a"].test] == [[21, 20][i] for i in rows["b"].test]


def test_empty_overlap_is_a_clear_error():
    with pytest.raises(AlignmentError, match="share no training rows"):
        align(
            {"a": _digests([1, 2]), "b": _digests([3, 4])},
            {"a": _digests([9]), "b": _digests([9])},
            labels={},
            num_classes=2,
            val_fraction=0.2,
            seed=0,
            label_party="server",
        )


def test_overlap_smaller_than_number_of_classes_is_a_clear_error():
    with pytest.raises(AlignmentError, match="only 1 aligned labeled rows for training.*3 classes"):
        align(
            {"a": _digests([1, 2]), "b": _digests([1, 2])},
            {"a": _digests([9]), "b": _digests([9])},
            labels=dict(zip(_digests([1, 2]), [0, 1])),
            num_classes=3,
            val_fraction=0.5,
            seed=0,
            label_party="server",
        )


def test_validation_rows_are_stratified_by_class():
    """A class with 10 % of the labeled rows gets 10 % of the validation rows, whatever the order; the
    unstratified first-n split of the old code gave a rare class none here."""
    labels = np.array([0] * 90 + [1] * 10)
    mask = stratified_val_mask(labels, 0.2)
    assert mask.sum() == 20 and labels[mask].tolist().count(1) == 2
    rare_last = np.array([0] * 95 + [1] * 5)
    assert labels_of(rare_last, stratified_val_mask(rare_last, 0.2)) == {0: 19, 1: 1}
    # largest remainder: 7 validation rows of 3 + 3 + 1 labels keep every class represented in proportion
    assert labels_of(
        np.array([0, 0, 0, 1, 1, 1, 2] * 3), stratified_val_mask(np.array([0, 0, 0, 1, 1, 1, 2] * 3), 1 / 3)
    ) == {0: 3, 1: 3, 2: 1}
    assert not stratified_val_mask(labels, 0.0).any()


def labels_of(labels: np.ndarray, mask: np.ndarray) -> dict[int, int]:
    values, counts = np.unique(labels[mask], return_counts=True)
    return dict(zip(values.tolist(), counts.tolist()))
