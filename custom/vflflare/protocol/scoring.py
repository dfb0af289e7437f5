"""Scoring new rows with a saved vertical model (issue 14), the parties' side.

A site reads its file of new rows (ID + the columns it trained on), checks it against the training
schema its saved model keeps, preprocesses it with the training statistics, and sends salted digests of
the IDs. After the coordinator has matched the digests, the site sends f_k of the matched rows, in the
coordinator's order. The label party (at the coordinator, or at the site that owned the labels) applies
its saved head to the representations side by side and writes predictions_<model id>.csv where it runs,
with predictions_<model id>.json beside it: which model, which rows, when. A label party at the
coordinator scores the IDs it lists itself (`read_score_ids`): no ID crosses to it that it does not hold.
With alignment "psi", the rows every site has come from NVFlare's DH-PSI over the score files' IDs, run
first in the same job (flare/psi.py `ScoreFilePSI`); every site orders them locally (`canonical_order`)
and the coordinator sees only a fingerprint of that order. Raw features never leave a site, as in training.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vflflare.data.checks import describe_checks, public_checks
from vflflare.data.columnar import read_table, table_path
from vflflare.data.errors import DataError, site_owner
from vflflare.data.ids import normalize_table_ids
from vflflare.data.preprocess import SiteInput
from vflflare.data.schema import TableSchema
from vflflare.data.strings import pick
from vflflare.data.table import ColumnPlan, parse_features
from vflflare.data.types import FeatureBlock
from vflflare.models.fitting import predict_proba
from vflflare.models.own_model import blend
from vflflare.privacy.defenses import noisy_representations
from vflflare.privacy.enforcement import Enforcement, enforced_floor
from vflflare.privacy.private_randomness import PrivateRandomness
from vflflare.protocol.alignment import (
    AlignmentError,
    answer_label_match,
    canonical_order,
    hash_ids,
    intersection_fingerprint,
    order_key,
    positions_in,
)
from vflflare.protocol.feature_party import forward_in_chunks
from vflflare.protocol.model_store import (
    LABEL_DIR,
    ModelStoreError,
    label_owner,
    latest_job,
    load_label_model,
    load_site_model,
    models_dir,
    prediction_columns,
    write_predictions,
)
from vflflare.protocol.payload import Payload
from vflflare.ssl.augment import TabularBatch

SCORE_FILE = "score.csv"
PREDICTIONS_DIR = "vflflare_predictions"
LOAD, REPRESENT, APPLY = "score.load", "score.represent", "score.apply"
MATCH = "score.match"  # alignment "psi", labels at the coordinator: its PSI round over its own score IDs
LATEST = "latest"
SCORE_PART = "score"  # the PSI tag of a score file's IDs


def score_items(ids: list[str]) -> list[str]:
    """PSI items of a score file: its IDs tagged score:<id> (a training PSI tags train: and test:)."""
    return [f"{SCORE_PART}:{i}" for i in ids]


def score_ids_of(items: list[str], owner: str) -> list[str]:
    """The score-file IDs of a PSI intersection; none means this job ran no PSI over the score files."""
    ids = [value for part, _, value in (str(item).partition(":") for item in items) if part == SCORE_PART]
    if not ids:
        raise AlignmentError(
            f"{owner}: scoring with alignment 'psi' needs NVFlare's DH-PSI over the score files "
            f"in the same job (VFLRecipe(algorithm='vertical_inference', psi=True), or `vflflare "
            f"jobs --algorithm vertical_inference --psi`); the PSI result here has no score rows"
        )
    return ids


def read_score_ids(folder: Path, score_file: str, id_normalize: Sequence[str]) -> tuple[list[str], str, Path]:
    """A label party at the coordinator: the IDs of the rows it wants scored, one column of `folder/score_file`
    or its Parquet twin (its header names the ID column of the predictions), in their normal form under
    `id_normalize` (the training job's, as the sites read theirs); with the column's name and the file read."""
    owner = "label party 'server'"
    path = table_path(owner, folder, score_file)
    table = read_table(owner, path)
    if len(table.header) != 1:
        raise DataError.at(
            owner,
            path,
            f"lists the IDs to score in one column; it has {len(table.header)}: {table.header} "
            "(the sites hold the feature columns)",
        )
    normalize_table_ids(table, table.header[0], id_normalize)
    return list(table.ids or []), table.header[0], path


def read_new_rows(site: str, path: Path, site_input: SiteInput) -> tuple[list[str], FeatureBlock, dict]:
    """IDs, the preprocessed block and the data checks (data/checks.py: unseen categories, values outside
    the training range, clipped values) of the new rows in `path`. A column the model was trained on that
    the file lacks, or one it was not trained on, is an error naming both."""
    owner = site_owner(site)
    schema = TableSchema(site_input.id_column, tuple(site_input.categorical_columns), missing=site_input.missing)
    table = read_table(owner, path, site_input.id_column, plan=ColumnPlan.features(schema))
    trained = list(site_input.preprocessor.columns)
    given = [name for name in table.header if name != site_input.id_column]
    missing = [name for name in trained if name not in given]
    if missing:
        raise DataError.at(
            owner,
            path,
            f"no column {missing[0]!r} ({len(missing)} of the {len(trained)} training "
            f"columns missing: {missing}); the model was trained on {trained}",
            column=missing[0],
        )
    extra = [name for name in given if name not in trained]
    if extra:
        raise DataError.at(
            owner,
            path,
            f"column {extra[0]!r} was not a training column ({len(extra)} such: {extra}); "
            f"the model was trained on {trained}: remove the others",
            column=extra[0],
        )
    normalize_table_ids(table, site_input.id_column, site_input.id_normalize)
    features = parse_features(table, schema)
    block, checks = site_input.preprocessor.checked_transform(features)
    return features.ids, block, checks


@dataclass
class SiteScorer:
    """One site's side of a scoring job; `tasks` are its entries for SiteRuntime."""

    site: str
    data_root: str | None
    runs_root: str | None
    psi_source: Callable[[], list[str]] | None = None  # this job's PSI intersection, for alignment "psi"
    log: Callable[[str], None] | None = None  # the site's own log (values may appear there, nowhere else)
    private: PrivateRandomness | None = None  # the site's private source for scoring noise (default: its environment)
    enforce: Enforcement | None = None  # defenses the site's local configuration enforces (privacy/enforcement.py)
    _loaded: dict[str, Any] | None = None
    _noise: torch.Generator | None = None
    wire_dtype: str = "float32"  # the loaded model's training precision: its representations cross in it

    @property
    def tasks(self) -> dict[str, Any]:
        return {LOAD: self.load, MATCH: self.match, REPRESENT: self.represent, APPLY: self.apply}

    def new_rows(self, model_job: str, score_file: str) -> dict[str, Any]:
        """The saved model of `model_job` ("latest": this site's newest) and the new rows of `score_file`,
        read and checked against the model's training schema."""
        if self.runs_root is None:
            raise ModelStoreError(f"site '{self.site}': no workspace to find saved models in")
        job = latest_job(self.runs_root, self.site) if model_job == LATEST else model_job
        folder = models_dir(self.runs_root, job)
        encoder, site_input, manifest = load_site_model(folder / self.site, self.site)
        if self.data_root is None:
            raise DataError(
                f"{site_owner(self.site)}: scoring reads the new rows from the site's data root "
                f"(<data root>/{self.site}/{score_file}); this site has none set"
            )
        path = table_path(site_owner(self.site), Path(self.data_root) / self.site, score_file)  # or its Parquet twin
        ids, block, checks = read_new_rows(self.site, path, site_input)
        for line in describe_checks(site_owner(self.site), checks) if self.log is not None else []:
            self.log(line)  # with the values: the site's own log
        return {
            "job": job,
            "folder": folder,
            "encoder": encoder,
            "manifest": manifest,
            "path": path,
            "ids": ids,
            "block": block,
            "checks": checks,
            "id_column": site_input.id_column,
            "id_normalize": site_input.id_normalize,
        }

    def load(self, payload: Payload) -> Payload:
        """payload: model_job (a job id, or "latest": this site's newest saved model), score_file, and salt
        (alignment "hash") or seed (alignment "psi"). Reply: the ID digests (hash) or the size and
        fingerprint of the PSI intersection in canonical order (psi), the model's job id and config hash,
        row count, data checks (counts by column, data/checks.py), and whether this site holds the job's label
        model."""
        rows = self.new_rows(payload["model_job"], payload["score_file"])
        ids, folder, path = rows["ids"], rows["folder"], rows["path"]
        batch = TabularBatch.from_block(rows["block"])
        try:
            with torch.no_grad():
                rows["encoder"](*batch.take(torch.arange(min(1, len(ids)))))
        except RuntimeError as error:
            raise ModelStoreError(
                f"site '{self.site}': the model saved at {folder / self.site} does not match its "
                f"preprocessing ({rows['block'].numeric.shape[1]} numeric inputs, "
                f"{rows['block'].categorical.shape[1]} categorical): {error}"
            ) from error
        self.wire_dtype = rows["manifest"].get("wire_dtype", "float32")  # a model saved before it had it: float32
        self._loaded = {
            "ids": ids,
            "batch": batch,
            "encoder": rows["encoder"],
            "folder": folder,
            "path": str(path),
            "id_column": rows["id_column"],
        }
        reply = {
            "job_id": rows["job"],
            "config_hash": rows["manifest"]["config_hash"],
            "algorithm": rows["manifest"]["algorithm"],
            "rows": len(ids),
            "data_checks": public_checks(rows["checks"]),
            "file": str(path),
            "label_model": label_owner(folder / LABEL_DIR) == self.site,
            "id_normalize": list(rows["id_normalize"]),  # the training job's, for a label party's own IDs
        }
        if "salt" in payload:
            return {**reply, "ids": hash_ids(ids, payload["salt"])}
        try:  # a PSI output file, if any, is a training job's: train and test IDs only
            items = self.psi_source() if self.psi_source is not None else []
        except AlignmentError:
            items = []
        order = canonical_order(score_ids_of(items, f"site '{self.site}'"), payload["seed"], SCORE_PART)
        self._loaded["positions"] = positions_in(ids, order, f"site '{self.site}'", payload["score_file"])
        self._loaded.update(order=order, seed=payload["seed"])
        return {**reply, "matched": len(order), "fingerprint": intersection_fingerprint(payload["seed"], [], order)}

    def match(self, payload: Payload) -> Payload:
        """Alignment "psi": answer a label party's PSI request over its own score IDs against this site's
        intersection; it learns which of its IDs every site has, and nothing else."""
        return answer_label_match(score_items(self._require()["order"]), payload)

    def represent(self, payload: Payload) -> Payload:
        """f_k of the rows at payload["positions"] (in the coordinator's order; None: this site's PSI order,
        with payload["keys"], only the rows whose order keys it lists: those a label party at the coordinator
        has); with payload["representation_noise"], noised as a training job's uploads are
        (FeatureParty.to_upload)."""
        loaded = self._require()
        if payload.get("keys") is not None:
            keep = set(payload["keys"])
            seed = loaded["seed"]
            wanted = [i for i, row_id in enumerate(loaded["order"]) if order_key(seed, SCORE_PART, row_id) in keep]
            loaded["positions"] = loaded["positions"][np.asarray(wanted, dtype=np.int64)]
        positions = self._positions(payload)
        reps = torch.as_tensor(represent_rows(loaded["encoder"], loaded["batch"], positions))
        # the stricter of the job's noise and the floor this site's local configuration enforces
        strength, enforced = enforced_floor(
            self.enforce, "representation_noise", float(payload.get("representation_noise") or 0.0)
        )
        if strength:
            if self._noise is None:
                private = self.private or PrivateRandomness.from_environment(f"scorer:{self.site}")
                self._noise = private.generator("scoring-noise")
            reps = noisy_representations(reps, strength, self._noise)
        reply: Payload = {"reps": reps.numpy().astype(np.float32)}
        if enforced:  # for the results' privacy.enforced
            reply["enforced"] = {"representation_noise": enforced}
        return reply

    def apply(self, payload: Payload) -> Payload:
        """The label party at this site: the head over payload["reps"] (site -> array), predictions by this
        site's own IDs of payload["positions"], named after the model (payload["model_id"]); payload["about"]:
        what the sidecar says of the scoring job."""
        loaded = self._require()
        positions = self._positions(payload)
        ids = pick(loaded["ids"], positions)
        model_id = payload.get("model_id") or loaded["folder"].name
        out = predictions_path(self.runs_root, model_id)
        about = {**dict(payload.get("about") or {}), "score_file": loaded["path"]}
        batch = loaded["batch"]
        return apply_head(
            loaded["folder"] / LABEL_DIR,
            payload["reps"],
            ids,
            out,
            positions,
            loaded["id_column"],
            about,
            lambda: batch.take(torch.as_tensor(positions)),  # for a blend only: a copy of the rows
        )

    def _positions(self, payload: Payload) -> np.ndarray:
        given = payload.get("positions")
        return self._require()["positions"] if given is None else np.asarray(given, dtype=np.int64)

    def _require(self) -> dict[str, Any]:
        if self._loaded is None:
            raise RuntimeError(f"site '{self.site}': scoring step before {LOAD}")
        return self._loaded


def represent_rows(encoder: torch.nn.Module, batch: TabularBatch, positions: np.ndarray) -> np.ndarray:
    """float32 f_k of the rows at `positions`, in that order. The forward runs in the table's own order, in
    training's chunks (the test rows of a training job come out bit for bit); where the rows are a run of the
    table's (a site scoring its whole file) each chunk is a slice, so the rows are never copied. Only the
    representations are put in the asked order."""
    order = np.argsort(positions, kind="stable")
    rows = positions[order]
    first = int(rows[0]) if len(rows) else 0
    run = np.array_equal(rows, np.arange(first, first + len(rows)))
    encoder.eval()

    def forward(chunk: torch.Tensor) -> torch.Tensor:
        if run:
            lo, hi = first + int(chunk[0]), first + int(chunk[-1]) + 1
            return encoder(batch.numeric[lo:hi], batch.categorical[lo:hi])
        return encoder(*batch.take(torch.as_tensor(rows[chunk.numpy()])))

    with torch.no_grad():
        in_table_order = forward_in_chunks(forward, len(rows), 0)
    reps = np.empty_like(in_table_order)
    reps[order] = in_table_order
    return reps


def predictions_path(runs_root: str | None, model_id: str) -> Path:
    """<runs root>/vflflare_predictions/predictions_<model id>.csv, named after the model that scores, or
    `-2`, `-3`, ...: a scoring run never overwrites another's predictions (nor their sidecar .json)."""
    folder = Path(runs_root or ".") / PREDICTIONS_DIR
    path, n = folder / f"predictions_{model_id}.csv", 1
    while path.exists() or path.with_suffix(".json").exists():
        n += 1
        path = folder / f"predictions_{model_id}-{n}.csv"
    return path


def apply_head(
    folder: Path,
    reps: dict[str, np.ndarray],
    ids: list[str],
    out: Path,
    rows: np.ndarray,
    id_column: str,
    about: dict[str, Any] | None = None,
    own_rows: Callable[[], Any] | None = None,
) -> Payload:
    """The label party's step: class probabilities of the head saved in `folder` over the sites'
    representations (in the order it was trained with), blended with the label site's own model of its rows
    `own_rows()` (in the same order) where the training job delivered a blend (going_alone.py), written to `out`
    in the score file's row order (`rows`: each row's place in it) under its ID column's name, with the
    predicted class by name when the model's labels.json named the classes; beside it, `out` with .json: the
    model (ID, algorithm, when trained, sites, label owner, test metric), the rows (score file, count, ID
    column), the columns, and when and by which job (`about`: scoring_job_id, score_file) they were scored."""
    head, manifest, own = load_label_model(folder)
    missing = [s for s in manifest["sites"] if s not in reps]
    if missing:
        raise ModelStoreError(
            f"label party: the head at {folder} was trained on the representations of "
            f"{manifest['sites']}; none came from {missing}"
        )
    joint = torch.as_tensor(np.concatenate([np.asarray(reps[s], dtype=np.float32) for s in manifest["sites"]], axis=1))
    try:
        probs = predict_proba(head, joint)
    except RuntimeError as error:
        raise ModelStoreError(
            f"label party: the head at {folder} does not take these representations ({joint.shape[1]} wide): {error}"
        ) from error
    if own is not None:
        probs = blend(probs, own.predict_proba(own_rows()), manifest["blend"]["federated_share"])
    order = np.argsort(np.asarray(rows), kind="stable")
    out.parent.mkdir(parents=True, exist_ok=True)
    classes = manifest.get("classes")
    probs = np.asarray(probs)
    write_predictions(out, [ids[i] for i in order], probs[order], id_column, classes)
    sidecar = out.with_suffix(".json")
    sidecar.write_text(
        json.dumps(
            {
                "predictions": out.name,
                "model_id": manifest.get("model_id") or folder.parent.name,
                "model": {
                    "algorithm": manifest.get("algorithm"),
                    "trained_at": manifest.get("created_at"),
                    "trained_by_job": manifest.get("job_id"),
                    "sites": manifest.get("sites"),
                    "label_owner": manifest.get("label_owner"),
                    "metrics": manifest.get("metrics"),
                    "folder": str(folder.parent),
                },
                "rows": {"score_file": (about or {}).get("score_file"), "scored": len(ids), "id_column": id_column},
                "columns": prediction_columns(probs.shape[1], classes),
                "score": ("probability of class 1" + (f" ({classes[1]!r})" if classes else ""))
                if probs.shape[1] == 2
                else "one probability per class",
                **({"classes": classes} if classes else {}),
                "scored_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "scoring_job_id": (about or {}).get("scoring_job_id"),
            },
            indent=2,
        )
    )
    return {
        "predictions": str(out),
        "rows": len(ids),
        "sidecar": str(sidecar),
        **({"classes": classes} if classes else {}),
    }
