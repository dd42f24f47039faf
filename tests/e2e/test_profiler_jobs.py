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

Image digests: a real kubelet writes, in each container status, the
`imageID` its runtime reports for the image it pulled (`repo@sha256:...`, or
`docker-pullable://repo@sha256:...`). The stand-in writes exactly that field,
with the digest the test says the tag pointed to when the pod pulled it; for
a model-server pod on a KWOK node (KWOK writes no imageID) the test patches
the pod's status the same way, as the kubelet does when a restarted
container pulls the tag again. Results are checked to be keyed by those
digests: a tag pushed again (same tag, new digest) is measured again, and a
reference pinning a measured digest is served its measurements.
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

import time
from datetime import datetime, timezone

from .operator_fixtures import crds, custom, run_operator  # noqa: F401  (fixtures)
from .operator_harness import EXAMPLES, H100, POOL_LABEL, condition, is_true, pinned_node, systems

TIMEOUT_S = 240
PROFILER_IMAGE = "example.org/tessera:test"
JOBS = "app.kubernetes.io/managed-by=tessera,tessera.ai/component=profiler"
# Every MIG profile of an H100-80GB, twice, so a Job for any segment the plan picks has an instance here.
PROFILING_GPUS = [{"1g.10gb": 7}, {"1g.20gb": 4}, {"2g.20gb": 3}, {"3g.40gb": 2}, {"4g.40gb": 1}, {"7g.80gb": 1}] * 2
AAA = "sha256:" + "a" * 64
BBB = "sha256:" + "b" * 64


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


def complete_jobs(operator, kubelet, batch, core, custom, name: str, image_ids: dict[str, str],
                  done: set[str]) -> dict:
    """Plays the kubelet for every profiler Job not in `done`, until the system's profiling is complete.

    Each pod pulls the images in `image_ids` as those imageIDs; a re-plan may choose segment types that were
    not measured yet: they get Jobs too.
    """
    for _round in range(5):
        for job in profiler_jobs(batch, operator.namespace):
            if job.metadata.name in done:
                continue
            pod = scheduled_pod(core, kubelet, job)
            assert_unfinished(batch, core, job, pod)
            kubelet.run(pod, image_ids)
            kubelet.finish(pod, "profiler", 0, fast_result(job_target(job)).termination_message())
            wait_for(lambda job=job: job_condition(batch, job, "Complete"), 60, f"Job {job.metadata.name} Complete")
            done.add(job.metadata.name)
        settled = wait_for(lambda: (s := systems(custom, operator.namespace)[name])
                           and condition(s, "ProfilingComplete")
                           and (is_true(s, "ProfilingComplete") or len(profiler_jobs(batch, operator.namespace)) > len(done))
                           and s, TIMEOUT_S, "measured profiles merged, or new Jobs")
        if is_true(settled, "ProfilingComplete"):
            return settled
    raise AssertionError(f"{name}: profiling not complete after five rounds of Jobs")


def stored_entries(core, namespace: str) -> list[dict]:
    configmaps = core.list_namespaced_config_map(namespace, label_selector="tessera.ai/component=profiles").items
    return [json.loads(text) for cm in configmaps for text in (cm.data or {}).values()]


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
    pulled = {"example.org/resnet50:1": f"docker-pullable://example.org/resnet50@{AAA}"}
    settled = complete_jobs(operator, kubelet, batch, core, custom, "measured", pulled, done)
    summary = settled["status"]["plan"]
    assert summary["profileSources"]["measured"] >= 1 and summary["profileSources"]["estimated"] == 0
    assert condition(settled, "ProfilesEstimated")["status"] == "False"
    assert len(first) >= 1

    # The results are stored per variant and image digest in the state namespace, where they outlive the Jobs,
    # keyed by the digest the server's pod reported, not by the tag.
    (stored,) = core.list_namespaced_config_map(operator.state_namespace,
                                                label_selector="tessera.ai/component=profiles").items
    assert stored.metadata.annotations["tessera.ai/image"] == AAA
    entries = [json.loads(text) for text in stored.data.values()]
    assert len(entries) == len(done) and all(e["result"]["points"] for e in entries)
    assert {(e["target"]["image"], e["target"]["image_digest"]) for e in entries} == {("example.org/resnet50:1", AAA)}
    assert operator.alive()


def report_pulled_again(core, kubelet: KubeletStandIn, pod: client.V1Pod, image: str, image_id: str) -> None:
    """The pod's server container restarted and pulled `image` again, which now is `image_id`: its status as the
    kubelet writes it (KWOK's pods get the same status written through the status subresource)."""
    time.sleep(1.1)  # a start strictly after the profiler pods' (the API's times are in seconds)
    if pod.spec.node_name == kubelet.name:
        kubelet.run(pod, {image: image_id})
        return
    now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    statuses = [{"name": c.name, "image": c.image, "imageID": image_id if c.image == image else "", "ready": True,
                 "started": True, "restartCount": 1, "state": {"running": {"startedAt": now}}}
                for c in pod.spec.containers]
    core.patch_namespaced_pod_status(pod.metadata.name, pod.metadata.namespace,
                                     {"status": {"containerStatuses": statuses}})


def wait_settled_on(core, custom, operator, name: str) -> None:
    """Until the pool's stored plan is made for `name` alone, `name` is Ready and no node of the pool is cordoned
    (tessera cordons a node it re-partitions)."""
    def planned_alone() -> bool:
        states = [c for c in core.list_namespaced_config_map(operator.state_namespace).items
                  if c.metadata.name.startswith("tessera-pool-") and (c.data or {}).get("plan")]
        return len(states) == 1 and {s["system"] for s in json.loads(states[0].data["plan"])["systems"]} == {
            f"{operator.namespace}/{name}"}

    def settled() -> bool:
        nodes = core.list_node(label_selector=f"{POOL_LABEL}={operator.pool.id}").items
        return planned_alone() and not any(n.spec.unschedulable for n in nodes) \
            and is_true(systems(custom, operator.namespace)[name], "Ready")
    wait_for(settled, TIMEOUT_S, f"{name} planned alone and serving")


def test_results_are_keyed_by_image_digest_a_tag_pushed_again_is_measured_again(profiling, core, custom, api_client,
                                                                               kubectl):
    operator, kubelet = profiling()
    batch = client.BatchV1Api(api_client)
    tag = "example.org/resnet50:1"
    kubectl("apply", "-n", operator.namespace, "-f", "-", input=one_variant_system("retag", "resnet50", tag))
    wait_for(lambda: profiler_jobs(batch, operator.namespace), TIMEOUT_S, "profiler Jobs")
    done: set[str] = set()
    complete_jobs(operator, kubelet, batch, core, custom, "retag", {tag: f"example.org/resnet50@{AAA}"}, done)
    assert {e["target"]["image_digest"] for e in stored_entries(core, operator.state_namespace)} == {AAA}

    # The same digest under another reference (pinned) is served the measurements: no Job of its own.
    pinned = f"example.org/resnet50@{AAA}"
    kubectl("apply", "-n", operator.namespace, "-f", "-", input=one_variant_system("pinned", "resnet50", pinned))
    alias = wait_for(lambda: (s := systems(custom, operator.namespace).get("pinned"))
                     and (s.get("status") or {}).get("plan") and condition(s, "ProfilingComplete") and s,
                     TIMEOUT_S, "the pinned system planned")
    assert alias["status"]["plan"]["profileSources"]["measured"] >= 1
    assert not [j for j in profiler_jobs(batch, operator.namespace) if job_target(j).image == pinned]
    kubectl("delete", "compoundinferencesystem", "pinned", "-n", operator.namespace)
    # The re-plan without `pinned` may re-partition retag's node (solves run off the reconcile, so the status can
    # read Ready before it starts): the server pod is picked only once the plan made for retag alone serves.
    wait_settled_on(core, custom, operator, "retag")

    # The tag is pushed again: a model-server pod that restarts pulls it as BBB. A tessera that keyed results by
    # the tag would keep serving AAA's measurements and start no Job.
    server = wait_for(lambda: [p for p in core.list_namespaced_pod(
        operator.namespace, label_selector="tessera.ai/system=retag").items
        if p.spec.node_name and "batch.kubernetes.io/job-name" not in (p.metadata.labels or {})
        and any(c.image == tag for c in p.spec.containers)], TIMEOUT_S, "a model-server pod of the tag")[0]
    report_pulled_again(core, kubelet, server, tag, f"example.org/resnet50@{BBB}")
    retagged = wait_for(lambda: [j for j in profiler_jobs(batch, operator.namespace)
                                 if job_target(j).image_digest == BBB], TIMEOUT_S, "Jobs for the new digest")
    assert all(job_target(j).image == tag for j in retagged)
    back = wait_for(lambda: (s := systems(custom, operator.namespace)["retag"]) and is_true(s, "ProfilesEstimated")
                    and s, TIMEOUT_S, "the system back on estimates")
    assert back["status"]["plan"]["profileSources"]["measured"] == 0
    settled = complete_jobs(operator, kubelet, batch, core, custom, "retag", {tag: f"example.org/resnet50@{BBB}"}, done)
    assert settled["status"]["plan"]["profileSources"]["estimated"] == 0
    digests = {e["target"]["image_digest"] for e in stored_entries(core, operator.state_namespace)}
    assert digests == {AAA, BBB}
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


def whole_gpu_system(name: str) -> str:
    """One variant whose 50 GB only a whole-GPU instance (7g.80gb) holds: the plan takes every one it makes."""
    document = yaml.safe_load((EXAMPLES / "single-model.yaml").read_text())
    document["metadata"]["name"] = name
    (task,) = document["spec"]["tasks"]
    big = next(v for v in task["variants"] if v["name"] == "resnet152")
    task["variants"] = [{**big, "gpuMemoryGigabytes": 50, "image": "example.org/resnet152:big"}]
    return yaml.safe_dump(document)


def job_host(job: client.V1Job) -> str:
    terms = job.spec.template.spec.affinity.node_affinity \
        .required_during_scheduling_ignored_during_execution.node_selector_terms
    return terms[0].match_expressions[0].values[0]


@pytest.mark.parametrize("repartition", [True, False], ids=["repartition-on", "repartition-off"])
def test_a_free_node_is_re_partitioned_for_a_profile_no_node_offers_only_with_the_setting(
        run_operator, core, custom, api_client, kubectl, repartition):
    """Two KWOK nodes, MIG off: the plan takes one (its only 7g.80gb instance serves); the other is free.

    The MIG-manager stand-in applies what tessera asks through the label and ConfigMap contract. KWOK completes
    the profiler pod by itself (no result: a recorded failure), so this checks where the Job goes and what was
    re-partitioned, not its result (the tests above do that on the kubelet stand-in's node).
    """
    operator = run_operator(nodes=2)
    operator.extra_args += ["--profiler-image", PROFILER_IMAGE] + (["--profiling-repartition"] if repartition else [])
    operator.start()
    batch, apps = client.BatchV1Api(api_client), client.AppsV1Api(api_client)
    initially = {n: core.read_node(n).metadata.labels["nvidia.com/mig.config"] for n in operator.pool.nodes}
    assert set(initially.values()) == {"all-disabled"}
    kubectl("apply", "-n", operator.namespace, "-f", "-", input=whole_gpu_system("big"))
    deployments = wait_for(lambda: apps.list_namespaced_deployment(
        operator.namespace, label_selector="tessera.ai/component=model-server").items, TIMEOUT_S, "model servers")
    planned = {pinned_node(d) for d in deployments}
    (free,) = [n for n in operator.pool.nodes if n not in planned]
    before = initially[free]

    if repartition:
        (job,) = wait_for(lambda: profiler_jobs(batch, operator.namespace), TIMEOUT_S, "the profiler Job")
        assert job_target(job).mig_profile == "7g.80gb" and job_host(job) == free
        node = core.read_node(free)
        labels, annotations = node.metadata.labels, node.metadata.annotations or {}
        # Re-partitioned by tessera (its content-addressed config, its request annotation), applied by
        # mig-manager before the Job was made: success, and the node advertises the profile.
        assert labels["nvidia.com/mig.config"] != before and labels["nvidia.com/mig.config"].startswith("tessera-")
        assert annotations.get("tessera.ai/mig-config-requested") == labels["nvidia.com/mig.config"]
        assert labels["nvidia.com/mig.config.state"] == "success" and int(labels["nvidia.com/mig-7g.80gb.count"]) >= 1
        mig_parted = yaml.safe_load(core.read_namespaced_config_map("tessera-mig-parted-config", "gpu-operator")
                                    .data["config.yaml"])
        entries = mig_parted["mig-configs"][labels["nvidia.com/mig.config"]]
        assert all(e["mig-enabled"] and e["mig-devices"] == {"7g.80gb": 1} for e in entries)
        # The serving node kept the plan's layout; one Job, no second re-partition once it ran.
        wait_for(lambda: job_condition(batch, job, "Complete") or job_condition(batch, job, "Failed"), TIMEOUT_S,
                 "KWOK ends the Job")
        resyncs = operator.log.read_text().count("reconciled")
        wait_for(lambda: operator.log.read_text().count("reconciled") >= resyncs + 3, 60, "three more reconciles")
        assert [j.metadata.name for j in profiler_jobs(batch, operator.namespace)] == [job.metadata.name]
        assert core.read_node(free).metadata.labels["nvidia.com/mig.config"] == labels["nvidia.com/mig.config"]
    else:
        found = wait_for(lambda: (s := systems(custom, operator.namespace).get("big"))
                         and (c := condition(s, "ProfilingComplete")) and c["reason"] == "NoInstanceToProfileOn"
                         and s, TIMEOUT_S, "NoInstanceToProfileOn")
        assert "--profiling-repartition" in condition(found, "ProfilingComplete")["message"]
        resyncs = operator.log.read_text().count("reconciled")
        wait_for(lambda: operator.log.read_text().count("reconciled") >= resyncs + 3, 60, "three more reconciles")
        node = core.read_node(free)
        assert node.metadata.labels["nvidia.com/mig.config"] == before
        assert "tessera.ai/mig-config-requested" not in (node.metadata.annotations or {})
        assert profiler_jobs(batch, operator.namespace) == []
    assert operator.alive()
