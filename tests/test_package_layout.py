"""The design's folders import under one package, and the top-level operator/ folder never
passes for the standard library's `operator`.

Each check runs in a fresh interpreter: pytest itself imported the standard `operator`
long before any test runs, so an in-process check could not fail.
"""

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

from click.testing import CliRunner

from tessera.cli import main

REPO = Path(__file__).resolve().parents[1]


def python(code: str, *flags: str) -> subprocess.CompletedProcess:
    """Run code with the repository root as working directory, as a developer would."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONSAFEPATH"}
    return subprocess.run([sys.executable, *flags, "-c", code], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=120)


def test_design_folders_import_under_one_package():
    code = ("import importlib\n"
            "for name in ('tessera.planner', 'tessera.operator', 'tessera.profiler'):\n"
            "    module = importlib.import_module(name)\n"
            "    print(name, module.__name__, module.__file__)")
    result = python(code, "-P")
    assert result.returncode == 0, result.stderr
    folders = {line.split()[0]: Path(line.split()[2]).parent.name for line in result.stdout.splitlines()}
    assert folders == {"tessera.planner": "planner", "tessera.operator": "operator",
                       "tessera.profiler": "profiler-job"}


def test_standard_library_operator_is_not_shadowed_under_the_safe_path_rule():
    result = python("import operator; print(operator.__file__); print(operator.add(2, 3))", "-P")
    assert result.returncode == 0, result.stderr
    origin, total = result.stdout.split()
    assert Path(origin).parent == Path(sysconfig.get_paths()["stdlib"]) and total == "5"


def test_importing_the_operator_folder_as_the_standard_library_fails_loudly():
    """Without -P the working directory comes first on sys.path and the folder must refuse, naming the fix.
    -S keeps site.py from importing the standard module first, which would otherwise hide the shadowing
    until some later import of a submodule."""
    result = python("import operator", "-S")
    assert result.returncode != 0
    assert "ImportError" in result.stderr and "PYTHONSAFEPATH=1" in result.stderr


def test_cli_reports_its_version():
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0
    assert "tessera" in result.output
