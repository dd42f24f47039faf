"""tessera's import graph: no module imports itself through others, and every module a contract names exists.

The graph is grimp's (import-linter's own) over the staged package tree, as
scripts/checks.sh stages it: planner/ and operator/ only become
tessera.planner and tessera.operator through setup.py's mapping. Imports
under `if TYPE_CHECKING:` are left out: they never run.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GRAPH = """
import json, sys, grimp
graph = grimp.build_graph("tessera", exclude_type_checking_imports=True)
print(json.dumps({m: sorted(graph.find_modules_directly_imported_by(m)) for m in graph.modules}))
"""


@pytest.fixture(scope="module")
def imports(tmp_path_factory) -> dict[str, list[str]]:
    tree = tmp_path_factory.mktemp("tree")
    subprocess.run([sys.executable, "-P", "setup.py", "-q", "build_py", "--build-lib", str(tree)], cwd=ROOT,
                   check=True, capture_output=True)
    out = subprocess.run([sys.executable, "-P", "-c", GRAPH], cwd=tree, env={"PYTHONPATH": str(tree)},
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def cycles(edges: dict[str, list[str]]) -> list[list[str]]:
    """The graph's strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(edges.get(start, ())))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = len(index)
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(edges.get(succ, ()))))
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_the_cycle_finder_finds_a_cycle_through_three_modules():
    assert cycles({"a": ["b"], "b": ["c"], "c": ["a", "d"], "d": []}) == [["a", "b", "c"]]


def test_no_module_of_tessera_imports_itself_through_others(imports):
    found = cycles(imports)
    assert not found, "modules that import each other: " + "; ".join(" <-> ".join(c) for c in found)


def contract_modules() -> list[tuple[str, str]]:
    """(contract, module) for every module of tessera that pyproject.toml's import contracts name."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    named = []
    for contract in config["contracts"]:
        modules = contract.get("source_modules", []) + contract.get("forbidden_modules", [])
        for container in contract.get("containers", []):
            for layer in contract.get("layers", []):
                modules += [f"{container}.{name.strip()}" for name in layer.replace(":", "|").split("|")]
            modules.append(container)
        named += [(contract["name"], m) for m in modules if m.split(".")[0] in config["root_packages"]]
    return named


def test_the_contracts_name_the_operators_builders_and_layers():
    modules = {m for _, m in contract_modules()}
    assert {"tessera.operator.reconcile.builders", "tessera.operator.entry", "tessera.operator.api"} <= modules


def test_every_module_an_import_contract_names_exists(imports):
    # import-linter's own `forbidden` and `layers` refuse an absent module; this keeps a custom contract type
    # that drops them (a renamed module would switch its rule off without a word) from coming back.
    missing = [(contract, module) for contract, module in contract_modules() if module not in imports]
    assert missing == []
