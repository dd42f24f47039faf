"""Read compound inference systems from YAML files.

A file holds one or more YAML documents. Each is either a Kubernetes-shaped
object

    apiVersion: tessera.ai/v1alpha1
    kind: CompoundInferenceSystem
    metadata: {name: traffic-analysis}
    spec: {tasks: ..., edges: ..., slo: ..., demandRequestsPerSecond: ..., priority: ...}

or a bare SystemSpec mapping with a `name`. Files use the camelCase wire
names only (`latencyMilliseconds`), as the API server does; a snake_case
attribute name is an unknown field there. Errors name the file and the
document (1-based) they come from.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tessera.planner.input_files import (InputError, load_yaml_documents, object_name_and_spec, quote, shorten,
                                         validate)
from tessera.planner.model import SystemSpec

KIND = "CompoundInferenceSystem"


MAX_SYSTEMS_PER_FILE = 64


class SpecFileError(InputError):
    """A spec file that cannot be read as systems; the message names file and document."""


def system_from_object(document: dict[str, Any], where: str = "document") -> SystemSpec:
    """One SystemSpec from a CompoundInferenceSystem object or a bare SystemSpec mapping."""
    if not isinstance(document, dict):
        raise SpecFileError(f"{where}: expected a mapping, got {type(document).__name__}")
    if "kind" in document or "apiVersion" in document:
        name, spec = object_name_and_spec(document, KIND, where, SpecFileError)
        if "name" in spec and spec["name"] != name:
            raise SpecFileError(f"{where} ({shorten(name)}): spec.name {quote(spec['name'])} differs from metadata.name")
        fields = {**spec, "name": name}
        prefix = "spec"
    else:
        fields = document
        name = document.get("name", "?")
        prefix = ""
    return validate(SystemSpec, fields, f"{where} ({shorten(name)})", prefix, SpecFileError,
                    by_alias=True, by_name=False)


def load_systems(path: str | Path) -> list[SystemSpec]:
    """Every system in a (multi-document) YAML file; empty documents are skipped."""
    path = Path(path)
    try:
        documents = load_yaml_documents(path)
    except InputError as error:
        raise SpecFileError(str(error)) from None
    if len(documents) > MAX_SYSTEMS_PER_FILE:
        raise SpecFileError(f"{path}: {len(documents)} YAML documents, over the limit of {MAX_SYSTEMS_PER_FILE}")
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
        raise SpecFileError(f"{path}: duplicate system names {quote(duplicates)}")
    return systems
