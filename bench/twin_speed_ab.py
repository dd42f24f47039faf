"""The twin's kernel against an earlier version of itself, on the heaviest real configuration, in one run.

Timings on a shared machine drift with its load, so both kernels run in the
same process, alternating, and the figure is the ratio of their medians. The
earlier kernel is ``git show REF:planner/twin/_kernel.c`` compiled here, run with
REF's shipped Qwen profile and its own signature (a kernel from before vLLM's
slot pass takes no set order); the current one runs with this tree's shipped
Qwen profile, so a tree that ships other rules (issue 26's resweep patch: the
slot cost, the skipped-waiting rule and vLLM's slot pass) is timed with their
work. (Before issue 26's resweep the current kernel ran with the profile
``tessera twin calibrate`` fits on all runs.) Writes bench/results/twin_speed_ab.json.

    nice -n 10 .venv/bin/python -P bench/twin_speed_ab.py [--ref main] [--repeats 5]
"""

import argparse
import ctypes
import json
import os
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from tessera.planner.twin import ckernel
from tessera.planner.twin.profile import load_profile
from tessera.planner.twin.sim import ServerConfig, simulate
from tessera.planner.twin.workload import Workload

ROOT = Path(__file__).resolve().parents[1]
PROFILE = "planner/twin/profiles/qwen2.5-7b-instruct.yaml"


def _library(source: str, directory: Path) -> ctypes.CDLL:
    directory.mkdir()  # one folder per build: dlopen returns the loaded library for a path it has seen
    src = directory / "kernel.c"
    src.write_text(source)
    so = directory / "kernel.so"
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(so), str(src), "-lm"], check=True)
    lib = ctypes.CDLL(str(so))
    P = ctypes.c_void_p
    lib.simulate_kernel.restype = ctypes.c_int64
    lib.simulate_kernel.argtypes = [ctypes.c_int64, P, P, P, P, ctypes.c_int64, P] + [P] * _takes_set_order(source) + [
        P, P, P, P, ctypes.c_int64, P, P, P, P, P, P]
    return lib


def _takes_set_order(source: str) -> bool:
    return "const int32_t *set_order" in source


def _without_set_order(lib: ctypes.CDLL) -> Callable[..., tuple[int, int]]:
    """A kernel from before vLLM's slot pass takes no set order: sim.simulate's call, less that argument."""
    def call(arr_t: np.ndarray, arr_ad: np.ndarray, prompt: np.ndarray, out_len: np.ndarray, load_ms: np.ndarray,
             set_order: np.ndarray, params: np.ndarray, *outputs: np.ndarray) -> tuple[int, int]:
        state, gen, ttft, ts_running, ts_waiting, ts_kv, itl_hist, stats = outputs
        counts = np.zeros(2, np.int64)
        lib.simulate_kernel(arr_t.shape[0], arr_t.ctypes.data, arr_ad.ctypes.data, prompt.ctypes.data,
                            out_len.ctypes.data, load_ms.shape[0], load_ms.ctypes.data, params.ctypes.data,
                            state.ctypes.data, gen.ctypes.data, ttft.ctypes.data, ts_running.shape[0],
                            ts_running.ctypes.data, ts_waiting.ctypes.data, ts_kv.ctypes.data, itl_hist.ctypes.data,
                            stats.ctypes.data, counts.ctypes.data)
        return int(counts[0]), int(counts[1])
    return call


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ref", default="main")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    k = np.arange(384)
    w = Workload(ranks=np.array([8, 16, 32])[k % 3], rates=np.array([1.6, 0.8, 0.4])[k % 3],
                 duration_s=3600.0, n_arrivals=960_714)
    cfg = ServerConfig(max_loras=16, max_rank=32, outstanding_cap=26_000)
    with tempfile.TemporaryDirectory() as tmp:
        old_source, old_profile = (subprocess.run(["git", "show", f"{args.ref}:{path}"], cwd=ROOT, check=True,
                                                  capture_output=True, text=True).stdout
                                   for path in ("planner/twin/_kernel.c", PROFILE))
        (Path(tmp) / "before.yaml").write_text(old_profile)
        sources = {"before": old_source, "after": (ROOT / "planner/twin/_kernel.c").read_text()}
        kernels = {name: (_library(source, Path(tmp) / name), _takes_set_order(source)) for name, source in sources.items()}
        profiles = {"before": load_profile(Path(tmp) / "before.yaml"), "after": load_profile("qwen")}
        walls: dict[str, list[float]] = {name: [] for name in kernels}
        steps: dict[str, int] = {}
        loads: dict[str, int] = {}
        call_with_set_order = ckernel.simulate_kernel
        for _ in range(args.repeats):
            for name, (lib, set_order) in kernels.items():
                ckernel._lib = lib  # the loaded kernel simulate() calls
                ckernel.simulate_kernel = call_with_set_order if set_order else _without_set_order(lib)
                profile = profiles[name]
                t0 = time.process_time()
                res = simulate(w, profile, cfg, seed=0)
                walls[name].append(time.process_time() - t0)
                steps[name] = res.steps
                loads[name] = res.loads
    before, after = (float(np.median(walls[n])) for n in ("before", "after"))
    out = {"config": "384 adapters, 1.6/0.8/0.4 req/s, A_max=16, max rank 32, 3600 s, 960714 arrivals, cap 26000",
           "ref": args.ref, "cpu_s": walls, "median_cpu_s": {"before": before, "after": after},
           "after_over_before": after / before, "steps": steps, "loads": loads, "load_avg_1min": os.getloadavg()[0]}
    (ROOT / "bench" / "results" / "twin_speed_ab.json").write_text(json.dumps(out, indent=2))
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
