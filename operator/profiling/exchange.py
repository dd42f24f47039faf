"""Measured profiles between clusters: the profiles ConfigMaps <-> the planner's CSV of measured rows.

`export` reads tessera's profiles ConfigMaps (from a cluster, or from a
file of them as `kubectl get configmap -o yaml` writes it) and gives the CSV
that `tessera plan --measured` reads; `import` writes such a CSV into a
cluster's ConfigMaps, merged per variant like the profiler's own results
(a segment type the file carries replaces the one stored), so the operator
plans on them as measured. Failed entries stay in their cluster: a failure
says something about that cluster's nodes and images, not a profile.

Rows carry the image digest they were measured under (`imageDigest`) and are
imported under it, so they serve a variant whose image resolves to that
digest in the importing cluster (pinned in its reference, or reported by a
pod there), under whatever tag. A row without a digest (a file from before
digests) is keyed by its image reference's pinned digest, else by the
reference itself, as a result whose digest nobody reported.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tessera.operator.profiling import jobs as pf
from tessera.operator.profiling.jobs import Obj
from tessera.operator.cluster import Cluster
from tessera.operator.profiling.in_cluster import PROFILES_SELECTOR
from tessera.planner.input_files import InputError, parse_yaml_documents, quote, read_text, validate
from tessera.planner.measured import ProfileRow
from tessera.profiler.results import MAX_BATCHES, Point, SweepResult, Target

IMPORTED_JOB = "imported"
MAX_CONFIGMAP_FILE_BYTES = 64 * 1024 * 1024


def rows_of(entries: list[pf.StoredResult]) -> list[ProfileRow]:
    """Every measured point of these entries, as the planner's rows, sorted; a point the planner would
    refuse (a GPU or MIG profile its catalog lacks, p99 below p50) is refused naming its entry."""
    rows = [validate(ProfileRow, {
        "variant": entry.target.variant, "image": entry.target.image, "image_digest": entry.target.image_digest,
        "gpu": entry.target.gpu, "mig_profile": entry.target.mig_profile, "mps": entry.target.mps,
        "batch": point.batch, "p50_ms": point.p50_ms, "p99_ms": point.p99_ms, "throughput_rps": point.throughput_rps,
    }, f"stored result of {quote(entry.target.variant)} on {quote(entry.target.gpu)} {quote(entry.target.mig_profile)} "
       f"x{entry.target.mps}, batch {point.batch}")
            for entry in entries if entry.result is not None for point in entry.result.points]
    return sorted(rows, key=lambda r: (r.variant, r.image_digest, r.image, r.gpu, r.mig_profile, r.mps, r.batch))


def entries_of_rows(rows: list[ProfileRow]) -> list[pf.StoredResult]:
    """One entry per (variant and image digest, GPU, MIG profile, MPS degree), its batches as measured points."""
    groups: dict[tuple[str, str, str, str, str, int], dict[int, ProfileRow]] = {}
    for row in rows:
        digest = row.image_digest or pf.pinned_digest(row.image)
        groups.setdefault((row.variant, digest, row.image, row.gpu, row.mig_profile, row.mps), {})[row.batch] = row
    entries = []
    for (variant, digest, image, gpu, mig, mps), by_batch in sorted(groups.items()):
        if len(by_batch) > MAX_BATCHES:
            raise InputError(f"{variant} on {gpu} {mig} x{mps}: {len(by_batch)} batch sizes, more than the "
                             f"{MAX_BATCHES} one stored result holds")
        target = Target(variant=variant, image=image, image_digest=digest, gpu=gpu, mig_profile=mig, mps=mps,
                        batches=tuple(sorted(by_batch)))
        points = tuple(Point(batch=b, p50_ms=r.p50_ms, p99_ms=r.p99_ms, throughput_rps=r.throughput_rps, requests=1)
                       for b, r in sorted(by_batch.items()))
        entries.append(pf.StoredResult(job=IMPORTED_JOB, target=target, result=SweepResult(target=target, points=points)))
    return entries


def configmaps_in_file(path: Path) -> list[Obj]:
    """tessera's profiles ConfigMaps in a YAML file (one object, a List, or several documents)."""
    found = []
    documents = parse_yaml_documents(read_text(path, MAX_CONFIGMAP_FILE_BYTES), str(path))
    for number, document in enumerate(documents, start=1):
        where = f"{path}, document {number}" if len(documents) > 1 else str(path)
        if document is None:
            continue
        if not isinstance(document, dict):
            raise InputError(f"{where}: expected a Kubernetes object or List (a mapping), got a {type(document).__name__}")
        items = document.get("items") if document.get("kind") == "List" else [document]
        if not isinstance(items, list):
            raise InputError(f"{where}: items: expected a list of objects, got {type(items).__name__}")
        for index, item in enumerate(items):
            if _is_profiles_configmap(item):
                if not isinstance(item.get("data") or {}, dict):
                    field = f"items[{index}].data" if document.get("kind") == "List" else "data"
                    raise InputError(f"{where}: {field}: expected a mapping of keys to results")
                found.append(item)
    if not found:
        raise InputError(f"{path}: no tessera profiles ConfigMap (label tessera.ai/component={pf.PROFILES_COMPONENT})")
    return found


def _is_profiles_configmap(item: Any) -> bool:
    if not isinstance(item, dict) or item.get("kind") != "ConfigMap":
        return False
    metadata = item.get("metadata")
    labels = metadata.get("labels") if isinstance(metadata, dict) else None
    return isinstance(labels, dict) and labels.get("tessera.ai/component") == pf.PROFILES_COMPONENT


def export_rows(configmaps: list[Obj]) -> list[ProfileRow]:
    return rows_of([entry for cm in configmaps for entry in pf.entries_of(cm)])


def cluster_configmaps(cluster: Cluster) -> list[Obj]:
    return cluster.list_labelled_configmaps(cluster.settings.state_namespace, PROFILES_SELECTOR)


def import_entries(cluster: Cluster, entries: list[pf.StoredResult]) -> None:
    """Merges entries (`entries_of_rows`: checked before any cluster is contacted) into the cluster's
    profiles ConfigMaps."""
    current = {cm["metadata"]["name"]: cm for cm in cluster_configmaps(cluster)}
    by_variant: dict[tuple[str, str], list[pf.StoredResult]] = {}
    for entry in entries:
        key = pf.image_key(entry.target.image, entry.target.image_digest)
        by_variant.setdefault((entry.target.variant, key), []).append(entry)
    namespace = cluster.settings.state_namespace
    cluster.ensure_namespace(namespace)
    for (variant, key), merged in sorted(by_variant.items()):
        existing = current.get(pf.profiles_configmap_name(variant, key))
        body = pf.profiles_configmap(variant, key, pf.merged_data((existing or {}).get("data") or {}, merged))
        body["metadata"]["namespace"] = namespace
        cluster.apply(body)
