"""The built wheel works outside the repository, as a platform team would install it.

One wheel build and one fresh virtual environment (scripts/wheel_venv.sh: the runtime
lock's pins, no extras) serve every test here; the commands run from an empty folder,
so nothing can be found beside the repository. About a minute, most of it pip.
"""

import json
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
EXTRAS_MODULES = ("sklearn", "matplotlib", "pyarrow", "numba", "llvmlite")  # offline and numba extras

pytestmark = pytest.mark.package


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("wheel")
    subprocess.run(["bash", str(REPO / "scripts" / "wheel_venv.sh"), str(root)], check=True, timeout=900)
    return root / "venv"


@pytest.fixture()
def empty_folder(tmp_path) -> Path:
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    return folder


def run(venv: Path, folder: Path, *command: str, **environment: str) -> subprocess.CompletedProcess:
    """A command of the venv, run in folder with a bare environment (plus the variables given)."""
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(folder), "PYTHONSAFEPATH": "1", **environment}
    return subprocess.run([str(venv / "bin" / command[0]), *command[1:]], cwd=folder, capture_output=True,
                          text=True, timeout=600, env=env)


def test_plan_solves_the_shipped_examples_from_an_empty_folder(venv, empty_folder):
    result = run(venv, empty_folder, "tessera", "plan", "--time-limit", "60", "--output", "json")
    assert result.returncode == 0, result.stderr  # exit 0: every system fully served (3 would be infeasible)
    plan = json.loads(result.stdout)
    assert {summary["system"] for summary in plan["systems"]} == {"traffic-analysis", "social-media", "ar-assistant"}
    assert list(empty_folder.iterdir()) == []


def test_the_wheel_carries_the_examples_and_the_crds(venv, empty_folder):
    code = ("from importlib import resources\n"
            "print(sorted(p.name for p in resources.files('tessera.examples').iterdir() if p.name.endswith('.yaml')))\n"
            "print(sorted(p.name for p in resources.files('tessera.crds').iterdir()))")
    result = run(venv, empty_folder, "python", "-c", code)
    assert result.returncode == 0, result.stderr
    examples, crds = result.stdout.splitlines()
    assert "traffic-analysis.yaml" in examples and "compoundinferencesystems.tessera.ai.yaml" in crds


def test_the_twin_runs_with_the_kernel_compiled_at_install_time(venv, empty_folder):
    locate = run(venv, empty_folder, "python", "-c",
                 "from tessera.shipped import example; from tessera.planner.twin import ckernel\n"
                 "print(example('twin/workload.yaml')); print(ckernel.installed_library())")
    assert locate.returncode == 0, locate.stderr
    workload, kernel = locate.stdout.split()
    assert kernel != "None", "setup.py compiled no C kernel although this machine has a compiler"
    result = run(venv, empty_folder, "tessera", "twin", "run", workload)
    assert result.returncode == 0, result.stderr
    assert "throughput / offered" in result.stdout
    assert "falling back to numba" not in result.stderr


def test_without_a_c_kernel_the_twin_names_the_numba_extra(venv, empty_folder):
    """Forcing the numba kernel stands in for a machine without a compiler: numba is not installed."""
    locate = run(venv, empty_folder, "python", "-c", "from tessera.shipped import example; "
                                                     "print(example('twin/workload.yaml'))")
    result = run(venv, empty_folder, "tessera", "twin", "run", locate.stdout.strip(), TESSERA_TWIN_ENGINE="numba")
    assert result.returncode != 0
    assert "pip install 'tessera[numba]'" in result.stderr and "Traceback" not in result.stderr


def test_the_runtime_installs_without_the_extras(venv, empty_folder):
    code = ("import importlib.util\n"
            f"print([m for m in {EXTRAS_MODULES!r} if importlib.util.find_spec(m)])")
    result = run(venv, empty_folder, "python", "-c", code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_an_offline_command_names_the_extra_it_needs(venv, empty_folder):
    result = run(venv, empty_folder, "tessera", "twin", "train", "--no-compile")
    assert result.returncode != 0
    assert "pip install 'tessera[offline]'" in result.stderr
