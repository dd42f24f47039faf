"""Fit the per-variant correction's instance scaling on the ParvaGPU A100 measurements.

    .venv/bin/python -P scripts/calibrate_instance_scaling.py [MEASUREMENTS_DIR]

Writes planner/data/instance_scaling.json (commit it): the estimator's
coefficients and a compute multiplier per MIG profile, fitted on every
measured model (see planner/correction.py).
"""

import sys
from pathlib import Path

from tessera.planner.calibration import Dataset, reference_models
from tessera.planner.catalog import gpu_product
from tessera.planner.correction import calibrate_instance_scaling, write_instance_scalings
from tessera.planner.measured import PARVAGPU_GPU, read_parvagpu_dir

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_MEASUREMENTS = ROOT.parent / "shared" / "data" / "parvagpu-a100-mig"
OUTPUT = ROOT / "planner" / "data" / "instance_scaling.json"


def main() -> None:
    measurements = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_MEASUREMENTS
    data = Dataset.from_rows(read_parvagpu_dir(measurements), reference_models())
    scaling = calibrate_instance_scaling(data, gpu_product(PARVAGPU_GPU))
    write_instance_scalings([scaling], OUTPUT, "shared/data/parvagpu-a100-mig (ParvaGPU SC'24, A100-80GB)")
    print(OUTPUT.read_text())


if __name__ == "__main__":
    main()
