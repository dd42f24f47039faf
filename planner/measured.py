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
import io
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from tessera.planner.catalog import GpuProduct, MigProfile, gpu_product
from tessera.planner.input_files import InputError, csv_records, validate
from tessera.planner.model import Name
from tessera.planner.profiles import Profile, ProfileSource, ProfileStore, SegmentType

PARVAGPU_GPU = "A100-80GB"
PARVAGPU_COLUMNS = ("Mig instance", "Batch size", "Workload Number", "Throughput", "Latency")
MAX_MEASURED_FILES = 256


class ParvaGpuRow(BaseModel):
    """One row of a ParvaGPU CSV, as written; zeros in Throughput and Latency mean "not run"."""

    model_config = ConfigDict(populate_by_name=True, allow_inf_nan=False)

    compute_slices: int = Field(alias="Mig instance", ge=1, le=7, description="Compute slices of the instance, 1..7.")
    batch: int = Field(alias="Batch size", ge=1, le=4096, description="Batch size, 1..4096.")
    processes: int = Field(alias="Workload Number", ge=1, le=64, description="MPS processes, 1..64.")
    throughput_rps: float = Field(alias="Throughput", ge=0, le=1e7,
                                  description="Requests/s of one process, 0 (not run) or up to 1e7.")
    latency_s: float = Field(alias="Latency", ge=0, le=3600, description="Seconds per batch, 0 (not run) or up to 3600.")


@dataclass(frozen=True)
class MeasuredRow:
    """One measured configuration, in the store's units."""

    variant: str
    segment: SegmentType
    batch: int
    latency_ms: float  # the p99 where the measurement has percentiles
    throughput_rps: float
    p50_ms: float | None = None  # the median, where the measurement recorded one (ParvaGPU's did not)


def mig_profile_for_slices(gpu: GpuProduct, compute_slices: int) -> MigProfile:
    """The profile with this many compute slices and the least memory (1 -> 1g.10gb on A100-80GB)."""
    candidates = [p for p in gpu.profiles if p.compute_slices == compute_slices]
    if not candidates:
        known = sorted({p.compute_slices for p in gpu.profiles})
        raise ValueError(f"{gpu.name} has no MIG profile with {compute_slices} compute slices (known: {known})")
    return min(candidates, key=lambda p: p.memory_gb)


def read_parvagpu_csv(path: str | Path, variant: str, gpu: str = PARVAGPU_GPU) -> list[MeasuredRow]:
    """The measured rows of one CSV; zero rows (missing) are skipped. Errors name the file, line and column."""
    path = Path(path)
    product = gpu_product(gpu)
    rows: list[MeasuredRow] = []
    for line, record in csv_records(path, PARVAGPU_COLUMNS, exact=True):
        if all(not (cell or "").strip() for cell in record.values()):
            continue
        row = validate(ParvaGpuRow, {k: (v or "").strip() for k, v in record.items()}, f"{path}:{line}")
        if row.throughput_rps <= 0 or row.latency_s <= 0:
            continue  # not run or out of memory
        try:
            mig = mig_profile_for_slices(product, row.compute_slices)
        except ValueError as error:
            raise InputError(f"{path}:{line}: Mig instance: {error}") from None
        rows.append(MeasuredRow(
            variant=variant,
            segment=SegmentType(gpu=product.name, mig_profile=mig.name, mps=row.processes),
            batch=row.batch,
            latency_ms=1000.0 * row.batch / row.throughput_rps,
            throughput_rps=row.throughput_rps * row.processes,
        ))
    return rows


def add_rows(store: ProfileStore, rows: list[MeasuredRow]) -> ProfileStore:
    for row in rows:
        store.add(row.variant, row.segment, row.batch, Profile(
            latency_ms=row.latency_ms, throughput_rps=row.throughput_rps, source=ProfileSource.MEASURED,
            p50_ms=row.p50_ms,
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
        raise InputError(f"{path}: no *.csv files; expected one ParvaGPU CSV per variant")
    if len(files) > MAX_MEASURED_FILES:
        raise InputError(f"{path}: {len(files)} CSV files, over the limit of {MAX_MEASURED_FILES}")
    return [row for file in files for row in read_parvagpu_csv(file, file.stem, gpu)]


def load_parvagpu_dir(path: str | Path, gpu: str = PARVAGPU_GPU,
                      store: ProfileStore | None = None) -> ProfileStore:
    """Measured profiles of every `*.csv` in a folder, variant name = file stem."""
    return add_rows(store if store is not None else ProfileStore(), read_parvagpu_dir(path, gpu))


# -- tessera's own table of measured profiles (`tessera profiles export`) ---------------------

class ProfileRow(BaseModel):
    """One measured (variant and image, segment type, batch), as `tessera profiles export` writes it.

    The planner's latency is the p99 of a batch (the SLO's default percentile).
    """

    model_config = ConfigDict(populate_by_name=True, serialize_by_alias=True, allow_inf_nan=False, frozen=True)

    variant: Name = Field(description="Variant name, a DNS-1035 label as in the spec (it names the ConfigMap it is imported into).")
    image: str = Field(default="", max_length=512, description="The variant's image the profile was measured with.")
    image_digest: str = Field(default="", alias="imageDigest", pattern=r"^(sha256:[0-9a-f]{64})?$",
                              description="That image's sha256 digest, which the profile is keyed by; empty if unknown.")
    gpu: str = Field(alias="gpuProduct", min_length=1, max_length=64, description="GPU product, as the catalog names it.")
    mig_profile: str = Field(alias="migProfile", min_length=1, max_length=16, description="MIG profile.")
    mps: int = Field(alias="mpsDegree", ge=1, le=48, description="Server processes sharing the instance.")
    batch: int = Field(alias="batchSize", ge=1, le=4096, description="Batch size.")
    p50_ms: float = Field(alias="latencyP50Milliseconds", gt=0, le=3_600_000, description="Median batch latency, ms.")
    p99_ms: float = Field(alias="latencyP99Milliseconds", gt=0, le=3_600_000, description="p99 batch latency, ms.")
    throughput_rps: float = Field(alias="throughputRequestsPerSecond", gt=0, le=1e7,
                                  description="Requests/s of the whole segment.")

    @field_validator("gpu")
    @classmethod
    def _known_gpu(cls, gpu: str) -> str:
        try:
            return gpu_product(gpu).name
        except KeyError as error:
            raise ValueError(error.args[0]) from None

    @field_validator("mig_profile")
    @classmethod
    def _known_mig_profile(cls, mig_profile: str, info: ValidationInfo) -> str:
        if "gpu" in info.data:  # else the GPU is refused already
            try:
                gpu_product(info.data["gpu"]).profile(mig_profile)
            except KeyError as error:
                raise ValueError(error.args[0]) from None
        return mig_profile

    @field_validator("p99_ms")
    @classmethod
    def _p99_not_below_p50(cls, p99_ms: float, info: ValidationInfo) -> float:
        p50_ms = info.data.get("p50_ms")
        if p50_ms is not None and p99_ms < p50_ms:
            raise ValueError(f"{p99_ms:g} ms is below latencyP50Milliseconds {p50_ms:g} ms; a p99 is at least the median")
        return p99_ms


PROFILE_COLUMNS = tuple(field.alias or name for name, field in ProfileRow.model_fields.items())
OPTIONAL_PROFILE_COLUMNS = ("imageDigest",)  # files written before it was added lack it


def read_profiles_csv(path: str | Path) -> list[ProfileRow]:
    """The rows of a `tessera profiles export` CSV; errors name the file, line and column."""
    path = Path(path)
    rows = []
    required = tuple(c for c in PROFILE_COLUMNS if c not in OPTIONAL_PROFILE_COLUMNS)
    for line, record in csv_records(path, required):
        cells = {k: (v or "").strip() for k, v in record.items() if k in PROFILE_COLUMNS}
        rows.append(validate(ProfileRow, cells, f"{path}:{line}"))
    return rows


def profile_rows_csv(rows: list[ProfileRow]) -> str:
    """The CSV `read_profiles_csv` reads, one row per (variant, image, segment type, batch)."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=PROFILE_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow(row.model_dump(mode="json"))
    return out.getvalue()


def measured_rows_of(rows: list[ProfileRow]) -> list[MeasuredRow]:
    """The table's rows in the store's units (p99 latency); rows of one key: the last one counts."""
    return [MeasuredRow(variant=row.variant, segment=SegmentType(gpu=row.gpu,
                                                                  mig_profile=row.mig_profile, mps=row.mps),
                        batch=row.batch, latency_ms=row.p99_ms, throughput_rps=row.throughput_rps,
                        p50_ms=row.p50_ms) for row in rows]


def load_measured(path: str | Path, store: ProfileStore | None = None) -> ProfileStore:
    """Measured profiles from a folder of ParvaGPU CSVs or from one `tessera profiles export` CSV."""
    path = Path(path)
    if path.is_dir():
        return load_parvagpu_dir(path, store=store)
    try:
        rows = measured_rows_of(read_profiles_csv(path))
    except (KeyError, ValueError) as error:
        if isinstance(error, InputError):
            raise
        raise InputError(f"{path}: {error}") from None
    return add_rows(store if store is not None else ProfileStore(), rows)
