"""What a training job leaves for scoring new rows later (issue 14): every feature site's bottom model and
preprocessing, the label party's head, and a manifest per party.

Layout, under each party's runs root (checkpoint.runs_root: VFLFLARE_RUNS_ROOT, else its data root, else
~/.vflflare/runs):
``vflflare_models/<model id>/<site>/`` holds a site's ``encoder.pt`` (its f_k, the module itself),
``preprocessing.json`` (the fitted Preprocessor and the input schema: column order, scales, categorical
vocabularies, ID column and ID normalisation) and ``manifest.json``; ``vflflare_models/<model id>/label/``
holds the label party's ``head.pt``, ``test_predictions.csv`` (ID, under the label files' ID column name,
and class probabilities of the test rows it evaluated, with the predicted class by its name when labels.json
names the classes) and ``manifest.json``. Each party writes only at its own place: raw features never leave
a site, and the label party's files hold no feature at all. The model ID (model_ids.py) is the training
run's own, so a second run adds a folder beside the first; a party never writes over a saved model.

A manifest names the algorithm, the hash of the job's config (`config_hash`: every party of one job writes
the same), the model ID and the NVFlare job id that trained it, where the label party ran (`label_owner`), the
precision representations crossed in (`wire_dtype`), the party's input schema (a site) or the sites in the
head's input order, the test metric and the class names, if any (the label party), when it was written, and
the sha256 of each file, which loading checks.
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
from vflflare.protocol.model_ids import LABEL_DIR, MANIFEST, MODELS_DIR

ENCODER_FILE, PREPROCESSING_FILE = "encoder.pt", "preprocessing.json"
HEAD_FILE, PREDICTIONS_FILE = "head.pt", "test_predictions.csv"
OWN_MODEL_FILE = "own_model.pt"  # a blend's own model of the label site's columns (protocol/going_alone.py)


class ModelStoreError(RuntimeError):
    """A saved model cannot be used as asked: the message names the party and the file."""


def models_dir(root: str | Path, model_id: str) -> Path:
    return Path(root) / MODELS_DIR / model_id


def latest_job(root: str | Path, party: str) -> str:
    """The model ID of the newest model of `party` (a site, or LABEL_DIR) saved under `root`."""
    manifests = sorted(
        (p.stat().st_mtime, p.parent.parent.name) for p in Path(root, MODELS_DIR).glob(f"*/{party}/{MANIFEST}")
    )
    if not manifests:
        raise ModelStoreError(f"{party}: no saved model under {Path(root, MODELS_DIR)}; run a training job first")
    return manifests[-1][1]


def config_hash(config: dict[str, Any]) -> str:
    """sha256 of the job's settings, without those a resumed run may change."""
    kept = {k: v for k, v in config.items() if k not in UNCHECKED}
    return hashlib.sha256(json.dumps(kept, sort_keys=True, default=str).encode()).hexdigest()


def _new_folder(folder: Path, party: str) -> None:
    """A party's model folder, which must not hold a saved model yet: a model is never overwritten."""
    if (folder / MANIFEST).exists():
        raise ModelStoreError(
            f"{party}: a model is already saved at {folder}; a saved model is never overwritten "
            f"(each training run has a model ID of its own)"
        )
    folder.mkdir(parents=True, exist_ok=True)


def _write_manifest(folder: Path, fields: dict[str, Any], files: list[str]) -> Path:
    manifest = {
        **fields,
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "files": {name: file_hash(folder / name) for name in files},
    }
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
            raise ModelStoreError(
                f"{party}: {folder / name} changed since it was saved (its sha256 differs from {path})"
            )
    return manifest


def save_site_model(
    folder: Path, site: str, encoder: torch.nn.Module, site_input: SiteInput | None, fields: dict[str, Any]
) -> Path:
    """fields: algorithm, config_hash, model_id, job_id. A site without a tabular input (images) saves its encoder
    only."""
    _new_folder(folder, f"site '{site}'")
    torch.save(encoder, folder / ENCODER_FILE)
    files = [ENCODER_FILE]
    schema = None
    if site_input is not None:
        (folder / PREPROCESSING_FILE).write_text(json.dumps(site_input.to_dict(), indent=2))
        files.append(PREPROCESSING_FILE)
        schema = {
            "id_column": site_input.id_column,
            "columns": list(site_input.preprocessor.columns),
            "categorical_columns": site_input.categorical_columns,
        }
    return _write_manifest(folder, {**fields, "party": site, "input_schema": schema}, files)


def load_site_model(folder: Path, site: str) -> tuple[torch.nn.Module, SiteInput, dict[str, Any]]:
    manifest = read_manifest(folder, f"site '{site}'")
    if PREPROCESSING_FILE not in manifest["files"]:
        raise ModelStoreError(
            f"site '{site}': the model at {folder} has no tabular preprocessing (an image "
            f"site); scoring new rows needs a table site"
        )
    # the site's own file, checked against its manifest's hash just above
    encoder = torch.load(folder / ENCODER_FILE, map_location="cpu", weights_only=False)
    site_input = SiteInput.from_dict(json.loads((folder / PREPROCESSING_FILE).read_text()))
    return encoder.eval(), site_input, manifest


def save_label_model(
    folder: Path,
    head: torch.nn.Module,
    sites: list[str],
    metrics: dict[str, float],
    test_ids: list[str] | None,
    test_probs: np.ndarray | None,
    fields: dict[str, Any],
    id_column: str = "id",
    classes: list[str] | None = None,
    blend: tuple[Any, float] | None = None,
) -> Path:
    """The head over the sites' representations side by side in `sites` order, and the test rows' class
    probabilities it gave (the training job's test predictions, to compare scoring with), under the label
    files' ID column name; `classes`: the names labels.json gives the classes (None: numbered 0..C-1)."""
    _new_folder(folder, "label party")
    torch.save(head, folder / HEAD_FILE)
    files = [HEAD_FILE]
    blended = {}
    if blend is not None:  # going_alone.py: the label site's own model, mixed in at this share of the head's
        own, share = blend
        torch.save(own, folder / OWN_MODEL_FILE)
        files.append(OWN_MODEL_FILE)
        blended = {"blend": {"federated_share": share, "own_model": own.kind}}
    if test_ids is not None and test_probs is not None:
        write_predictions(folder / PREDICTIONS_FILE, test_ids, test_probs, id_column, classes)
        files.append(PREDICTIONS_FILE)
    named = {"classes": list(classes)} if classes else {}
    return _write_manifest(
        folder, {**fields, "party": LABEL_DIR, "sites": list(sites), "metrics": metrics, **named, **blended}, files
    )


def label_owner(folder: Path) -> str | None:
    """Who saved the label model in `folder` (the coordinator "server", or a site), or None: parties that
    share one runs root (VFLFLARE_RUNS_ROOT) all see it, only its owner may use it."""
    path = folder / MANIFEST
    return json.loads(path.read_text()).get("label_owner") if path.is_file() else None


def load_label_model(folder: Path) -> tuple[torch.nn.Module, dict[str, Any], Any]:
    """(the head, the manifest, the own model a blend mixes in, or None)."""
    manifest = read_manifest(folder, "label party")
    head = torch.load(folder / HEAD_FILE, map_location="cpu", weights_only=False)
    own = torch.load(folder / OWN_MODEL_FILE, map_location="cpu", weights_only=False) if "blend" in manifest else None
    return head.eval(), manifest, own


PREDICTED_COLUMN = "predicted"  # the predicted class by its name, when labels.json names the classes


def prediction_columns(num_classes: int, classes: list[str] | None = None) -> list[str]:
    """The columns after the ID: binary `score` (the probability of class 1), else `p0,p1,...`, or
    `p_<class name>` when the classes have names; then `predicted` (the most probable class's name)."""
    if num_classes == 2:
        columns = ["score"]
    else:
        columns = [f"p_{name}" for name in classes] if classes else [f"p{c}" for c in range(num_classes)]
    return columns + ([PREDICTED_COLUMN] if classes else [])


def write_predictions(
    path: Path, ids: list[str], probs: np.ndarray, id_column: str = "id", classes: list[str] | None = None
) -> None:
    """ID, then the probability of each class (binary: `score`, the positive class's); with class names
    (labels.json `classes`), also the predicted class by its name."""
    probs = np.asarray(probs, dtype=np.float64)
    if classes is not None and len(classes) != probs.shape[1]:
        raise ModelStoreError(f"{len(classes)} class names {list(classes)} for {probs.shape[1]} class probabilities")
    values = probs[:, 1:] if probs.shape[1] == 2 else probs
    columns = [map(repr, column) for column in values.T.tolist()]  # column by column: 3x faster at 800k rows
    named = [[classes[c] for c in np.argmax(probs, axis=1)]] if classes else []
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow([id_column, *prediction_columns(probs.shape[1], classes)])
        writer.writerows(zip(ids, *columns, *named))


def read_predictions(path: Path) -> dict[str, list[float]]:
    """ID -> the class probabilities of a predictions file (`predicted`, a class name, left out)."""
    with path.open(newline="") as f:
        rows = list(csv.reader(f))
    keep = [c for c, name in enumerate(rows[0]) if c and name != PREDICTED_COLUMN] if rows else []
    return {row[0]: [float(row[c]) for c in keep] for row in rows[1:]}


def _fields(cfg: JobConfig, model_id: str, job_id: str | None) -> dict[str, Any]:
    return {
        "algorithm": cfg.algorithm,
        "config_hash": config_hash(cfg.to_dict()),
        "model_id": model_id,
        "job_id": job_id or model_id,
        "label_owner": cfg.label_owner,
        "wire_dtype": cfg.wire_dtype,  # scoring sends representations as training did
    }


def save_feature_party(
    root: str | Path, model_id: str, party: FeatureParty, job_id: str | None = None, job_cfg: JobConfig | None = None
) -> Path:
    """A site's f_k as it stands now (the job's end) and, for a table site, its preprocessing; job_id: the
    NVFlare job that trained it (default: the model ID); job_cfg: the job's config as every party got it, the
    one `config_hash` names (default: the party's own, which holds the defenses its site enforces)."""
    site_input = getattr(getattr(party.view, "tables", None), "site_input", None)
    return save_site_model(
        models_dir(root, model_id) / party.site,
        party.site,
        party.encoder,
        site_input,
        _fields(job_cfg or party.cfg, model_id, job_id),
    )


def save_label_party(
    root: str | Path, model_id: str, label: LabelParty, job_id: str | None = None, job_cfg: JobConfig | None = None
) -> Path | None:
    """The label party's head and its last test predictions; None when it trained no head (a job that
    ended before its classifier, or an algorithm without one)."""
    if "classifier" not in label.state:
        return None
    metrics = {}
    if label.test_probs is not None:
        name, value = score(label.test_probs, label.part_labels("test").numpy(), label.num_classes)
        metrics[f"test_{name}"] = value
    return save_label_model(
        models_dir(root, model_id) / LABEL_DIR,
        label.state["classifier"],
        label.sites,
        metrics,
        label.test_ids,
        label.test_probs,
        _fields(job_cfg or label.cfg, model_id, job_id),
        getattr(label.tables, "id_column", "id"),
        getattr(label.tables, "classes", None),
        label.blend,
    )
