"""Profiler Jobs in the reconcile: collect finished results, feed them to the plan, start what is missing.

Level-based like the rest of the reconcile: every run reads the profiler
Jobs and the stored profiles back from the cluster. A finished Job's result
(the profiler's termination message in its pod's status, as the kubelet
writes it) is merged into its variant's profiles ConfigMap, where it stays
after the Job's TTL removed the Job. A stored entry, measured or failed, is
never measured again: a deterministic failure is reported (ProfilingComplete
False, a Warning Event), not retried. What the pool's plan runs on an
estimate gets a Job, at most `profiling_jobs_per_pool` at once; the measured
profiles are part of the plan's inputs, so their arrival re-plans the pool.

Results are keyed by image digest (operator/profiling/jobs.py says how a digest is
resolved): each run also reads the digests Kubernetes reports in tessera's
pods (serving and profiler: their containers' imageID) beside those the
stored results were measured under, and a variant's image counts as its
latest reported digest. A tag pushed again thus drops back to estimates (and
new Jobs) once a pod reports the new digest.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from tessera.operator import naming
from tessera.operator.profiling import jobs as pf
from tessera.operator.profiling.jobs import Obj, PlannedNode
from tessera.operator.api import status as st
from tessera.operator.cluster import Cluster
from tessera.operator.gpus.node_plans import NodePlan
from tessera.operator.gpus.discovery import MIG_RESOURCE_PREFIX, Pool, node_profile_name
from tessera.operator.settings import OperatorSettings
from tessera.operator.api.systems import SystemObject
from tessera.planner.plan import Plan
from tessera.planner.profiles import ProfileStore

log = logging.getLogger("tessera.operator")
JOB_SELECTOR = f"{naming.MANAGED_BY}={naming.MANAGED_BY_VALUE},{naming.CHILD_KIND_LABEL}={pf.COMPONENT}"
PROFILES_SELECTOR = f"{naming.MANAGED_BY}={naming.MANAGED_BY_VALUE},{naming.CHILD_KIND_LABEL}={pf.PROFILES_COMPONENT}"
POD_SELECTOR = f"{naming.MANAGED_BY}={naming.MANAGED_BY_VALUE}"
"""tessera's pods (model servers, profilers): what their containers' imageIDs report resolves image digests."""
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"

Identity = tuple[str, str, str, str, int]


@dataclass
class PoolProfiling:
    """One pool's profiling: the measured rows its plan rests on, and what is measured or waits."""

    rows: list[pf.MeasuredRow] = field(default_factory=list)
    wanted: dict[str, list[Identity]] = field(default_factory=dict)
    """system key -> what its plan runs on estimates, as result identities (image digest as resolved now)."""
    no_node: set[Identity] = field(default_factory=set)
    repartitioning: str | None = None
    """The free node being re-partitioned for what no node offers (re-partitioning on), if any."""


class Profiling:
    def __init__(self, cluster: Cluster, settings: OperatorSettings) -> None:
        self.cluster = cluster
        self.settings = settings
        self.entries: dict[Identity, pf.StoredResult] = {}
        self.jobs: dict[Identity, Obj] = {}
        self.pools: dict[str, PoolProfiling] = {}
        self.observations: list[tuple[str, pf.Observation]] = []
        """(image reference, digest reported for it): from stored results and tessera's pods."""

    @property
    def enabled(self) -> bool:
        return bool(self.settings.profiler_image)

    # -- 1. results in ------------------------------------------------------------
    def collect(self) -> None:
        """Reads stored profiles and profiler Jobs; stores the results of finished Jobs not stored yet."""
        self.pools = {}
        configmaps = self.cluster.list_labelled_configmaps(self.settings.state_namespace, PROFILES_SELECTOR)
        stored = {cm["metadata"]["name"]: cm for cm in configmaps}
        self.entries = {pf.result_identity(e.target): e for cm in configmaps for e in pf.entries_of(cm)}
        self.observations = [(e.target.image, pf.Observation(e.observed_at, e.target.image_digest))
                             for e in self.entries.values() if e.observed_at and e.target.image_digest]
        self.jobs = {}
        if not self.enabled:
            return
        pods = self.cluster.list_labelled_pods(POD_SELECTOR)
        by_job: dict[tuple[str, str], list[Obj]] = {}
        for pod in pods:
            self.observations += list(pf.pod_image_digests(pod).items())
            job_name = ((pod.get("metadata") or {}).get("labels") or {}).get(JOB_NAME_LABEL)
            if job_name:
                by_job.setdefault((pod["metadata"]["namespace"], job_name), []).append(pod)
        stored_jobs = {e.job for e in self.entries.values()}
        fresh: dict[tuple[str, str], list[pf.StoredResult]] = {}
        for job in self.cluster.list_labelled_jobs(JOB_SELECTOR):
            target = pf.job_target(job)
            if target is None:
                continue
            job_pods = by_job.get((job["metadata"]["namespace"], job["metadata"]["name"]), [])
            self.jobs[pf.result_identity(target)] = job
            # A running Job measures the digest its pod reports, whatever was known when it was made.
            digest, _ = pf.server_digest(job_pods, target.image)
            if digest:
                self.jobs[pf.result_identity(target.model_copy(update={"image_digest": digest}))] = job
            if job["metadata"]["name"] in stored_jobs or pf.job_finished(job) is None:
                continue
            if not job_pods:  # the Job's pods may be gone (TTL, or never made): ask for them by name
                job_pods = self.cluster.list_job_pods(job["metadata"]["namespace"], job["metadata"]["name"])
            entry = pf.stored_result(job, job_pods)
            if entry is not None:
                key = pf.image_key(entry.target.image, entry.target.image_digest)
                self.entries[pf.result_identity(entry.target)] = entry
                if entry.observed_at and entry.target.image_digest:
                    self.observations.append((entry.target.image,
                                              pf.Observation(entry.observed_at, entry.target.image_digest)))
                fresh.setdefault((target.variant, key), []).append(entry)
                log.info("profiler Job %s/%s finished: %s", job["metadata"]["namespace"], job["metadata"]["name"],
                         f"failed: {entry.why()}" if entry.failed or entry.result is None
                         else f"{len(entry.result.points)} batch sizes")
        for (variant, key), entries in sorted(fresh.items()):
            current = stored.get(pf.profiles_configmap_name(variant, key))
            data = pf.merged_data((current or {}).get("data") or {}, entries)
            body = pf.profiles_configmap(variant, key, data)
            body["metadata"]["namespace"] = self.settings.state_namespace
            self.cluster.ensure_namespace(self.settings.state_namespace)
            self.cluster.apply(body)

    # -- 2. into the plan ----------------------------------------------------------
    def image_keys(self, variants: dict[str, str]) -> dict[str, str]:
        """Variant -> the key its results are stored under: its image's digest as resolved now, else its reference."""
        digests = pf.resolve_digests(set(variants.values()), self.observations)
        return {name: pf.image_key(image, digests[image]) for name, image in variants.items()}

    def prepare(self, pool: Pool, systems: list[SystemObject]) -> None:
        """The measured rows of the pool's systems' variants on its GPU (same image digest), for the solve."""
        images = self.image_keys({v.name: v.image or "" for s in systems if s.spec for t in s.spec.tasks
                                  for v in t.variants})
        self.pools[pool.key] = PoolProfiling(rows=pf.measured_rows(list(self.entries.values()), pool.gpu.name, images))

    def store(self, pool_key: str) -> ProfileStore | None:
        found = self.pools.get(pool_key)
        return pf.measured_store(found.rows) if found and found.rows else None

    def digest(self, pool_key: str) -> str:
        found = self.pools.get(pool_key)
        return pf.rows_digest(found.rows) if found and found.rows else ""

    # -- 3. Jobs out ----------------------------------------------------------------
    def launch(self, pool: Pool, plan: Plan | None, systems: list[SystemObject], batches: tuple[int, ...],
               planned: dict[str, PlannedNode] | None = None) -> dict[str, NodePlan]:
        """A Job for every segment type the plan runs on an estimate that has no result, within the cap.

        `planned`: the nodes of the pool's plan (their layouts applied or not,
        the instances their servers take). Returns the free nodes to
        re-partition for profiling (with the setting on), as node plans for
        the reconcile's MIG path: a profile no node offers gets one.
        """
        state = self.pools.setdefault(pool.key, PoolProfiling())
        if not self.enabled or plan is None:
            return {}
        planned = planned or {}
        refs = [(s.ref, s.spec) for s in systems if s.spec is not None]
        pool_jobs = {job["metadata"]["name"]: job for job in self.jobs.values()
                     if job["metadata"].get("labels", {}).get(pf.POOL_LABEL) == naming.label_value(pool.key)}
        running = [job for job in pool_jobs.values() if pf.job_finished(job) is None]
        taken = self.taken(pool, planned, running)
        unusable = {n.name for n in pool.nodes if pf.in_transition(n)} | {
            name for name, node in planned.items() if not node.applied}
        shortlist = pf.shortlist(plan, refs)
        digests = pf.resolve_digests({w.image for w in shortlist}, self.observations)
        count = len(running)
        missing: list[str] = []
        for wanted in shortlist:
            target = wanted.target(batches, digests[wanted.image])
            identity = pf.result_identity(target)
            state.wanted.setdefault(wanted.system.key, []).append(identity)
            if identity in self.entries or identity in self.jobs:
                continue
            found = pf.node_for(pool, wanted.mig_profile, taken, unusable)
            if found is None:
                state.no_node.add(identity)
                if count < self.settings.profiling_jobs_per_pool:
                    missing.append(wanted.mig_profile)
                continue
            if count >= self.settings.profiling_jobs_per_pool:
                continue
            node, node_profile = found
            body = pf.profiler_job(wanted, target, node, node_profile, pool.key, self.profiler_settings())
            self.cluster.apply(body)
            self.jobs[identity] = body
            taken[(node.name, node_profile)] = taken.get((node.name, node_profile), 0) + 1
            count += 1
            log.info("pool %s: profiler Job %s/%s measures %s on %s x%d (node %s)", pool.key,
                     wanted.system.namespace, body["metadata"]["name"], target.variant, target.mig_profile,
                     target.mps, node.name)
        if not missing or not self.settings.profiling_repartition:
            return {}
        chosen = self.repartition(pool, planned, missing)
        state.repartitioning = min(chosen, default=None)
        return chosen

    def taken(self, pool: Pool, planned: dict[str, PlannedNode], running: list[Obj]) -> dict[tuple[str, str], int]:
        """(node, the node's profile name) -> instances held: by the plan's servers and by running profiler Jobs."""
        taken: dict[tuple[str, str], int] = {}
        for node in pool.nodes:
            for profile in pool.gpu.profiles:
                used = planned[node.name].used.get(profile.name, 0) if node.name in planned else 0
                if used:
                    key = (node.name, node_profile_name(profile, node.advertised))
                    taken[key] = taken.get(key, 0) + used
        by_host = {n.hostname: n.name for n in pool.nodes}
        for job in running:
            held = pf.job_holds(job)
            if held is not None and held[0] in by_host:
                key = (by_host[held[0]], held[1].removeprefix(MIG_RESOURCE_PREFIX))
                taken[key] = taken.get(key, 0) + 1
        return taken

    def repartition(self, pool: Pool, planned: dict[str, PlannedNode], missing: list[str]) -> dict[str, NodePlan]:
        """One free node of the pool re-partitioned for the profiles no node offers, or none.

        Free: in no system's plan, schedulable, no pod holding its GPUs (a
        serving pod, a running profiler Job, anyone's). While a node tessera
        asked for a layout has not answered, no other is chosen: the answer
        may offer what is missing. A node whose state is `failed` is the last
        choice (its config may be the one the hardware refused).
        """
        transit = [node for node in pool.nodes if node.name not in planned and pf.in_transition(node)]
        if transit:  # the reconcile polls the one it asked for, and never changes a layout mid-way
            return {node.name: pf.repartition_plan(node, pool.gpu.name, missing) for node in transit}
        for node in sorted(pool.nodes, key=lambda n: (n.mig_state == "failed", n.name)):
            if node.name in planned or not node.schedulable or node.gpu_count < 1:
                continue
            if self.cluster.gpu_pods_on(node.name):
                continue
            log.debug("pool %s: free node %s to re-partition for profiling %s", pool.key, node.name,
                      ", ".join(sorted(set(missing))))
            return {node.name: pf.repartition_plan(node, pool.gpu.name, missing)}
        return {}

    def profiler_settings(self) -> pf.ProfilerSettings:
        return pf.ProfilerSettings(image=self.settings.profiler_image, server_port=self.settings.server_port,
                                   deadline_s=self.settings.profiling_deadline_s, ttl_s=self.settings.profiling_ttl_s,
                                   ready_timeout_s=self.settings.profiling_ready_timeout_s,
                                   default_image=self.settings.default_image)

    # -- 4. status -------------------------------------------------------------------
    def condition(self, system: SystemObject, pool: Pool) -> list[st.Condition]:
        """ProfilingComplete for a planned system: measured, measuring, waiting, or failed (and why)."""
        state = self.pools.get(pool.key)
        if not self.enabled or state is None or system.spec is None:
            return []
        images = self.image_keys({v.name: v.image or "" for t in system.spec.tasks for v in t.variants})
        mine = {identity: entry for identity, entry in self.entries.items()
                if identity[2] == pool.gpu.name and images.get(identity[0]) == identity[1]}
        measured = sum(1 for entry in mine.values() if _measured(entry))
        wanted = state.wanted.get(system.ref.key, [])
        # A failure matters while the plan still runs on the estimate it was to replace.
        failed = sorted((identity, self.entries[identity]) for identity in set(wanted)
                        if identity in self.entries and self.entries[identity].failed)
        if failed:
            (variant, _image, _gpu, mig, mps), entry = failed[0]
            return [st.Condition(st.PROFILING_COMPLETE, False, st.PROFILING_FAILED,
                                 f"{len(failed)} profiler Job(s) failed; {variant} on {mig} x{mps}: {entry.why()}. "
                                 f"Not retried: a new image digest measures again. {measured} segment type(s) measured")]
        # Measured, yet the plan in force still runs on their estimates: its re-plan on them runs (off the
        # reconcile, pool_solves.py), and profiling is complete only once that plan is the one in force.
        taken_later = [i for i in wanted if i in self.entries and _measured(self.entries[i])]
        if taken_later:
            return [st.Condition(st.PROFILING_COMPLETE, False, st.PROFILING,
                                 f"re-planning on {len(taken_later)} segment type(s) measured since the plan in "
                                 f"force was made on their estimates; {measured} measured")]
        pending = [i for i in wanted if i not in self.entries]
        if not pending:
            return [st.Condition(st.PROFILING_COMPLETE, True, st.PROFILES_MEASURED,
                                 f"{measured} segment type(s) measured; the plan rests on no estimate it could measure")]
        waiting = [i for i in pending if i in state.no_node]
        if len(waiting) == len(pending):
            names = ", ".join(sorted({i[3] for i in waiting}))
            if not self.settings.profiling_repartition:
                then = "re-partitioning free nodes for profiling is off (--profiling-repartition)"
            elif state.repartitioning:
                then = f"re-partitioning free node {state.repartitioning} for it"
            else:
                then = "no free node (no pods on its GPUs, in no plan) to re-partition for it"
            return [st.Condition(st.PROFILING_COMPLETE, False, st.NO_PROFILING_INSTANCE,
                                 f"no node of the pool offers a free MIG instance of {names} to profile on; {then}; "
                                 f"{measured} segment type(s) measured")]
        return [st.Condition(st.PROFILING_COMPLETE, False, st.PROFILING,
                             f"measuring {len(pending)} segment type(s) in profiler Jobs; {measured} measured")]


def _measured(entry: pf.StoredResult) -> bool:
    return entry.result is not None and bool(entry.result.points)
