"""Import measured profiles: the ParvaGPU CSV format (A100-80GB, MIG x MPS x batch).

Columns: `Mig instance,Batch size,Workload Number,Throughput,Latency`.

- `Mig instance` is the instance's compute slices (1, 2, 3, 4, 7), mapped to
  the GPU's MIG profile with that many compute slices and the least memory
  (on an A100-80GB: 1g.10gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb).
- `Workload Number` is the MPS degree: processes sharing the instance.
- `Throughput` is requests/s of ONE process, so the segment's throughput is
  Throughput x processes.
- `Latency` is seconds per batch, rounded to 1 ms; the batch latency of one
  process is derived as batch / Throughput instead, which is exact.
- A row of zeros was not run or ran out of memory: it is missing, not added.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from tessera.planner.catalog import GpuProduct, MigProfile, gpu_product
from tessera.planner.profiles import Profile, ProfileSource, ProfileStore, SegmentType

PARVAGPU_GPU = "A100-80GB"
PARVAGPU_COLUMNS = ("Mig instance", "Batch size", "Workload Number", "Throughput", "Latency")


@dataclass(frozen=True)
class MeasuredRow:
    """One measured configuration, in the store's units."""

    variant: str
    segment: SegmentType
    batch: int
    latency_ms: float
    throughput_rps: float


def mig_profile_for_slices(gpu: GpuProduct, compute_slices: int) -> MigProfile:
    """The profile with this many compute slices and the least memory (1 -> 1g.10gb on A100-80GB)."""
    candidates = [p for p in gpu.profiles if p.compute_slices == compute_slices]
    if not candidates:
        known = sorted({p.compute_slices for p in gpu.profiles})
        raise ValueError(f"{gpu.name} has no MIG profile with {compute_slices} compute slices (known: {known})")
    return min(candidates, key=lambda p: p.memory_gb)


def read_parvagpu_csv(path: str | Path, variant: str, gpu: str = PARVAGPU_GPU) -> list[MeasuredRow]:
    """The measured rows of one CSV; zero rows (missing) are skipped. Errors name the file and line."""
    path = Path(path)
    product = gpu_product(gpu)
    rows: list[MeasuredRow] = []
    with path.open(newline="") as handle:
        reader = csv.reader(handle)
        header = next(reader, None)
        if header is None or tuple(h.strip() for h in header) != PARVAGPU_COLUMNS:
            raise ValueError(f"{path}: header must be {','.join(PARVAGPU_COLUMNS)}, got {header}")
        for line, record in enumerate(reader, start=2):
            if not record or all(not cell.strip() for cell in record):
                continue
            try:
                slices, batch, processes = (int(float(record[i])) for i in range(3))
                throughput, latency = float(record[3]), float(record[4])
            except (ValueError, IndexError) as error:
                raise ValueError(f"{path}:{line}: cannot read row {record}: {error}") from None
            if throughput <= 0 or latency <= 0:
                continue  # not run or out of memory
            if batch < 1 or processes < 1:
                raise ValueError(f"{path}:{line}: batch and workload number must be >= 1, got {record}")
            try:
                mig = mig_profile_for_slices(product, slices)
            except ValueError as error:
                raise ValueError(f"{path}:{line}: {error}") from None
            rows.append(MeasuredRow(
                variant=variant,
                segment=SegmentType(gpu=product.name, mig_profile=mig.name, mps=processes),
                batch=batch,
                latency_ms=1000.0 * batch / throughput,
                throughput_rps=throughput * processes,
            ))
    return rows


def add_rows(store: ProfileStore, rows: list[MeasuredRow]) -> ProfileStore:
    for row in rows:
        store.add(row.variant, row.segment, row.batch, Profile(
            latency_ms=row.latency_ms, throughput_rps=row.throughput_rps, source=ProfileSource.MEASURED,
        ))
    return store


def load_parvagpu_csv(path: str | Path, variant: str, gpu: str = PARVAGPU_GPU,
                      store: ProfileStore | None = None) -> ProfileStore:
    """Measured profiles of one variant from one CSV, added to `store` (a new one by default)."""
    return add_rows(store if store is not None else ProfileStore(), read_parvagpu_csv(path, variant, gpu))


def read_parvagpu_dir(path: str | Path, gpu: str = PARVAGPU_GPU) -> list[MeasuredRow]:
    """Rows of every `*.csv` in a folder; the variant name is the file stem (`resnet50.csv` -> resnet50)."""
    path = Path(path)
    files = sorted(path.glob("*.csv"))
    if not files:
        raise ValueError(f"{path}: no *.csv files")
    return [row for file in files for row in read_parvagpu_csv(file, file.stem, gpu)]


def load_parvagpu_dir(path: str | Path, gpu: str = PARVAGPU_GPU,
                      store: ProfileStore | None = None) -> ProfileStore:
    """Measured profiles of every `*.csv` in a folder, variant name = file stem."""
    return add_rows(store if store is not None else ProfileStore(), read_parvagpu_dir(path, gpu))
