"""What a runtime install of tessera brings in, and how much disk it takes.

    .venv/bin/python -P bench/package_footprint.py   -> bench/results/package_footprint.md

Builds the wheel and installs it into a fresh virtual environment exactly as the
wheel test and the image do (scripts/wheel_venv.sh: requirements/runtime.lock, no
extras), then sums the installed files of every distribution in it. The offline
extras' distributions are measured in the development environment (.venv), where
dev.lock installed them.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "results" / "package_footprint.md"
EXTRAS = {"offline": ["scikit-learn", "pyarrow", "matplotlib"], "numba": ["numba"]}

# Run inside an environment: every distribution with its version and installed bytes.
SIZES = """
import json, importlib.metadata as md
rows = {}
for dist in md.distributions():
    size = sum(f.size or 0 for f in (dist.files or []))
    rows[dist.metadata["Name"].lower()] = [dist.version, size, sorted(dist.requires or [])]
print(json.dumps(rows))
"""


def sizes(python: Path) -> dict[str, list]:
    return json.loads(subprocess.run([str(python), "-P", "-c", SIZES], capture_output=True, text=True,
                                     check=True).stdout)


def closure(names: list[str], installed: dict[str, list], runtime: dict[str, list]) -> set[str]:
    """The named distributions and what they require that the runtime set does not hold already."""
    found: set[str] = set()
    todo = [n.lower() for n in names]
    while todo:
        name = todo.pop()
        if name in found or name in runtime or name not in installed:
            continue
        found.add(name)
        for requirement in installed[name][2]:
            if "extra ==" in requirement:
                continue
            todo.append(requirement.split(";")[0].split("[")[0].split("<")[0].split(">")[0].split("=")[0]
                        .split("!")[0].split("~")[0].strip().lower())
    return found


def mb(size: int) -> str:
    return f"{size / 1e6:.1f}"


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(["bash", str(ROOT / "scripts" / "wheel_venv.sh"), tmp], check=True)
        wheel = next(Path(tmp, "dist").glob("tessera-*.whl"))
        runtime = sizes(Path(tmp, "venv", "bin", "python"))
        wheel_bytes = wheel.stat().st_size
    tooling = {"pip", "setuptools", "wheel"}
    rows = sorted(((n, v) for n, v in runtime.items() if n not in tooling), key=lambda item: -item[1][1])
    total = sum(v[1] for _, v in rows)
    dev = sizes(ROOT / ".venv" / "bin" / "python")
    extras = []
    for extra, names in EXTRAS.items():
        added = sorted(closure(names, dev, runtime), key=lambda n: -dev[n][1])
        extras.append(f"- the {extra} extra (`tessera[{extra}]`) would add {len(added)} distributions, "
                      f"{mb(sum(dev[n][1] for n in added))} MB: " + ", ".join(added))
    lines = [
        "# Runtime footprint of tessera",
        "",
        "`python -P bench/package_footprint.py`: the wheel installed into a fresh virtual environment with",
        f"`requirements/runtime.lock` and no extras (Python {sys.version_info.major}.{sys.version_info.minor}, Linux x86_64).",
        "",
        f"- wheel: {mb(wheel_bytes)} MB",
        f"- installed, {len(rows)} distributions (pip and setuptools of the venv left out): **{mb(total)} MB**",
        *extras,
        "",
        "| distribution | version | installed MB |",
        "| --- | --- | ---: |",
        *[f"| {name} | {version} | {mb(size)} |" for name, (version, size, _) in rows],
        "",
    ]
    OUT.write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
