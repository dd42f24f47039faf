"""Does a variant's own measurement on two MIG profiles predict the other three? Held out, on real data.

    .venv/bin/python -P bench/variant_correction.py [MEASUREMENTS_DIR]

For each of the 11 models measured on an A100-80GB (ParvaGPU): the 1g and 3g
rows (every MPS degree and batch) are the model's measurements; its 2g, 4g
and 7g rows are predicted and compared. Nothing fitted here has seen the
model's 2g/4g/7g rows: the estimator's coefficients and the instance scaling
are calibrated on the OTHER models (leave one model out), then refitted to
the model's own 1g/3g rows. Side by side, on the same rows:
- estimator: the analytical estimator calibrated on the other models (what
  a variant gets today without measurements; the 13-14% of
  bench/results/estimator_error.md);
- refit, nominal shares: the correction with instances scaled by their SMs;
- correction: refit with the instance scaling calibrated on the other models
  and the variant's host time per request taken from its own 1g/3g rows
  (what planner/correction.py does; its shipped scaling is calibrated on all
  models, which this benchmark must not use).
The refit with nominal shares gets the host time too.
Error = |predicted / measured - 1| of the batch latency of one process and of
the segment's throughput. Writes bench/results/variant_correction.md and .json.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from tessera.planner.calibration import Dataset, default_layers, fit, reference_models
from tessera.planner.catalog import gpu_product
from tessera.planner.correction import CorrectedEstimator, InstanceScaling, MeasuredPoint, calibrate_instance_scaling, correct
from tessera.planner.measured import PARVAGPU_GPU, MeasuredRow, read_parvagpu_dir
from tessera.planner.model import Variant

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_MEASUREMENTS = ROOT.parent / "shared" / "data" / "parvagpu-a100-mig"
RESULTS = ROOT / "bench" / "results"
MEASURED = ("1g.10gb", "3g.40gb")
PREDICTED = ("2g.20gb", "4g.40gb", "7g.80gb")
METHODS = ("estimator", "refit, nominal shares", "correction")
APART = ("bert", "inceptionv3")


def errors(estimator, rows: list[MeasuredRow]) -> tuple[np.ndarray, np.ndarray]:
    ratio = np.array([estimator.latency_ms(r.segment.mig_profile, r.segment.mps, r.batch) / r.latency_ms
                      for r in rows])
    return np.abs(ratio - 1.0), np.abs(1.0 / ratio - 1.0)


def summary(latency: np.ndarray, throughput: np.ndarray) -> dict:
    return {"rows": int(len(latency)), "latency_median": float(np.median(latency)),
            "latency_p90": float(np.quantile(latency, 0.9)), "latency_worst": float(latency.max()),
            "throughput_median": float(np.median(throughput)), "throughput_worst": float(throughput.max())}


def run(measurements: Path) -> dict:
    started = time.perf_counter()
    gpu = gpu_product(PARVAGPU_GPU)
    models = reference_models()
    rows = read_parvagpu_dir(measurements)
    data = Dataset.from_rows(rows, models)
    layers = default_layers(models)
    shipped = fit(data, layers)
    per_model, collected = {}, {m: {} for m in METHODS}
    for name in sorted(models):
        others = data.subset(data.variant != name)
        held_out = fit(others, layers, shipped.vector())
        scaling = calibrate_instance_scaling(others, gpu, held_out)
        figures = models[name]
        variant = Variant(name=name, accuracy=1.0, memory_gb=1.0, gflops=figures.gflops,
                          params_millions=figures.params_millions, layers=figures.layers)
        own = [r for r in rows if r.variant == name]
        points = [MeasuredPoint(r.segment, r.batch, r.latency_ms) for r in own if r.segment.mig_profile in MEASURED]
        targets = [r for r in own if r.segment.mig_profile in PREDICTED]
        estimators = {
            "estimator": CorrectedEstimator(variant=variant, gpu=gpu, scaling=InstanceScaling.nominal(gpu, held_out)),
            "refit, nominal shares": correct(variant, gpu, points, InstanceScaling.nominal(gpu, held_out)),
            "correction": correct(variant, gpu, points, scaling),
        }
        per_model[name] = {"measured_rows": len(points), "multipliers": scaling.compute_multipliers}
        for method, estimator in estimators.items():
            latency, throughput = errors(estimator, targets)
            collected[method][name] = (latency, throughput, [r.segment.mig_profile for r in targets])
            per_model[name][method] = summary(latency, throughput)
    groups = {"all models": sorted(models), "without BERT and Inception v3": [m for m in sorted(models) if m not in APART],
              **{m: [m] for m in APART}}
    overall = {}
    for method in METHODS:
        overall[method] = {}
        for group, names in groups.items():
            latency = np.concatenate([collected[method][n][0] for n in names])
            throughput = np.concatenate([collected[method][n][1] for n in names])
            overall[method][group] = summary(latency, throughput)
        for profile in PREDICTED:
            mask = np.concatenate([np.array(collected[method][n][2]) == profile for n in sorted(models)])
            latency = np.concatenate([collected[method][n][0] for n in sorted(models)])[mask]
            throughput = np.concatenate([collected[method][n][1] for n in sorted(models)])[mask]
            overall[method][profile] = summary(latency, throughput)
    return {"measurements": str(measurements), "measured_profiles": MEASURED, "predicted_profiles": PREDICTED,
            "error": "|predicted / measured - 1| per predicted row", "overall": overall, "per_model": per_model,
            "seconds": round(time.perf_counter() - started, 1)}


def pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def model_rows(result: dict) -> list[tuple[str, ...]]:
    out = []
    for name, entry in result["per_model"].items():
        out.append((name, str(entry["correction"]["rows"]),
                    *(pct(entry[m]["latency_median"]) for m in METHODS),
                    pct(entry["correction"]["throughput_median"]), pct(entry["correction"]["latency_worst"])))
    return out


def group_rows(result: dict) -> list[tuple[str, ...]]:
    out = []
    for group, entry in result["overall"]["correction"].items():
        out.append((group, str(entry["rows"]), *(pct(result["overall"][m][group]["latency_median"]) for m in METHODS),
                    pct(entry["throughput_median"]), pct(entry["latency_worst"])))
    return out


HEADER = ("rows predicted", "rows", "estimator latency median", "refit (nominal) latency median",
          "correction latency median", "correction throughput median", "correction latency worst")


def markdown(result: dict) -> str:
    table = ["| " + " | ".join(HEADER) + " |", "| " + " | ".join("---" for _ in HEADER) + " |"]
    lines = [
        "# Per-variant correction: 2g, 4g and 7g predicted from a model's own 1g and 3g rows",
        "",
        "Generated by `.venv/bin/python -P bench/variant_correction.py` (do not edit by hand).",
        "",
        "Data: ParvaGPU's A100-80GB measurements. Per model, its 1g.10gb and 3g.40gb rows (every MPS degree and "
        "batch) are its measurements; its 2g.20gb, 4g.40gb and 7g.80gb rows are predicted. The estimator's "
        "coefficients and the instance scaling are calibrated on the other 10 models only. Error = "
        "|predicted / measured - 1|.",
        "",
        "By group and by predicted profile:",
        "",
        *table,
        *("| " + " | ".join(row) + " |" for row in group_rows(result)),
        "",
        "By model:",
        "",
        *table,
        *("| " + " | ".join(row) + " |" for row in model_rows(result)),
        "",
        f"Run time: {result['seconds']} s.",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    measurements = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_MEASUREMENTS
    result = run(measurements)
    table = Table(title="2g/4g/7g rows predicted from 1g/3g, model held out of every calibration")
    for column in HEADER:
        table.add_column(column, justify="left" if column == "rows predicted" else "right")
    for row in group_rows(result) + model_rows(result):
        table.add_row(*row)
    Console(width=160).print(table)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "variant_correction.md").write_text(markdown(result))
    (RESULTS / "variant_correction.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {RESULTS / 'variant_correction.md'} and .json ({result['seconds']} s)")


if __name__ == "__main__":
    main()
