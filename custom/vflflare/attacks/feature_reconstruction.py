"""Feature reconstruction by the label party (a learning-based attack on intermediate representations, as
in He et al., "Model Inversion Attacks against Collaborative Inference", ACSAC 2019, and VFLAIR's feature
inference attacks): from the representations a site uploaded, predict the site's own input columns with a
ridge regression fitted on auxiliary rows whose both sides the label party is assumed to know. Scored per
column as R² against predicting the auxiliary rows' mean, on the other rows: 0 = learned nothing, 1 = the
column exactly."""

from __future__ import annotations

import numpy as np
from sklearn.linear_model import RidgeCV
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

CHANNEL = "representations"
AUX_ROWS = 200


def reconstruction_r2(reps: np.ndarray, columns: np.ndarray, aux_rows: int = AUX_ROWS) -> np.ndarray:
    """R² per column on the rows after the first aux_rows (at most half the rows), of a ridge fitted on those
    first rows, against their mean."""
    reps, columns = np.asarray(reps, dtype=np.float64), np.asarray(columns, dtype=np.float64)
    if len(reps) != len(columns) or len(reps) < 4:
        raise ValueError(
            f"feature reconstruction needs as many representations as rows of columns, at least 4: "
            f"got {len(reps)} and {len(columns)}"
        )
    aux_rows = min(aux_rows, len(reps) // 2)
    model = make_pipeline(StandardScaler(), RidgeCV(alphas=np.logspace(-3, 3, 13)))
    model.fit(reps[:aux_rows], columns[:aux_rows])
    truth, predicted = columns[aux_rows:], model.predict(reps[aux_rows:]).reshape(len(reps) - aux_rows, -1)
    baseline = ((truth - columns[:aux_rows].mean(axis=0)) ** 2).sum(axis=0)
    error = ((truth - predicted) ** 2).sum(axis=0)
    # a column constant on the scored rows and equal to the aux mean has nothing to reconstruct: R² 0
    return np.where(baseline > 0, 1.0 - error / np.where(baseline > 0, baseline, 1.0), 0.0)
