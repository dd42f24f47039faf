"""C build of the twin's event loop, loaded with ctypes.

The C source (``_kernel.c``) is a line-by-line port of the numba kernel in
``_numba_kernel.py`` and gives the same results. It is compiled when tessera is
installed (setup.py; the library lies beside this module), else on first use with
the system C compiler into a per-user cache. Why both kernels: numba alone costs
~120 MB of resident memory (LLVM) per process, which breaks the 200 MB budget of
the twin on the heaviest configuration; the C build needs none of it. Where
neither build works, ``kernel.get_kernel`` falls back to numba (the ``numba``
extra) and logs why (set TESSERA_TWIN_ENGINE=numba to force it).
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib.machinery
import logging
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

_SRC = Path(__file__).with_name("_kernel.c")
_lib = None
# Why the last load() found no C kernel, for the fallback's log message.
unavailable_reason = ""
logger = logging.getLogger(__name__)


def _cache_dir() -> Path:
    base = os.environ.get("TESSERA_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "tessera")
    return Path(base)


def source_tag() -> str:
    return hashlib.sha256(_SRC.read_bytes()).hexdigest()[:16]


def _built_from_source(library: Path) -> bool:
    """Whether the library was compiled from the source beside it: an editable install keeps the kernel
    built at install time, and after a change of the source its arguments may no longer match."""
    try:
        built = ctypes.CDLL(str(library))
    except OSError:
        return False
    tag = getattr(built, "kernel_source", None)
    if tag is None:
        return False
    tag.restype = ctypes.c_char_p
    return bool(tag() == source_tag().encode())


def installed_library() -> Path | None:
    """The kernel setup.py compiled at install time from this source, if it did."""
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        candidate = _SRC.with_name("_kernel" + suffix)
        if candidate.exists() and _built_from_source(candidate):
            return candidate
    return None


def _cached_build() -> Path | None:
    """Compile the C source into the per-user cache (once per source version)."""
    global unavailable_reason
    if not _SRC.exists():
        unavailable_reason = f"{_SRC} is missing"
        return None
    tag = source_tag()
    so = _cache_dir() / f"twin_kernel_{tag}.so"
    if so.exists():
        return so
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        unavailable_reason = "no C compiler (cc, gcc, clang or $CC) was found"
        return None
    so.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=so.parent) as tmp:
        out = Path(tmp) / so.name
        r = subprocess.run([cc, "-O2", "-shared", "-fPIC", f'-DTESSERA_KERNEL_SOURCE="{tag}"', "-o", str(out),
                            str(_SRC), "-lm"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            unavailable_reason = f"{cc} failed to compile {_SRC.name}: {r.stderr.strip()[:500]}"
            return None
        os.replace(out, so)  # atomic: parallel workers may build at once
    logger.info("compiled the twin's C kernel into %s", so)
    return so


def load() -> ctypes.CDLL | None:
    """The compiled kernel: the one built at install time, else a cached build; None when
    neither works (``unavailable_reason`` says why)."""
    global _lib, unavailable_reason
    if _lib is not None:
        return _lib
    so = installed_library() or _cached_build()
    if so is None:
        return None
    try:
        lib = ctypes.CDLL(str(so))
    except OSError as error:
        unavailable_reason = f"cannot load {so}: {error}"
        return None
    P = ctypes.c_void_p
    lib.simulate_kernel.restype = ctypes.c_int64
    lib.simulate_kernel.argtypes = [ctypes.c_int64, P, P, P, P, ctypes.c_int64, P, P, P, P, P, P,
                                    ctypes.c_int64, P, P, P, P, P, P]
    _lib = lib
    return lib


def _p(a: np.ndarray, dtype: type) -> int:
    assert a.dtype == dtype and a.flags.c_contiguous, (a.dtype, dtype)
    return a.ctypes.data


def simulate_kernel(arr_t: np.ndarray, arr_ad: np.ndarray, prompt: np.ndarray, out_len: np.ndarray,
                    load_ms: np.ndarray, set_order: np.ndarray, params: np.ndarray, state: np.ndarray,
                    gen: np.ndarray, ttft: np.ndarray,
                    ts_running: np.ndarray, ts_waiting: np.ndarray, ts_kv: np.ndarray, itl_hist: np.ndarray,
                    stats: np.ndarray) -> tuple[int, int]:
    lib = load()
    if lib is None:
        raise RuntimeError(f"the twin's C kernel is unavailable: {unavailable_reason}")
    counts = np.zeros(2, np.int64)
    lib.simulate_kernel(arr_t.shape[0], _p(arr_t, np.float64), _p(arr_ad, np.int32), _p(prompt, np.int32),
                        _p(out_len, np.int32), load_ms.shape[0], _p(load_ms, np.float64),
                        _p(set_order, np.int32), _p(params, np.float64), _p(state, np.int8), _p(gen, np.int32),
                        _p(ttft, np.float32),
                        ts_running.shape[0], _p(ts_running, np.int32), _p(ts_waiting, np.int32),
                        _p(ts_kv, np.float32), _p(itl_hist, np.float64), _p(stats, np.float64),
                        counts.ctypes.data)
    return int(counts[0]), int(counts[1])
