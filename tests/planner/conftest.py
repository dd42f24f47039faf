from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MEASUREMENTS = REPO.parent / "shared" / "data" / "parvagpu-a100-mig"


@pytest.fixture(scope="session")
def measurements() -> Path:
    if not MEASUREMENTS.is_dir():
        pytest.skip(f"measured profiles not found at {MEASUREMENTS}")
    return MEASUREMENTS
