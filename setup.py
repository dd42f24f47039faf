"""Maps the design's top-level folders onto one import package, and builds the twin's C kernel.

planner/, operator/ and profiler-job/ stay at the top of the repository (the
design card fixes them) but import as tessera.planner, tessera.operator and
tessera.profiler, so no module shadows the standard library's `operator`.
examples/ and crds/ travel in the wheel as tessera.examples and tessera.crds,
so `tessera plan` and `tessera crds` find them from any folder. Subpackages are
found per folder, so new ones need no change here; data folders
(planner/data, twin/profiles, ...) count as namespace packages, which is how
setuptools wants package data listed.

The twin's event loop (planner/twin/_kernel.c) is a plain C library loaded
with ctypes, not a Python extension; it is compiled here where a C compiler
exists. Without one the build goes on (the extension is optional) and the twin
reports at run time that it falls back to numba (the `numba` extra), or that it
needs one of the two.
"""

import hashlib
from pathlib import Path

from setuptools import Extension, find_namespace_packages, setup

FOLDERS = {
    "tessera": "tessera",
    "tessera.planner": "planner",
    "tessera.operator": "operator",
    "tessera.profiler": "profiler-job",
    "tessera.frontend": "frontend",
    "tessera.examples": "examples",
    "tessera.crds": "crds",
}

packages = []
for package, folder in FOLDERS.items():
    packages.append(package)
    packages += [f"{package}.{sub}" for sub in find_namespace_packages(folder, exclude=["*__pycache__*"])]

KERNEL = "planner/twin/_kernel.c"
# The source's hash, built in: the loader uses an installed kernel only when it was built from the source beside it.
twin_kernel = Extension("tessera.planner.twin._kernel", [KERNEL], libraries=["m"], extra_compile_args=["-O2"],
                        define_macros=[("TESSERA_KERNEL_SOURCE", f'"{hashlib.sha256(Path(KERNEL).read_bytes()).hexdigest()[:16]}"')],
                        optional=True)

setup(packages=packages, package_dir=FOLDERS, include_package_data=True, ext_modules=[twin_kernel])
