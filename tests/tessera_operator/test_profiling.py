"""Profiler Jobs, pure: what is measured, the Job that measures it, and its result read back."""

from __future__ import annotations

import json

import pytest

from tessera.operator import naming
from tessera.operator.profiling import jobs as pf
from tessera.profiler.results import ExitCode, Failure, FailureKind, Point, SweepResult

from tessera.operator.profiling.in_cluster import Profiling
from tessera.operator.settings import OperatorSettings
from tessera.operator.api.systems import SystemObject
from tessera.planner.profiles import ProfileSource

from .conftest import gpu_node, pool_of

SETTINGS = pf.ProfilerSettings(image="example.org/tessera:1", server_port=8000, deadline_s=1800, ttl_s=600,
                               ready_timeout_s=300)
BATCHES = (1, 2, 4, 8, 16, 32)


def _mig_node(name: str, counts: dict[str, int]) -> dict:
    labels = {f"nvidia.com/mig-{p}.count": str(n) for p, n in counts.items()}
    return gpu_node(name, extra_labels=labels)


@pytest.fixture
def wanted(plan, spec, system_ref):
    return pf.shortlist(plan, [(system_ref, spec)])


def _job(wanted_item, node_counts=None):
    pool = pool_of(_mig_node("gpu-a", node_counts or {"3g.40gb": 2, "1g.10gb": 7}))
    node, profile = pf.node_for(pool, wanted_item.mig_profile)
    target = wanted_item.target(BATCHES)
    return pf.profiler_job(wanted_item, target, node, profile, pool.key, SETTINGS), target


def test_the_shortlist_is_every_estimated_segment_type_of_the_plan_once(wanted):
    assert sorted((w.variant.name, w.mig_profile, w.mps) for w in wanted) == [
        ("effnet-b0", "1g.10gb", 2), ("yolov5m", "3g.40gb", 1)]


def test_the_server_is_a_native_sidecar_and_the_profiler_the_only_container(wanted):
    body, target = _job(next(w for w in wanted if w.variant.name == "yolov5m"))
    pod = body["spec"]["template"]["spec"]
    (server,) = pod["initContainers"]
    (profiler,) = pod["containers"]
    assert server["restartPolicy"] == "Always" and server["image"] == "example.org/yolo:1"
    assert server["command"][-3:] == ["--shared-folder", pf.SHARED_DIR, "--"] and server["args"] == ["--model", "yolov5m"]
    assert profiler["name"] == pf.PROFILER_CONTAINER and profiler["image"] == SETTINGS.image
    assert pod["restartPolicy"] == "Never"
    env = {e["name"]: e["value"] for e in profiler["env"]}
    assert json.loads(env["TESSERA_PROFILE_TARGET"])["batches"] == list(BATCHES)
    assert env["TESSERA_MODEL_NAME"] == "yolov5m"


def test_the_server_gets_the_serving_environment_with_batching_off(wanted):
    body, _ = _job(next(w for w in wanted if w.variant.name == "effnet-b0"))
    (server,) = body["spec"]["template"]["spec"]["initContainers"]
    env = {e["name"]: e["value"] for e in server["env"]}
    assert env["TESSERA_BATCH_SIZE"] == "1" and env["TESSERA_MAX_BATCH_DELAY_MS"] == "0"
    assert env["TESSERA_PROCESSES"] == "2" and env["TESSERA_MODEL_NAME"] == "effnet-b0" and env["TESSERA_PORT"] == "8000"


def test_the_job_requests_one_mig_instance_on_a_node_that_has_one(wanted):
    body, _ = _job(next(w for w in wanted if w.variant.name == "yolov5m"))
    pod = body["spec"]["template"]["spec"]
    server = pod["initContainers"][0]
    assert server["resources"]["requests"]["nvidia.com/mig-3g.40gb"] == "1"
    assert server["resources"]["limits"]["nvidia.com/mig-3g.40gb"] == "1"
    assert server["resources"]["limits"]["ephemeral-storage"] == SETTINGS.scratch
    assert pod["containers"][0]["resources"]["requests"]["cpu"]
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms[0]["matchExpressions"][0]["values"] == ["gpu-a"]
    assert {v["name"]: v["emptyDir"]["sizeLimit"] for v in pod["volumes"]} == {"shared": "16Mi", "scratch": "2Gi"}


def test_no_node_advertising_the_profile_means_no_job(wanted):
    pool = pool_of(_mig_node("gpu-a", {"1g.10gb": 7}))
    assert pf.node_for(pool, "3g.40gb") is None


def test_a_deterministic_failure_fails_the_job_at_once_and_a_disruption_does_not(wanted):
    body, _ = _job(wanted[0])
    spec = body["spec"]
    assert spec["backoffLimit"] == 0
    assert spec["activeDeadlineSeconds"] == 1800 and spec["ttlSecondsAfterFinished"] == 600
    ignore, fail = spec["podFailurePolicy"]["rules"]
    assert ignore == {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}
    assert fail["action"] == "FailJob" and fail["onExitCodes"]["containerName"] == "profiler"
    assert set(fail["onExitCodes"]["values"]) == {int(c) for c in ExitCode} - {0}


def test_names_labels_and_owner_are_deterministic_and_within_limits(wanted, system_ref):
    body, target = _job(wanted[0])
    again, _ = _job(wanted[0])
    assert body == again
    metadata = body["metadata"]
    assert len(metadata["name"]) <= 63 and metadata["name"] == pf.job_name(target)
    assert metadata["ownerReferences"] == [system_ref.owner_reference()]
    assert metadata["labels"][naming.MANAGED_BY] == "tessera"
    assert metadata["labels"][naming.CHILD_KIND_LABEL] == "profiler"
    assert all(len(v) <= 63 for v in metadata["labels"].values())
    long = target.model_copy(update={"variant": "v" * 63, "image_digest": "r.example.org/" + "x" * 400})
    assert len(pf.job_name(long)) <= 63 and pf.job_name(long) != pf.job_name(target)


def _finished(body: dict, kind: str = "Complete") -> dict:
    return {**body, "status": {"conditions": [{"type": kind, "status": "True", "reason": "PodFailurePolicy",
                                               "message": "Container profiler for pod x failed with exit code 12"}]}}


def _pod(terminated: dict) -> dict:
    return {"status": {"containerStatuses": [{"name": "profiler", "state": {"terminated": terminated}}]}}


def test_a_completed_jobs_termination_message_is_its_result(wanted):
    body, target = _job(wanted[0])
    result = SweepResult(target=target, points=(Point(batch=1, p50_ms=2.0, p99_ms=3.0, throughput_rps=400.0, requests=50),))
    entry = pf.stored_result(_finished(body), [_pod({"exitCode": 0, "reason": "Completed",
                                                     "message": result.termination_message()})])
    assert entry.result == result and not entry.failed and entry.target == target


def test_a_running_job_has_no_result_yet(wanted):
    body, _ = _job(wanted[0])
    assert pf.stored_result(body, []) is None


def test_a_failed_job_keeps_the_profilers_structured_failure(wanted):
    body, target = _job(wanted[0])
    result = SweepResult(target=target, failure=Failure.of(FailureKind.OUT_OF_MEMORY, "CUDA out of memory", batch=16))
    entry = pf.stored_result(_finished(body, "Failed"), [_pod({"exitCode": 12, "reason": "Error",
                                                               "message": result.termination_message()})])
    assert entry.failed and entry.why().startswith("out_of_memory at batch 16")


def test_a_job_that_failed_without_a_result_says_why_in_words(wanted):
    body, _ = _job(wanted[0])
    entry = pf.stored_result(_finished(body, "Failed"), [_pod({"exitCode": 1, "reason": "Error",
                                                               "message": "Traceback: boom"})])
    assert entry.failed and entry.result is None
    assert "exited 1" in entry.why() and "boom" in entry.why()


def test_a_result_for_another_target_is_not_taken(wanted):
    body, target = _job(wanted[0])
    other = SweepResult(target=target.model_copy(update={"mps": 7}))
    entry = pf.stored_result(_finished(body), [_pod({"exitCode": 0, "message": other.termination_message()})])
    assert entry.result is None and entry.failed


def test_results_merge_per_segment_type_into_the_variants_configmap_and_become_measured_profiles(wanted):
    body, target = _job(wanted[0])
    points = tuple(Point(batch=b, p50_ms=b, p99_ms=2 * b, throughput_rps=100 * b, requests=20) for b in (1, 2))
    first = pf.StoredResult(job="a", target=target, result=SweepResult(target=target, points=points))
    other_target = target.model_copy(update={"mig_profile": "7g.80gb"})
    second = pf.StoredResult(job="b", target=other_target, job_failure="Job b failed: DeadlineExceeded")
    data = pf.merged_data({"unrelated": "kept"}, [first])
    data = pf.merged_data(data, [second])
    assert set(data) == {"unrelated", pf.result_key(target), pf.result_key(other_target)}
    entries = pf.entries_of({"data": data})
    assert len(entries) == 2
    key = pf.image_key(target.image, target.image_digest)
    rows = pf.measured_rows(entries, target.gpu, {target.variant: key})
    assert [(r.batch, r.profile.latency_ms, r.profile.throughput_rps) for r in rows] == [(1, 2, 100), (2, 4, 200)]
    assert pf.measured_rows(entries, target.gpu, {target.variant: "ref:another-image"}) == []
    assert pf.rows_digest(rows) != pf.rows_digest(rows[:1])


# -- results keyed by image digest --------------------------------------------------

AAA = "sha256:" + "a" * 64
BBB = "sha256:" + "b" * 64


@pytest.mark.parametrize(("image_id", "digest"), [
    (f"docker-pullable://example.org/yolo@{AAA}", AAA),  # dockershim / cri-dockerd
    (f"example.org/yolo@{AAA}", AAA),  # containerd, CRI-O
    (f"docker.io/library/yolo@{AAA}", AAA),
    (AAA, AAA),
    ("", ""),
    ("example.org/yolo:1", ""),  # no digest in it: nothing is reported
    ("example.org/yolo@sha256:abc", ""),  # not a whole sha256
    (f"example.org/yolo@{AAA.upper()}", ""),
])
def test_the_digest_is_read_from_an_image_id_as_the_kubelet_writes_it(image_id, digest):
    assert pf.image_id_digest(image_id) == digest


def test_a_reference_that_pins_a_digest_names_it_up_front():
    assert pf.pinned_digest(f"example.org/yolo@{AAA}") == AAA
    assert pf.pinned_digest(f"example.org/yolo:1@{AAA}") == AAA
    assert pf.pinned_digest("example.org/yolo:1") == ""
    assert pf.pinned_digest("registry:5000/yolo") == ""


def _server_pod(image: str, image_id: str, started: str = "2026-01-01T00:00:00Z", init: bool = True,
                job: str | None = None) -> dict:
    status = {"name": pf.SERVER_CONTAINER, "image": "normalised/by/the/runtime", "imageID": image_id,
              "state": {"running": {"startedAt": started}}}
    spec_key, status_key = ("initContainers", "initContainerStatuses") if init else ("containers", "containerStatuses")
    labels = {"batch.kubernetes.io/job-name": job} if job else {}
    return {"metadata": {"name": f"p-{started}", "namespace": "shop", "labels": labels},
            "spec": {spec_key: [{"name": pf.SERVER_CONTAINER, "image": image}]},
            "status": {status_key: [status]}}


def test_a_pods_digests_are_keyed_by_the_image_its_spec_names_from_init_and_regular_containers():
    for init in (True, False):
        found = pf.pod_image_digests(_server_pod("example.org/yolo:1", f"example.org/yolo@{AAA}", init=init))
        assert found == {"example.org/yolo:1": pf.Observation("2026-01-01T00:00:00Z", AAA)}
    assert pf.pod_image_digests(_server_pod("example.org/yolo:1", "")) == {}  # not pulled yet: no report
    assert pf.pod_image_digests({"metadata": {}}) == {}


def test_a_digest_resolves_pinned_first_then_the_latest_report():
    observed = [("example.org/yolo:1", pf.Observation("2026-01-01T00:00:00Z", AAA)),
                ("example.org/yolo:1", pf.Observation("2026-01-02T00:00:00Z", BBB)),
                ("example.org/other:1", pf.Observation("2026-01-03T00:00:00Z", AAA))]
    pinned = f"example.org/yolo@{AAA}"
    assert pf.resolve_digests({"example.org/yolo:1", pinned, "example.org/never:1"}, observed) == {
        "example.org/yolo:1": BBB, pinned: AAA, "example.org/never:1": ""}


def test_the_result_key_is_the_digest_and_the_reference_only_while_none_is_known():
    target = pf.Target(variant="v", image="example.org/yolo:1", image_digest=AAA, gpu="H100-80GB",
                       mig_profile="1g.10gb", mps=1, batches=(1,))
    retagged = target.model_copy(update={"image_digest": BBB})
    alias = target.model_copy(update={"image": "example.org/yolo:stable"})
    assert pf.result_identity(target) != pf.result_identity(retagged)  # same tag, new digest: another result
    assert pf.result_identity(target) == pf.result_identity(alias)  # same digest, another tag: the same result
    unknown = target.model_copy(update={"image_digest": ""})
    assert pf.result_identity(unknown)[1] == "ref:example.org/yolo:1"
    assert pf.job_name(target) != pf.job_name(retagged)  # a Job for the new digest is a new Job


def _completed(wanted_item, image_id: str, started: str = "2026-01-01T00:00:00Z"):
    body, target = _job(wanted_item)
    result = SweepResult(target=target, points=(Point(batch=1, p50_ms=2.0, p99_ms=3.0, throughput_rps=400.0,
                                                      requests=50),))
    pod = _server_pod(target.image, image_id, started)
    pod["status"]["containerStatuses"] = [{"name": "profiler", "state": {"terminated": {
        "exitCode": 0, "message": result.termination_message()}}}]
    return body, target, result, pod


def test_a_result_is_keyed_by_the_digest_the_servers_pod_reported(wanted):
    yolo = next(w for w in wanted if w.variant.name == "yolov5m")
    body, target, result, pod = _completed(yolo, f"docker-pullable://example.org/yolo@{AAA}")
    assert target.image == "example.org/yolo:1" and target.image_digest == ""  # unknown when the Job was made
    entry = pf.stored_result(_finished(body), [pod])
    assert entry.result == result and entry.target.image_digest == AAA and entry.target.image == "example.org/yolo:1"
    assert entry.observed_at == "2026-01-01T00:00:00Z"
    assert pf.result_identity(entry.target)[1] == AAA


def test_a_job_whose_pod_never_started_keeps_its_failure_under_the_digest_known_then_or_the_reference(wanted):
    yolo = next(w for w in wanted if w.variant.name == "yolov5m")
    body, target = _job(yolo)
    never = {"status": {"phase": "Pending", "initContainerStatuses": [{"name": "server", "imageID": "",
                                                                      "state": {"waiting": {"reason": "ErrImagePull"}}}]}}
    entry = pf.stored_result(_finished(body, "Failed"), [never])
    assert entry.failed and entry.observed_at is None
    assert pf.result_identity(entry.target)[1] == "ref:example.org/yolo:1"
    pinned = pf.Wanted(yolo.system, yolo.task, yolo.variant.model_copy(update={"image": f"example.org/yolo@{BBB}"}),
                       yolo.gpu, yolo.mig_profile, yolo.mps)
    assert pinned.target(BATCHES).image_digest == BBB


def test_measured_rows_serve_the_digest_under_any_reference_and_not_a_tag_pushed_again(wanted):
    yolo = next(w for w in wanted if w.variant.name == "yolov5m")
    body, _target, _result, pod = _completed(yolo, f"example.org/yolo@{AAA}")
    entry = pf.stored_result(_finished(body), [pod])
    gpu = entry.target.gpu
    assert pf.measured_rows([entry], gpu, {"yolov5m": AAA})  # the tag resolved to AAA, or @AAA pinned
    assert pf.measured_rows([entry], gpu, {"yolov5m": BBB}) == []  # the same tag, pushed again
    assert pf.measured_rows([entry], gpu, {"yolov5m": "ref:example.org/yolo:1"}) == []  # tag not resolved


class FakeCluster:
    """What Profiling reads and writes, in memory."""

    def __init__(self) -> None:
        self.configmaps: dict[str, dict] = {}
        self.jobs: dict[str, dict] = {}
        self.pods: list[dict] = []

    def list_labelled_configmaps(self, namespace, selector):
        return list(self.configmaps.values())

    def list_labelled_jobs(self, selector):
        return list(self.jobs.values())

    def list_labelled_pods(self, selector):
        return list(self.pods)

    def list_job_pods(self, namespace, job):
        return [p for p in self.pods if p["metadata"]["labels"].get("batch.kubernetes.io/job-name") == job]

    def ensure_namespace(self, name):
        pass

    def apply(self, body):
        kind = {"Job": self.jobs, "ConfigMap": self.configmaps}[body["kind"]]
        kind[body["metadata"]["name"]] = body


def test_a_tag_pushed_again_drops_its_measurements_and_gets_new_jobs_once_a_pod_reports_the_new_digest(
        plan, spec, system_ref):
    cluster = FakeCluster()
    profiling = Profiling(cluster, OperatorSettings(profiler_image="example.org/tessera:1",
                                                    profiling_jobs_per_pool=8))
    pool = pool_of(_mig_node("gpu-a", {"3g.40gb": 2, "1g.10gb": 7}))
    system = SystemObject(system_ref, spec, None, {}, {})

    def run() -> None:
        profiling.collect()
        profiling.prepare(pool, [system])
        profiling.launch(pool, plan, [system], BATCHES)

    run()
    first = {name: pf.job_target(job) for name, job in cluster.jobs.items()}
    yolo_job = next(n for n, t in first.items() if t.variant == "yolov5m")
    assert first[yolo_job].image_digest == ""  # the tag's digest is unknown before any pod reports it
    result = SweepResult(target=first[yolo_job], points=(Point(batch=1, p50_ms=2, p99_ms=3, throughput_rps=400,
                                                               requests=5),))
    pod = _server_pod("example.org/yolo:1", f"example.org/yolo@{AAA}", "2026-01-01T00:00:00Z", job=yolo_job)
    pod["status"]["containerStatuses"] = [{"name": "profiler", "state": {"terminated": {
        "exitCode": 0, "message": result.termination_message()}}}]
    cluster.pods.append(pod)
    cluster.jobs[yolo_job] = _finished(cluster.jobs[yolo_job])
    run()
    assert [r.variant for r in profiling.pools[pool.key].rows] == ["yolov5m"]  # measured, under AAA
    (stored,) = cluster.configmaps.values()
    assert stored["metadata"]["annotations"][pf.IMAGE_ANNOTATION] == AAA
    assert len(cluster.jobs) == len(first)  # nothing measured twice

    # The pod goes (the Job's TTL): the stored result still knows the tag meant AAA.
    cluster.pods.clear()
    run()
    assert [r.variant for r in profiling.pools[pool.key].rows] == ["yolov5m"]

    # The tag is pushed again: a serving pod that started later reports BBB.
    cluster.pods.append(_server_pod("example.org/yolo:1", f"example.org/yolo@{BBB}", "2026-01-02T00:00:00Z",
                                    init=False))
    run()
    assert profiling.pools[pool.key].rows == []  # AAA's measurements do not serve BBB
    new = {n: pf.job_target(j) for n, j in cluster.jobs.items() if n not in first}
    assert [(t.variant, t.image_digest) for t in new.values()] == [("yolov5m", BBB)]


def test_profiling_is_complete_only_once_the_plan_in_force_rests_on_the_measurements(plan, spec, system_ref):
    """Every Job measured: while the plan in force is still the one made on their estimates (its re-plan on the
    measurements runs off the reconcile), ProfilingComplete is False, re-planning; True once a plan on the
    measurements is in force."""
    cluster = FakeCluster()
    profiling = Profiling(cluster, OperatorSettings(profiler_image="example.org/tessera:1",
                                                    profiling_jobs_per_pool=8))
    pool = pool_of(_mig_node("gpu-a", {"3g.40gb": 2, "1g.10gb": 7}))
    system = SystemObject(system_ref, spec, None, {}, {})

    def run(in_force) -> list:
        profiling.collect()
        profiling.prepare(pool, [system])
        profiling.launch(pool, in_force, [system], BATCHES)
        return profiling.condition(system, pool)

    (measuring,) = run(plan)
    assert (measuring.status, measuring.reason) == (False, "Profiling")
    for name, job in list(cluster.jobs.items()):
        target = pf.job_target(job)
        result = SweepResult(target=target, points=(Point(batch=1, p50_ms=2, p99_ms=3, throughput_rps=400,
                                                          requests=5),))
        pod = _server_pod(target.image, f"example.org/any@{AAA}", job=name)
        pod["status"]["containerStatuses"] = [{"name": "profiler", "state": {"terminated": {
            "exitCode": 0, "message": result.termination_message()}}}]
        cluster.pods.append(pod)
        cluster.jobs[name] = _finished(job)
    (replanning,) = run(plan)
    assert (replanning.status, replanning.reason) == (False, "Profiling") and "re-planning" in replanning.message
    on_measurements = plan.model_copy(update={"tasks": [t.model_copy(update={"configs": [
        c.model_copy(update={"source": ProfileSource.MEASURED}) for c in t.configs]}) for t in plan.tasks]})
    (complete,) = run(on_measurements)
    assert (complete.status, complete.reason) == (True, "ProfilesMeasured")


# -- where: free instances, and free nodes re-partitioned for profiling --------------

def test_a_node_offers_only_instances_the_plan_and_running_jobs_leave_free():
    pool = pool_of(_mig_node("gpu-a", {"3g.40gb": 2}), _mig_node("gpu-b", {"3g.40gb": 1}))
    assert pf.node_for(pool, "3g.40gb")[0].name == "gpu-a"  # the most instances
    assert pf.node_for(pool, "3g.40gb", taken={("gpu-a", "3g.40gb"): 2})[0].name == "gpu-b"
    assert pf.node_for(pool, "3g.40gb", taken={("gpu-a", "3g.40gb"): 2, ("gpu-b", "3g.40gb"): 1}) is None
    assert pf.node_for(pool, "3g.40gb", unusable={"gpu-a", "gpu-b"}) is None


def test_a_free_nodes_profiling_layout_takes_each_missing_profile_in_turn_at_its_most_instances():
    (node,) = pool_of(gpu_node("gpu-a", gpus=4)).nodes
    plan = pf.repartition_plan(node, "H100-80GB", ["7g.80gb", "1g.10gb", "7g.80gb"])
    assert plan.layouts == {0: (("1g.10gb", 7),), 1: (("7g.80gb", 1),), 2: (("1g.10gb", 7),), 3: (("7g.80gb", 1),)}
    assert pf.profiling_layout("H100-80GB", "3g.40gb") == (("3g.40gb", 2),)


def test_a_jobs_node_and_instance_are_read_from_its_spec(wanted):
    body, _ = _job(next(w for w in wanted if w.variant.name == "yolov5m"))
    assert pf.job_holds(body) == ("gpu-a", "nvidia.com/mig-3g.40gb")
    assert pf.job_holds({"spec": {}}) is None


class FreeNodes(FakeCluster):
    def __init__(self, busy: dict[str, list[str]] | None = None) -> None:
        super().__init__()
        self.busy = busy or {}

    def gpu_pods_on(self, node):
        return self.busy.get(node, [])


def _launch(plan, spec, system_ref, nodes, repartition=True, planned=None, busy=None):
    from tessera.operator.profiling.jobs import PlannedNode  # noqa: F401  (the type of `planned`)

    cluster = FreeNodes(busy)
    profiling = Profiling(cluster, OperatorSettings(profiler_image="example.org/tessera:1", profiling_jobs_per_pool=8,
                                                    profiling_repartition=repartition))
    pool = pool_of(*nodes)
    system = SystemObject(system_ref, spec, None, {}, {})
    profiling.collect()
    profiling.prepare(pool, [system])
    chosen = profiling.launch(pool, plan, [system], BATCHES, planned or {})
    return profiling, pool, system, cluster, chosen


def test_with_repartitioning_a_profile_no_node_offers_gets_a_free_node_and_without_it_none(plan, spec, system_ref):
    from tessera.operator.profiling.jobs import PlannedNode

    nodes = [_mig_node("gpu-a", {"3g.40gb": 2}), gpu_node("gpu-b"), gpu_node("gpu-c"), gpu_node("gpu-d")]
    # gpu-a serves (both its 3g.40gb taken), gpu-b holds someone's pod, gpu-c is free.
    planned = {"gpu-a": PlannedNode(applied=True, used={"3g.40gb": 2})}
    profiling, pool, system, cluster, chosen = _launch(plan, spec, system_ref, nodes, planned=planned,
                                                       busy={"gpu-b": ["other/pod"]})
    assert cluster.jobs == {}  # no node offers 3g.40gb or 1g.10gb free
    assert list(chosen) == ["gpu-c"]
    assert sorted({dict(layout).popitem()[0] for layout in chosen["gpu-c"].layouts.values()}) == ["1g.10gb", "3g.40gb"]
    (condition,) = profiling.condition(system, pool)
    assert condition.reason == "NoInstanceToProfileOn" and "re-partitioning free node gpu-c" in condition.message

    _, _, system, _, chosen = _launch(plan, spec, system_ref, nodes, repartition=False, planned=planned,
                                      busy={"gpu-b": ["other/pod"]})
    assert chosen == {}  # the setting off: nothing is re-partitioned


def test_a_node_mig_manager_has_not_answered_yet_is_the_only_one_and_a_planned_node_never(plan, spec, system_ref):
    from tessera.operator.profiling.jobs import PlannedNode

    asked = gpu_node("gpu-c")
    asked["metadata"]["labels"]["nvidia.com/mig.config"] = "tessera-abc"
    asked["metadata"]["annotations"] = {"tessera.ai/mig-config-requested": "tessera-abc"}
    nodes = [gpu_node("gpu-a"), gpu_node("gpu-b"), asked]
    planned = {"gpu-a": PlannedNode(applied=False), "gpu-b": PlannedNode(applied=True)}
    _, _, _, _, chosen = _launch(plan, spec, system_ref, nodes, planned=planned)
    assert list(chosen) == ["gpu-c"]  # waiting for its answer: no other node is chosen meanwhile
    asked["metadata"]["labels"]["nvidia.com/mig.config.state"] = "success"
    _, _, _, _, chosen = _launch(plan, spec, system_ref, nodes, planned=planned)
    assert list(chosen) == ["gpu-c"]
    _, _, _, _, chosen = _launch(plan, spec, system_ref, nodes, planned=planned, busy={"gpu-c": ["shop/profile-x"]})
    assert chosen == {}  # a running profiler Job on the only free node: its layout stays


def test_once_the_free_node_advertises_the_profile_the_job_goes_there_and_nothing_is_re_partitioned(
        plan, spec, system_ref):
    from tessera.operator.profiling.jobs import PlannedNode

    nodes = [_mig_node("gpu-a", {"3g.40gb": 2}), _mig_node("gpu-c", {"3g.40gb": 2, "1g.10gb": 7})]
    planned = {"gpu-a": PlannedNode(applied=True, used={"3g.40gb": 2})}
    _, _, _, cluster, chosen = _launch(plan, spec, system_ref, nodes, planned=planned)
    assert chosen == {}
    hosts = sorted(pf.job_holds(job) for job in cluster.jobs.values())
    assert hosts == [("gpu-c", "nvidia.com/mig-1g.10gb"), ("gpu-c", "nvidia.com/mig-3g.40gb")]
