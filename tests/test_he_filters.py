"""HE on the NVFlare side without a simulator: the site Filters, the keys in a startup kit, the
coordinator's refusal of plaintext, the generated job configuration and the config check."""

import json

import numpy as np
import pytest
from flare_fakes import FakeEngine
from nvflare.apis.fl_constant import ReservedKey
from nvflare.apis.fl_context import FLContext

from vflflare import wire
from vflflare.flare.he_filters import DecryptTaskData, EncryptTaskResult, workspace_context
from vflflare.flare.messages import ERROR_HEADER, error_of, from_shareable, to_shareable
from vflflare.flare.transport import FlareTransport
from vflflare.jobs import job_files
from vflflare.privacy import ckks
from vflflare.protocol.payload import tensor_kinds
from vflflare.protocol.transport import TransportError
from vflflare.registry import make_config


def _fl_ctx(startup, site="site-1"):
    fl_ctx = FLContext()
    fl_ctx.set_prop(ReservedKey.ENGINE, FakeEngine(startup), private=True, sticky=False)
    fl_ctx.set_prop(ReservedKey.IDENTITY_NAME, site, private=False, sticky=False)
    return fl_ctx


@pytest.fixture(scope="module")
def startup(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ws") / "startup"
    ckks.write_contexts(folder)
    return folder


def test_result_filter_encrypts_and_data_filter_decrypts(startup):
    fl_ctx = _fl_ctx(startup)
    payload = {"aligned": np.random.default_rng(0).standard_normal((30, 32)).astype(np.float32), "rows": np.arange(5)}
    result = EncryptTaskResult().process(to_shareable(wire.dumps(payload)), fl_ctx)
    sent = from_shareable(result)
    assert tensor_kinds(sent) == {"plaintext": 0, "encrypted": 1}  # what the coordinator gets
    np.testing.assert_array_equal(sent["rows"], payload["rows"])
    # the coordinator relays it as task data to a site, whose data filter decrypts it
    received = from_shareable(DecryptTaskData().process(to_shareable(wire.dumps(sent)), _fl_ctx(startup, "site-2")))
    np.testing.assert_allclose(received["aligned"], payload["aligned"], atol=1e-3)
    # control-only messages and error replies pass untouched (and need no key)
    control = to_shareable(wire.dumps({"train_ids": ["a", "b"]}))
    assert EncryptTaskResult().process(control, _fl_ctx("/nonexistent")) is control


def test_missing_context_is_a_clear_error_naming_the_file(tmp_path):
    fl_ctx = _fl_ctx(tmp_path / "startup")
    with pytest.raises(ckks.HEContextError, match=r"startup/client_context.tenseal is missing.*vflflare he-keys"):
        workspace_context(fl_ctx, "client")
    # inside a filter it becomes the site's error reply, with the reason (not NVFlare's bare filter error code)
    reply = EncryptTaskResult().process(to_shareable(wire.dumps({"h": np.ones(3, np.float32)})), fl_ctx)
    assert "client_context.tenseal is missing" in error_of(reply)


def test_wrong_context_in_the_startup_kit(tmp_path):
    folder = tmp_path / "startup"
    folder.mkdir()
    server, _ = ckks.make_contexts()
    (folder / "client_context.tenseal").write_bytes(server)  # a server context where a site needs its key
    with pytest.raises(ckks.HEContextError, match="holds no secret key"):
        workspace_context(_fl_ctx(folder), "client")
    (folder / "server_context.tenseal").write_bytes(b"garbage")
    with pytest.raises(ckks.HEContextError, match="server_context.tenseal is not a TenSEAL context"):
        workspace_context(_fl_ctx(folder), "server")


def test_decrypt_failure_in_data_filter_reaches_the_executor_as_an_error(startup, tmp_path):
    other = tmp_path / "startup"
    ckks.write_contexts(other)  # another key pair
    sent = from_shareable(
        EncryptTaskResult().process(to_shareable(wire.dumps({"g": np.ones(4, np.float32)})), _fl_ctx(other))
    )
    data = DecryptTaskData().process(to_shareable(wire.dumps(sent)), _fl_ctx(startup))
    assert "made with key" in data.get_header(ERROR_HEADER)


def _transport():
    return FlareTransport(None, None, None, ["site-1", "site-2"], False, 1.0, 1.0, he=True)


def test_coordinator_refuses_plaintext_floats_naming_site_and_task(startup):
    net = _transport()
    reply = to_shareable(wire.dumps({"aligned": np.ones((2, 2), np.float32)}))
    with pytest.raises(TransportError, match=r"site 'site-2' sent 1 plaintext float tensor\(s\) in task 'represent'"):
        net._incoming("site-2", "represent", reply)
    with pytest.raises(TransportError, match="coordinator was about to send site 'site-1'"):
        net._outgoing("site-1", {"grads": np.ones(3, np.float32)}, "oneshot_update")
    # ciphertexts and control pass, and are counted by kind
    client = workspace_context(_fl_ctx(startup), "client")
    enc = {"aligned": ckks.encrypt(np.ones((2, 2), np.float32), client), "rows": np.arange(2)}
    got = net._incoming("site-1", "represent", to_shareable(wire.dumps(enc)))
    assert tensor_kinds(got) == {"plaintext": 0, "encrypted": 1}
    assert net.ledger.summary()["tensor_kinds"]["up"] == {"plaintext": 1, "encrypted": 1}  # the refused one was seen
    # a site with another key pair is refused too
    other = ckks.load_context(ckks.make_contexts()[1], "client")
    foreign = to_shareable(wire.dumps({"aligned": ckks.encrypt(np.ones(2, np.float32), other)}))
    with pytest.raises(TransportError, match="site 'site-2' encrypted task 'represent' with key"):
        net._incoming("site-2", "represent", foreign)


def test_job_generator_adds_filters_only_with_he():
    plain = job_files("j", {"algorithm": "oneshot", "label_owner": "site-1"})["app/config/config_fed_client.json"]
    assert plain["task_result_filters"] == [] and plain["task_data_filters"] == []
    files = job_files("j", {"algorithm": "oneshot", "label_owner": "site-1", "he": True})
    client = files["app/config/config_fed_client.json"]
    tasks = client["executors"][0]["tasks"]
    assert sorted(client["task_result_filters"][0]["tasks"]) == sorted(
        tasks
    )  # NVFlare matches filters by exact task name
    assert client["task_result_filters"][0]["filters"][0]["path"].endswith("he_filters.EncryptTaskResult")
    assert client["task_data_filters"][0]["filters"][0]["path"].endswith("he_filters.DecryptTaskData")
    json.dumps(files)
    assert files["app/config/config_fed_server.json"]["workflows"][0]["args"]["config"]["he"] is True


def test_he_with_labels_on_the_server_fails_early():
    with pytest.raises(ValueError, match="he needs the labels on a site"):
        make_config(algorithm="oneshot", he=True)
    with pytest.raises(ValueError, match="label_owner 'server'"):
        job_files("j", {"algorithm": "vanilla", "he": True})
    make_config(algorithm="secure_sum", he=True)  # secure aggregation gives the server no tensor to train on
