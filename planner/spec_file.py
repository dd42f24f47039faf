"""Read compound inference systems from YAML files.

A file holds one or more YAML documents. Each is either a Kubernetes-shaped
object

    apiVersion: tessera.ai/v1alpha1
    kind: CompoundInferenceSystem
    metadata: {name: traffic-analysis}
    spec: {tasks: ..., edges: ..., slo: ..., demand_rps: ..., priority: ...}

or a bare SystemSpec mapping with a `name`. Errors name the file and the
document (1-based) they come from.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from tessera.planner.model import SystemSpec

API_VERSION = "tessera.ai/v1alpha1"
KIND = "CompoundInferenceSystem"


class SpecFileError(ValueError):
    """A spec file that cannot be read as systems; the message names file and document."""


def system_from_object(document: dict[str, Any], where: str = "document") -> SystemSpec:
    """One SystemSpec from a CompoundInferenceSystem object or a bare SystemSpec mapping."""
    if not isinstance(document, dict):
        raise SpecFileError(f"{where}: expected a mapping, got {type(document).__name__}")
    if "kind" in document or "apiVersion" in document:
        if document.get("kind") != KIND:
            raise SpecFileError(f"{where}: kind must be {KIND}, got {document.get('kind')!r}")
        if document.get("apiVersion") != API_VERSION:
            raise SpecFileError(f"{where}: apiVersion must be {API_VERSION}, got {document.get('apiVersion')!r}")
        name = (document.get("metadata") or {}).get("name")
        if not name:
            raise SpecFileError(f"{where}: metadata.name is missing")
        spec = document.get("spec")
        if not isinstance(spec, dict):
            raise SpecFileError(f"{where} ({name}): spec is missing or not a mapping")
        if "name" in spec and spec["name"] != name:
            raise SpecFileError(f"{where} ({name}): spec.name {spec['name']!r} differs from metadata.name")
        fields = {**spec, "name": name}
    else:
        fields = document
        name = document.get("name", "?")
    try:
        return SystemSpec.model_validate(fields)
    except ValidationError as error:
        raise SpecFileError(f"{where} ({name}): {_describe(error)}") from None


def _describe(error: ValidationError) -> str:
    """Pydantic's errors on one line each: `slo.latency_ms: Input should be greater than 0`."""
    return "; ".join(
        f"{'.'.join(str(part) for part in e['loc']) or 'spec'}: {e['msg']}" for e in error.errors()
    )


def load_systems(path: str | Path) -> list[SystemSpec]:
    """Every system in a (multi-document) YAML file; empty documents are skipped."""
    path = Path(path)
    try:
        documents = list(yaml.safe_load_all(path.read_text()))
    except yaml.YAMLError as error:
        raise SpecFileError(f"{path}: not valid YAML: {error}") from None
    systems = [
        system_from_object(document, f"{path}, document {index}")
        for index, document in enumerate(documents, start=1)
        if document is not None
    ]
    if not systems:
        raise SpecFileError(f"{path}: no systems in the file")
    names = [s.name for s in systems]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise SpecFileError(f"{path}: duplicate system names {duplicates}")
    return systems
