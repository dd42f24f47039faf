"""C build of the twin's event loop, loaded with ctypes.

The C source (``_kernel.c``) is a line-by-line port of the numba kernel in
``engine.py``; it is compiled on first use with the system C compiler into a
per-user cache and gives the same results. Why both: numba alone costs ~120 MB
of resident memory (LLVM) per process, which breaks the 200 MB budget of the
twin on the heaviest configuration; the C build needs none of it. Where no C
compiler exists, ``sim.py`` falls back to numba (set TESSERA_TWIN_ENGINE=numba
to force it).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

_SRC = Path(__file__).with_name("_kernel.c")
_lib = None


def _cache_dir() -> Path:
    base = os.environ.get("TESSERA_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "tessera")
    return Path(base)


def load() -> ctypes.CDLL | None:
    """The compiled kernel, building it if needed; None when no compiler works."""
    global _lib
    if _lib is not None:
        return _lib
    if not _SRC.exists():
        return None
    src = _SRC.read_bytes()
    tag = hashlib.sha256(src).hexdigest()[:16]
    so = _cache_dir() / f"twin_kernel_{tag}.so"
    if not so.exists():
        cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
        if cc is None:
            return None
        so.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=so.parent) as tmp:
            out = Path(tmp) / so.name
            r = subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", str(out), str(_SRC), "-lm"],
                               capture_output=True, text=True)
            if r.returncode != 0:
                return None
            os.replace(out, so)  # atomic: parallel workers may build at once
    try:
        lib = ctypes.CDLL(str(so))
    except OSError:
        return None
    P = ctypes.c_void_p
    lib.simulate_kernel.restype = ctypes.c_int64
    lib.simulate_kernel.argtypes = [ctypes.c_int64, P, P, P, P, ctypes.c_int64, P, P, P, P, P,
                                    ctypes.c_int64, P, P, P, P, P, P]
    _lib = lib
    return lib


def _p(a: np.ndarray, dtype) -> int:
    assert a.dtype == dtype and a.flags.c_contiguous, (a.dtype, dtype)
    return a.ctypes.data


def simulate_kernel(arr_t, arr_ad, prompt, out_len, load_ms, params, state, gen, ttft, ts_running,
                    ts_waiting, ts_kv, itl_hist, stats):
    lib = load()
    counts = np.zeros(2, np.int64)
    lib.simulate_kernel(arr_t.shape[0], _p(arr_t, np.float64), _p(arr_ad, np.int32), _p(prompt, np.int32),
                        _p(out_len, np.int32), load_ms.shape[0], _p(load_ms, np.float64),
                        _p(params, np.float64), _p(state, np.int8), _p(gen, np.int32), _p(ttft, np.float32),
                        ts_running.shape[0], _p(ts_running, np.int32), _p(ts_waiting, np.int32),
                        _p(ts_kv, np.float32), _p(itl_hist, np.float64), _p(stats, np.float64),
                        counts.ctypes.data)
    return int(counts[0]), int(counts[1])
