"""Profiler Jobs, pure: what to measure, the Job that measures it, and its result back as profiles.

No API calls here (operator/profiling/in_cluster.py reads and writes the cluster):
plain data in, plain data out, unit-tested without a cluster.

- What: the segment types a pool's plan chose for a variant on the built-in
  estimate (the planner's shortlist), one Job per (variant and image digest,
  GPU product, MIG profile, MPS degree) that has no stored result yet,
  measured or failed: a failure is a result, never a reason to run the same
  Job again.
- Which image: results are keyed by the image's digest, never by its tag.
  A reference that pins `@sha256:` names its digest; otherwise the digest is
  what Kubernetes reports for it: the `imageID` the kubelet writes into a
  pod's container status (`docker-pullable://repo@sha256:...`,
  `repo@sha256:...`). The operator takes the latest such report for the
  reference (tessera's serving and profiler pods, and the stored results,
  which keep the report they were measured under), so a tag pushed again
  (same tag, new digest) is measured again once a pod reports the new
  digest, and a digest measured under one reference serves every reference
  that resolves to it. While no digest is known for a reference, its
  results are keyed by the reference (`ref:<image>`): a Job whose pod never
  started (no imageID) keeps its failure there, and a later report of a
  digest measures that digest afresh.
- Where: a node of the pool with a free instance of that MIG profile in its
  current layout: advertised (`nvidia.com/mig-<profile>.count`), less the
  instances the pool's plan gives its servers there and those running
  profiler Jobs hold; a node whose planned layout is not applied yet, or
  whose layout tessera changes right now, offers none. The Job is pinned to
  it and requests one. With re-partitioning on (a setting), a profile no
  node offers gets a free node of the pool (no pods on its GPUs, in no
  system's plan, schedulable) re-partitioned to a layout holding it, through
  the same mig-parted ConfigMap and `nvidia.com/mig.config` label as a plan's
  layouts (`repartition_plan`); its Job follows once mig-manager reports
  success and the node advertises the profile.
- The Job: the variant's model server as a native sidecar (an init container
  with restartPolicy Always) under tessera's identity wrapper, the profiler
  as the only regular container, so the Job completes when the profiler
  exits. backoffLimit 0; a podFailurePolicy fails the Job at once on the
  profiler's documented exit codes and ignores disruptions; a deadline, a
  TTL, resource requests and size-limited scratch.
- The result: the profiler's termination message (`SweepResult` JSON, within
  4 KiB), as the kubelet writes it into the pod's status. Stored per variant
  in one ConfigMap (a key per segment type), within the 1 MiB limit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tessera.operator import naming
from tessera.operator.api.v1alpha1 import child_name
from tessera.operator.gpus.node_plans import NodePlan
from tessera.operator.gpus.discovery import MIG_RESOURCE_PREFIX, NodeFacts, Pool, node_profile_name
from tessera.operator.pod_security import RESTRICTED_CONTAINER_SECURITY, RESTRICTED_POD_SECURITY
from tessera.planner.catalog import Layout, valid_layouts
from tessera.operator.api.systems import SystemRef
from tessera.planner.model import SystemSpec, Variant
from tessera.planner.plan import Plan
from tessera.planner.profiles import Profile, ProfileSource, ProfileStore, SegmentType
from tessera.profiler.contract import ENV_MODEL_NAME, server_environment
from tessera.profiler.results import DIGEST, MAX_BATCHES, ExitCode, SweepResult, Target

PROFILER_CONTAINER = "profiler"
SERVER_CONTAINER = "server"
SHARED_DIR = "/tessera-shared"
SCRATCH_DIR = "/tmp"
SHARED_LIMIT = "16Mi"
COMPONENT = "profiler"
PROFILES_COMPONENT = "profiles"
VARIANT_LABEL = f"{naming.GROUP}/variant"
POOL_LABEL = f"{naming.GROUP}/pool"
TARGET_LABEL = f"{naming.GROUP}/profile-target"
TARGET_ANNOTATION = f"{naming.GROUP}/profile-target"
IMAGE_ANNOTATION = f"{naming.GROUP}/image"
PROFILES_PREFIX = "tessera-profiles"
PROFILER_CPU = "500m"
PROFILER_MEMORY = "512Mi"
# The result, on every outcome: the termination message holds the profiler's last write.
FAILJOB_EXIT_CODES = sorted(int(code) for code in ExitCode if code != ExitCode.COMPLETE)
Obj = dict[str, Any]
"""A Kubernetes object as the API's JSON has it."""
CONFIGMAP_LIMIT = 1_000_000  # bytes of data in one ConfigMap (the API's limit is 1 MiB, with metadata)


@dataclass(frozen=True)
class PlannedNode:
    """A node of the pool's plan, as profiling sees it."""

    applied: bool
    """It advertises its planned layout (mig-manager's success, the expected counts)."""
    used: dict[str, int] = field(default_factory=dict)
    """Catalog MIG profile -> instances the plan's servers take on the node."""


@dataclass(frozen=True)
class ProfilerSettings:
    """What the Job builder needs from the operator's settings."""

    image: str
    server_port: int
    deadline_s: int
    ttl_s: int
    ready_timeout_s: float
    default_image: str = ""
    scratch: str = "2Gi"


# -- image digests -----------------------------------------------------------------

def pinned_digest(image: str) -> str:
    """The digest a reference pins (`repo@sha256:<hex>`), else ''."""
    _, at, digest = image.rpartition("@")
    return digest if at and DIGEST.fullmatch(digest) else ""


def image_id_digest(image_id: str) -> str:
    """The `sha256:` digest in a container status's imageID as the kubelet writes it, else ''.

    `docker-pullable://repo@sha256:<hex>`, `repo@sha256:<hex>` and a bare
    `sha256:<hex>` all give `sha256:<hex>`; anything else (empty, a runtime's
    other forms) gives ''.
    """
    text = image_id.strip()
    if "://" in text:
        text = text.split("://", 1)[1]
    digest = text.rpartition("@")[2]
    return digest if DIGEST.fullmatch(digest) else ""


def image_key(image: str, digest: str) -> str:
    """What results of an image are keyed by: its digest, or `ref:<reference>` while none is known."""
    return digest if digest else f"ref:{image}"


@dataclass(frozen=True, order=True)
class Observation:
    """A digest Kubernetes reported for an image reference, and when the container started."""

    started_at: str
    digest: str


def _started_at(status: Obj) -> str:
    state = status.get("state") or {}
    for phase in ("running", "terminated"):
        if (state.get(phase) or {}).get("startedAt"):
            return str(state[phase]["startedAt"])
    return ""


def pod_image_digests(pod: Obj, only: str | None = None) -> dict[str, Observation]:
    """Image reference (as the pod's spec names it) -> the digest its container status reports.

    Init (native sidecar) and regular containers alike; `only` restricts it to
    one container name. A status without a digest in its imageID (a container
    not pulled or started yet) reports nothing.
    """
    spec = pod.get("spec") or {}
    images = {c["name"]: c.get("image", "") for key in ("initContainers", "containers") for c in spec.get(key) or []}
    status = pod.get("status") or {}
    found: dict[str, Observation] = {}
    for container in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]:
        name = container.get("name", "")
        digest = image_id_digest(str(container.get("imageID") or ""))
        image = images.get(name, "")
        if not digest or not image or (only is not None and name != only):
            continue
        seen = Observation(_started_at(container), digest)
        found[image] = max(found.get(image, seen), seen)
    return found


def resolve_digests(images: set[str], observations: list[tuple[str, Observation]]) -> dict[str, str]:
    """Image reference -> its digest: pinned, else the latest reported, else ''."""
    latest: dict[str, Observation] = {}
    for image, seen in observations:
        if image in images:
            latest[image] = max(latest.get(image, seen), seen)
    return {image: pinned_digest(image) or (latest[image].digest if image in latest else "") for image in images}


@dataclass(frozen=True)
class Wanted:
    """One segment type a plan chose for a variant on an estimate: what a Job would measure."""

    system: SystemRef
    task: str
    variant: Variant
    gpu: str
    mig_profile: str
    mps: int

    @property
    def image(self) -> str:
        return self.variant.image or ""

    def target(self, batches: tuple[int, ...], digest: str = "") -> Target:
        """The Job's target; `digest` is the image's digest as known now ('' while unknown)."""
        return Target(variant=self.variant.name, image=self.image, image_digest=digest or pinned_digest(self.image),
                      gpu=self.gpu, mig_profile=self.mig_profile, mps=self.mps, batches=batches[:MAX_BATCHES])


class StoredResult(BaseModel):
    """One segment type's entry in a variant's profiles ConfigMap: the profiler's result, or why there is none."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    job: str = Field(description="The Job that measured it (or `imported`).")
    target: Target = Field(description="What was measured; `image_digest` is the digest the server's pod reported.")
    observed_at: str | None = Field(
        default=None, max_length=64,
        description="When the server's container started with that digest (its status' startedAt): the report "
                    "of the image's digest this result rests on. None where no pod reported one (imported).")
    result: SweepResult | None = None
    job_failure: str | None = Field(default=None, max_length=1024,
                                    description="Why the Job failed without a result from the profiler.")

    @property
    def failed(self) -> bool:
        return self.result is None or self.result.failure is not None

    def why(self) -> str:
        if self.result is not None and self.result.failure is not None:
            failure = self.result.failure
            at = f" at batch {failure.batch}" if failure.batch else ""
            return f"{failure.kind.value}{at}: {failure.message}"
        return self.job_failure or "no result"


# -- what to measure ------------------------------------------------------------

def shortlist(plan: Plan, systems: list[tuple[SystemRef, SystemSpec]]) -> list[Wanted]:
    """The (variant, segment type) pairs the plan runs on estimates, once each, in plan order."""
    specs = {spec.name: (ref, spec) for ref, spec in systems}
    wanted: dict[tuple[str, str, str, str, str, int], Wanted] = {}
    for task in plan.tasks:
        if task.system not in specs:
            continue
        ref, spec = specs[task.system]
        variant = spec.task(task.task).variant(task.variant)
        for config in task.configs:
            if config.source is not ProfileSource.ESTIMATED:
                continue
            item = Wanted(ref, task.task, variant, config.segment.gpu, config.segment.mig_profile, config.segment.mps)
            wanted.setdefault((item.variant.name, item.image, item.gpu, item.mig_profile, "", item.mps), item)
    return list(wanted.values())


def result_identity(target: Target) -> tuple[str, str, str, str, int]:
    """What a stored result is keyed by: variant and image digest, GPU product, MIG profile, MPS degree.

    (With batch, the key of one measured point: a result holds its batches.)
    """
    return target.variant, image_key(target.image, target.image_digest), target.gpu, target.mig_profile, target.mps


def node_for(pool: Pool, mig_profile: str, taken: dict[tuple[str, str], int] | None = None,
             unusable: frozenset[str] | set[str] = frozenset()) -> tuple[NodeFacts, str] | None:
    """The pool's node with the most free instances of this MIG profile, and the node's name for it.

    `taken`: (node, the node's name for the profile) -> instances the plan's
    servers and running profiler Jobs hold; `unusable`: nodes that offer none
    (a planned layout not applied yet, a layout being changed).
    """
    profile = pool.gpu.profile(mig_profile)
    found: list[tuple[int, str, NodeFacts, str]] = []
    for node in pool.nodes:
        if node.name in unusable or not node.schedulable:
            continue
        name = node_profile_name(profile, node.advertised)
        count = (node.advertised[name].count if name in node.advertised else 0) - (taken or {}).get((node.name, name), 0)
        if count > 0:
            found.append((-count, node.name, node, name))
    if not found:
        return None
    _, _, node, name = min(found)
    return node, name


def in_transition(node: NodeFacts) -> bool:
    """tessera asked mig-manager for a layout on this node and it has not answered success or failed yet."""
    return node.requested_config is not None and node.mig_config == node.requested_config \
        and node.mig_state not in ("success", "failed")


def job_holds(job: Obj) -> tuple[str, str] | None:
    """(hostname, MIG resource) a profiler Job's pod is pinned to and requests, from the Job's spec."""
    pod = ((job.get("spec") or {}).get("template") or {}).get("spec") or {}
    terms = (((pod.get("affinity") or {}).get("nodeAffinity") or {})
             .get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or []
    hosts = [v for term in terms for e in term.get("matchExpressions") or []
             if e.get("key") == "kubernetes.io/hostname" for v in e.get("values") or []]
    resources = [r for c in pod.get("initContainers") or [] if c.get("name") == SERVER_CONTAINER
                 for r in ((c.get("resources") or {}).get("requests") or {}) if r.startswith(MIG_RESOURCE_PREFIX)]
    return (hosts[0], resources[0]) if hosts and resources else None


def profiling_layout(gpu: str, mig_profile: str) -> Layout:
    """The valid layout of one GPU with the most instances of `mig_profile` (and the fewest others)."""
    def score(layout: Layout) -> tuple[int, int, Layout]:
        counts = dict(layout)
        return (-counts.get(mig_profile, 0), sum(counts.values()), layout)
    return min(valid_layouts(gpu), key=score)


def repartition_plan(node: NodeFacts, gpu: str, mig_profiles: list[str]) -> NodePlan:
    """A free node's layout for profiling: its GPUs take the wanted profiles in turn, each at its most instances."""
    wanted = sorted(set(mig_profiles))[:node.gpu_count]
    return NodePlan(node=node.name, gpu_count=node.gpu_count,
                    layouts={index: profiling_layout(gpu, wanted[index % len(wanted)])
                             for index in range(node.gpu_count)} if wanted else {})


# -- the Job --------------------------------------------------------------------

def job_name(target: Target) -> str:
    return child_name("profile", target.variant, target.mig_profile, f"x{target.mps}", target.gpu, target.image,
                      target.image_digest)


def target_hash(target: Target) -> str:
    return naming.digest(list(result_identity(target)))[:16]


def profiler_job(wanted: Wanted, target: Target, node: NodeFacts, node_profile: str, pool_key: str,
                 settings: ProfilerSettings) -> Obj:
    """The Job measuring `target` on `node`: server as a native sidecar, profiler as the only container."""
    name = job_name(target)
    labels = {**naming.child_labels(wanted.system.name, wanted.task, COMPONENT),
              VARIANT_LABEL: naming.label_value(target.variant), POOL_LABEL: naming.label_value(pool_key),
              TARGET_LABEL: target_hash(target)}
    resource = f"{MIG_RESOURCE_PREFIX}{node_profile}"
    variant = wanted.variant
    server_env = {
        **{e.name: e.value for e in variant.env},
        # The profiler forms every batch itself: the server must not merge requests (docs/profiler.md).
        **server_environment(batch_size=1, batch_delay_ms=0, processes=target.mps, model_name=variant.name,
                             http_port=settings.server_port),
        "TESSERA_SHARED_DIR": SHARED_DIR,
    }
    server = {
        "name": SERVER_CONTAINER,
        "image": variant.image or settings.default_image,
        "restartPolicy": "Always",  # a native sidecar: the Job completes when the profiler exits
        "command": ["python3", "-P", "-m", "tessera.profiler.main", "serve", "--shared-folder", SHARED_DIR, "--"],
        "args": list(variant.args),
        "env": [{"name": k, "value": v} for k, v in server_env.items()],
        "ports": [{"name": "http", "containerPort": settings.server_port}],
        "resources": {
            "requests": {resource: "1", "cpu": f"{variant.cpu_millicores * target.mps}m",
                         "memory": f"{variant.memory_mib * target.mps}Mi", "ephemeral-storage": settings.scratch},
            "limits": {resource: "1", "memory": f"{variant.memory_mib * target.mps}Mi",
                       "ephemeral-storage": settings.scratch},
        },
        "volumeMounts": [{"name": "shared", "mountPath": SHARED_DIR}, {"name": "scratch", "mountPath": SCRATCH_DIR}],
        "securityContext": RESTRICTED_CONTAINER_SECURITY,
    }
    profiler = {
        "name": PROFILER_CONTAINER,
        "image": settings.image,
        "command": ["python", "-P", "-m", "tessera.profiler.main", "run"],
        "env": [
            {"name": "TESSERA_PROFILE_TARGET", "value": target.model_dump_json()},
            {"name": ENV_MODEL_NAME, "value": variant.name},
            {"name": "TESSERA_SERVER_URL", "value": f"http://127.0.0.1:{settings.server_port}"},
            {"name": "TESSERA_SHARED_DIR", "value": SHARED_DIR},
            {"name": "TESSERA_READY_TIMEOUT_S", "value": f"{settings.ready_timeout_s:g}"},
        ],
        # The result is the termination message; a crash before it is written leaves the log's tail.
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "resources": {"requests": {"cpu": PROFILER_CPU, "memory": PROFILER_MEMORY},
                      "limits": {"memory": PROFILER_MEMORY}},
        "volumeMounts": [{"name": "shared", "mountPath": SHARED_DIR, "readOnly": True}],
        "securityContext": RESTRICTED_CONTAINER_SECURITY,
    }
    pod_spec = {
        "restartPolicy": "Never",
        "securityContext": RESTRICTED_POD_SECURITY,
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [node.hostname]}]}]}}},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "initContainers": [server],
        "containers": [profiler],
        "volumes": [{"name": "shared", "emptyDir": {"sizeLimit": SHARED_LIMIT}},
                    {"name": "scratch", "emptyDir": {"sizeLimit": settings.scratch}}],
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": wanted.system.namespace, "labels": labels,
                     "annotations": {TARGET_ANNOTATION: target.model_dump_json()},
                     "ownerReferences": [wanted.system.owner_reference()]},
        "spec": {
            "backoffLimit": 0,
            "podFailurePolicy": {"rules": [
                # A node drain or preemption is no verdict on the variant: run the pod again.
                {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
                # Every documented non-zero exit is deterministic: fail at once, keep the result.
                {"action": "FailJob", "onExitCodes": {"containerName": PROFILER_CONTAINER, "operator": "In",
                                                      "values": FAILJOB_EXIT_CODES}},
            ]},
            "activeDeadlineSeconds": settings.deadline_s,
            "ttlSecondsAfterFinished": settings.ttl_s,
            "template": {"metadata": {"labels": {naming.MANAGED_BY: naming.MANAGED_BY_VALUE,
                                                 naming.CHILD_KIND_LABEL: COMPONENT, TARGET_LABEL: target_hash(target)}},
                         "spec": pod_spec},
        },
    }


# -- the result -------------------------------------------------------------------

def job_target(job: Obj) -> Target | None:
    text = ((job.get("metadata") or {}).get("annotations") or {}).get(TARGET_ANNOTATION)
    try:
        return Target.model_validate_json(text) if text else None
    except ValidationError:
        return None


def job_finished(job: Obj) -> str | None:
    """'Complete' or 'Failed' once the Job controller says so, else None."""
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("type") in ("Complete", "Failed") and condition.get("status") == "True":
            return str(condition["type"])
    return None


def _job_failure_text(job: Obj) -> str:
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Failed" and condition.get("status") == "True":
            return f"Job {job['metadata']['name']} failed: {condition.get('reason', '')}: {condition.get('message', '')}"
    return f"Job {job['metadata']['name']} ended without a result"


def server_digest(pods: list[Obj], image: str) -> tuple[str, str | None]:
    """The digest and start time the Job's pods report for the server's image; ('', None) if none reported one."""
    seen = [found[image] for pod in pods if image in (found := pod_image_digests(pod, SERVER_CONTAINER))]
    if not seen:
        return "", None
    latest = max(seen)
    return latest.digest, latest.started_at or None


def profiler_termination(pod: Obj) -> Obj | None:
    """The profiler container's `state.terminated`, as the kubelet writes it in the pod's status."""
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if status.get("name") == PROFILER_CONTAINER:
            terminated = (status.get("state") or {}).get("terminated")
            return terminated if terminated else None
    return None


def stored_result(job: Obj, pods: list[Obj]) -> StoredResult | None:
    """A finished Job's entry: the result from its pod's termination message; None while it runs.

    The message must be a result for the Job's own target; anything else (a
    crash's log tail, a result for another target) is the Job's failure, in words.
    The entry is keyed by the digest the server's pod reported (its imageID),
    which may differ from the one known when the Job was made (a tag pushed
    again in between); a pod that never reported one (never started, image not
    pulled) leaves the Job's own: pinned, the one known then, or none.
    """
    finished = job_finished(job)
    launched = job_target(job)
    if finished is None or launched is None:
        return None
    name = job["metadata"]["name"]
    digest, observed_at = server_digest(pods, launched.image)
    target = launched.model_copy(update={"image_digest": digest}) if digest else launched
    terminated = [t for t in (profiler_termination(p) for p in pods) if t is not None]
    for termination in sorted(terminated, key=lambda t: str(t.get("finishedAt") or "")):
        message = (termination.get("message") or "").strip()
        try:
            result = SweepResult.from_termination_message(message)
        except ValidationError:
            continue
        if result.target == launched:
            return StoredResult(job=name, target=target, result=result, observed_at=observed_at)
    why = _job_failure_text(job)
    if terminated:
        last = terminated[-1]
        why += (f"; the profiler exited {last.get('exitCode')} without a result: "
                f"{(last.get('message') or last.get('reason') or '')[-300:]}")
    return StoredResult(job=name, target=target, job_failure=why[:1024], observed_at=observed_at)


# -- stored results: one ConfigMap per variant and image digest, a key per segment type --------

def profiles_configmap_name(variant: str, key: str) -> str:
    """The ConfigMap of a variant's results under one `image_key` (a digest, or `ref:<image>`)."""
    return child_name(PROFILES_PREFIX, variant, key)


def result_key(target: Target) -> str:
    """The ConfigMap key of a segment type: `H100-80GB.1g.10gb.x2`."""
    return f"{target.gpu}.{target.mig_profile}.x{target.mps}"


def profiles_configmap(variant: str, key: str, data: dict[str, str]) -> Obj:
    return {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": profiles_configmap_name(variant, key),
                     "labels": {naming.MANAGED_BY: naming.MANAGED_BY_VALUE, naming.SCHEMA_LABEL: naming.SCHEMA_VERSION,
                                naming.CHILD_KIND_LABEL: PROFILES_COMPONENT, VARIANT_LABEL: naming.label_value(variant)},
                     "annotations": {IMAGE_ANNOTATION: key}},
        "data": data,
    }


def merged_data(current: dict[str, str], entries: list[StoredResult]) -> dict[str, str]:
    """The ConfigMap's data with these entries merged in (a later entry replaces an earlier one's key).

    Raises ValueError when the whole would pass the ConfigMap limit (it
    cannot at 4 KiB per key and the catalog's segment types per variant).
    """
    data = dict(current)
    for entry in entries:
        data[result_key(entry.target)] = entry.model_dump_json(exclude_none=True)
    size = sum(len(k) + len(v.encode()) for k, v in data.items())
    if size > CONFIGMAP_LIMIT:
        raise ValueError(f"profiles of {len(data)} segment types take {size} bytes, over {CONFIGMAP_LIMIT}")
    return data


def entries_of(configmap: Obj) -> list[StoredResult]:
    """The readable entries of a profiles ConfigMap (an unreadable key is skipped, not fatal)."""
    found = []
    for _key, text in sorted(((configmap.get("data") or {})).items()):
        try:
            found.append(StoredResult.model_validate_json(text))
        except ValidationError:
            continue
    return found


@dataclass(frozen=True)
class MeasuredRow:
    variant: str
    segment: SegmentType
    batch: int
    profile: Profile


def measured_rows(entries: list[StoredResult], gpu: str, images: dict[str, str]) -> list[MeasuredRow]:
    """Measured points of these entries on `gpu`, for variants whose image key is `images[variant]`.

    `images` holds each variant's `image_key`: its image's digest where known,
    so a result measured under another reference of the same digest counts
    and one measured under the same tag before it was pushed again does not.

    The latency is the p99 of a batch: the SLO's default percentile, and the
    safe side for a p50 SLO.
    """
    rows = []
    for entry in entries:
        target, result = entry.target, entry.result
        if result is None or target.gpu != gpu or images.get(target.variant) != image_key(target.image,
                                                                                        target.image_digest):
            continue
        segment = SegmentType(gpu=gpu, mig_profile=target.mig_profile, mps=target.mps)
        rows += [MeasuredRow(target.variant, segment, point.batch, Profile(
            latency_ms=point.p99_ms, throughput_rps=point.throughput_rps, source=ProfileSource.MEASURED,
            p50_ms=point.p50_ms))
            for point in result.points]
    return sorted(rows, key=lambda r: (r.variant, r.segment.mig_profile, r.segment.mps, r.batch))


def measured_store(rows: list[MeasuredRow]) -> ProfileStore:
    store = ProfileStore()
    for row in rows:
        store.add(row.variant, row.segment, row.batch, row.profile)
    return store


def rows_digest(rows: list[MeasuredRow]) -> str:
    """Equal measured profiles, equal digest: part of what a pool's plan depends on."""
    return naming.digest([(r.variant, r.segment.mig_profile, r.segment.mps, r.batch, r.profile.latency_ms,
                           r.profile.throughput_rps) for r in rows])
