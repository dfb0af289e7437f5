"""Everything a site does on request: one entry point, `handle(task, payload)`, used alike by the
NVFlare executor (tasks and aux messages) and by the in-process driver.

The runtime itself answers the protocol tasks (setup, alignment, PSI label match) and hands every
other task to the party the job's algorithm plug-in built at setup (`plugin.Site`, its `steps`), to
the label party a label-owning site hosts (`label.<method>`, `plugin.Label.channels`), or, for
plug-ins that use no site data, to the plug-in's stateless steps."""

from __future__ import annotations

import threading
from collections.abc import Callable

import torch

from vflflare.config import JobConfig
from vflflare.data.checks import describe_checks, has_findings, public_checks
from vflflare.data.loading import load_label_tables
from vflflare.data.schema import TEST_FILE, TRAIN_FILE
from vflflare.privacy.enforcement import Enforcement, apply_enforcement
from vflflare.privacy.private_randomness import PrivateRandomness
from vflflare.protocol.alignment import (
    AlignmentError,
    PSIView,
    answer_label_match,
    hash_ids,
    intersection_fingerprint,
    labeled_rows,
    positions_in,
    psi_file,
    psi_root,
    read_psi_file,
    split_by_mask,
    stratified_val_mask,
)
from vflflare.protocol.alignment_report import (
    describe_unmatched,
    id_variants,
    lacking_test,
    partial_test,
    summarize,
    test_labels_source,
    unlabeled_test,
)
from vflflare.protocol.checkpoint import MARK, RESTORE_TASK, SAVE_TASK, SiteCheckpoints
from vflflare.protocol.feature_party import FeatureParty
from vflflare.protocol.label_party import LabelParty
from vflflare.protocol.model_store import save_feature_party, save_label_party
from vflflare.protocol.payload import Payload
from vflflare.protocol.scoring import LOAD, SiteScorer
from vflflare.protocol.views import describe_view, job_data_request, load_site_view
from vflflare.registry import algorithms, get_algorithm, make_config
from vflflare.tracking import DETAILS, LogTracker, Tracker
from vflflare.wire import LABEL_PREFIX


def _named(classes: list[str] | None) -> Payload:
    """The class names of a label site's labels.json, for the job's results; sent only when it names them."""
    return {"classes": list(classes)} if classes else {}


class SiteRuntime:
    def __init__(
        self,
        site: str,
        data_root: str | None,
        tracker: Tracker | None = None,
        psi_source: Callable[[], list[str]] | None = None,
        runs_root: str | None = None,
        private_seed: str | None = None,
        enforce: Enforcement | None = None,
    ) -> None:
        """psi_source: returns this site's PSI intersection (tagged items) for alignment "psi"; default:
        read <psi root>/<site>/psi_intersection.csv (psi root: VFLFLARE_PSI_ROOT, else data_root).
        runs_root: where the site keeps the checkpoints of runs with `checkpoint` (its workspace).
        private_seed: the site's private seed from its local configuration (privacy/private_randomness.py);
        None: VFLFLARE_PRIVATE_SEED at this site, else the OS.
        enforce: the defenses the site enforces whatever the job asks, from its local configuration
        (privacy/enforcement.py)."""
        self.site = site
        self.data_root = data_root
        self.private_seed = private_seed
        self.enforce = enforce
        self.psi_source = psi_source or self._psi_from_file
        self.checkpoints = SiteCheckpoints(runs_root, site)
        self.runs_root = runs_root
        self.model_id: str | None = None  # the training run's model ID, as the coordinator announces it
        self.job_cfg: JobConfig | None = None  # the job's config before this site's enforced defenses
        self._psi: PSIView | None = None
        self._cfg: JobConfig | None = None
        self._plugin = None
        self._steps: list[str] = []
        self.tracker = tracker or LogTracker(f"vflflare.{site}")
        self.party: FeatureParty | None = None
        self.label: LabelParty | None = None
        self.wire_dtype = "float32"
        self._lock = threading.Lock()  # tasks and aux messages may arrive on different threads
        self._tasks: dict[str, Callable[[Payload], Payload]] = {
            "setup": self._setup,
            "align": self._align,
            "psi_labels": self._psi_labels,
            RESTORE_TASK: self._restore,
            SAVE_TASK: lambda payload: {},  # its MARK makes `handle` save
        }
        # a scoring job (vertical_inference) needs no setup: it reads a saved model and new rows
        self._scorer = SiteScorer(
            site,
            data_root,
            runs_root,
            self.psi_source,
            self.tracker.info,
            self._private(f"scorer:{site}"),
            enforce=enforce,
        )
        self._tasks.update(self._scorer.tasks)
        self._tasks[LOAD] = self._score_load
        self._without_setup = {"setup", *self._scorer.tasks}

    def handle(self, task: str, payload: Payload) -> Payload:
        with self._lock:
            mark = payload.pop(MARK, None)
            reply = self._handle(task, payload)
            if mark is not None:  # a checkpointed run's phase exchange: save the state it left (checkpoint.py)
                reply = {**reply, MARK: self.checkpoints.save(mark, *self._states())}
            return reply

    def save_model(self, job_id: str) -> list[str]:
        """At the job's end: this site's f_k and preprocessing, and the head of the label party it hosts, for
        scoring new rows (model_store.py), under the model ID the coordinator sent with setup (a coordinator
        that sent none: `job_id`, the NVFlare job's). A silo space's silos keep no vertical model. Returns the
        manifests."""
        if self.runs_root is None or self.party is None or not self._plugin.setup.saves_model:
            return []
        model_id = self.model_id or job_id
        saved = [save_feature_party(self.runs_root, model_id, self.party, job_id, self.job_cfg)]
        if self.label is not None:
            saved.append(save_label_party(self.runs_root, model_id, self.label, job_id, self.job_cfg))
        paths = [str(p) for p in saved if p is not None]
        DETAILS.info(f"site '{self.site}': model saved for scoring: {', '.join(paths)}")
        return paths

    def _score_load(self, payload: Payload) -> Payload:
        reply = self._scorer.load(payload)
        self.wire_dtype = self._scorer.wire_dtype  # its representations cross as the saved model's training did
        return reply

    def _states(self) -> tuple:
        return (
            self.party.state if self.party is not None else None,
            self.label.state if self.label is not None else None,
        )

    def _restore(self, payload: Payload) -> Payload:
        self.checkpoints.load(payload, *self._states())
        self.tracker.info(f"site '{self.site}': resumed run {payload['run']!r} from its exchange {payload['seq']}")
        return {}

    def _handle(self, task: str, payload: Payload) -> Payload:
        if task in self._tasks:
            if task not in self._without_setup and self.party is None:
                raise RuntimeError(f"site '{self.site}': task '{task}' before setup")
            return self._tasks[task](payload)
        if task.startswith(LABEL_PREFIX):
            return self._label_call(task[len(LABEL_PREFIX) :], payload)
        if self.party is not None and task in self._steps:
            return getattr(self.party, task)(payload)
        for plugin in algorithms().values():
            steps = plugin.setup.stateless_steps()
            if task in steps:
                return steps[task](self.site, payload)
        if self.party is None:
            raise RuntimeError(f"site '{self.site}': task '{task}' before setup")
        raise ValueError(
            f"site '{self.site}': algorithm '{self._cfg.algorithm}' has no site step '{task}'; its steps: {self._steps}"
        )

    def _setup(self, payload: Payload) -> Payload:
        cfg = self.job_cfg = make_config(payload["config"])  # as every party got it (the saved model's hash)
        self._plugin = get_algorithm(cfg.algorithm)
        setup = self._plugin.setup
        hosts_label = setup.hosts_label(cfg, self.site)
        # the stricter of the job's defenses and the ones this site's local configuration enforces
        cfg, enforced = apply_enforcement(cfg, self.enforce, hosts_site=True, hosts_label=hosts_label)
        if enforced:
            self.tracker.info(f"site '{self.site}' enforces {enforced}")
        self._steps = self._plugin.Site.site_steps()
        self.wire_dtype = cfg.wire_dtype
        torch.set_num_threads(cfg.num_threads)
        sites, salt = list(payload["sites"]), payload.get("salt")
        setup.check_site(self.site, self.data_root, cfg)
        tables = load_site_view(self.site, job_data_request(sites, self.data_root, cfg))
        self.tracker.info(f"site '{self.site}': {describe_view(tables)}")
        for line in describe_checks(f"site '{self.site}'", tables.data_checks):  # with values: stays here
            DETAILS.info(line)  # the coordinator's report lists them (counts only) for whoever runs the job
        position = sites.index(self.site)
        self.party = self._plugin.Site(
            self.site, tables, cfg, self.tracker, position=position, private=self._private(f"site-{position + 1}")
        )
        self._cfg = cfg
        # column names and counts go into the job's alignment report (setup.py)
        checks = {"data_checks": public_checks(tables.data_checks)} if has_findings(tables.data_checks) else {}
        if enforced:  # what this site's local configuration changed, for the results' privacy.enforced
            checks["enforced"] = enforced
        if cfg.alignment == "psi":
            return {**self._setup_psi(cfg, sites, tables), **checks, **self._randomness(cfg)}
        reply = {
            **self._digests(tables.train_ids, tables.test_ids, salt, cfg.id_normalize),
            **checks,
            **self._randomness(cfg),
        }
        if hosts_label:
            labels = self._host_label(cfg, sites)
        if cfg.label_owner == self.site:  # the label party's digests, for the coordinator's intersection
            reply["label"] = {
                **self._digests(labels.train_ids, labels.test_ids, salt, cfg.id_normalize),
                "num_classes": labels.num_classes,
                **_named(labels.classes),
            }
        return reply

    def _host_label(self, cfg: JobConfig, sites: list[str]):
        """The label party of a label-owning site. It and the site's feature party know each other
        (`colocated`): one institution, one process, so a plug-in may join its labels and features locally
        (VFLHLP's active party trains on both); nothing of either travels for it."""
        labels = load_label_tables(
            self.site,
            job_data_request(sites, self.data_root, cfg),
            active_site_labels=self._plugin.setup.active_site_labels,
        )
        self.label = self._plugin.Label(labels, sites, cfg, self.tracker, private=self._private("label"))
        self.label.colocated, self.party.colocated = self.party, self.label
        return labels

    def _private(self, party: str) -> PrivateRandomness:
        return PrivateRandomness.from_environment(party, self.private_seed)

    def _randomness(self, cfg: JobConfig) -> Payload:
        """With a defense on, the kind of this site's private source for the job's results (never its value)."""
        return {"private_randomness": self.party.private.source} if cfg.defended else {}

    @staticmethod
    def _digests(train_ids: list[str], test_ids: list[str], salt: str, applied: list[str]) -> Payload:
        """Salted digests of a party's IDs, and of their normal forms where those differ (for the hint)."""
        digests: Payload = {"train_ids": hash_ids(train_ids, salt), "test_ids": hash_ids(test_ids, salt)}
        variants = id_variants(train_ids, test_ids, salt, applied)
        if variants is not None:
            digests["variants"] = variants
        return digests

    def _psi_from_file(self) -> list[str]:
        root = psi_root(self.data_root)
        if root is None:
            raise AlignmentError(
                f"site '{self.site}': alignment 'psi' needs a place for PSI outputs: set VFLFLARE_PSI_ROOT or the "
                f"site's data root, or generate the VFL job with `vflflare jobs --psi`"
            )
        return read_psi_file(psi_file(root, self.site), f"site '{self.site}'")

    def _setup_psi(self, cfg: JobConfig, sites: list[str], tables) -> Payload:
        """Order the site's PSI intersection canonically, check it against the site's own tables; a
        label-owning site also says which aligned rows it has labels for (masks, no IDs)."""
        owner = f"site '{self.site}'"
        self._psi = PSIView.of(self.psi_source(), cfg.seed, f"{owner} PSI output")
        positions_in(tables.train_ids, self._psi.train, owner, "train")
        positions_in(tables.test_ids, self._psi.test, owner, "test")
        problems = self._report(
            owner,
            (TRAIN_FILE, TEST_FILE),
            tables.train_ids,
            tables.test_ids,
            summarize(self._psi.unmatched(tables.train_ids, tables.test_ids)),
        ).get("problems", [])
        reply: Payload = {
            "psi": {
                "train": len(self._psi.train),
                "test": len(self._psi.test),
                "fingerprint": intersection_fingerprint(cfg.seed, self._psi.train, self._psi.test),
                "rows": {"train": len(tables.train_ids), "test": len(tables.test_ids)},
            }
        }
        if cfg.label_owner == self.site:
            labels = self._host_label(cfg, sites)
            who = f"label party '{self.site}'"
            problems += self._report(
                who,
                (labels.train_source, test_labels_source(labels)),
                labels.train_ids,
                labels.test_ids,
                summarize(self._psi.unmatched(labels.train_ids, labels.test_ids)),
            ).get("problems", [])
            labeled = set(labels.test_ids)
            problems += unlabeled_test(
                who,
                test_labels_source(labels),
                [i for i in self._psi.test if i not in labeled],
                len(self._psi.test),
                cfg.allow_partial_test,
                self.tracker.info,
            )
            train_mask, test_mask = self._psi.masks_for(labels.train_ids, labels.test_ids)
            label_of = dict(zip(labels.train_ids, labels.train_labels.tolist()))
            labeled = labeled_rows(self._psi.labeled(train_mask, None).train, cfg.labeled_fraction)
            val_mask = stratified_val_mask([label_of[i] for i in labeled], cfg.val_fraction)
            reply["label"] = {
                "num_classes": labels.num_classes,
                **_named(labels.classes),
                "train_mask": train_mask,
                "test_mask": test_mask,
                "val_mask": val_mask,
                "rows": {"train": len(labels.train_ids), "test": len(labels.test_ids)},
            }
        if problems:
            reply["problems"] = problems
        return reply

    def _psi_labels(self, payload: Payload) -> Payload:
        """Answer a coordinator-hosted label party's PSI request against this site's intersection."""
        if self._psi is None:
            raise RuntimeError(f"site '{self.site}': label match requested without alignment 'psi'")
        return answer_label_match(self._psi.items(), payload)

    def _align_psi(self, keep: Payload) -> Payload:
        cfg, owner = self._cfg, f"site '{self.site}'"
        train_mask, test_mask = keep.get("train_mask"), keep.get("test_mask")
        if keep.get("train_keys") is not None or keep.get("test_keys") is not None:
            train_mask, test_mask = self._psi.masks_from_keys(cfg.seed, keep.get("train_keys"), keep.get("test_keys"))
        view = self._psi.labeled(train_mask, test_mask)
        # the label party chose the stratified validation rows and checked the class count already
        labeled = labeled_rows(view.train, cfg.labeled_fraction)
        train, val = split_by_mask(labeled, keep["val_mask"], 0, cfg.label_owner, "", len(view.train))
        tables = self.party.view
        labeled_ids = set(train) | set(val)
        unlabeled = [i for i in self._psi.train if i not in labeled_ids]
        self.party.align(
            positions_in(tables.train_ids, train, owner, "train"),
            positions_in(tables.train_ids, val, owner, "train"),
            positions_in(tables.test_ids, view.test, owner, "test"),
            positions_in(tables.train_ids, unlabeled, owner, "train"),
        )
        if self.label is not None:
            labels, who = self.label.tables, f"label party '{self.site}'"
            self.label.align(
                positions_in(labels.train_ids, train, who, "train labels"),
                positions_in(labels.train_ids, val, who, "train labels"),
                positions_in(labels.test_ids, view.test, who, "test labels"),
            )
        return {
            "counts": {"aligned_train": len(train), "val": len(val), "test": len(view.test)},
            "aligned_unlabeled": len(unlabeled),
        }

    def _align(self, payload: Payload) -> Payload:
        if "psi" in payload:
            return self._align_psi(payload["psi"])
        if "union" in payload:
            self.party.align_union(payload["union"])
            return {}
        if "labeled" in payload:
            return self._align_label_site(payload)
        problems = self._report(
            f"site '{self.site}'",
            (TRAIN_FILE, TEST_FILE),
            self.party.view.train_ids,
            self.party.view.test_ids,
            payload["unmatched"],
            payload.get("lacking", 0),
        )
        self.party.align(payload["train"], payload["val"], payload["test"], payload.get("aligned_unlabeled"))
        return problems

    def _align_label_site(self, payload: Payload) -> Payload:
        """The label-owning site gets its labeled rows in canonical order and splits them into training
        and validation rows itself, stratified by its labels; the coordinator passes the split on."""
        rows, labels = payload["label"], self.label.tables
        val = stratified_val_mask(labels.train_labels[rows["labeled"]], self._cfg.val_fraction)
        site = self._report(
            f"site '{self.site}'",
            (TRAIN_FILE, TEST_FILE),
            self.party.view.train_ids,
            self.party.view.test_ids,
            payload["unmatched"],
            payload.get("lacking", 0),
        )
        label = self._report(
            f"label party '{self.site}'",
            (labels.train_source, test_labels_source(labels)),
            labels.train_ids,
            labels.test_ids,
            rows["unmatched"],
            rows.get("lacking", 0),
        )
        self.party.align(
            payload["labeled"][~val], payload["labeled"][val], payload["test"], payload.get("aligned_unlabeled")
        )
        self.label.align(rows["labeled"][~val], rows["labeled"][val], rows["test"])
        return {"val_mask": val, **{key: site.get(key, []) + label.get(key, []) for key in {*site, *label}}}

    def _report(
        self,
        owner: str,
        files: tuple[str, str],
        train_ids: list[str],
        test_ids: list[str],
        unmatched: Payload,
        lacking: int = 0,
    ) -> Payload:
        """Log this party's unmatched IDs (they stay at the site). Returns, for the coordinator to fail the job
        with, the problems of its test rows without IDs: "lacking" (rows every other party has and it
        lacks) and "problems" (its rows without partner), each key only when it has some."""
        if unmatched["train"]["count"]:
            self.tracker.info(describe_unmatched(owner, files[0], train_ids, unmatched["train"], "train rows"))
        allowed, log = self._cfg.allow_partial_test, self.tracker.info
        found = {
            "lacking": lacking_test(owner, files[1], lacking, allowed, log),
            "problems": partial_test(owner, files[1], test_ids, unmatched["test"], allowed, log),
        }
        return {key: problems for key, problems in found.items() if problems}

    def _label_call(self, method: str, payload: Payload) -> Payload:
        if self.label is None:
            raise RuntimeError(f"site '{self.site}' is not the label owner but got label call '{method}'")
        if method not in self.label.label_channels():
            raise ValueError(f"site '{self.site}': unknown label call '{method}'")
        return {"result": getattr(self.label, method)(*payload.get("args", []))}
