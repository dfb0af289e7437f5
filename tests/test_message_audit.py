"""No raw feature leaves a site: every message a site sends in a full run of each algorithm (every plug-in
that trains, and a vertical_inference scoring job after a short training job) is recorded and checked by
value against the site's own inputs. What each kind of payload must be:

- a float array that speaks for rows (a representation `aligned`/`val`/`test`/`unaligned`, a split-NN `h`,
  FedHSSL's cross-party `z`, a scoring job's `reps`): [rows, width], width one of the site model's output
  widths, and no column of it may track one of the site's input columns of those rows (|corr| >= 0.999 also
  catches a standardised or rescaled copy; a trained ReLU representation can follow a dominant input column
  to |corr| 0.991, as few-shot's did once validation became stratified, without being a copy);
- model `weights` (FedHSSL's PMA, CFL's FedAvg): not row-aligned, so the correlation cannot apply; instead
  they must be, name for name and value for value, the float tensors of the site's shared module, so nothing
  else can ride along;
- from a label-owning site, `label.*` results (gradients, probabilities): label-side data, [rows, width];
- numbers (losses, metrics, counts) and strings (ID digests, file names) are control; a list of numbers is
  audited as an array, so a raw column cannot travel as a plain list;
- no string anywhere in a site's messages, setup's included, may be one of the site's own row IDs.
Any other numeric array is a leak. Toy plug-ins that send a raw column in each of these shapes show the audit
catches them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from scoring_helpers import score_the_test_rows

from vflflare import cli
from vflflare.algorithms.blocks.partial_aggregation import PartialAggregationSite
from vflflare.algorithms.plugin import Algorithm
from vflflare.config import SERVER
from vflflare.protocol import inprocess
from vflflare.protocol.feature_party import FeatureParty
from vflflare.protocol.payload import Payload
from vflflare.protocol.site_runtime import SiteRuntime
from vflflare.registry import algorithms, get_algorithm, make_config

SITES = ["site-1", "site-2"]
PARTS = ("aligned", "unaligned", "val", "test")
FAST = {
    "ssl_epochs": 1,
    "split_epochs": 2,
    "split_patience": 2,
    "pretrain_epochs": 1,
    "finetune_epochs": 1,
    "classifier_epochs": 5,
    "global_iterations": 1,
    "finetune_lrs": [0.01],
    "active_epochs": 2,
    "cfl_rounds": 1,
    "cfl_hidden": 32,
}
CORRELATED = 0.999


class Leak(AssertionError):
    pass


def fast(algorithm: str) -> dict[str, Any]:
    """The FAST settings the algorithm has."""
    names = {f.name for f in fields(get_algorithm(algorithm).Config)}
    return {k: v for k, v in FAST.items() if k in names}


def float_columns(batch: Any) -> np.ndarray:
    """A batch's float fields side by side, one row per batch row."""
    return np.concatenate([t.reshape(len(t), -1).double().numpy() for t in batch if torch.is_floating_point(t)], 1)


def strongest_tracking(sent: np.ndarray, inputs: np.ndarray) -> tuple[int, int, float]:
    """(sent column, input column, |Pearson correlation|) of the most correlated pair; a constant column
    correlates with nothing."""

    def unit(x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        centred = x - x.mean(axis=0)
        norm = np.where(np.ptp(x, axis=0) > 0, np.linalg.norm(centred, axis=0), np.inf)
        return centred / norm

    corr = np.abs(unit(sent).T @ unit(inputs))
    i, j = np.unravel_index(np.argmax(corr), corr.shape)
    return int(i), int(j), float(corr[i, j])


class AuditedRuntime(SiteRuntime):
    """Checks every reply before it leaves the site; `checked` lists the tasks of the arrays it compared."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.checked: list[str] = []
        # which rows a row-aligned field speaks for, from the request that asked for it
        self.rows_of: dict[str, Callable[[Payload], Any]] = {
            **{part: lambda request, part=part: self.party.part(part) for part in PARTS},
            "h": lambda request: self.party.part(request.get("part", "aligned"), torch.as_tensor(request["rows"])),
            "z": lambda request: self.party.train_batch(self.party.cross_rows()[torch.as_tensor(request["rows"])]),
            "reps": self._scored_rows,
        }

    def handle(self, task: str, payload: Payload) -> Payload:
        reply = super().handle(task, payload)
        self.audit_ids(task, reply)
        if task not in ("setup", "align"):  # setup: salted ID digests and counts; align: counts and masks
            self.audit(task, payload, reply)
        return reply

    def audit(self, task: str, request: Payload, reply: Any, key: str = "") -> None:
        where = f"site '{self.site}', task '{task}', field '{key}'"
        if key == "weights" and not task.startswith("label."):
            return self.audit_weights(where, task, request, reply)
        if isinstance(reply, dict):
            for k, v in reply.items():
                self.audit(task, request, v, k)
            return None
        if isinstance(reply, (list, tuple)) and not all(isinstance(v, (int, float)) for v in reply):
            for v in reply:
                self.audit(task, request, v, key)
            return None
        sent = np.asarray(reply) if isinstance(reply, (list, tuple)) and len(reply) > 1 else reply
        if not isinstance(sent, np.ndarray) or sent.dtype == bool or not np.issubdtype(sent.dtype, np.number):
            return None  # a number or a string: control
        if task.startswith("label."):  # the label party's results (gradients, probabilities): label-side data
            assert sent.ndim <= 2 and (sent.ndim < 2 or sent.shape[1] in self.widths()), where
            return None
        if key not in self.rows_of:
            raise Leak(f"{where}: a numeric array {sent.shape} that is no representation of known rows")
        inputs = float_columns(self.rows_of[key](request))
        if sent.ndim != 2 or len(sent) != len(inputs) or sent.shape[1] not in self.widths():
            raise Leak(f"{where}: shape {sent.shape}, expected ({len(inputs)}, one of {sorted(self.widths())})")
        i, j, corr = strongest_tracking(sent, inputs)
        if corr >= CORRELATED:
            raise Leak(f"{where}: column {i} tracks input column {j} (|corr| {corr:.4f})")
        self.checked.append(task)
        return None

    def audit_ids(self, task: str, reply: Any, key: str = "") -> None:
        """No row ID of the site's own, in any field."""
        if isinstance(reply, dict):
            for k, v in reply.items():
                self.audit_ids(task, v, k)
        elif isinstance(reply, str):
            if reply in self.own_ids():
                raise Leak(f"site '{self.site}', task '{task}', field '{key}': the row ID {reply!r}")
        elif isinstance(reply, Sequence) and not isinstance(reply, bytes):
            for v in reply:
                self.audit_ids(task, v, key)

    def own_ids(self) -> set[str]:
        if self.party is not None:
            return {*self.party.view.train_ids, *self.party.view.test_ids}
        loaded = self._scorer._loaded
        return set(loaded["ids"]) if loaded else set()

    def audit_weights(self, where: str, task: str, request: Payload, sent: dict[str, np.ndarray]) -> None:
        """Model weights are the site's shared tensors exactly: no other name, shape or value."""
        if not isinstance(self.party, PartialAggregationSite):
            raise Leak(f"{where}: weights from a site that shares no model")
        own = self.party.shared_weights()
        if sorted(sent) != sorted(own):
            raise Leak(f"{where}: sends {sorted(set(sent) ^ set(own))} beyond or short of its shared module's tensors")
        for name, value in own.items():
            same = np.array_equal(sent[name], value) if not request.get("iso") else np.shape(sent[name]) == value.shape
            if not same:
                raise Leak(f"{where}: '{name}' {np.shape(sent[name])} is not the shared module's tensor")
        self.checked.append(task)

    def widths(self) -> set[int]:
        """The widths a site's model outputs: f_k (both towers for FedHSSL), a cross-party projection; in a
        scoring job, the saved f_k's."""
        if self.party is None:
            loaded = self._scorer._require()
            with torch.no_grad():
                return {loaded["encoder"](*loaded["batch"].take(torch.arange(1))).shape[1]}
        cfg = self.party.cfg
        return {cfg.rep_dim, cfg.representation_width, *getattr(cfg, "projector_widths", [])[-1:]}

    def _scored_rows(self, request: Payload) -> Any:
        """A scoring job's new rows at the request's positions (scoring.SiteScorer.represent)."""
        return self._scorer._require()["batch"].take(torch.as_tensor(self._scorer._positions(request)))


def audited_run(
    monkeypatch: pytest.MonkeyPatch,
    algorithm: str,
    data_root: Path | None = None,
    runs_root: Path | None = None,
    **settings: Any,
) -> tuple[dict, dict[str, AuditedRuntime]]:
    """run_inprocess with audited sites: its result and the sites' runtimes."""
    runtimes: dict[str, AuditedRuntime] = {}

    def audited(site: str, *args: Any, **kwargs: Any) -> AuditedRuntime:
        runtimes[site] = AuditedRuntime(site, *args, **kwargs)
        return runtimes[site]

    monkeypatch.setattr(inprocess, "SiteRuntime", audited)
    cfg = make_config({"algorithm": algorithm, **settings})
    results = inprocess.run_inprocess(
        cfg, SITES, str(data_root) if data_root else None, str(runs_root) if runs_root else None
    )
    assert "error" not in results, results.get("error")
    return results, runtimes


def split(tmp_path: Path, *args: str) -> Path:
    """A breast-cancer data root for algorithms the embedded default does not serve."""
    root = tmp_path / "data"
    assert cli.main(["split", "--dataset", "breast_cancer", "--out", str(root), *args]) == 0
    return root


def assert_audited(runtimes: dict[str, AuditedRuntime], tasks: set[str]) -> None:
    """Every site had exactly these tasks' arrays compared: the algorithm's uploads did go through the audit."""
    assert {site: set(runtime.checked) for site, runtime in runtimes.items()} == {site: tasks for site in SITES}


VFLHLP_SPLIT = ("--overlap", "150", "--label-owner", "site-1", "--active-site-labels")


@pytest.mark.parametrize("algorithm,label_owner,split_args,audited_tasks", [
    ("vanilla", SERVER, None, {"split", "represent"}),
    ("fedbcd", SERVER, None, {"split", "represent"}),
    ("oneshot", SERVER, None, {"represent", "oneshot_update"}),
    ("oneshot", "site-2", None, {"represent", "oneshot_update"}),
    ("fewshot", SERVER, None, {"represent", "oneshot_update", "fewshot_update", "split"}),
    ("fewshot", "site-1", None, {"represent", "oneshot_update", "fewshot_update", "split"}),
    ("ssvfl_i", SERVER, None, {"represent"}),
    ("ssvfl_c", SERVER, None, {"split", "represent"}),
    ("fedhssl", SERVER, None, {"cross_ssl", "pma_contribute", "split", "represent"}),
    ("vflhlp", "site-1", VFLHLP_SPLIT, {"split", "represent"}),
    ("cfl", SERVER, ("--silo-space",), {"pma_contribute"}),
])  # fmt: skip
def test_no_site_sends_its_input_columns(monkeypatch, tmp_path, algorithm, label_owner, split_args, audited_tasks):
    root = split(tmp_path, *split_args) if split_args else None
    _, runtimes = audited_run(monkeypatch, algorithm, root, label_owner=label_owner, **fast(algorithm))
    assert_audited(runtimes, audited_tasks)


def test_scoring_new_rows_sends_only_representations(monkeypatch, tmp_path):
    root = split(tmp_path, "--overlap", "150")
    score_the_test_rows(root, SITES)  # the test rows as new rows to score
    runs = tmp_path / "runs"
    trained, _ = audited_run(monkeypatch, "oneshot", root, runs, **fast("oneshot"))
    scored, runtimes = audited_run(monkeypatch, "vertical_inference", root, runs, model_job=trained["job_id"])
    assert scored["metrics"]["scored_rows"] == trained["rows"]["test"]
    assert_audited(runtimes, {"score.represent"})


class _Leaky(PartialAggregationSite, FeatureParty):
    """Hides a rescaled raw column in each kind of payload the audit knows."""

    steps = ("leak_representation", "leak_weights", "leak_list", "leak_ids")

    def raw_column(self) -> np.ndarray:
        return 3.0 * self.part("aligned").numeric.numpy()[:, 0] + 1.0

    def shared_module(self) -> torch.nn.Module:
        return self.encoder

    def leak_representation(self, payload: Payload) -> Payload:
        reps = self.representations(["aligned"])["aligned"]
        reps[:, 0] = self.raw_column()
        return {"aligned": reps}

    def leak_weights(self, payload: Payload) -> Payload:
        return {"weights": {**self.shared_weights(), "extra.bias": self.raw_column()}}

    def leak_list(self, payload: Payload) -> Payload:
        return {"loss": 0.5, "stats": self.raw_column().tolist()}

    def leak_ids(self, payload: Payload) -> Payload:
        return {"rows": list(self.view.train_ids[:3])}


def _leaky_algorithm(step: str) -> type[Algorithm]:
    """A plug-in whose only exchange is the _Leaky step `step`."""

    class Leaky(Algorithm):
        name = f"leaky_{step}"
        Site = _Leaky

        def run(self, net: Any, label: Any, rows: dict[str, int]) -> dict[str, float]:
            net.exchange(step, {s: {} for s in net.sites})
            return {}

    return Leaky


@pytest.mark.parametrize("step,caught", [
    ("leak_representation", r"field 'aligned': column 0 tracks input column 0"),
    ("leak_weights", r"field 'weights': sends \['extra.bias'\] beyond or short of its shared module's tensors"),
    ("leak_list", r"field 'stats': a numeric array \(\d+,\) that is no representation of known rows"),
    ("leak_ids", r"field 'rows': the row ID '"),
])  # fmt: skip
def test_the_audit_catches_a_rescaled_raw_column(monkeypatch, step, caught):
    leaky = _leaky_algorithm(step)
    monkeypatch.setitem(algorithms(), leaky.name, leaky)  # registered for this test only
    with pytest.raises(Leak, match=rf"site 'site-1', task '{step}', {caught}"):
        audited_run(monkeypatch, leaky.name)
