"""Maps the design's top-level folders onto one import package.

planner/, operator/ and profiler-job/ stay at the top of the repository (the
design card fixes them) but import as tessera.planner, tessera.operator and
tessera.profiler, so no module shadows the standard library's `operator`.
Subpackages are found per folder, so new ones need no change here; data
folders (planner/data, twin/profiles, ...) count as namespace packages, which
is how setuptools wants package data listed.
"""

from setuptools import find_namespace_packages, setup

FOLDERS = {
    "tessera": "tessera",
    "tessera.planner": "planner",
    "tessera.operator": "operator",
    "tessera.profiler": "profiler-job",
}

packages = []
for package, folder in FOLDERS.items():
    packages.append(package)
    packages += [f"{package}.{sub}" for sub in find_namespace_packages(folder, exclude=["*__pycache__*"])]

setup(packages=packages, package_dir=FOLDERS, include_package_data=True)
