"""The choice of the twin's compiled event loop: the C build when one was compiled, else numba."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from functools import cache

logger = logging.getLogger(__name__)


class KernelUnavailable(RuntimeError):
    """Neither the C build nor numba can run the twin here."""


@cache
def _report_fallback(reason: str) -> None:
    logger.warning("the twin's C kernel is unavailable (%s); falling back to numba, which needs about "
                   "120 MB more memory per process and compiles on first use", reason)


def get_kernel() -> Callable[..., tuple[int, int]]:
    """The C build when one was compiled (low memory), else numba, saying why."""
    choice = os.environ.get("TESSERA_TWIN_ENGINE", "auto")
    if choice in ("auto", "c"):
        from . import ckernel

        if ckernel.load() is not None:
            return ckernel.simulate_kernel
        if choice == "c":
            raise KernelUnavailable(f"TESSERA_TWIN_ENGINE=c but the C kernel is unavailable: "
                                    f"{ckernel.unavailable_reason}")
        reason = ckernel.unavailable_reason
    else:
        reason = f"TESSERA_TWIN_ENGINE={choice}"
    try:
        from ._numba_kernel import simulate_kernel
    except ModuleNotFoundError as error:
        if error.name != "numba":
            raise
        raise KernelUnavailable(f"the twin has no kernel: the C build is unavailable ({reason}) and numba is not "
                           "installed; install a C compiler and reinstall tessera, or pip install 'tessera[numba]'"
                           ) from None
    if choice != "numba":
        _report_fallback(reason)
    return simulate_kernel
