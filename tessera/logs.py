"""The one place that configures logging.

Library modules only create loggers (``logging.getLogger(__name__)``) and log;
entry points (the CLI, later the operator) call ``configure_logging`` once.
"""

from __future__ import annotations

import logging

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def configure_logging(level: str = "warning", libraries: str | None = None) -> None:
    """Send the records of tessera's loggers at ``level`` and above to stderr; with ``libraries``,
    also those of every other logger (kopf, the kubernetes client) at that level and above."""
    if libraries is not None:
        logging.basicConfig(level=libraries.upper(), format=FORMAT)
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter(FORMAT))
    logger = logging.getLogger("tessera")
    logger.handlers[:] = [handler]
    logger.setLevel(level.upper())
    logger.propagate = False
