"""Calibrating the estimator on measured profiles, and measuring its error.

The fit: robust least squares (scipy's soft-L1 loss, scale 0.1) on
log(predicted / measured batch latency) over every measured row, with
coefficients bounded to physical ranges. The throughput error follows from
the latency error (throughput = processes x batch / latency). A soft-L1 loss
keeps a few odd rows (BERT, which scales poorly with slices) from dragging
every other model's fit.

Regenerate the shipped coefficients with
`.venv/bin/python scripts/calibrate_estimator.py`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import cast

import numpy as np
import yaml

from tessera.planner.catalog import gpu_product
from tessera.planner.estimator import VECTOR_FIELDS, Coefficients, instance_peak_tflops, latency_ms
from tessera.planner.measured import MeasuredRow

REFERENCE_MODELS_FILE = "reference_models.yaml"
REGENERATE_COMMAND = ".venv/bin/python scripts/calibrate_estimator.py"
LOSS_SCALE = 0.1

# (lower, upper, start) per coefficient, in VECTOR_FIELDS order
BOUNDS = {
    "launch_ms": (0.0, 10.0, 0.5),
    "launch_ms_per_layer": (0.0, 1.0, 0.08),
    "efficiency_max": (1e-3, 1.0, 0.2),
    "efficiency_half_gflops_per_layer": (1e-3, 10.0, 0.1),
    "efficiency_exponent": (0.2, 4.0, 1.0),
    "bandwidth_efficiency": (0.05, 1.0, 0.5),
    "overlap_exponent": (1.0, 20.0, 3.0),
    "mps_penalty": (0.0, 1.0, 0.02),
}


@dataclass(frozen=True)
class ReferenceModel:
    name: str
    gflops: float
    params_millions: float
    layers: int
    source: str


def reference_models() -> dict[str, ReferenceModel]:
    """GFLOPs, parameters and layers of the 11 measured models (data/reference_models.yaml)."""
    text = resources.files("tessera.planner").joinpath("data", REFERENCE_MODELS_FILE).read_text()
    return {
        m["name"]: ReferenceModel(m["name"], float(m["gflops"]), float(m["params_millions"]), int(m["layers"]),
                                  m["source"])
        for m in yaml.safe_load(text)["models"]
    }


@dataclass(frozen=True)
class Dataset:
    """Measured rows as arrays, with the figures the estimator reads."""

    variant: np.ndarray
    gflops: np.ndarray
    params_millions: np.ndarray
    layers: np.ndarray
    batch: np.ndarray
    mps: np.ndarray
    peak_tflops: np.ndarray
    bandwidth_gbs: np.ndarray
    mig_profile: np.ndarray
    latency_ms: np.ndarray

    @classmethod
    def from_rows(cls, rows: list[MeasuredRow], models: dict[str, ReferenceModel]) -> "Dataset":
        missing = sorted({r.variant for r in rows} - set(models))
        if missing:
            raise ValueError(f"no GFLOPs/parameters/layers for measured models {missing}")
        columns: dict[str, list[object]] = {name: [] for name in cls.__dataclass_fields__}
        for row in rows:
            model, gpu = models[row.variant], gpu_product(row.segment.gpu)
            mig = gpu.profile(row.segment.mig_profile)
            for name, value in (
                ("variant", row.variant), ("gflops", model.gflops), ("params_millions", model.params_millions),
                ("layers", model.layers), ("batch", row.batch), ("mps", row.segment.mps),
                ("peak_tflops", instance_peak_tflops(gpu, mig)), ("bandwidth_gbs", gpu.bandwidth_share(mig)),
                ("mig_profile", mig.name), ("latency_ms", row.latency_ms),
            ):
                columns[name].append(value)
        return cls(**{name: np.array(values) for name, values in columns.items()})

    def __len__(self) -> int:
        return len(self.variant)

    def subset(self, mask: np.ndarray) -> "Dataset":
        return Dataset(**{name: getattr(self, name)[mask] for name in self.__dataclass_fields__})

    def predict(self, coefficients: np.ndarray) -> np.ndarray:
        return latency_ms(coefficients, self.gflops, self.params_millions, self.layers, self.batch, self.mps,
                          self.peak_tflops, self.bandwidth_gbs)

    def relative_errors(self, coefficients: Coefficients) -> tuple[np.ndarray, np.ndarray]:
        """|predicted/measured - 1| of batch latency, and of segment throughput, per row."""
        ratio = self.predict(coefficients.vector()) / self.latency_ms
        return np.abs(ratio - 1.0), np.abs(1.0 / ratio - 1.0)


def fit(data: Dataset, default_layers: int, start: np.ndarray | None = None) -> Coefficients:
    """Least squares on log latency error (soft-L1 loss), coefficients within BOUNDS."""
    from scipy.optimize import least_squares  # only calibration needs scipy

    lower = np.array([BOUNDS[n][0] for n in VECTOR_FIELDS])
    upper = np.array([BOUNDS[n][1] for n in VECTOR_FIELDS])
    x0 = np.array([BOUNDS[n][2] for n in VECTOR_FIELDS]) if start is None else np.clip(start, lower, upper)
    log_measured = np.log(data.latency_ms)

    def residuals(vector: np.ndarray) -> np.ndarray:
        return cast(np.ndarray, np.log(data.predict(vector)) - log_measured)

    result = least_squares(residuals, x0, bounds=(lower, upper), loss="soft_l1", f_scale=LOSS_SCALE)
    return Coefficients.from_vector(result.x, default_layers)


def default_layers(models: dict[str, ReferenceModel]) -> int:
    """Layers assumed for a variant that does not state them: the reference models' median."""
    return int(np.median([m.layers for m in models.values()]))


def leave_one_model_out(data: Dataset, default: int, start: Coefficients | None = None) -> dict[str, tuple[Coefficients, np.ndarray, np.ndarray]]:
    """Per model: coefficients fitted on the other models, and its latency and throughput errors."""
    out = {}
    for name in sorted(set(data.variant)):
        held_out = data.variant == name
        coefficients = fit(data.subset(~held_out), default, None if start is None else start.vector())
        out[name] = (coefficients, *data.subset(held_out).relative_errors(coefficients))
    return out


def write_coefficients(coefficients: Coefficients, data: Dataset, path: str | Path, measured_from: str) -> None:
    latency_error, throughput_error = data.relative_errors(coefficients)
    document = {
        "regenerate": REGENERATE_COMMAND,
        "fitted_on": {
            "measurements": measured_from,
            "rows": len(data),
            "models": sorted(set(data.variant.tolist())),
            "method": f"scipy least_squares, soft_l1 loss (f_scale {LOSS_SCALE}) on log latency ratio",
        },
        "in_sample": {
            "latency_median_relative_error": round(float(np.median(latency_error)), 4),
            "latency_worst_relative_error": round(float(latency_error.max()), 4),
            "throughput_median_relative_error": round(float(np.median(throughput_error)), 4),
            "throughput_worst_relative_error": round(float(throughput_error.max()), 4),
        },
        "coefficients": {k: (round(v, 6) if isinstance(v, float) else v)
                         for k, v in coefficients.model_dump().items()},
    }
    Path(path).write_text(json.dumps(document, indent=2) + "\n")
