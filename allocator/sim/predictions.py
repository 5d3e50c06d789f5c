"""The platform's runtime predictor inside a replay (allocator/predict.py; docs/predictions.md).

Each job gets a prediction at the moment it is submitted, from the jobs that had finished in this replay by
then (the predictor is fed as jobs complete, so it cannot see the future); the summary compares it with the
job's real duration. Traces carry no job names or commands, so the levels that match on them never apply:
predictions come from the same tenant and gang size, then any tenant with that gang size.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from allocator.predict import Finished, Prediction, Query, RuntimeHistory


class SimPredictor:
    def __init__(self, tenant_names: list[str], n_jobs: int) -> None:
        self.names = tenant_names
        self.history = RuntimeHistory()
        self.median = np.full(n_jobs, np.nan)  # predicted at submit; NaN = no prediction (cold start)
        self.p90 = np.full(n_jobs, np.nan)
        self.asked = np.zeros(n_jobs, dtype=np.bool_)  # admitted, so predicted (or found cold)

    def query(self, tenant: int, gpus: int) -> Query:
        return Query(self.names[tenant], "", "", int(gpus))

    def at_submit(self, job: int, tenant: int, gpus: int) -> Prediction | None:
        self.asked[job] = True
        got = self.history.predict(self.query(tenant, gpus))
        if got is not None:
            self.median[job], self.p90[job] = got.median_s, got.p90_s
        return got

    def finished(self, tenant: int, gpus: int, runtime_s: int, end: int) -> None:
        self.history.add(Finished(self.names[tenant], "", "", int(gpus), float(runtime_s), float(end)))


def prediction_figures(predictor: SimPredictor, duration_s: npt.NDArray[np.int64]) -> dict[str, Any]:
    """Median absolute percentage error of the predicted median, and how often the real runtime exceeded the
    predicted 90th percentile, over the arrived jobs that got a prediction (and ran for a nonzero time)."""
    arrived = predictor.asked
    had = arrived & ~np.isnan(predictor.median) & (duration_s > 0)
    out: dict[str, Any] = {
        "predicted_jobs": int(had.sum()),
        "prediction_coverage": round(float(had.sum() / max(int(arrived.sum()), 1)), 4),
        "prediction_mdape": None,
        "prediction_p90_exceeded": None,
    }
    if had.any():
        real = duration_s[had].astype(np.float64)
        ape = np.abs(predictor.median[had] - real) / real
        out["prediction_mdape"] = round(float(np.median(ape)), 4)
        out["prediction_p90_exceeded"] = round(float((real > predictor.p90[had]).mean()), 4)
    return out
