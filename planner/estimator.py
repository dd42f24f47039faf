"""The built-in analytical profile estimator, calibrated on real A100 measurements.

For a variant described by three figures (forward GFLOPs per request,
parameters, weight layers) it predicts the batch latency of one server
process and the throughput of a segment (a MIG instance shared by `mps`
processes). The model, per process, for batch b and k = mps processes:

    launch   = c0 + c_layer x layers                     host-side kernel launches; the
                                                         same on every instance and GPU
    eff      = e_max x x^g / (x^g + x0^g),  x = GFLOPs / layers
                                                         fraction of peak FLOP/s reached;
                                                         small layers (depthwise, 1x1)
                                                         reach less
    compute  = k x b x GFLOPs / (eff x peak)             peak = the GPU's FP16 dense FLOP/s
                                                         x the instance's share of SMs; the k
                                                         processes' batches share the SMs
    memory   = k x weight bytes / (m_eff x bandwidth)    bandwidth = the instance's share
    latency  = (launch^p + (compute + memory)^p)^(1/p) x (1 + c_mps x (k - 1))
    throughput of the segment = k x b / latency

The soft maximum says that launching overlaps the GPU's work: small batches
are launch-bound (latency flat in the batch and in the slice count), large
batches are compute-bound (latency linear in the batch, inversely
proportional to the slices). MPS processes launch in parallel, so at small
batches k processes multiply the throughput; at large batches they only
share the same SMs.

The coefficients are data (data/estimator_coefficients.json), fitted by
`planner/calibration.py`; regenerate them with
`.venv/bin/python scripts/calibrate_estimator.py`. Other GPUs (A100-40GB,
H100, H200) are reached through the catalog's SM count, FP16 dense TFLOP/s
and memory bandwidth; that transfer is an assumption that no measurement
here checks (the A100 measurements ran the same precision everywhere, so
efficiency is taken as a property of the model, not of the GPU).
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Sequence, cast

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field

from tessera.planner.catalog import GpuProduct, MigProfile
from tessera.planner.model import Variant
from tessera.planner.profiles import Profile, ProfileSource

COEFFICIENTS_FILE = "estimator_coefficients.json"
BYTES_PER_PARAMETER = 4  # the measured servers ran FP32 weights (TF32 tensor cores where allowed)


class Coefficients(BaseModel):
    """The estimator's fitted coefficients (see the module's docstring for the formula)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    launch_ms: float = Field(ge=0, description="c0: fixed host time per batch, ms.")
    launch_ms_per_layer: float = Field(ge=0, description="c_layer: launch time per weight layer, ms.")
    efficiency_max: float = Field(gt=0, le=1, description="e_max: best fraction of peak FLOP/s.")
    efficiency_half_gflops_per_layer: float = Field(gt=0, description="x0: GFLOPs per layer at half of e_max.")
    efficiency_exponent: float = Field(gt=0, description="g: steepness of efficiency in GFLOPs per layer.")
    bandwidth_efficiency: float = Field(gt=0, le=1, description="m_eff: fraction of the bandwidth reached reading weights.")
    overlap_exponent: float = Field(ge=1, description="p: soft maximum of launch and GPU time.")
    mps_penalty: float = Field(ge=0, description="c_mps: latency added per extra MPS process (contention).")
    default_layers: int = Field(ge=1, description="Layers assumed for a variant that does not state them.")

    @classmethod
    def from_vector(cls, vector: np.ndarray, default_layers: int) -> "Coefficients":
        return cls(**dict(zip(VECTOR_FIELDS, (float(v) for v in vector))), default_layers=default_layers)

    def vector(self) -> np.ndarray:
        return np.array([getattr(self, name) for name in VECTOR_FIELDS])


VECTOR_FIELDS = (
    "launch_ms", "launch_ms_per_layer", "efficiency_max", "efficiency_half_gflops_per_layer",
    "efficiency_exponent", "bandwidth_efficiency", "overlap_exponent", "mps_penalty",
)


@cache
def calibrated() -> Coefficients:
    """The coefficients shipped with the package (data/estimator_coefficients.json)."""
    text = resources.files("tessera.planner").joinpath("data", COEFFICIENTS_FILE).read_text()
    return Coefficients(**json.loads(text)["coefficients"])


def latency_ms(coefficients: np.ndarray, gflops: npt.ArrayLike, params_millions: npt.ArrayLike,
               layers: npt.ArrayLike, batch: npt.ArrayLike, mps: npt.ArrayLike, peak_tflops: npt.ArrayLike,
               bandwidth_gbs: npt.ArrayLike) -> np.ndarray:
    """Batch latency of one process, ms; vectorised over numpy arrays (used by the fit too).

    `coefficients` is `Coefficients.vector()`: the formula in the module docstring.
    """
    c0, c_layer, e_max, x0, g, m_eff, p, c_mps = coefficients
    gflops, layers, batch, mps = (np.asarray(a, dtype=float) for a in (gflops, layers, batch, mps))
    launch = c0 + c_layer * layers
    x = (gflops / layers) ** g
    efficiency = e_max * x / (x + x0 ** g)
    compute = mps * batch * gflops / (efficiency * np.asarray(peak_tflops, dtype=float))  # GFLOP / TFLOP/s = ms
    weights_gb = np.asarray(params_millions, dtype=float) * BYTES_PER_PARAMETER / 1000.0
    memory = mps * weights_gb / (m_eff * np.asarray(bandwidth_gbs, dtype=float)) * 1000.0
    gpu = compute + memory
    # soft maximum, scaled by the larger term so that large p cannot overflow
    top = np.maximum(launch, gpu)
    soft_max = top * ((launch / top) ** p + (gpu / top) ** p) ** (1.0 / p)
    return cast(np.ndarray, soft_max * (1.0 + c_mps * (mps - 1)))


def instance_peak_tflops(gpu: GpuProduct, mig: MigProfile) -> float:
    """FP16 dense TFLOP/s of a MIG instance: the GPU's, in proportion to the instance's SMs."""
    return gpu.fp16_dense_tflops * gpu.sm_share(mig) / gpu.sm_count


def estimate(variant: Variant, gpu: GpuProduct, mig: MigProfile, mps: int, batch: int,
             coefficients: Coefficients | None = None) -> Profile:
    """Estimated profile of `variant` on (gpu, mig, mps) at `batch` (source ESTIMATED).

    Needs the variant's `gflops` and `params_millions`; `layers` falls back to
    the coefficients' `default_layers`. Does not check memory: callers keep
    `mps x variant.memory_gb <= mig.memory_gb`.
    """
    return estimates(variant, gpu, [(mig, mps, batch)], coefficients)[0]


def estimates(variant: Variant, gpu: GpuProduct, points: Sequence[tuple[MigProfile, int, int]],
              coefficients: Coefficients | None = None, spread: float | None = None) -> list[Profile]:
    """`estimate` at every (mig, mps, batch) of `points` in one vectorised call, each profile with `spread`.

    A store estimates every variant on hundreds of points: a numpy call per
    point made most of the time of building it (issue 29). One point goes
    through the same arrays, so `estimate` agrees with this to the last bit
    (numpy's scalar and array powers may differ in it)."""
    if variant.gflops is None or variant.params_millions is None:
        raise ValueError(f"variant {variant.name!r}: the estimator needs gflops and params_millions")
    for mig, mps, batch in points:
        if mps < 1 or batch < 1:
            raise ValueError(f"variant {variant.name!r}: mps and batch must be >= 1, got mps={mps}, batch={batch}")
        if mig not in gpu.profiles:
            raise ValueError(f"{gpu.name} has no MIG profile {mig.name!r}")
    if not points:
        return []
    coefficients = coefficients or calibrated()
    layers = variant.layers or coefficients.default_layers
    migs, degrees, batches = zip(*points)
    latencies = latency_ms(coefficients.vector(), variant.gflops, variant.params_millions, layers,
                           np.array(batches), np.array(degrees),
                           np.array([instance_peak_tflops(gpu, mig) for mig in migs]),
                           np.array([gpu.bandwidth_share(mig) for mig in migs]))
    return [estimated_profile(float(latency), mps, batch, spread)
            for latency, mps, batch in zip(latencies, degrees, batches)]


def estimated_profile(latency: float, mps: int, batch: int, spread: float | None = None) -> Profile:
    """An estimate of a segment's `mps` processes at `batch`, from its batch latency in ms."""
    return Profile(latency_ms=latency, throughput_rps=mps * batch * 1000.0 / latency, source=ProfileSource.ESTIMATED,
                   spread=spread)
