"""Profiler Jobs, pure: what is measured, the Job that measures it, and its result read back."""

from __future__ import annotations

import json

import pytest

from tessera.operator import naming
from tessera.operator import profiling as pf
from tessera.profiler.results import ExitCode, Failure, FailureKind, Point, SweepResult

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
    rows = pf.measured_rows(entries, target.gpu, {target.variant: target.image_digest})
    assert [(r.batch, r.profile.latency_ms, r.profile.throughput_rps) for r in rows] == [(1, 2, 100), (2, 4, 200)]
    assert pf.measured_rows(entries, target.gpu, {target.variant: "another-image"}) == []
    assert pf.rows_digest(rows) != pf.rows_digest(rows[:1])
