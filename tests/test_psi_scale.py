"""The two-site ECDH-PSI that the PSI job runs (protocol/ecdh_psi.py, flare/psi.py): exact (each site gets
the plain set intersection, in its own item order, the same as NVFlare's DH-PSI passes gave), the same
points on one thread or several, only EC points in a private random order on the wire, and the
task handler's stages with NVFlare's duplicate check. tests/test_psi_simulator.py runs it in NVFlare."""

from __future__ import annotations

import random

import pytest

from vflflare.bench.suites.psi_scale import expected, run_ecdh, run_nvflare_dh, synthetic_ids
from vflflare.flare.psi import (
    ECDH_ANSWER,
    ECDH_FINISH,
    ECDH_OFFER,
    ECDH_POINTS,
    ExactDhPSITaskHandler,
    VFLPSIController,
)
from vflflare.protocol.ecdh_psi import POINT_BYTES, CommutativeCipher, ECDHParty, split_points, two_party_psi


def random_sets(rng: random.Random, n_a: int, n_b: int, shared: int) -> tuple[list[str], list[str]]:
    pool = rng.sample(range(10**9), n_a + n_b - shared)
    common = pool[:shared]
    a = [f"train:{v}" for v in common + pool[shared:n_a]]
    b = [f"test:{v}" if i % 7 == 0 else f"train:{v}" for i, v in enumerate(pool[n_a:])]
    b += [f"train:{v}" for v in common]
    rng.shuffle(a)
    rng.shuffle(b)
    return a, b


@pytest.mark.parametrize(
    ("n_a", "n_b", "shared"), [(300, 200, 57), (50, 400, 50), (120, 120, 0), (1, 90, 1), (64, 64, 64)]
)
def test_each_site_gets_the_plain_intersection_in_its_own_order(n_a, n_b, shared):
    a, b = random_sets(random.Random(n_a * 1000 + shared), n_a, n_b, shared)
    found_a, found_b = two_party_psi(a, b, workers=2)
    assert found_a == expected(a, b) and found_b == expected(b, a)
    assert len(found_a) == shared and set(found_a) == set(found_b)


def test_the_same_result_as_nvflares_dh_psi_passes():
    a, b = synthetic_ids(700, 0.3, seed=4)
    _, old_a, old_b = run_nvflare_dh(a, b)
    _, new_a, new_b = run_ecdh(a, b, workers=2)
    assert (new_a, new_b) == (old_a, old_b) == (expected(a, b), expected(b, a))


def test_threads_compute_the_same_points_as_one_thread():
    items = [f"train:{i}" for i in range(999)]
    cipher = CommutativeCipher(workers=1)
    one = cipher.encrypt(items)
    cipher.workers = 4  # 4 chunks on 4 threads, the same key
    assert cipher.encrypt(items) == one and len(one) == POINT_BYTES * len(items)
    doubled = CommutativeCipher(workers=1)
    single = doubled.reencrypt(one)
    doubled.workers = 3
    assert doubled.reencrypt(one) == single
    a, b = random_sets(random.Random(1), 500, 400, 123)
    assert two_party_psi(a, b, workers=1) == two_party_psi(a, b, workers=3)


def test_messages_are_points_in_a_private_random_order():
    a, b = random_sets(random.Random(2), 400, 400, 200)
    runs = []
    for _ in range(2):
        pa, pb = ECDHParty(a), ECDHParty(b)
        offer_a, offer_b = pa.offer(), pb.offer()
        to_a, to_b = pb.answer(offer_a), pa.answer(offer_b)
        for message in (offer_a, offer_b, to_a, to_b):
            assert len(message) % POINT_BYTES == 0
            assert not any(item.encode() in message for item in a[:50] + b[:50])
        # what the coordinator relaying all four could compute: which positions of the messages match
        matched = {i for i, p in enumerate(split_points(to_a)) if p in set(split_points(to_b))}
        assert len(matched) == 200
        runs.append((offer_a, matched))
        assert pa.intersection(to_a) == expected(a, b)
    assert runs[0][0] != runs[1][0]  # a fresh key every run
    assert runs[0][1] != runs[1][1]  # and a fresh order: the matching positions say nothing about files


def test_bad_items_and_messages_are_errors():
    with pytest.raises(ValueError, match="at least one item"):
        ECDHParty([])
    with pytest.raises(ValueError, match="must be unique: 1 duplicates"):
        ECDHParty(["train:1", "train:2", "train:1"])
    party = ECDHParty(["train:1", "train:2"])
    with pytest.raises(ValueError, match="not a whole number"):
        party.answer(b"\x02" * 40)
    with pytest.raises(RuntimeError, match="before answer"):
        party.intersection(b"")
    party.answer(ECDHParty(["train:9"]).offer())
    with pytest.raises(ValueError, match="1 doubly encrypted points came back for 2 items"):
        party.intersection(party.cipher.encrypt(["x"]))
    with pytest.raises(ValueError, match="PSI protocol 'bloom'"):
        VFLPSIController(protocol="bloom")


class _Items:
    """A site's PSI component, as the task handler calls it."""

    def __init__(self, items: list[str]) -> None:
        self.items, self.saved = items, None

    def load_items(self) -> list[str]:
        return self.items

    def save(self, intersection: list[str]) -> None:
        self.saved = intersection


class _Ctx:
    def __init__(self, name: str) -> None:
        self.name = name

    def get_identity_name(self) -> str:
        return self.name


def _stage(handler: ExactDhPSITaskHandler, stage: str, points: bytes | None = None):
    from nvflare.apis.shareable import Shareable
    from nvflare.apis.signal import Signal
    from nvflare.app_common.app_constant import PSIConst

    task = Shareable()
    task[PSIConst.TASK_KEY] = stage
    if points is not None:
        task[ECDH_POINTS] = points
    return handler.execute_task(PSIConst.TASK, task, _Ctx("site-x"), Signal())


def test_the_task_handler_runs_the_three_stages_and_saves_the_intersection():
    from nvflare.app_common.app_constant import PSIConst

    a, b = random_sets(random.Random(3), 250, 300, 40)
    sites = {}
    for name, items in (("a", a), ("b", b)):
        handler = ExactDhPSITaskHandler(local_psi_id="local_psi", workers=2)
        handler.local_psi_handler = _Items(items)
        sites[name] = handler
    offers = {s: _stage(h, ECDH_OFFER)[ECDH_POINTS] for s, h in sites.items()}
    answers = {s: _stage(h, ECDH_ANSWER, offers["b" if s == "a" else "a"])[ECDH_POINTS] for s, h in sites.items()}
    sizes = {
        s: _stage(h, ECDH_FINISH, answers["b" if s == "a" else "a"])[PSIConst.ITEMS_SIZE] for s, h in sites.items()
    }
    assert sizes == {"a": 40, "b": 40}
    assert sites["a"].local_psi_handler.saved == expected(a, b) == sites["a"].intersects
    assert sites["b"].local_psi_handler.saved == expected(b, a)
    # NVFlare's own check of a site's items still runs first (as in its forward/backward passes)
    handler = ExactDhPSITaskHandler(local_psi_id="local_psi")
    handler.local_psi_handler = _Items(["train:1", "train:1"])
    with pytest.raises(ValueError, match="the items must be unique"):
        _stage(handler, ECDH_OFFER)
    with pytest.raises(Exception, match="before ecdh_offer"):
        _stage(ExactDhPSITaskHandler(local_psi_id="local_psi"), ECDH_ANSWER, b"")


@pytest.mark.parametrize(
    ("protocol", "sites", "ran"), [("ecdh", 2, "ecdh"), ("ecdh", 3, "nvflare"), ("nvflare", 2, "nvflare")]
)
def test_the_workflow_runs_ecdh_for_two_sites_and_nvflares_passes_otherwise(monkeypatch, protocol, sites, ran):
    from nvflare.apis.signal import Signal
    from nvflare.app_common.psi.dh_psi.dh_psi_workflow import DhPSIWorkFlow, SiteSize

    from vflflare.flare.psi import CheckedDhPSIWorkflow

    called = []
    workflow = CheckedDhPSIWorkflow(protocol=protocol)
    workflow.ordered_sites = [SiteSize(f"site-{i}", 10) for i in range(1, sites + 1)]

    def passes(self, abort_signal):
        called.append("nvflare")
        self.backward_processed.update({s.name: 4 for s in self.ordered_sites})

    def one_exchange(self, abort_signal):
        called.append("ecdh")
        self.backward_processed.update({s.name: 4 for s in self.ordered_sites})

    monkeypatch.setattr(DhPSIWorkFlow, "run", passes)
    monkeypatch.setattr(CheckedDhPSIWorkflow, "run_two_sites", one_exchange)
    workflow.run(Signal())
    assert called == [ran] and workflow.ran == ran and workflow.final_size == 4


def test_the_label_match_sends_openmineds_messages_byte_for_byte():
    """LabelMatchClient / answer_label_match compute OpenMined's request and response on threads: the same
    bytes as the library's single calls with the same keys, and the same matches."""
    import private_set_intersection.python as psi

    from vflflare.protocol.alignment import LabelMatchClient, answer_label_match

    labels = [f"train:{i}" for i in range(0, 3000, 3)]
    intersection = [f"train:{i}" for i in range(0, 3000, 2)]
    client = LabelMatchClient(labels)
    sent = client.request()
    assert sent["request"] == client._client.CreateRequest(labels).SerializeToString()
    answer = answer_label_match(intersection, sent)
    assert client.matches(answer) == [x for x in labels if x in set(intersection)]
    key = CommutativeCipher(workers=1)._key
    request = psi.Request()
    request.ParseFromString(sent["request"])
    threaded = CommutativeCipher(workers=3, key=key).reencrypt(b"".join(request.encrypted_elements))
    assert threaded == b"".join(psi.server.CreateFromKey(key, True).ProcessRequest(request).encrypted_elements)
