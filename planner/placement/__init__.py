"""Adapter placement: LoRA adapters of one base model on the fewest GPUs, checked by the twin.

Pure library: plain data in (``PlacementProblem``), plain data out
(``Placement``, ``PlacementReport``, ``Replacement``); no Kubernetes.
"""

from .bound import lower_bound
from .model import (AdapterDemand, GateLog, LowerBound, Placement, PlacementProblem, PlacementReport, PoolLimits,
                    Prediction, Replacement, ServerPlacement, ServiceBound, TwinCheck)
from .packing import STRATEGIES, zigzag_order
from .placing import BASELINES, place, plan_placement
from .replace import replace_adapters
from .server import ServerModel
from .twin_check import check_placement

__all__ = ["AdapterDemand", "BASELINES", "GateLog", "LowerBound", "Placement", "PlacementProblem", "PlacementReport",
           "PoolLimits", "Prediction", "Replacement", "STRATEGIES", "ServerModel", "ServerPlacement",
           "ServiceBound", "TwinCheck", "check_placement", "lower_bound", "place", "plan_placement",
           "replace_adapters", "zigzag_order"]
