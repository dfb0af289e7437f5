"""HE keys by role (issue 37; vflflare.privacy.he_keys, docs/he.md "Who holds which key").

With he: true and the labels on a site, every site makes its own CKKS key pair for the job and a sender
encrypts for the receiver: the coordinator decrypts nothing, and no site decrypts what another site sent
to a third party. The in-process job below runs the real site code (VFLExecutor behind the job's HE
filters) and the real coordinator transport checks (FlareTransport), with the sites in this process
instead of behind NVFlare, so the test holds every party's keys and can try each on each ciphertext.
The simulator test checks the same key split in a real NVFlare job."""

from pathlib import Path

import numpy as np
import pytest
import tenseal as ts
from flare_fakes import FakeEngine
from nvflare.apis.fl_constant import ReservedKey
from nvflare.apis.fl_context import FLContext
from nvflare.apis.signal import Signal

from vflflare import wire
from vflflare.config import SERVER
from vflflare.data.loading import DataRequest, load_label_tables
from vflflare.flare import he_filters
from vflflare.flare.executor import VFLExecutor
from vflflare.flare.he_filters import DecryptTaskData, EncryptTaskResult
from vflflare.flare.messages import from_shareable, to_shareable
from vflflare.flare.transport import FlareTransport
from vflflare.privacy import ckks
from vflflare.privacy.he_keys import MULTI_KEY, PartyKeys, address, published_for
from vflflare.protocol.inprocess import run_inprocess
from vflflare.protocol.payload import is_encrypted
from vflflare.protocol.recording import RecordingTransport
from vflflare.protocol.runner import run_algorithm
from vflflare.protocol.site_runtime import SiteRuntime
from vflflare.protocol.transport import TransportError
from vflflare.registry import make_config
from vflflare.tracking import LogTracker

SITES = ["site-1", "site-2", "site-3"]
LABEL = "site-1"
JOB = "job-he-keys"


def _fl_ctx(startup, site, task=None, job=JOB):
    fl_ctx = FLContext()
    fl_ctx.set_prop(ReservedKey.ENGINE, FakeEngine(startup), private=True, sticky=False)
    fl_ctx.set_prop(ReservedKey.IDENTITY_NAME, site, private=False, sticky=False)
    fl_ctx.set_prop(ReservedKey.RUN_NUM, job, private=False, sticky=False)
    if task:
        fl_ctx.set_prop(ReservedKey.TASK_NAME, task, private=True, sticky=False)
    return fl_ctx


class LocalFlare(FlareTransport):
    """FlareTransport's checks (HE enforcement, key exchange, addressing) with the sites in this process:
    each a real VFLExecutor, its task data and results passing the job's real HE filters."""

    def __init__(self, startup, sites):
        super().__init__(None, None, None, list(sites), "float32", 60.0, 60.0, he=True)
        self.startup = startup
        self.executors = {}
        for site in sites:
            self.executors[site] = VFLExecutor()
            self.executors[site].runtime = SiteRuntime(site, None)
        self.plain: list[tuple[str, str, dict]] = []  # (task, site, its reply before encryption)

    def exchange(self, task, payloads):
        self.ledger.count_round("exchange")
        return self._sites(task, payloads, step=False)

    def step(self, task, payloads):
        self.ledger.count_round("step")
        return self._sites(task, payloads, step=True)

    def _sites(self, task, payloads, step):
        replies = {}
        for site, payload in payloads.items():
            data = self._outgoing(site, payload, task)
            fl_ctx, executor = _fl_ctx(self.startup, site, task), self.executors[site]
            if step:  # per-batch steps: the executor decrypts and encrypts itself
                reply = executor._run(task, wire.loads(data), fl_ctx, step=True)
            else:
                result = executor.execute(task, DecryptTaskData().process(to_shareable(data), fl_ctx), fl_ctx, Signal())
                self.plain.append((task, site, from_shareable(result)))
                reply = EncryptTaskResult().process(result, fl_ctx)
            replies[site] = self._incoming(site, task, reply)
        return replies

    def close(self):
        super().close()
        for site in self.sites:
            he_filters.forget_party_keys(_fl_ctx(self.startup, site))


@pytest.fixture(scope="module")
def startup(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ws") / "startup"
    ckks.write_contexts(folder)
    return folder


@pytest.fixture(scope="module")
def job(startup):
    """A one-shot job with he: true and the labels on site-1, over 3 sites, every message recorded."""
    cfg = make_config(algorithm="oneshot", label_owner=LABEL, he=True)
    net = LocalFlare(startup, SITES)
    server = ckks.load_context(startup / ckks.SERVER_CONTEXT_FILE, "server")
    net.exchange_he_keys(LABEL)  # what the controller does before setup
    keys = {s: he_filters.party_keys(_fl_ctx(startup, s)) for s in SITES}
    recorded = RecordingTransport(net)
    results = run_algorithm(
        recorded,
        cfg,
        lambda: load_label_tables(SERVER, DataRequest(SITES, None, cfg.seed)),
        LogTracker("t"),
        he_context=server,
    )
    yield {
        "results": results,
        "messages": recorded.messages,
        "plain": net.plain,
        "keys": keys,
        "server": server,
        "net": net,
    }
    net.close()


def _raw_decrypt(enc, context):
    """TenSEAL itself, without the codec's key check: what a party holding `context` gets."""
    return np.concatenate([ts.ckks_vector_from(context, chunk).decrypt() for chunk in enc["chunks"]])[
        : int(np.prod(enc["shape"]))
    ].reshape(enc["shape"])


def _cannot_decrypt(enc, truth, keys: PartyKeys | None, server):
    """Neither `keys`' site (if given) nor the coordinator gets `truth` out of `enc`."""
    if keys is not None:
        with pytest.raises(ckks.HEContextError, match="cannot decrypt it"):
            keys.decrypt({"x": enc})
        for ctx in (keys.own, keys.shared):  # its own secret key, and the kit's shared one
            garbage = _raw_decrypt(enc, ctx.context)
            assert np.max(np.abs(garbage - truth)) > 1e3, "a site decrypted a ciphertext not meant for it"
    with pytest.raises(ckks.HEContextError, match="holds no secret key"):
        ckks.decrypt(enc, server)
    with pytest.raises(ValueError, match="secret_key"):
        _raw_decrypt(enc, server.context)


def test_job_runs_and_he_changes_no_metric(job):
    results = job["results"]
    kinds = results["communication"]["tensor_kinds"]
    assert kinds["up"]["plaintext"] == 0 and kinds["down"]["plaintext"] == 0, kinds
    plain = run_inprocess(make_config(algorithm="oneshot", label_owner=LABEL), SITES, None)
    assert abs(results["metrics"]["test_auc"] - plain["metrics"]["test_auc"]) <= 0.005, (
        results["metrics"],
        plain["metrics"],
    )
    # every site its own key, none of them the kit's shared one
    key_ids = {s: k.own.key_id for s, k in job["keys"].items()}
    assert len(set(key_ids.values())) == 3 and job["keys"][LABEL].shared.key_id not in key_ids.values()
    # a feature site holds only the label site's public key; the label site every other site's
    assert set(job["keys"]["site-2"].public) == {LABEL}
    assert set(job["keys"][LABEL].public) == {"site-2", "site-3"}


def test_relayed_representations_only_the_label_site_decrypts(job):
    keys, server = job["keys"], job["server"]
    truth = next(p for t, s, p in job["plain"] if t == "represent" and s == "site-2")["aligned"]
    sent = next(m for m in job["messages"] if m.task == "represent" and m.site == "site-2").reply["aligned"]
    assert is_encrypted(sent) and sent["key"] == keys[LABEL].own.key_id
    # as the coordinator relayed it to the label site, in the partial-gradients call
    relayed = next(m for m in job["messages"] if m.task == "label.partial_gradients").request["args"][0]["site-2"]
    assert relayed["chunks"] == sent["chunks"]
    np.testing.assert_allclose(keys[LABEL].decrypt({"x": relayed})["x"], truth, atol=1e-3)
    _cannot_decrypt(sent, truth, keys["site-3"], server)  # the other feature site, and the coordinator
    _cannot_decrypt(sent, truth, keys["site-2"], server)  # not even its sender: it encrypted for site-1


def test_gradients_for_one_site_only_that_site_decrypts(job):
    keys, server = job["keys"], job["server"]
    truth = next(p for t, s, p in job["plain"] if t == "label.partial_gradients")["result"]
    reply = next(m for m in job["messages"] if m.task == "label.partial_gradients").reply["result"]
    for site in SITES:
        assert reply[site]["key"] == keys[site].own.key_id
    received = next(m for m in job["messages"] if m.task == "oneshot_update" and m.site == "site-2").request["grads"]
    np.testing.assert_allclose(keys["site-2"].decrypt({"g": received})["g"], truth["site-2"], atol=1e-3)
    _cannot_decrypt(received, truth["site-2"], keys["site-3"], server)
    _cannot_decrypt(received, truth["site-2"], None, server)


def test_coordinator_refuses_to_send_a_site_what_was_made_for_another(job):
    net, keys = job["net"], job["keys"]
    for_site_3 = ckks.encrypt(np.ones(4, np.float32), keys[LABEL].public["site-3"])
    with pytest.raises(TransportError, match="made for site 'site-3''s key.*only 'site-3' can decrypt it"):
        net._outgoing("site-2", {"grads": for_site_3}, "oneshot_update")
    net._outgoing("site-3", {"grads": for_site_3}, "oneshot_update")  # to its receiver: fine


def test_label_site_broadcast_is_one_ciphertext_per_receiver(job):
    """FedHSSL's cross-party z_c: the active (label) site's goes to every passive site, each with its own key."""
    import vflflare.algorithms.blocks.cross_party_ssl  # noqa: F401  registers its broadcast step

    keys, server = job["keys"], job["server"]
    z = np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32)
    sent = keys[LABEL].encrypt("cross_ssl", {"z": z})["z"]
    assert set(sent[MULTI_KEY]) == {"site-2", "site-3"}
    for site in ("site-2", "site-3"):
        got = address({"targets": {LABEL: sent}}, site)["targets"][LABEL]
        np.testing.assert_allclose(keys[site].decrypt({"z": got})["z"], z, atol=1e-3)
    _cannot_decrypt(sent[MULTI_KEY]["site-3"], z, keys["site-2"], server)
    # a passive site's z_c goes to the active site only
    assert keys["site-2"].encrypt("cross_ssl", {"z": z})["z"]["key"] == keys[LABEL].own.key_id


def test_secure_aggregation_keeps_the_shared_kit_key(job):
    import vflflare.algorithms.blocks.partial_aggregation  # noqa: F401  registers its contribution step

    keys, server = job["keys"], job["server"]
    w = {s: np.full(5, float(i + 1), np.float32) for i, s in enumerate(SITES)}
    sent = [keys[s].encrypt("pma_contribute", {"weights": {"w": w[s]}}) for s in SITES]
    assert {c["weights"]["w"]["key"] for c in sent} == {keys[LABEL].shared.key_id}
    total = ckks.add_payloads(sent, server)  # the coordinator adds, cannot decrypt
    for site in SITES:
        np.testing.assert_allclose(keys[site].decrypt(total)["weights"]["w"], np.full(5, 6.0), atol=1e-3)
    with pytest.raises(ckks.HEContextError):
        ckks.decrypt(total["weights"]["w"], server)


def test_fedhssl_over_three_sites_per_batch_steps_broadcast_and_secure_aggregation(startup):
    """Every HE flow in one job: cross-party z_c (the label site's to each passive site, one ciphertext each),
    PMA under the shared key, split-NN steps encrypted by the executor; same metric as without HE."""
    small = {
        "projector": [16, 16, 16],
        "predictor_hidden": 16,
        "pretrain_batch_size": 64,
        "global_iterations": 1,
        "labeled_fraction": 0.5,
        "split_epochs": 2,
        "split_patience": 2,
    }
    cfg = make_config(algorithm="fedhssl", label_owner="site-2", he=True, **small)
    net = LocalFlare(startup, SITES)
    try:
        net.exchange_he_keys("site-2")
        recorded = RecordingTransport(net)
        results = run_algorithm(
            recorded,
            cfg,
            lambda: load_label_tables(SERVER, DataRequest(SITES, None, cfg.seed)),
            LogTracker("t"),
            he_context=ckks.load_context(startup / ckks.SERVER_CONTEXT_FILE, "server"),
        )
    finally:
        net.close()
    kinds = results["communication"]["tensor_kinds"]
    assert kinds["up"]["plaintext"] == 0 and kinds["down"]["plaintext"] == 0, kinds
    z = next(m for m in recorded.messages if m.task == "cross_ssl" and m.site == "site-2").reply["z"]
    assert set(z[MULTI_KEY]) == {"site-1", "site-3"}
    plain = run_inprocess(make_config(algorithm="fedhssl", label_owner="site-2", **small), SITES, None)
    assert abs(results["metrics"]["test_auc"] - plain["metrics"]["test_auc"]) <= 0.02, (
        results["metrics"],
        plain["metrics"],
    )


def test_public_contexts_are_checked(startup, tmp_path):
    kit = ckks.load_context(startup / ckks.CLIENT_CONTEXT_FILE, "client")
    own, public = ckks.make_key_pair(kit, "site-9")
    assert ckks.load_public(public, kit, "site-9").key_id == own.key_id == ckks.party_key_id(public)
    secret = own.context.serialize(save_secret_key=True)
    with pytest.raises(ckks.HEContextError, match="no secret key"):
        ckks.load_public(secret, kit, "site-9")
    other = ts.context(
        ts.SCHEME_TYPE.CKKS, 8192, coeff_mod_bit_sizes=[60, 40, 60], encryption_type=ts.ENCRYPTION_TYPE.ASYMMETRIC
    )
    other.global_scale = 2**40
    with pytest.raises(ckks.HEContextError, match="parameters"):
        ckks.load_public(other.serialize(save_secret_key=False), kit, "site-9")
    # a site refuses a key relayed as its own that it did not make
    fl_ctx = _fl_ctx(startup, "site-9", job="job-check")
    he_filters.make_party_keys(fl_ctx)
    try:
        with pytest.raises(ckks.HEContextError, match="not its own"):
            he_filters.register_party_keys(
                fl_ctx, published_for("site-9", "site-9", {"site-9": public}), "site-9", ["site-9", "site-8"]
            )
    finally:
        he_filters.forget_party_keys(fl_ctx)


@pytest.mark.simulator
def test_simulator_each_site_gets_ciphertexts_of_its_own_key_only(tmp_path):
    """A real NVFlare job over 3 sites, every relayed message recorded: each site receives ciphertexts of one
    key, its own (a different one per site); the feature sites' representations are encrypted for the label
    site; neither the coordinator's context nor the secret context every site shares in its kit decrypts
    them. (Each site's own secret key lives in its job process only: the in-process tests try those.)"""
    from vflflare import cli
    from vflflare.jobs import write_job
    from vflflare.privacy.ckks import key_ids
    from vflflare.protocol.recording import load_messages
    from vflflare.simulation import simulate

    assert cli.main(["he-keys", "-w", str(tmp_path / "ws")]) == 0
    job = write_job(
        tmp_path / "jobs",
        "oneshot_he_keys",
        {"algorithm": "oneshot", "label_owner": LABEL, "he": True},
        min_sites=3,
        record_messages=True,
    )
    results = simulate(str(job), str(tmp_path / "ws"), 3, 3, timeout=600)
    assert "error" not in results, results.get("error")
    assert results["metrics"]["test_auc"] >= 0.9
    messages = load_messages(Path(results["results_path"]).parent / results["messages"])
    received = {s: set().union(*(key_ids(m.request) for m in messages if m.site == s)) for s in SITES}
    assert all(len(keys) == 1 for keys in received.values()), received  # one key per receiver ...
    own = {s: next(iter(keys)) for s, keys in received.items()}
    assert len(set(own.values())) == 3  # ... a different one for each
    server = ckks.load_context(tmp_path / "ws" / "startup" / ckks.SERVER_CONTEXT_FILE, "server")
    kit = ckks.load_context(tmp_path / "ws" / "startup" / ckks.CLIENT_CONTEXT_FILE, "client")
    for site in ("site-2", "site-3"):
        reps = next(m for m in messages if m.task == "represent" and m.site == site).reply["aligned"]
        assert reps["key"] == own[LABEL]  # for the label site
        with pytest.raises(ckks.HEContextError):
            ckks.decrypt(reps, server)
        with pytest.raises(ckks.HEContextError, match="made with key"):
            ckks.decrypt(reps, kit)
        assert np.max(np.abs(_raw_decrypt(reps, kit.context))) > 1e6  # what TenSEAL gives the kit key: noise
        grads = next(m for m in messages if m.task == "oneshot_update" and m.site == site).request["grads"]
        assert grads["key"] == own[site]
        assert np.max(np.abs(_raw_decrypt(grads, kit.context))) > 1e6


def test_resume_under_per_party_keys_is_refused_early():
    """The keys die with the job that made them: an earlier job's journaled ciphertexts are unreadable."""
    with pytest.raises(ValueError, match="resume cannot go on with a run under he: true"):
        make_config(algorithm="oneshot", label_owner=LABEL, he=True, resume="run-1")
