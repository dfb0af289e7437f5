"""`vertical_inference`: score new rows with the model a finished training job saved (issue 14).

1. every site loads its saved f_k and preprocessing, reads its file of new rows and sends salted
   digests of their IDs (phase `score_alignment`); with alignment "psi", NVFlare's DH-PSI over the score
   files' IDs has run first in the job, and each site sends only a fingerprint of the intersection;
2. the coordinator matches the digests (or checks that the fingerprints agree): the rows every site has
   are scored, in one shared order. A label party at the coordinator reads the IDs it wants scored from
   its own score file and takes part in the match (with "psi", by one OpenMined PSI round with the first
   site over the intersection), so that the predictions carry IDs it already held and no site sends one;
3. every site sends f_k of its matched rows (phase `scoring`);
4. the label party, where the training job had it, applies the saved head and writes
   predictions_<model id>.csv (ID, score or class probabilities, the predicted class by name when the
   labels had names) and predictions_<model id>.json (which model, which rows, when).
The result reports how many rows were scored and, per site, how many were unmatched and which categories
training never saw.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vflflare.algorithms.plugin import Algorithm
from vflflare.config import SERVER, JobConfig
from vflflare.data.checks import describe_checks
from vflflare.protocol.alignment import LabelMatchClient, canonical_order, hash_ids, order_key
from vflflare.protocol.model_store import LABEL_DIR, ModelStoreError, label_owner, models_dir
from vflflare.protocol.party_setup import Stateless
from vflflare.protocol.scoring import (
    APPLY,
    LATEST,
    LOAD,
    MATCH,
    REPRESENT,
    SCORE_FILE,
    SCORE_PART,
    apply_head,
    predictions_path,
    read_score_ids,
    score_items,
)
from vflflare.protocol.transport import Transport
from vflflare.registry import register


@dataclass
class VerticalInferenceConfig(JobConfig):
    # the model ID of the training run whose saved model scores (`vflflare models ROOT` lists them); "latest":
    # each party's newest, which must be one model at every party
    model_job: str = LATEST
    score_file: str = SCORE_FILE  # each site's file of new rows, in its data root's <site>/ folder

    def validate(self) -> None:
        super().validate()
        self.check(
            bool(self.model_job),
            "model_job",
            "must name the model ID whose model scores the rows (`vflflare models ROOT` lists them), or be 'latest'",
        )


def matched_order(digests: dict[str, list[str]]) -> tuple[list[str], dict[str, np.ndarray]]:
    """The digests every site has, sorted (one order for all), and each site's row positions in it."""
    common = sorted(set.intersection(*(set(d) for d in digests.values())))
    positions = {}
    for site, ids in digests.items():
        where = {d: i for i, d in enumerate(ids)}
        positions[site] = np.fromiter((where[d] for d in common), dtype=np.int64, count=len(common))
    return common, positions


@register
class VerticalInference(Algorithm):
    name = "vertical_inference"
    Config = VerticalInferenceConfig
    job_name = "vertical_inference"
    phases = ("score_alignment", "scoring")
    # no training tables: each site reads only its file of new rows (SiteRuntime's scorer answers the tasks)
    setup = Stateless(psi_items="score_file")

    @classmethod
    def site_tasks(cls) -> list[str]:
        return [LOAD, MATCH, REPRESENT, APPLY]

    def run(self, net: Transport, label: Any, rows: dict[str, int]) -> dict[str, float]:
        sites = list(net.sites)
        request = {"model_job": self.cfg.model_job, "score_file": self.cfg.score_file}
        psi = self.cfg.alignment == "psi"
        salt = secrets.token_hex(16)
        request.update({"seed": self.cfg.seed} if psi else {"salt": salt})
        with net.ledger.phase("score_alignment"):
            loaded = net.exchange(LOAD, {s: request for s in sites})
            model_job = self._check_one_model(loaded)
            owner = self._label_owner(loaded, model_job)
            # a label party here scores the IDs it lists itself: (IDs, ID column, file)
            own = self._own_score_ids(loaded) if owner == SERVER else None
            keys = None
            if psi:  # every site holds the same intersection in its own canonical order
                matched = self._check_one_intersection(loaded)
                positions: dict[str, np.ndarray | None] = {s: None for s in sites}
                if own is not None:
                    in_all, keys = self._match_own_ids(net, sites[0], own[0], matched)
                    matched = len(in_all)
            else:
                digests = {s: list(r["ids"]) for s, r in loaded.items()}
                if own is not None:
                    digests[SERVER] = hash_ids(own[0], salt)
                common, positions = matched_order(digests)
                matched = len(common)
        if not matched:
            counts = ", ".join(f"{s}: {r['rows']} rows" for s, r in loaded.items())
            mine = f", {SERVER}: {len(own[0])} IDs" if own is not None else ""
            raise ValueError(f"no row ID is in every party's {self.cfg.score_file}: nothing to score ({counts}{mine})")
        with net.ledger.phase("scoring"):
            # the defense covers the scoring uploads too, with each site's private noise
            noise = {"representation_noise": self.cfg.representation_noise} if self.cfg.representation_noise else {}
            keep = {"keys": keys} if keys is not None else {}
            replies = net.exchange(REPRESENT, {s: {"positions": positions[s], **keep, **noise} for s in sites})
            reps = {s: np.asarray(r["reps"]) for s, r in replies.items()}
            # what a site's local configuration enforced on its uploads (privacy/enforcement.py): privacy.enforced
            self.enforced = {s: r["enforced"] for s, r in replies.items() if "enforced" in r}
            about = {"scoring_job_id": self.job_id or "inprocess"}
            if own is not None:
                ids, id_column, file = own
                out = predictions_path(self.runs_root, model_job)  # named after the model that scores
                folder = models_dir(self.runs_root or ".", model_job) / LABEL_DIR
                if psi:  # the intersection's canonical order: that of the representations
                    scored_ids = in_all
                    where = {row_id: row for row, row_id in enumerate(ids)}
                    order = np.asarray([where[i] for i in scored_ids], dtype=np.int64)
                else:  # the coordinator's own rows, in the matched order
                    order = positions[SERVER]
                    scored_ids = [ids[i] for i in order]
                scored = apply_head(folder, reps, scored_ids, out, order, id_column, {**about, "score_file": file})
            else:
                scored = net.exchange(
                    APPLY, {owner: {"reps": reps, "positions": positions[owner], "model_id": model_job, "about": about}}
                )[owner]
        self.info.update(
            model_job=model_job,
            algorithm=loaded[sites[0]]["algorithm"],
            label_owner=owner,
            predictions=scored["predictions"],
            **({"predictions_about": scored["sidecar"]} if scored.get("sidecar") else {}),
            **({"classes": scored["classes"]} if scored.get("classes") else {}),
            per_site={
                s: {
                    "file": r["file"],
                    "rows": r["rows"],
                    "unmatched": r["rows"] - matched,
                    "unseen_categories": r["data_checks"]["unseen_categories"],  # as before data_checks
                    "data_checks": r["data_checks"],
                }
                for s, r in loaded.items()
            },
            # the IDs the label party at the coordinator listed, and how many of them some site lacks
            **(
                {"label_party": {"file": own[2], "rows": len(own[0]), "unmatched": len(own[0]) - matched}}
                if own
                else {}
            ),
        )
        for site, report in self.info["per_site"].items():
            self.tracker.info(
                f"{site}: {report['rows']} rows in {report['file']}, {report['unmatched']} not at "
                f"every party (not scored)"
            )
        if own:
            self.tracker.info(f"{SERVER}: {len(own[0])} IDs in {own[2]}, {len(own[0]) - matched} not at every site")
            for line in describe_checks(f"site {site!r}", report["data_checks"]):
                self.tracker.info(line)
        self.tracker.info(
            f"scored {matched} rows with model {model_job}; predictions at {owner}: {scored['predictions']}"
        )
        return {"scored_rows": float(matched)}

    def _own_score_ids(self, loaded: dict[str, dict]) -> tuple[list[str], str, str]:
        """The label party at the coordinator: the IDs it wants scored, read from <its data root>/server/
        <score_file> and normalised as the training job normalised them (the sites report how)."""
        if self.data_root is None:
            raise ValueError(
                f"the label party is at the coordinator, which scores the IDs it lists in <data root>/{SERVER}/"
                f"{self.cfg.score_file}; the coordinator has no data root set"
            )
        forms = {s: tuple(r["id_normalize"]) for s, r in loaded.items()}
        if len(set(forms.values())) > 1:
            raise ModelStoreError(f"the sites' saved models normalise IDs differently: {forms}")
        ids, id_column, path = read_score_ids(
            Path(self.data_root) / SERVER, self.cfg.score_file, list(next(iter(forms.values())))
        )
        self.tracker.info(f"label party '{SERVER}': {len(ids)} IDs to score in {path}")
        return ids, id_column, str(path)

    def _match_own_ids(
        self, net: Transport, first: str, ids: list[str], matched: int
    ) -> tuple[list[str], list[str] | None]:
        """Alignment "psi": which of the coordinator's IDs every site has, by one OpenMined PSI round with the
        first site over its intersection, in the intersection's canonical order; and the order keys of those
        rows, for the sites to score only them (None when the coordinator has every row)."""
        client = LabelMatchClient(score_items(ids))
        answer = net.exchange(MATCH, {first: client.request()})[first]
        mine = [item.partition(":")[2] for item in client.matches(answer)]  # its own items, score:<id>
        in_all = canonical_order(mine, self.cfg.seed, SCORE_PART)
        keys = [order_key(self.cfg.seed, SCORE_PART, i) for i in in_all] if len(in_all) < matched else None
        return in_all, keys

    def _check_one_model(self, loaded: dict[str, dict]) -> str:
        """The one training job every site's saved model comes from."""
        jobs = {s: r["job_id"] for s, r in loaded.items()}
        hashes = {s: r["config_hash"] for s, r in loaded.items()}
        if len(set(jobs.values())) > 1 or len(set(hashes.values())) > 1:
            raise ModelStoreError(
                f"the sites' saved models come from different training runs ({jobs}, config "
                f"hashes {hashes}); set model_job to the model ID every site has a model of "
                f"(`vflflare models ROOT` lists them)"
            )
        return next(iter(jobs.values()))

    @staticmethod
    def _check_one_intersection(loaded: dict[str, dict]) -> int:
        """The size of the PSI intersection every site scores; sites that hold different ones are an error."""
        found = {s: (r["matched"], r["fingerprint"]) for s, r in loaded.items()}
        if len(set(found.values())) > 1:
            sizes = {s: n for s, (n, _) in found.items()}
            raise ValueError(
                f"the sites hold different PSI intersections of their score files (sizes {sizes}); "
                f"rerun the job so that DH-PSI runs over the files being scored"
            )
        return next(iter(found.values()))[0]

    def _label_owner(self, loaded: dict[str, dict], model_job: str) -> str:
        holders = [s for s, r in loaded.items() if r["label_model"]]
        if label_owner(models_dir(self.runs_root or ".", model_job) / LABEL_DIR) == SERVER:
            holders.append(SERVER)
        if len(holders) != 1:
            raise ModelStoreError(
                f"model {model_job}: {'no party' if not holders else holders} holds its label model "
                f"(the head); a training job that ended before its classifier saves none"
            )
        if self.cfg.label_owner not in (SERVER, holders[0]):  # a site named, but the head is elsewhere
            raise ModelStoreError(
                f"label_owner {self.cfg.label_owner!r}, but the label model (the head) of model "
                f"{model_job} is at {holders[0]!r}: leave label_owner out, or name {holders[0]!r}"
            )
        return holders[0]

    def expected_communications(self, sites: list[str], rows: dict[str, int]) -> dict[str, dict[str, int]]:
        """One upload per site (its representations; ID digests and row positions are control), and
        one download of every site's representations to a label-owning site."""
        owner = self.info.get("label_owner", SERVER)
        return {s: {"uploads": 1, "downloads": int(s == owner)} for s in sites}
