from pathlib import Path

import pytest

PARVAGPU = Path(__file__).resolve().parents[1] / "data" / "parvagpu-a100-mig"


@pytest.fixture(scope="session")
def measurements() -> Path:
    """The ParvaGPU A100 MIG measurements, vendored under tests/data."""
    return PARVAGPU


def pytest_collection_modifyitems(config, items):
    """Tests marked `slow` run only when asked for: `pytest -m slow` (or TESSERA_SLOW=1)."""
    import os

    expression = config.getoption("-m") or ""
    if os.environ.get("TESSERA_SLOW") or ("slow" in expression and "not slow" not in expression):
        return
    skip = pytest.mark.skip(reason="slow: run with `pytest -m slow` or TESSERA_SLOW=1")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
