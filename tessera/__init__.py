"""tessera: GPU inference at the lowest GPU cost that meets its SLOs."""

__version__ = "0.1.0"
