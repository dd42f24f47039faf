"""Profiler Jobs end to end on the real test cluster: Jobs for what runs on estimates, results re-plan.

How the checks are kept from being vacuous: KWOK completes every Job pod on
its nodes by itself (exit 0, no termination message). The profiler Jobs here
can only run on a node that KWOK does not manage: the pool's KWOK node
advertises no MIG instance when the Jobs are made, and the other node, the
only one with instances to profile on, is kept by `KubeletStandIn`, which
writes a pod's status only when the test says so, exactly the fields a real
kubelet writes (phase, `state.terminated` with exit code and termination
message). The tests assert that each Job is still unfinished, with its pod
Pending, before they write; the Job's Complete or Failed condition then
comes from the real Job controller (with the Job's podFailurePolicy), and
tessera has only the kubelet's fields to read the result from.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import pytest
import yaml
from kubernetes import client

from cluster.kube import wait_for
from cluster.kubelet_standin import KubeletStandIn
from tessera.planner.measured import ProfileRow, profile_rows_csv, read_profiles_csv
from tessera.profiler.results import Failure, FailureKind, Point, SweepResult, Target

from .operator_fixtures import crds, custom, run_operator  # noqa: F401  (fixtures)
from .operator_harness import EXAMPLES, H100, POOL_LABEL, condition, is_true, systems

TIMEOUT_S = 240
PROFILER_IMAGE = "example.org/tessera:test"
JOBS = "app.kubernetes.io/managed-by=tessera,tessera.ai/component=profiler"
# Every MIG profile of an H100-80GB, twice, so a Job for any segment the plan picks has an instance here.
PROFILING_GPUS = [{"1g.10gb": 7}, {"1g.20gb": 4}, {"2g.20gb": 3}, {"3g.40gb": 2}, {"4g.40gb": 1}, {"7g.80gb": 1}] * 2


def one_variant_system(name: str, variant: str, image: str) -> str:
    document = yaml.safe_load((EXAMPLES / "single-model.yaml").read_text())
    document["metadata"]["name"] = name
    (task,) = document["spec"]["tasks"]
    task["variants"] = [{**next(v for v in task["variants"] if v["name"] == variant), "image": image}]
    return yaml.safe_dump(document)


@pytest.fixture
def profiling(run_operator, core):
    """An operator with profiling on, its pool: one KWOK node and one node the test's kubelet stand-in keeps."""
    standins = []

    def make() -> tuple:
        operator = run_operator(nodes=1)
        operator.extra_args += ["--profiler-image", PROFILER_IMAGE, "--profiling-jobs-per-pool", "4"]
        kubelet = KubeletStandIn(core, f"h100-{operator.pool.id}-z-kubelet", H100, PROFILING_GPUS,
                                 labels={POOL_LABEL: operator.pool.id}).start()
        standins.append(kubelet)
        wait_for(lambda: any(c.type == "Ready" and c.status == "True"
                             for c in core.read_node(kubelet.name).status.conditions or []), 30, "stand-in node Ready")
        return operator.start(), kubelet

    yield make
    for kubelet in standins:
        kubelet.stop()


def profiler_jobs(batch: client.BatchV1Api, namespace: str) -> list[client.V1Job]:
    return batch.list_namespaced_job(namespace, label_selector=JOBS).items


def job_target(job: client.V1Job) -> Target:
    """The target as the profiler container reads it (its environment), not tessera's own annotation."""
    (profiler,) = job.spec.template.spec.containers
    env = {e.name: e.value for e in profiler.env}
    return Target.model_validate_json(env["TESSERA_PROFILE_TARGET"])


def scheduled_pod(core, kubelet: KubeletStandIn, job: client.V1Job) -> client.V1Pod:
    def found():
        pods = core.list_namespaced_pod(job.metadata.namespace,
                                        label_selector=f"batch.kubernetes.io/job-name={job.metadata.name}").items
        return pods[0] if len(pods) == 1 and pods[0].spec.node_name else None
    pod = wait_for(found, 60, f"the pod of Job {job.metadata.name} scheduled")
    assert pod.spec.node_name == kubelet.name, "a profiler pod went to a KWOK node, which would complete it itself"
    return pod


def fast_result(target: Target) -> SweepResult:
    """A result in the profiler's exact format: every batch measured, far faster than the estimate."""
    points = tuple(Point(batch=b, p50_ms=0.5 + 0.05 * b, p99_ms=0.6 + 0.06 * b,
                         throughput_rps=round(target.mps * b * 1000 / (0.5 + 0.05 * b), 3), requests=100)
                   for b in target.batches)
    return SweepResult(target=target, points=points)


def job_condition(batch, job: client.V1Job, kind: str) -> bool:
    live = batch.read_namespaced_job(job.metadata.name, job.metadata.namespace)
    return any(c.type == kind and c.status == "True" for c in live.status.conditions or [])


def assert_unfinished(batch, core, job: client.V1Job, pod: client.V1Pod) -> None:
    live = batch.read_namespaced_job(job.metadata.name, job.metadata.namespace)
    assert not live.status.conditions and not live.status.succeeded and not live.status.failed
    assert core.read_namespaced_pod(pod.metadata.name, pod.metadata.namespace).status.phase == "Pending"


def test_a_system_on_estimates_gets_profiler_jobs_and_their_results_replan_it(profiling, core, custom, api_client,
                                                                            kubectl):
    operator, kubelet = profiling()
    batch = client.BatchV1Api(api_client)
    kubectl("apply", "-n", operator.namespace, "-f", "-",
            input=one_variant_system("measured", "resnet50", "example.org/resnet50:1"))
    first = wait_for(lambda: profiler_jobs(batch, operator.namespace), TIMEOUT_S, "profiler Jobs")
    found = wait_for(lambda: (s := systems(custom, operator.namespace).get("measured"))
                     and condition(s, "ProfilingComplete") and s, 60, "ProfilingComplete reported")
    assert is_true(found, "ProfilesEstimated") and found["status"]["plan"]["profileSources"]["measured"] == 0
    assert condition(found, "ProfilingComplete")["reason"] == "Profiling"

    done: set[str] = set()
    for _round in range(5):  # a re-plan may choose segment types that were not measured yet: they get Jobs too
        for job in profiler_jobs(batch, operator.namespace):
            if job.metadata.name in done:
                continue
            pod = scheduled_pod(core, kubelet, job)
            assert_unfinished(batch, core, job, pod)
            kubelet.run(pod)
            kubelet.finish(pod, "profiler", 0, fast_result(job_target(job)).termination_message())
            wait_for(lambda job=job: job_condition(batch, job, "Complete"), 60, f"Job {job.metadata.name} Complete")
            done.add(job.metadata.name)
        settled = wait_for(lambda: (s := systems(custom, operator.namespace)["measured"])
                           and condition(s, "ProfilingComplete")
                           and (is_true(s, "ProfilingComplete") or len(profiler_jobs(batch, operator.namespace)) > len(done))
                           and s, TIMEOUT_S, "measured profiles merged, or new Jobs")
        if is_true(settled, "ProfilingComplete"):
            break
    summary = settled["status"]["plan"]
    assert summary["profileSources"]["measured"] >= 1 and summary["profileSources"]["estimated"] == 0
    assert condition(settled, "ProfilesEstimated")["status"] == "False"
    assert len(first) >= 1

    # The results are stored per variant in the state namespace, where they outlive the Jobs.
    (stored,) = core.list_namespaced_config_map(operator.state_namespace,
                                                label_selector="tessera.ai/component=profiles").items
    entries = [json.loads(text) for text in stored.data.values()]
    assert len(entries) == len(done) and all(e["result"]["points"] for e in entries)
    assert operator.alive()


def test_a_failed_profiler_job_is_reported_and_not_run_again(profiling, core, custom, api_client, kubectl):
    operator, kubelet = profiling()
    batch = client.BatchV1Api(api_client)
    kubectl("apply", "-n", operator.namespace, "-f", "-",
            input=one_variant_system("oom", "resnet152", "example.org/resnet152:1"))
    (job, *_) = wait_for(lambda: profiler_jobs(batch, operator.namespace), TIMEOUT_S, "a profiler Job")
    pod = scheduled_pod(core, kubelet, job)
    assert_unfinished(batch, core, job, pod)
    kubelet.run(pod)
    target = job_target(job)
    result = SweepResult(target=target, failure=Failure.of(FailureKind.OUT_OF_MEMORY, "HTTP 500: CUDA out of memory",
                                                           batch=target.batches[0]))
    kubelet.finish(pod, "profiler", int(result.exit_code), result.termination_message())

    # The real Job controller fails the Job at once by its podFailurePolicy, without another pod.
    wait_for(lambda: job_condition(batch, job, "Failed"), 60, "Job Failed")
    live = batch.read_namespaced_job(job.metadata.name, job.metadata.namespace)
    assert next(c for c in live.status.conditions if c.type == "Failed").reason == "PodFailurePolicy"

    found = wait_for(lambda: (s := systems(custom, operator.namespace)["oom"])
                     and (c := condition(s, "ProfilingComplete")) and c["reason"] == "ProfilingFailed" and s,
                     TIMEOUT_S, "ProfilingFailed")
    message = condition(found, "ProfilingComplete")["message"]
    assert "out_of_memory" in message and "resnet152" in message
    assert is_true(found, "ProfilesEstimated")
    events = json.loads(kubectl("get", "events", "-n", operator.namespace, "-o", "json").stdout)["items"]
    assert any(e["reason"] == "ProfilingFailed" and e["type"] == "Warning" for e in events)

    # Resyncs come and go: no second Job for the same target, no second pod for the failed one.
    resyncs = operator.log.read_text().count("reconciled")
    wait_for(lambda: operator.log.read_text().count("reconciled") >= resyncs + 3, 60, "three more reconciles")
    same = [j for j in profiler_jobs(batch, operator.namespace) if job_target(j) == target]
    assert [j.metadata.name for j in same] == [job.metadata.name]
    pods = core.list_namespaced_pod(operator.namespace, label_selector=f"batch.kubernetes.io/job-name={job.metadata.name}")
    assert len(pods.items) == 1
    assert operator.alive()


def test_profiles_imported_into_a_cluster_export_as_they_were(cluster, core, tmp_path):
    rows = [ProfileRow(variant="resnet50", image="example.org/resnet50:1", gpu="H100-80GB", mig_profile=mig, mps=mps,
                       batch=b, p50_ms=1.0 + b, p99_ms=2.0 + b, throughput_rps=100.0 * b)
            for mig in ("1g.10gb", "3g.40gb") for mps in (1, 2) for b in (1, 8)]
    source = tmp_path / "in.csv"
    source.write_text(profile_rows_csv(rows))
    namespace = f"tessera-profiles-{uuid.uuid4().hex[:5]}"

    def tessera(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-P", "-m", "tessera", "profiles", *args, "--kubeconfig",
                               str(cluster.kubeconfig), "--namespace", namespace], capture_output=True, text=True,
                              timeout=120)

    imported = tessera("import", str(source))
    assert imported.returncode == 0, imported.stderr
    (stored,) = core.list_namespaced_config_map(namespace, label_selector="tessera.ai/component=profiles").items
    assert len(stored.data) == 4  # one key per segment type, merged into the variant's ConfigMap
    exported = tessera("export")
    assert exported.returncode == 0, exported.stderr
    out = tmp_path / "out.csv"
    out.write_text(exported.stdout)
    assert read_profiles_csv(out) == sorted(rows, key=lambda r: (r.mig_profile, r.mps, r.batch))
    core.delete_namespace(namespace)
