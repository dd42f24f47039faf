"""Refit the estimator's coefficients on the ParvaGPU A100 measurements.

    .venv/bin/python scripts/calibrate_estimator.py [MEASUREMENTS_DIR]

Writes planner/data/estimator_coefficients.json (commit it).
"""

import sys
from pathlib import Path

from tessera.planner.calibration import Dataset, default_layers, fit, reference_models, write_coefficients
from tessera.planner.measured import read_parvagpu_dir

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_MEASUREMENTS = ROOT.parent / "shared" / "data" / "parvagpu-a100-mig"
OUTPUT = ROOT / "planner" / "data" / "estimator_coefficients.json"


def main() -> None:
    measurements = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_MEASUREMENTS
    models = reference_models()
    data = Dataset.from_rows(read_parvagpu_dir(measurements), models)
    coefficients = fit(data, default_layers(models))
    write_coefficients(coefficients, data, OUTPUT, "shared/data/parvagpu-a100-mig (ParvaGPU SC'24, A100-80GB)")
    print(OUTPUT.read_text())


if __name__ == "__main__":
    main()
