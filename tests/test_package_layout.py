import importlib
import operator

from click.testing import CliRunner

from tessera.cli import main


def test_design_folders_import_under_one_package():
    for name in ("tessera.planner", "tessera.operator", "tessera.profiler"):
        assert importlib.import_module(name).__name__ == name


def test_standard_library_operator_is_not_shadowed():
    assert operator.add(2, 3) == 5


def test_cli_reports_its_version():
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0
    assert "tessera" in result.output
