"""Transport over NVFlare: phase exchanges are tasks (job Filters apply), per-batch steps are cellnet
requests from the server's job cell to the sites' (about 10 ms instead of a 0.6-2 s task round trip;
flare/messages.py), liveness probes are aux requests (flare/liveness.py).

Every wait ends as soon as a site it waits on is known to have stopped (SiteHealth, fed by NVFlare's
reports and by the liveness probes of flare/liveness.py), with a TransportError naming the site, the
phase and the task; and as soon as NVFlare aborts the job.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Mapping
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout

from nvflare.apis.controller_spec import ClientTask, Task, TaskCompletionStatus
from nvflare.apis.fl_constant import ReservedKey, ReturnCode
from nvflare.apis.fl_context import FLContext
from nvflare.apis.impl.controller import Controller
from nvflare.apis.shareable import Shareable
from nvflare.apis.signal import Signal
from nvflare.fuel.f3.cellnet.fqcn import FQCN
from nvflare.fuel.f3.message import Message

from vflflare import wire
from vflflare.code_identity import CODE_HEADER, code_identity
from vflflare.config import SERVER
from vflflare.flare.liveness import PROBE_AFTER_S, PROBE_TIMEOUT_S, SiteProber
from vflflare.flare.messages import (
    MODEL_HEADER,
    PING_TOPIC,
    SAVE_MODEL_TASK,
    STEP_CHANNEL,
    STEP_TOPIC,
    UNREACHABLE_CODES,
    error_of,
    payload_bytes_of,
    shareable_of,
    step_request,
    to_shareable,
)
from vflflare.flare.site_health import SiteHealth
from vflflare.privacy.ckks import HEContextError, key_ids, party_key_id
from vflflare.privacy.he_keys import KEYGEN_TASK, KEYS_TASK, address, published_for
from vflflare.protocol.ledger import CommLedger
from vflflare.protocol.payload import Payload, decode, encode, tensor_kinds
from vflflare.protocol.transport import TransportError

# after NVFlare aborts the job (it does so about 2 s after a site's parent reports the site's job
# process dead, without saying which site), wait this long for a probe or NVFlare's dead-job report
# to name the site; NVFlare gives the server job 10 s before it terminates it
ABORT_GRACE_S = 5.0
POLL_S = 0.02


class FlareTransport:
    def __init__(
        self,
        controller: Controller,
        fl_ctx: FLContext,
        abort_signal: Signal,
        sites: list[str],
        wire_dtype: str,
        task_timeout: float,
        step_timeout: float,
        he: bool = False,
        health: SiteHealth | None = None,
        stall_timeout: float = 300.0,
        join_timeout: float = 120.0,
    ) -> None:
        """he: the sites encrypt every float tensor (vflflare.privacy.ckks); the coordinator then refuses
        any plaintext float tensor in either direction, and ciphertexts of differing keys; with per-party keys
        (exchange_he_keys) it sends a site no ciphertext made for another party's key.
        health: where the controller records NVFlare's dead-site reports (shared with the probes).
        stall_timeout: how long a site may stay silent, or busy without progress (flare/liveness.py).
        join_timeout: how long a site may take to pick up its first task (its job process starting)."""
        self.controller, self.fl_ctx, self.abort_signal = controller, fl_ctx, abort_signal
        self.he = he
        self._key_ids: dict[str, str] = {}  # HE key fingerprint -> first site that used it
        # per-party keys (exchange_he_keys): site -> the fingerprint of the public key it published
        self._party_keys: dict[str, str] = {}
        self.sites = sites
        self.task_timeout, self.step_timeout = task_timeout, step_timeout
        self.model_id: str | None = None
        self.ledger = CommLedger(wire_dtype)
        self._pool = ThreadPoolExecutor(max_workers=max(2, len(sites)), thread_name_prefix="vflflare-step")
        self.health = health if health is not None else SiteHealth()
        self.prober = SiteProber(self._ping, self.health, sites, stall_timeout, join_timeout)
        self._cell = None  # the server job's cellnet cell, once a step needs it
        self._job_cells: dict[str, str] = {}  # site -> its job cell's FQCN

    # ------------------------------------------------------------------ failure detection
    def _ping(self, site: str) -> Shareable | None:
        """A probe is an NVFlare aux request, not a cell request: when the site's job process is gone,
        only the aux path's byte stream learns at once that the message could not be forwarded (a
        plain cell request just times out)."""
        engine = self.fl_ctx.get_engine()
        with engine.new_context() as fl_ctx:
            # NVFlare's aux requests return early once the job's abort signal fires. A probe must not:
            # NVFlare aborts the job ~2 s after a site's job process died without telling us which,
            # and a probe already on its way is what names it. So this context (only) gets a signal
            # of its own; `put` does not write it back to the job's shared context.
            fl_ctx.put(ReservedKey.RUN_ABORT_SIGNAL, Signal(), private=True, sticky=False)
            replies = engine.send_aux_request([site], PING_TOPIC, Shareable(), PROBE_TIMEOUT_S, fl_ctx, optional=True)
        return (replies or {}).get(site)

    def _dead_error(self, site: str, task: str, note: str = "") -> TransportError:
        return TransportError(
            f"site '{site}' stopped during phase '{self.ledger.current}' (task '{task}'): "
            f"{self.health.reason(site)}{note}",
            site=site,
        )

    def _fail_if_dead(self, sites: Collection[str], task: str) -> None:
        dead = self.health.first_dead(sites)
        if dead:
            raise self._dead_error(dead, task)

    def _aborted_error(self, task: str, waiting: list[str]) -> TransportError:
        """NVFlare aborted the job: name the stopped site if a probe or NVFlare's report does in time.
        The abort may come while nothing was being waited on (the coordinator computing between two
        phases), with no probe under way: probe every site now."""
        self.prober.probe_all(self.sites)
        deadline = time.monotonic() + ABORT_GRACE_S
        while not self.health.first_dead(self.sites) and time.monotonic() < deadline:
            time.sleep(0.05)
        dead = self.health.first_dead(waiting) or self.health.first_dead(self.sites)
        if dead:
            return self._dead_error(dead, task, " (NVFlare aborted the job)")
        unjoined = self.prober.not_joined(waiting)
        if unjoined:  # a job process that stopped (or failed) while starting, before any probe could reach it
            named = f"site '{unjoined[0]}'" if len(unjoined) == 1 else f"one of the sites {unjoined}"
            return TransportError(
                f"{named} stopped during phase '{self.ledger.current}' (task '{task}'): NVFlare "
                f"aborted the job while {'it' if len(unjoined) == 1 else 'they'} had not picked up "
                f"any task yet: its job process probably failed or stopped while starting",
                site=unjoined[0],
            )
        return TransportError(
            f"job aborted by NVFlare during phase '{self.ledger.current}' (task '{task}') while "
            f"waiting for {', '.join(waiting) or 'no site'}; no site was reported dead"
        )

    def _wait(self, task: str, waiting: Callable[[], list[str]]) -> None:
        """Return once `waiting()` is empty; raise as soon as a site it lists stops or the job is aborted.
        Meanwhile the sites still waited on are probed (flare/liveness.py)."""
        start = time.monotonic()
        while True:
            pending = waiting()
            if not pending:
                return
            self._fail_if_dead(pending, task)
            if self.abort_signal.triggered:
                raise self._aborted_error(task, pending)
            self.prober.watch(pending, time.monotonic() - start)
            time.sleep(POLL_S)

    def _check_reply(self, site: str, task: str, reply: Shareable | None) -> None:
        """A reply NVFlare made up because the site was unreachable: confirm with a probe, and
        report a stopped site as such instead of as a bare return code."""
        if reply is None or reply.get_return_code(ReturnCode.OK) in UNREACHABLE_CODES:
            if self.health.reason(site) or not self.prober.probe(site):
                raise self._dead_error(site, task)

    def _check_he(self, site: str, task: str, payload: Payload, direction: str) -> None:
        plaintext = tensor_kinds(payload)["plaintext"]
        if plaintext:
            what = f"site '{site}' sent" if direction == "up" else f"the coordinator was about to send site '{site}'"
            raise TransportError(
                f"HE is on but {what} {plaintext} plaintext float tensor(s) in task '{task}': with he: true every "
                f"float tensor must cross the coordinator as a CKKS ciphertext (are the job's HE filters configured?)",
                site=site,
            )
        parties = set(self._party_keys.values())
        for key in key_ids(payload):
            if key in parties:  # a ciphertext for one party: only ever sent on to that party
                if direction == "down" and key != self._party_keys.get(site):
                    owner = next(s for s, k in self._party_keys.items() if k == key)
                    raise TransportError(
                        f"HE: the coordinator was about to send site '{site}' a ciphertext made for site '{owner}''s "
                        f"key in task '{task}': only '{owner}' can decrypt it (a routing error in the algorithm)",
                        site=site,
                    )
                continue
            first = self._key_ids.setdefault(key, site)
            if len(self._key_ids) > 1:
                raise TransportError(
                    f"HE is on but site '{site}' encrypted task '{task}' with key {key}, site '{first}' with "
                    f"{next(k for k in self._key_ids if k != key)}: all sites must share one client_context.tenseal "
                    f"(or a site encrypted for a key no site published)",
                    site=site,
                )

    def exchange_he_keys(self, label_owner: str) -> None:
        """HE keys by role (privacy/he_keys.py), before setup: every site makes its own key pair for the job
        and publishes its public context; the label site gets every site's, a feature site the label site's.
        Control messages: public keys are no tensors (wire bytes only)."""
        replies = self.exchange(KEYGEN_TASK, {s: {} for s in self.sites})
        published = {s: bytes(r["public_context"]) for s, r in replies.items()}
        self._party_keys = {s: party_key_id(data) for s, data in published.items()}
        if len(set(self._party_keys.values())) != len(self.sites):
            raise TransportError("HE: two sites published the same public key")
        self.exchange(
            KEYS_TASK,
            {
                s: {
                    "public_contexts": published_for(s, label_owner, published),
                    "label_owner": label_owner,
                    "sites": list(self.sites),
                }
                for s in self.sites
            },
        )

    def _outgoing(self, site: str, payload: Payload, task: str = "") -> bytes:
        if self.he and self._party_keys:
            try:  # a ciphertext for several receivers: only the one for `site` goes to it
                payload = address(payload, site)
            except HEContextError as error:
                raise TransportError(f"HE: task '{task}': {error}", site=site) from error
        if self.he:
            self._check_he(site, task, payload, "down")
        sent = encode(payload, self.ledger.wire_dtype)
        data = wire.dumps(sent)
        self.ledger.record(site, "down", sent, len(data))
        return data

    def _incoming(self, site: str, task: str, reply) -> Payload:
        problem = error_of(reply)
        if problem:
            raise TransportError(
                f"site '{site}' failed task '{task}' in phase '{self.ledger.current}': {problem}", site=site
            )
        data = payload_bytes_of(reply)
        received = wire.loads(data) if data else {}
        self.ledger.record(site, "up", received, len(data))
        if self.he:
            self._check_he(site, task, received, "up")
        return decode(received)

    def announce_model(self, model_id: str) -> None:
        self.model_id = model_id  # rides on every task from now on, as a header

    def exchange(self, task: str, payloads: Mapping[str, Payload]) -> dict[str, Payload]:
        self._fail_if_dead(payloads, task)
        self.ledger.count_round("exchange")
        replies: dict[str, object] = {}
        lock = threading.Lock()

        def on_result(client_task: ClientTask, fl_ctx: FLContext) -> None:
            with lock:
                replies[client_task.client.name] = client_task.result
            self.prober.seen(client_task.client.name)

        def waiting() -> list[str]:
            pending = [site for site, t in tasks.items() if t.completion_status is None]
            for site in pending:
                if tasks[site].client_tasks:  # the site picked the task up: its job is running
                    self.prober.seen(site)
            return pending

        tasks = {}
        for site, payload in payloads.items():
            data = to_shareable(self._outgoing(site, payload, task))
            # which vflflare the coordinator runs, outside the counted payload: a site running another refuses
            data.set_header(CODE_HEADER, code_identity(SERVER))
            if self.model_id:  # the ID the site saves this run's model under (announce_model)
                data.set_header(MODEL_HEADER, self.model_id)
            tasks[site] = Task(
                name=task,
                data=data,
                timeout=int(self.task_timeout),
                result_received_cb=on_result,
            )
            self.controller.broadcast(tasks[site], self.fl_ctx, targets=[site], min_responses=1)
        self._wait(task, waiting)
        for site, t in tasks.items():
            if site not in replies:
                status = t.completion_status
                why = "timed out" if status == TaskCompletionStatus.TIMEOUT else f"ended with status {status}"
                raise TransportError(
                    f"site '{site}' gave no result for task '{task}' in phase '{self.ledger.current}': "
                    f"{why} (timeout {self.task_timeout}s)",
                    site=site,
                )
        return {site: self._incoming(site, task, replies[site]) for site in payloads}

    def _request(self, site: str, message: Message) -> Shareable | None:
        """One step request to the site's job cell, on our own channel (flare/messages.py)."""
        if self._cell is None:
            cell = self.fl_ctx.get_engine().get_cell()
            self._cell = getattr(cell, "core_cell", cell)  # a plain request, not a byte-stream transaction
            self._job_cells = {s: FQCN.join([s, self.fl_ctx.get_job_id()]) for s in self.sites}
        reply = self._cell.send_request(
            STEP_CHANNEL, STEP_TOPIC, self._job_cells[site], message, timeout=self.step_timeout
        )
        return shareable_of(reply)

    def step(self, task: str, payloads: Mapping[str, Payload]) -> dict[str, Payload]:
        if self.health:  # the only cost on the per-batch path while every site is alive
            self._fail_if_dead(payloads, task)
        self.ledger.count_round("step")
        # one request per site, in parallel; a site that does not answer soon is probed, alone
        requests = {site: step_request(self._outgoing(site, p, task), task) for site, p in payloads.items()}
        futures = {site: self._pool.submit(self._request, site, request) for site, request in requests.items()}
        deadline = time.monotonic() + PROBE_AFTER_S
        try:
            replies = {site: f.result(timeout=max(0.0, deadline - time.monotonic())) for site, f in futures.items()}
        except FutureTimeout:  # slow: watch for a stopped site while the requests run out their timeout
            self._wait(task, lambda: [site for site, f in futures.items() if not f.done()])
            replies = {site: f.result() for site, f in futures.items()}
        if self.abort_signal.triggered:
            raise self._aborted_error(task, [s for s, r in replies.items() if error_of(r)])
        for site, reply in replies.items():
            if error_of(reply):
                self._check_reply(site, task, reply)
        return {site: self._incoming(site, task, replies.get(site)) for site in payloads}

    def save_models(self) -> None:
        """Every site saves its model for scoring before the job ends (flare/messages.py SAVE_MODEL_TASK). A
        control request, like a liveness probe: not a message of the algorithm, so the ledger does not count it."""
        futures = {s: self._pool.submit(self._request, s, step_request(b"", SAVE_MODEL_TASK)) for s in self.sites}
        for site, future in futures.items():
            problem = error_of(future.result())
            if problem:
                raise TransportError(f"site '{site}' did not save its model: {problem}", site=site)

    def close(self) -> None:
        """Let go of the worker threads; requests to a stopped site may still be running out their timeout."""
        self.prober.close()
        self._pool.shutdown(wait=False, cancel_futures=True)
