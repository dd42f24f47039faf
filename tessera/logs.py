"""The one place that configures logging.

Library modules only create loggers (``logging.getLogger(__name__)``) and log;
entry points (the CLI, later the operator) call ``configure_logging`` once.
"""

from __future__ import annotations

import logging

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def configure_logging(level: str = "warning") -> None:
    """Send the records of tessera's loggers at ``level`` and above to stderr."""
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter(FORMAT))
    logger = logging.getLogger("tessera")
    logger.handlers[:] = [handler]
    logger.setLevel(level.upper())
    logger.propagate = False
