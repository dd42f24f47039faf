"""CustomResourceDefinitions generated from the pydantic models, never edited by hand.

Kubernetes wants a structural OpenAPI v3.0 schema: no $ref, no `null` type
(nullable instead), `exclusiveMinimum` as a flag beside `minimum`, no
`additionalProperties` beside `properties` (the API server prunes unknown
fields instead, or rejects them with fieldValidation=Strict) and no
`propertyNames` or `patternProperties`. Defaults stay out of the schema and go into the field's
description: the API server then stores exactly what the user wrote, and the
operator applies the defaults when it validates the spec with the models.
`tessera crds --write` regenerates crds/; a test keeps the checked-in files
equal to the models.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from tessera.operator.api.v1alpha1 import MAX_NAME_LENGTH, AdapterPoolStatus, SystemStatus
from tessera.planner.adapter_pool import AdapterPoolSpec
from tessera.planner.model import DNS_1035_LABEL, SystemSpec

GROUP = "tessera.ai"
VERSION = "v1alpha1"
CATEGORY = "tessera"
CRDS_DIR = Path(__file__).resolve().parents[2] / "crds"
# Helm installs CRDs only from the chart's own crds/ folder: the generated files are copied there.
CHART_CRDS_DIR = CRDS_DIR.parent / "charts" / "tessera" / "crds"
DROPPED_KEYS = {"title", "$defs", "propertyNames"}
READY = '.status.conditions[?(@.type=="Ready")].status'


def _column(name: str, json_path: str, type_: str, description: str, priority: int = 0) -> dict[str, Any]:
    column = {"name": name, "type": type_, "jsonPath": json_path, "description": description}
    return {**column, "priority": priority} if priority else column


AGE = _column("Age", ".metadata.creationTimestamp", "date", "Time since the object was created.")


@dataclass(frozen=True)
class Kind:
    name: str
    plural: str
    short_names: tuple[str, ...]
    description: str
    spec: type[BaseModel]
    status: type[BaseModel]
    columns: tuple[dict[str, Any], ...]
    excluded: frozenset[str] = frozenset({"name"})  # spec fields the object's metadata supplies


KINDS = {kind.name: kind for kind in (
    Kind(
        name="CompoundInferenceSystem", plural="compoundinferencesystems", short_names=("cis",),
        description="A task graph of ML models with latency and accuracy SLOs and a demand; tessera picks variant, "
                    "GPU segment, batch and replicas per task at the lowest GPU cost that meets the SLOs.",
        spec=SystemSpec, status=SystemStatus,
        columns=(
            _column("Ready", READY, "string", "Whether the plan is applied and every server ready."),
            _column("Phase", ".status.phase", "string", "Where the system is."),
            _column("GPUs", ".status.plan.gpus", "integer", "GPUs holding this system's servers now (available pods)."),
            _column("Slices", ".status.plan.slices", "integer", "Compute slices (sevenths of a GPU) used."),
            _column("Pool-%", ".status.plan.poolSharePercent", "number", "Share of the GPU pool's compute slices."),
            _column("Priority", ".spec.poolPriority", "integer", "Rank among the pool's systems (spec.poolPriority).",
                    priority=1),
            _column("Accuracy", ".status.plan.predictedAccuracy", "number", "Predicted worst-path accuracy."),
            _column("Latency-ms", ".status.plan.predictedLatencyMilliseconds", "number",
                    "Predicted worst-path latency in ms."),
            _column("Frontend", ".status.frontend.address", "string", "The system's frontend endpoint (spec.frontend)."),
            AGE,
        ),
    ),
    Kind(
        name="AdapterPool", plural="adapterpools", short_names=("ap",),
        description="One base LLM serving many LoRA adapters, packed onto the fewest GPUs that keep every adapter "
                    "within its service bound.",
        spec=AdapterPoolSpec, status=AdapterPoolStatus,
        columns=(
            _column("Ready", READY, "string", "Whether the placement is applied and every server ready."),
            _column("Phase", ".status.phase", "string", "Where the pool is."),
            _column("Servers", ".status.plan.serversReady", "integer", "Servers available."),
            _column("GPUs", ".status.plan.gpus", "integer", "Servers planned (one whole GPU each)."),
            _column("Adapters", ".status.plan.adaptersPlaced", "integer", "Adapters placed on a server."),
            _column("Unplaced", ".status.plan.adaptersUnplaced", "integer", "Adapters that fit no server."),
            _column("Failed", ".status.plan.adaptersFailed", "integer", "Adapters that failed to load repeatedly."),
            _column("Priority", ".spec.poolPriority", "integer", "Rank among the pool's AdapterPools (spec.poolPriority).",
                    priority=1),
            AGE,
        ),
    ),
)}


def _with_default_described(node: dict[str, Any]) -> dict[str, Any]:
    if "default" not in node:
        return node
    node = dict(node)
    default = node.pop("default")
    if default is not None and default != [] and default != {}:
        node["description"] = f"{node.get('description', '').rstrip()} Default: {json.dumps(default)}.".strip()
    return node


def _structural(node: Any, definitions: dict[str, Any]) -> Any:
    if isinstance(node, list):
        return [_structural(item, definitions) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        # The referring field's own keys (its description) win over the definition's.
        target = dict(definitions[node["$ref"].split("/")[-1]])
        target.update({k: v for k, v in node.items() if k != "$ref"})
        return _structural(target, definitions)
    node = _with_default_described(node)
    variants = node.get("anyOf")
    if variants and any(v.get("type") == "null" for v in variants):
        rest = [v for v in variants if v.get("type") != "null"]
        merged = {k: v for k, v in node.items() if k != "anyOf"}
        inner = _structural(rest[0], definitions) if len(rest) == 1 else {"anyOf": rest}
        merged = {**inner, **merged}
        merged["nullable"] = True
        return _structural(merged, definitions)
    schema: dict[str, Any] = {}
    for key, value in node.items():
        if key in DROPPED_KEYS:
            continue
        if key == "exclusiveMinimum" and not isinstance(value, bool):
            schema["minimum"] = value
            schema["exclusiveMinimum"] = True
        elif key == "additionalProperties" and value is False:
            continue
        elif key == "patternProperties":
            # Kubernetes has no patternProperties: keep the values' schema, let the models check the keys.
            [values] = value.values()
            schema["additionalProperties"] = _structural(values, definitions)
        elif key == "properties":
            schema[key] = {name: _structural(sub, definitions) for name, sub in value.items()}
        else:
            schema[key] = _structural(value, definitions)
    return schema


def model_schema(model: type[BaseModel], excluded: frozenset[str] = frozenset()) -> dict[str, Any]:
    raw = model.model_json_schema(by_alias=True)
    schema = _structural(raw, raw.get("$defs", {}))
    for field in excluded:
        schema["properties"].pop(field, None)
        if field in schema.get("required", []):
            schema["required"].remove(field)
    return schema


def _docstring(model: type[BaseModel]) -> str:
    """A model's docstring, the description its CRD shows; every spec and status model has one."""
    if not model.__doc__:
        raise ValueError(f"{model.__name__} has no docstring for its CRD description")
    return model.__doc__.strip()


def _metadata_schema(kind: Kind) -> dict[str, Any]:
    return {
        "type": "object",  # the API server allows nothing here but restrictions on name and generateName
        "properties": {"name": {
            "type": "string", "maxLength": MAX_NAME_LENGTH, "pattern": DNS_1035_LABEL,
            "description": f"The {kind.name}'s name: a DNS-1035 label of at most 63 characters (it is a label "
                           "value on every child; children get hashed names, so any name fits).",
        }},
    }


def crd(name: str) -> dict[str, Any]:
    kind = KINDS[name]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{kind.plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "names": {"kind": kind.name, "plural": kind.plural, "singular": kind.name.lower(),
                      "listKind": f"{kind.name}List", "shortNames": list(kind.short_names),
                      "categories": [CATEGORY]},
            "scope": "Namespaced",
            "versions": [{
                "name": VERSION, "served": True, "storage": True,
                "subresources": {"status": {}},
                "additionalPrinterColumns": list(kind.columns),
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "description": kind.description,
                    "properties": {
                        "apiVersion": {"type": "string", "description": "tessera.ai/v1alpha1."},
                        "kind": {"type": "string", "description": f"{kind.name}."},
                        "metadata": _metadata_schema(kind),
                        "spec": {**model_schema(kind.spec, kind.excluded), "description": _docstring(kind.spec)},
                        "status": {**model_schema(kind.status), "description": _docstring(kind.status)},
                    },
                    "required": ["spec"],
                }},
            }],
        },
    }


def rendered() -> dict[Path, str]:
    header = "# Generated by `tessera crds --write` from the pydantic models; do not edit.\n"
    return {
        CRDS_DIR / f"{kind.plural}.{GROUP}.yaml": header + yaml.safe_dump(crd(name), sort_keys=False)
        for name, kind in KINDS.items()
    }
