"""Site side of every vflflare job: one executor answers phase tasks and per-batch step requests by
handing them to the site's SiteRuntime. Raw features never leave SiteRuntime."""

from __future__ import annotations

import traceback
from pathlib import Path

from nvflare.apis.event_type import EventType
from nvflare.apis.executor import Executor
from nvflare.apis.fl_context import FLContext
from nvflare.apis.shareable import Shareable
from nvflare.apis.signal import Signal
from nvflare.fuel.f3.message import Message

from vflflare import wire
from vflflare.code_identity import CODE_HEADER, code_identity, mismatch
from vflflare.code_identity import describe as describe_code
from vflflare.config import SERVER
from vflflare.flare.analytics import FlareTracker
from vflflare.flare.he_filters import (
    decrypt_for,
    encrypt_for,
    forget_party_keys,
    make_party_keys,
    party_keys,
    register_party_keys,
    workspace_context,
)
from vflflare.flare.liveness import WorkClock
from vflflare.flare.messages import (
    ERROR_HEADER,
    MODEL_HEADER,
    PING_TOPIC,
    SAVE_MODEL_TASK,
    STEP_CHANNEL,
    STEP_TOPIC,
    TASK_HEADER,
    error_reply,
    from_shareable,
    step_reply,
    to_shareable,
)
from vflflare.flare.psi import psi_source
from vflflare.flare.site_config import local_enforcement, local_private_seed, resolve_party_data_root
from vflflare.privacy.he_keys import KEYGEN_TASK, KEYS_TASK
from vflflare.protocol.checkpoint import runs_root
from vflflare.protocol.error_disclosure import public_message
from vflflare.protocol.payload import Payload, decode, encode, tensor_kinds
from vflflare.protocol.site_runtime import SiteRuntime
from vflflare.torch_runtime import prepare_torch
from vflflare.tracking import DETAILS


class VFLExecutor(Executor):
    def __init__(self, data_root: str | None = None, num_threads: int = 1) -> None:
        """data_root overrides the site's local/vflflare.json and VFLFLARE_DATA_ROOT (see
        vflflare.flare.site_config); with none of them the site uses the embedded default."""
        super().__init__()
        self.data_root = data_root
        self.num_threads = num_threads
        self.runtime: SiteRuntime | None = None
        self.config_error: str | None = None
        self.tracker: FlareTracker | None = None
        # he: true in the job's config (learnt from the setup task). Task data and results are then
        # decrypted / encrypted by the job's HE filters; per-batch steps, which filters never see, here.
        self.he = False
        self.model_saved = False  # SAVE_MODEL_TASK came, or END_RUN saved it
        self.clock = WorkClock()  # what a liveness probe is told: the task at work, time since its progress

    def handle_event(self, event_type: str, fl_ctx: FLContext) -> None:
        if event_type == EventType.START_RUN:
            prepare_torch(self.num_threads, warm_in_background=True)
            self._engine = fl_ctx.get_engine()
            site = fl_ctx.get_identity_name()
            self.tracker = FlareTracker(self, fl_ctx, on_site=True, on_progress=self.clock.tick)
            try:
                data_root = resolve_party_data_root(self.data_root, fl_ctx, site)
                private_seed = local_private_seed(fl_ctx, site)
                enforce = local_enforcement(fl_ctx, site)
            except ValueError as error:  # a malformed local/vflflare.json: reported by the first task
                self.config_error, data_root, private_seed = f"{type(error).__name__}: {error}", None, None
                enforce = None
            DETAILS.info(
                f"site {site!r}: data root: {data_root or '<embedded default>'}; vflflare code: "
                f"{Path(__file__).parents[1]} (release {describe_code(code_identity(site))})"
            )
            # alignment "psi": the intersection from this job's PSI workflow or an earlier PSI job
            self.runtime = SiteRuntime(
                site,
                data_root,
                self.tracker,
                psi_source(fl_ctx, site, data_root),
                runs_root=runs_root(data_root, site),
                private_seed=private_seed,
                enforce=enforce,
            )
            # per-batch steps: plain requests to this job's cell; the coordinator's liveness probes: aux
            cell = self._engine.get_cell()
            getattr(cell, "core_cell", cell).register_request_cb(STEP_CHANNEL, STEP_TOPIC, self._on_step)
            self._engine.register_aux_message_handler(PING_TOPIC, self._on_ping)
        elif event_type == EventType.END_RUN and self.tracker is not None:
            if not self.model_saved:  # a job that failed before the coordinator's SAVE_MODEL_TASK
                self._save_model(fl_ctx)
            self.tracker.close()
            forget_party_keys(fl_ctx)

    def _save_model(self, fl_ctx: FLContext) -> None:
        """The site's models for scoring new rows; a job that failed leaves them too, but its coordinator
        writes no label model, so scoring refuses them."""
        if self.runtime is None:
            return
        self.model_saved = True
        try:
            self.runtime.save_model(fl_ctx.get_job_id())
        except Exception as error:  # the job's outcome stands; say why nothing was saved
            self.log_error(
                fl_ctx, f"saving the model failed: {type(error).__name__}: {error}\n{traceback.format_exc()}"
            )

    def _run(self, task: str, payload: Payload, fl_ctx: FLContext, step: bool = False) -> Shareable:
        if self.config_error:
            self.log_error(fl_ctx, f"task '{task}' refused: {self.config_error}")
            return error_reply(self.config_error)
        try:
            # with the labels on a site, HE keys by role (privacy/he_keys.py): this site's own key pair for
            # the job, then the public keys of the parties it encrypts for
            if task == SAVE_MODEL_TASK:
                self._save_model(fl_ctx)
                return to_shareable(wire.dumps({}))
            if task == KEYGEN_TASK:
                return to_shareable(wire.dumps({"public_context": make_party_keys(fl_ctx)}))
            if task == KEYS_TASK:
                register_party_keys(fl_ctx, payload["public_contexts"], payload["label_owner"], payload["sites"])
                return to_shareable(wire.dumps({}))
            if task == "setup":
                config = payload.get("config", {})
                self.he = bool(config.get("he", False))
                if self.he:
                    workspace_context(fl_ctx, "client")  # a missing or wrong key fails the job here
                    if config.get("label_owner", SERVER) != SERVER and party_keys(fl_ctx) is None:
                        raise ValueError(
                            "he: true with the labels on a site, but this site holds no per-party keys "
                            f"(the coordinator did not run '{KEYGEN_TASK}' and '{KEYS_TASK}' first)"
                        )
            if step and tensor_kinds(payload)["encrypted"]:
                payload = decrypt_for(fl_ctx, payload)
            reply = encode(self.runtime.handle(task, decode(payload)), self.runtime.wire_dtype)
            if step and self.he:
                reply = encrypt_for(fl_ctx, task, reply)
            return to_shareable(wire.dumps(reply))
        except Exception as error:  # the full message stays here; the coordinator gets its public form
            # the coordinator reports the failure once; this party's log files keep the whole story
            DETAILS.error(
                f"site {fl_ctx.get_identity_name()!r}: task '{task}' failed: {type(error).__name__}: "
                f"{error}\n{traceback.format_exc()}"
            )
            return error_reply(public_message(error, f"site '{fl_ctx.get_identity_name()}'"))

    def execute(self, task_name: str, shareable: Shareable, fl_ctx: FLContext, abort_signal: Signal) -> Shareable:
        problem = shareable.get_header(ERROR_HEADER)  # a task data filter (HE decryption) failed: say why
        if problem:
            return error_reply(problem)
        if shareable.get_header(MODEL_HEADER) and self.runtime is not None:
            self.runtime.model_id = shareable.get_header(MODEL_HEADER)
        problem = self._other_code(shareable.get_header(CODE_HEADER), fl_ctx)
        if problem:
            self.log_error(fl_ctx, f"task '{task_name}' refused: {problem}")
            return error_reply(problem)
        self.clock.start(task_name)
        try:
            return self._run(task_name, from_shareable(shareable), fl_ctx)
        finally:
            self.clock.stop()

    @staticmethod
    def _other_code(server: dict | None, fl_ctx: FLContext) -> str | None:
        """The error when this site runs another vflflare than the coordinator that sent the task (its identity
        rides on every task: flare/transport.py); None when they agree or the task does not say."""
        if not server:
            return None
        site = fl_ctx.get_identity_name()
        return mismatch(site, code_identity(site), server)

    def _on_ping(self, topic: str, request: Shareable, fl_ctx: FLContext) -> Shareable:
        """Answering at all says the job is up; the clock says whether its task makes progress."""
        return to_shareable(wire.dumps(self.clock.report()))

    def _on_step(self, request: Message) -> Message:
        payload = wire.loads(request.payload) if request.payload else {}
        with self._engine.new_context() as fl_ctx:
            return step_reply(self._run(request.get_header(TASK_HEADER), payload, fl_ctx, step=True))
