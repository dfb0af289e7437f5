"""Resume a run from its last completed phase exchange.

With ``checkpoint: true`` every phase exchange after setup is journaled by the coordinator (its replies,
and the hash of the checkpoint each site wrote of its state right after answering), and each site
saves its `PartyState` (and its label party's) under the run id. A job submitted again with
``resume: <run id>`` runs setup (data loading and alignment are deterministic), then replays the
plug-in's `run` against the journal: every exchange already answered returns its journaled replies
without a message. At the first exchange past the journal, or the first per-batch step, the sites load
their checkpoint of the last replayed exchange, verifying its hash, and the run goes on live.
Coordinator-side computation (a label party on the server) is re-executed on the journaled inputs,
which is deterministic (seeded, see test_determinism.py).

Layout under a party's runs root (`runs_root`: VFLFLARE_RUNS_ROOT, else its data root, else
~/.vflflare/runs; or the in-process checkpoint root):
``vflflare_runs/<run id>/journal/`` on the coordinator, ``vflflare_runs/<run id>/<site>/`` on a site.

A per-batch phase (split-NN) is not journaled batch by batch. Instead it marks save points
(`save_point`, every `split_checkpoint_every` epochs and at its end): each site saves its state, and
the journal the coordinator's loop state and its own label party's state. A run stopped inside the
phase resumes from its last save point (`resume_point`).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vflflare import wire
from vflflare.protocol.payload import Payload, decode, encode
from vflflare.protocol.state import PartyState

RUNS_DIR = "vflflare_runs"
RUNS_ROOT_ENV = "VFLFLARE_RUNS_ROOT"  # overrides where a party keeps checkpoints, models and predictions
HOME_RUNS_ROOT = Path.home() / ".vflflare" / "runs"  # a party on the embedded default has no data root
MARK = "_checkpoint"  # the key an exchange payload carries to ask for a checkpoint, and its reply the hash
RESTORE_TASK = "resume_from_checkpoint"
SAVE_TASK = "save_checkpoint"  # a save point inside a per-batch phase: the site answers {} and saves (MARK)
UNCHECKED = ("checkpoint", "resume", "stall_timeout", "join_timeout")  # config keys a resumed run may change


class ResumeError(RuntimeError):
    """A run cannot be resumed as asked: the message names the run, the party and the file."""


def runs_root(data_root: str | None, party: str) -> str:
    """Where a party keeps checkpoints, saved models and predictions: VFLFLARE_RUNS_ROOT, else the folder
    holding its data folder `<data root>/<party>` (beside it, outside any simulator or POC workspace, which
    are wiped; a linked folder, as poc/run.sh gives each party, counts where it really is), else
    ~/.vflflare/runs for the embedded default."""
    if os.environ.get(RUNS_ROOT_ENV):
        return os.environ[RUNS_ROOT_ENV]
    if data_root is None:
        return str(HOME_RUNS_ROOT)
    own = Path(data_root) / party
    return str(own.resolve().parent) if own.is_dir() else data_root


def run_dir(root: str | Path, run_id: str) -> Path:
    return Path(root) / RUNS_DIR / run_id


def file_hash(*paths: Path) -> str:
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.read_bytes())
    return digest.hexdigest()


@dataclass
class Entry:
    seq: int
    task: str
    replies: dict[str, Payload]
    hashes: dict[str, str]
    coordinator: dict[str, Any] = field(default_factory=dict)  # a save point's loop state
    label_file: Path | None = None  # a save point's coordinator-side label party state


class Journal:
    """The coordinator's record of a run's phase exchanges, in order, each file with its hash."""

    def __init__(self, root: str | Path, run_id: str, config: Mapping[str, Any], resume: bool) -> None:
        self.run_id = run_id
        self.folder = run_dir(root, run_id) / "journal"
        self.index = self.folder / "index.jsonl"
        settings = {k: v for k, v in config.items() if k not in UNCHECKED}
        config_file = self.folder / "config.json"
        if resume:
            if not config_file.is_file():
                raise ResumeError(
                    f"resume {run_id!r}: no journal at {self.folder}; the run ids there: "
                    f"{sorted(p.name for p in self.folder.parents[1].glob('*'))}"
                )
            before = json.loads(config_file.read_text())
            changed = sorted(k for k in set(before) | set(settings) if before.get(k) != settings.get(k))
            if changed:
                raise ResumeError(
                    f"resume {run_id!r}: the job's settings {changed} differ from the run's; resume "
                    f"with the same settings"
                )
        else:
            if self.index.exists():
                raise ResumeError(f"run {run_id!r} already has a journal at {self.folder}; resume it or use another id")
            self.folder.mkdir(parents=True, exist_ok=True)
            config_file.write_text(json.dumps(settings, sort_keys=True))
            self.index.write_text("")

    def entries(self) -> list[Entry]:
        out = []
        for line in self.index.read_text().splitlines():
            record = json.loads(line)
            path = self.folder / record["file"]
            label = self.folder / record["label_file"] if record.get("label_file") else None
            for file, digest in ((path, record["sha256"]), (label, record.get("label_sha256"))):
                if file is not None and (not file.is_file() or file_hash(file) != digest):
                    raise ResumeError(f"resume {self.run_id!r}: journal entry {file} is missing or altered")
            data = wire.loads(path.read_bytes())
            out.append(
                Entry(
                    record["seq"],
                    record["task"],
                    {s: decode(r) for s, r in data["replies"].items()},
                    record["hashes"],
                    json.loads(data["coordinator"]),
                    label,
                )
            )
        return out

    def write(
        self,
        seq: int,
        task: str,
        replies: Mapping[str, Payload],
        hashes: Mapping[str, str],
        coordinator: Mapping[str, Any] | None = None,
        label: PartyState | None = None,
    ) -> None:
        """coordinator, label: a save point's loop state (JSON: a generator's state holds 128-bit ints)
        and the coordinator's label party."""
        path = self.folder / f"{seq:05d}-{task}.bin"
        path.write_bytes(
            wire.dumps(
                {
                    "replies": {s: encode(r, "float32") for s, r in replies.items()},
                    "coordinator": json.dumps(dict(coordinator or {})),
                }
            )
        )
        record = {"seq": seq, "task": task, "file": path.name, "sha256": file_hash(path), "hashes": dict(hashes)}
        if label is not None:
            label_path = label.save(self.folder / f"{seq:05d}-{task}.label.pt")
            record.update(label_file=label_path.name, label_sha256=file_hash(label_path))
        with open(self.index, "a") as handle:
            handle.write(json.dumps(record) + "\n")

    def truncate(self, keep: int) -> None:
        """Forget entries from `keep` on: the live run recomputes them."""
        lines = self.index.read_text().splitlines()[:keep]
        self.index.write_text("".join(line + "\n" for line in lines))


class CheckpointedTransport:
    """The transport a plug-in runs on when checkpointing: journals and replays phase exchanges."""

    def __init__(self, net: Any, journal: Journal) -> None:
        """Passes everything through until `start` (setup is never journaled: it is re-run on resume)."""
        self.net, self.journal = net, journal
        self.sites, self.ledger = net.sites, net.ledger
        self._replay = journal.entries()
        self._seq = 0
        self._live = not self._replay
        self._replayed = 0
        self._started = False

    def start(self) -> None:
        self._started = True

    @property
    def replayed(self) -> int:
        """Exchanges answered from the journal rather than by the sites."""
        return self._replayed if self._live else self._seq

    def announce_model(self, model_id: str) -> None:
        self.net.announce_model(model_id)

    def exchange(self, task: str, payloads: Mapping[str, Payload]) -> dict[str, Payload]:
        if not self._started:
            return self.net.exchange(task, payloads)
        if not self._live:
            if self._seq < len(self._replay):
                entry = self._replay[self._seq]
                if entry.task != task or sorted(entry.replies) != sorted(payloads):
                    raise ResumeError(
                        f"resume {self.journal.run_id!r}: exchange {self._seq} of the run was "
                        f"'{entry.task}' to {sorted(entry.replies)}, the job now asks '{task}' to "
                        f"{sorted(payloads)}: the run is not the same"
                    )
                self._seq += 1
                return entry.replies
            self._go_live()
        mark = {"run": self.journal.run_id, "seq": self._seq}
        replies = self.net.exchange(task, {s: {**p, MARK: mark} for s, p in payloads.items()})
        hashes = {s: str(r.pop(MARK)) for s, r in replies.items()}
        self.journal.write(self._seq, task, replies, hashes)
        self._seq += 1
        return replies

    def step(self, task: str, payloads: Mapping[str, Payload]) -> dict[str, Payload]:
        if self._started and not self._live:
            self._go_live()
        return self.net.step(task, payloads)

    def save_point(self, name: str, loop: Mapping[str, Any], label: PartyState | None) -> None:
        """A point to resume a per-batch phase from: every site saves its state (a per-batch message, so
        it costs a step, not a task round trip); the journal keeps `loop`, the coordinator's loop state,
        and `label`, the state of a label party on the coordinator (None when a site owns the labels:
        that site saves it)."""
        if not self._live:
            self._go_live()
        mark = {"run": self.journal.run_id, "seq": self._seq}
        replies = self.net.step(SAVE_TASK, {s: {MARK: mark} for s in self.sites})
        hashes = {s: str(r.pop(MARK)) for s, r in replies.items()}
        self.journal.write(self._seq, f"{SAVE_TASK}.{name}", replies, hashes, loop, label)
        self._seq += 1

    def resume_point(self, name: str, label: PartyState | None) -> dict[str, Any] | None:
        """Replaying: the loop state of the last of the save points `name` next in the journal, with the
        coordinator's label party loaded as it was there (the sites load theirs when the run goes live).
        None when the journal holds none there."""
        found = None
        while (
            not self._live and self._seq < len(self._replay) and self._replay[self._seq].task == f"{SAVE_TASK}.{name}"
        ):
            found = self._replay[self._seq]
            self._seq += 1
        if found is None:
            return None
        if label is not None:
            label.load(found.label_file)
        return found.coordinator

    def _go_live(self) -> None:
        """Sites load their state as of the last replayed exchange they took part in."""
        last: dict[str, Entry] = {}
        for entry in self._replay[: self._seq]:
            for site in entry.replies:
                last[site] = entry
        if last:
            self.net.exchange(
                RESTORE_TASK,
                {s: {"run": self.journal.run_id, "seq": e.seq, "hash": e.hashes[s]} for s, e in last.items()},
            )
        self.journal.truncate(self._seq)
        self._replayed, self._live = self._seq, True


class SiteCheckpoints:
    """A site's side: save its states after a marked exchange, load them back on restore."""

    def __init__(self, root: str | Path | None, site: str) -> None:
        self.root, self.site = root, site

    def _paths(self, run_id: str, seq: int) -> tuple[Path, Path]:
        if self.root is None:
            raise ResumeError(f"site '{self.site}': checkpointing needs a runs root (the site's workspace)")
        folder = run_dir(self.root, run_id) / self.site
        return folder / f"{seq:05d}.party.pt", folder / f"{seq:05d}.label.pt"

    def save(self, mark: Mapping[str, Any], party: PartyState | None, label: PartyState | None) -> str:
        party_path, label_path = self._paths(str(mark["run"]), int(mark["seq"]))
        (party or PartyState("none")).save(party_path)
        (label or PartyState("none")).save(label_path)
        return file_hash(party_path, label_path)

    def load(self, request: Mapping[str, Any], party: PartyState | None, label: PartyState | None) -> None:
        party_path, label_path = self._paths(str(request["run"]), int(request["seq"]))
        if not (party_path.is_file() and label_path.is_file()):
            raise ResumeError(
                f"site '{self.site}': no checkpoint {party_path} to resume run {request['run']!r} "
                f"from; was the site's workspace changed?"
            )
        if file_hash(party_path, label_path) != request["hash"]:
            raise ResumeError(
                f"site '{self.site}': checkpoint {party_path} does not match the coordinator's journal "
                f"of run {request['run']!r}; it was altered or comes from another run"
            )
        if party is not None:
            party.load(party_path)
        if label is not None:
            label.load(label_path)
