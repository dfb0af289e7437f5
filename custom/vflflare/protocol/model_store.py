"""What a training job leaves for scoring new rows later (issue 14): every feature site's bottom model and
preprocessing, the label party's head, and a manifest per party.

Layout, under each party's runs root (checkpoint.runs_root: VFLFLARE_RUNS_ROOT, else its data root, else
~/.vflflare/runs):
``vflflare_models/<job id>/<site>/`` holds a site's ``encoder.pt`` (its f_k, the module itself),
``preprocessing.json`` (the fitted Preprocessor and the input schema: column order, scales, categorical
vocabularies, ID column and ID normalisation) and ``manifest.json``; ``vflflare_models/<job id>/label/``
holds the label party's ``head.pt``, ``test_predictions.csv`` (ID and class probabilities of the test rows
it evaluated) and ``manifest.json``. Each party writes only at its own place: raw features never leave a
site, and the label party's files hold no feature at all.

A manifest names the algorithm, the hash of the job's config (`config_hash`: every party of one job writes
the same), the job id, where the label party ran (`label_owner`), the party's input schema (a site) or the sites in the head's input order and the
test metric (the label party), when it was written, and the sha256 of each file, which loading checks.
"""
from __future__ import annotations

import csv
import hashlib
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vflflare.config import JobConfig
from vflflare.data.preprocess import SiteInput
from vflflare.metrics import score
from vflflare.protocol.checkpoint import UNCHECKED, file_hash
from vflflare.protocol.feature_party import FeatureParty
from vflflare.protocol.label_party import LabelParty

MODELS_DIR = "vflflare_models"
LABEL_DIR = "label"
MANIFEST = "manifest.json"
ENCODER_FILE, PREPROCESSING_FILE = "encoder.pt", "preprocessing.json"
HEAD_FILE, PREDICTIONS_FILE = "head.pt", "test_predictions.csv"


class ModelStoreError(RuntimeError):
    """A saved model cannot be used as asked: the message names the party and the file."""


def models_dir(root: str | Path, job_id: str) -> Path:
    return Path(root) / MODELS_DIR / job_id


def latest_job(root: str | Path, party: str) -> str:
    """The id of the newest job that saved a model of `party` (a site, or LABEL_DIR) under `root`."""
    manifests = sorted((p.stat().st_mtime, p.parent.parent.name) for p in Path(root, MODELS_DIR).glob(f"*/{party}/{MANIFEST}"))
    if not manifests:
        raise ModelStoreError(f"{party}: no saved model under {Path(root, MODELS_DIR)}; run a training job first")
    return manifests[-1][1]


def config_hash(config: dict[str, Any]) -> str:
    """sha256 of the job's settings, without those a resumed run may change."""
    kept = {k: v for k, v in config.items() if k not in UNCHECKED}
    return hashlib.sha256(json.dumps(kept, sort_keys=True, default=str).encode()).hexdigest()


def _write_manifest(folder: Path, fields: dict[str, Any], files: list[str]) -> Path:
    manifest = {**fields, "created_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "files": {name: file_hash(folder / name) for name in files}}
    path = folder / MANIFEST
    path.write_text(json.dumps(manifest, indent=2))
    return path


def read_manifest(folder: Path, party: str) -> dict[str, Any]:
    """The party's manifest, after checking every file it lists against its hash."""
    path = folder / MANIFEST
    if not path.is_file():
        raise ModelStoreError(f"{party}: no saved model at {folder} ({MANIFEST} missing)")
    manifest = json.loads(path.read_text())
    for name, digest in manifest["files"].items():
        if not (folder / name).is_file():
            raise ModelStoreError(f"{party}: {folder / name} is listed in {path} but missing")
        if file_hash(folder / name) != digest:
            raise ModelStoreError(f"{party}: {folder / name} changed since it was saved (its sha256 differs "
                                  f"from {path})")
    return manifest


def save_site_model(folder: Path, site: str, encoder: torch.nn.Module, site_input: SiteInput | None,
                    fields: dict[str, Any]) -> Path:
    """fields: algorithm, config_hash, job_id. A site without a tabular input (images) saves its encoder only."""
    folder.mkdir(parents=True, exist_ok=True)
    torch.save(encoder, folder / ENCODER_FILE)
    files = [ENCODER_FILE]
    schema = None
    if site_input is not None:
        (folder / PREPROCESSING_FILE).write_text(json.dumps(site_input.to_dict(), indent=2))
        files.append(PREPROCESSING_FILE)
        schema = {"id_column": site_input.id_column, "columns": list(site_input.preprocessor.columns),
                  "categorical_columns": site_input.categorical_columns}
    return _write_manifest(folder, {**fields, "party": site, "input_schema": schema}, files)


def load_site_model(folder: Path, site: str) -> tuple[torch.nn.Module, SiteInput, dict[str, Any]]:
    manifest = read_manifest(folder, f"site '{site}'")
    if PREPROCESSING_FILE not in manifest["files"]:
        raise ModelStoreError(f"site '{site}': the model at {folder} has no tabular preprocessing (an image "
                              f"site); scoring new rows needs a table site")
    # the site's own file, checked against its manifest's hash just above
    encoder = torch.load(folder / ENCODER_FILE, map_location="cpu", weights_only=False)
    site_input = SiteInput.from_dict(json.loads((folder / PREPROCESSING_FILE).read_text()))
    return encoder.eval(), site_input, manifest


def save_label_model(folder: Path, head: torch.nn.Module, sites: list[str], metrics: dict[str, float],
                     test_ids: list[str] | None, test_probs: np.ndarray | None, fields: dict[str, Any]) -> Path:
    """The head over the sites' representations side by side in `sites` order, and the test rows' class
    probabilities it gave (the training job's test predictions, to compare scoring with)."""
    folder.mkdir(parents=True, exist_ok=True)
    torch.save(head, folder / HEAD_FILE)
    files = [HEAD_FILE]
    if test_ids is not None and test_probs is not None:
        write_predictions(folder / PREDICTIONS_FILE, test_ids, test_probs)
        files.append(PREDICTIONS_FILE)
    return _write_manifest(folder, {**fields, "party": LABEL_DIR, "sites": list(sites), "metrics": metrics}, files)


def label_owner(folder: Path) -> str | None:
    """Who saved the label model in `folder` (the coordinator "server", or a site), or None: parties that
    share one runs root (VFLFLARE_RUNS_ROOT) all see it, only its owner may use it."""
    path = folder / MANIFEST
    return json.loads(path.read_text()).get("label_owner") if path.is_file() else None


def load_label_model(folder: Path) -> tuple[torch.nn.Module, dict[str, Any]]:
    manifest = read_manifest(folder, "label party")
    head = torch.load(folder / HEAD_FILE, map_location="cpu", weights_only=False)
    return head.eval(), manifest


def write_predictions(path: Path, ids: list[str], probs: np.ndarray, id_column: str = "id") -> None:
    """ID, then the probability of each class (binary: `score`, the positive class's)."""
    probs = np.asarray(probs, dtype=np.float64)
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        if probs.shape[1] == 2:
            writer.writerow([id_column, "score"])
            writer.writerows((i, repr(float(p))) for i, p in zip(ids, probs[:, 1]))
        else:
            writer.writerow([id_column, *(f"p{c}" for c in range(probs.shape[1]))])
            writer.writerows((i, *(repr(float(v)) for v in row)) for i, row in zip(ids, probs))


def read_predictions(path: Path) -> dict[str, list[float]]:
    with path.open(newline="") as f:
        rows = list(csv.reader(f))
    return {row[0]: [float(v) for v in row[1:]] for row in rows[1:]}


def _fields(cfg: JobConfig, job_id: str) -> dict[str, Any]:
    return {"algorithm": cfg.algorithm, "config_hash": config_hash(cfg.to_dict()), "job_id": job_id,
            "label_owner": cfg.label_owner}


def save_feature_party(root: str | Path, job_id: str, party: FeatureParty) -> Path:
    """A site's f_k as it stands now (the job's end) and, for a table site, its preprocessing."""
    site_input = getattr(getattr(party.view, "tables", None), "site_input", None)
    return save_site_model(models_dir(root, job_id) / party.site, party.site, party.encoder, site_input,
                           _fields(party.cfg, job_id))


def save_label_party(root: str | Path, job_id: str, label: LabelParty) -> Path | None:
    """The label party's head and its last test predictions; None when it trained no head (a job that
    ended before its classifier, or an algorithm without one)."""
    if "classifier" not in label.state:
        return None
    metrics = {}
    if label.test_probs is not None:
        name, value = score(label.test_probs, label.part_labels("test").numpy(), label.num_classes)
        metrics[f"test_{name}"] = value
    return save_label_model(models_dir(root, job_id) / LABEL_DIR, label.state["classifier"], label.sites, metrics,
                            label.test_ids, label.test_probs, _fields(label.cfg, job_id))
