"""The Helm chart installed like a platform team would, on the real test cluster.

`helm install` creates the chart's objects on the real API server. Fake
nodes run no containers, so the operator Deployment's pod never really runs;
instead the test starts the operator on the host from that Deployment *as
rendered* (its command, args and env) and authenticates it with a
TokenRequest token of the chart's ServiceAccount. Every call it makes is
then authorized by the chart's RBAC and admitted by the chart's admission
policy, exactly as in a cluster; the audit log shows the ServiceAccount as
the writer, so the admin credentials cannot have done the work.

The tests of this module run in order and share one release: install,
reconcile, re-apply, upgrade, uninstall.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from cluster.chart_operator import HostOperator, token_kubeconfig
from cluster.controlplane import free_port
from cluster.gpu_nodes import create_gpu_nodes, gpu_states
from cluster.kube import ensure_namespace, wait_crd_established, wait_for

from .operator_harness import (
    H100, OPERATOR_AGENTS, REPO, THREE_EXAMPLES, apply_examples, children, condition, delete_pool, is_true, make_pool,
    system_yaml, systems,
)

CHART = REPO / "charts" / "tessera"
READY_TIMEOUT_S = 300
MIG_LABEL = "nvidia.com/mig.config"


def rendered(manifest: str, kind: str) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(manifest) if doc and doc.get("kind") == kind]


class Release:
    def __init__(self, name: str, namespace: str, workloads: str, pool, values: dict) -> None:
        self.name, self.namespace, self.workloads, self.pool, self.values = name, namespace, workloads, pool, values
        self.service_account = f"{name}-tessera" if "tessera" not in name else name

    @property
    def user(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{self.service_account}"


def values_for(workloads: str, pool_id: str, resync: float = 5.0) -> dict:
    return {
        "watchNamespaces": [workloads],
        "poolNodeSelector": {"tessera.test/pool": pool_id},
        "gpuOperator": {"migConfigPropagationSeconds": 1.5},
        "reconcile": {"resyncSeconds": resync, "debounceSeconds": 0.3},
        "solver": {"timeLimitSeconds": 120},
        "health": {"port": free_port()},
        "metrics": {"port": free_port()},
        "leaderElection": {"leaseDurationSeconds": 6},
    }


def helm_values_file(tmp: Path, values: dict) -> str:
    path = tmp / f"values-{uuid.uuid4().hex[:6]}.json"
    # JSON, not PyYAML's YAML: a pool id such as 3813e3 is a number to Helm's parser unless quoted.
    path.write_text(json.dumps(values))
    return str(path)


def writes_by(audit_log: Path, user: str, since_line: int = 0) -> list[dict]:
    found = []
    with open(audit_log) as log:
        for number, line in enumerate(log):
            if number >= since_line:
                event = json.loads(line)
                if event.get("user", {}).get("username") == user and event.get("verb") in (
                        "create", "update", "patch", "delete"):
                    found.append(event)
    return found


def audit_length(audit_log: Path) -> int:
    with open(audit_log) as log:
        return sum(1 for _ in log)


@pytest.fixture(scope="module")
def helm_on_cluster(helm, cluster):
    """The session's helm, pointed at the test cluster."""
    def run(*args: str, check: bool = True) -> subprocess.CompletedProcess:
        return helm(*args, f"--kubeconfig={cluster.kubeconfig}", check=check)
    return run


@pytest.fixture(scope="module")
def release(core, cluster, kubectl, helm_on_cluster, mig_manager, tmp_path_factory):
    helm = helm_on_cluster
    tmp = tmp_path_factory.mktemp("helm")
    pool = make_pool(core, nodes=4)
    name = f"tessera-{pool.id}"
    namespace, workloads = f"tessera-system-{pool.id}", f"inference-{pool.id}"
    for ns in (namespace, workloads):
        ensure_namespace(core, ns)
    values = values_for(workloads, pool.id)
    installed = helm("install", name, str(CHART), "-n", namespace, "-f", helm_values_file(tmp, values), check=False)
    assert installed.returncode == 0, installed.stderr
    rel = Release(name, namespace, workloads, pool, values)
    rel.tmp = tmp
    rel.operators = []
    yield rel
    for operator in rel.operators:
        operator.stop()
    helm("uninstall", name, "-n", namespace, check=False)
    for ns in (workloads, namespace):
        try:
            core.delete_namespace(ns)
        except client.ApiException as error:
            if error.status != 404:
                raise
    delete_pool(core, pool)


def start_operator(release: Release, helm, core, cluster, pod_name: str) -> HostOperator:
    manifest = helm("get", "manifest", release.name, "-n", release.namespace).stdout
    (deployment,) = rendered(manifest, "Deployment")
    kubeconfig = token_kubeconfig(core, cluster, release.namespace, release.service_account,
                                  release.tmp / f"{pod_name}.kubeconfig")
    operator = HostOperator(deployment, kubeconfig, release.tmp, pod_name).start()
    release.operators.append(operator)
    return operator


def cluster_view(kubectl, namespace: str) -> str:
    """What the cluster shows of a namespace, for a failure message."""
    return kubectl("get", "deployments,pods,events", "-n", namespace, "-o", "wide", check=False).stdout[-6000:]


def wait_ready(custom, release: Release, names: list[str], operator: HostOperator, kubectl=None) -> dict:
    def ready():
        if not operator.alive():
            raise AssertionError(f"operator exited:\n{operator.text()[-5000:]}")
        found = systems(custom, release.workloads)
        return found if all(n in found and is_true(found[n], "Ready") for n in names) else None
    try:
        return wait_for(ready, READY_TIMEOUT_S, f"{names} Ready", interval=1.0)
    except TimeoutError:
        view = cluster_view(kubectl, release.workloads) if kubectl else ""
        raise AssertionError(f"not Ready:\n{operator.text()[-5000:]}\n{view}") from None


def wait_quiet(operator: HostOperator) -> None:
    """Until a reconcile that wrote nothing: the systems' last status and Events after Ready are in."""
    def quiet():
        done = [line for line in operator.text().splitlines() if "reconciled (" in line]
        return done and " 0 write(s)" in done[-1]
    wait_for(quiet, 60, "a reconcile without writes", interval=0.5)


def apply_server_side(kubectl, namespace: str) -> list[str]:
    """As a GitOps pipeline applies: server-side, its own field manager, conflicts are errors (no --force-conflicts)."""
    for example in THREE_EXAMPLES:
        applied = kubectl("apply", "--server-side", "--field-manager=gitops", "-n", namespace,
                          "-f", str(REPO / "examples" / example), check=False)
        assert applied.returncode == 0, applied.stderr
    return [Path(n).stem for n in THREE_EXAMPLES]


@pytest.fixture
def custom(api_client) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api_client)


# -- install and reconcile ------------------------------------------------------

def test_the_charts_crds_are_the_generated_ones():
    for path in sorted((REPO / "crds").glob("*.yaml")):
        assert (CHART / "crds" / path.name).read_text() == path.read_text(), f"charts/tessera/crds/{path.name}"
    assert {p.name for p in (CHART / "crds").glob("*.yaml")} == {p.name for p in (REPO / "crds").glob("*.yaml")}


def test_the_operator_started_from_the_rendered_deployment_with_the_charts_service_account_makes_the_examples_ready(
        release, helm_on_cluster, core, cluster, custom, kubectl):
    helm = helm_on_cluster
    start = audit_length(cluster.audit_log)
    operator = start_operator(release, helm, core, cluster, "operator-a")
    names = apply_server_side(kubectl, release.workloads)
    wait_ready(custom, release, names, operator, kubectl)
    writes = writes_by(cluster.audit_log, release.user, start)
    written = {(w["objectRef"]["resource"], w["objectRef"].get("subresource")) for w in writes}
    assert {("nodes", None), ("deployments", None), ("services", None), ("leases", None),
            ("compoundinferencesystems", "status")} <= written, written
    forbidden = [w for w in writes if w.get("responseStatus", {}).get("code") == 403]
    assert forbidden == [], forbidden[:3]
    # Nothing but the ServiceAccount's token was used by the operator: no admin-certificate write after start.
    admin = [w for w in writes_by(cluster.audit_log, "tessera-admin", start)
             if w.get("userAgent", "").startswith(("tessera-operator", "kopf"))]
    assert admin == []


def helm_test_pod(release: Release, helm) -> dict:
    hooks = helm("get", "hooks", release.name, "-n", release.namespace).stdout
    (pod,) = [d for d in yaml.safe_load_all(hooks) if d and d["metadata"]["annotations"]["helm.sh/hook"] == "test"]
    return pod


def run_helm_test_command(release: Release, helm, core, cluster) -> subprocess.CompletedProcess:
    """The `helm test` pod's command, out of cluster: KWOK runs no containers, so `helm test` itself would
    wait forever for a pod that never runs. Same command, same API server, the same ServiceAccount's token."""
    (container,) = helm_test_pod(release, helm)["spec"]["containers"]
    assert container["command"][0] == "python"
    kubeconfig = token_kubeconfig(core, cluster, release.namespace, release.service_account,
                                  release.tmp / "helm-test.kubeconfig")
    return subprocess.run([sys.executable, *container["command"][1:]], capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "KUBECONFIG": str(kubeconfig),
                               "POD_NAMESPACE": release.namespace})


def test_the_helm_test_pods_command_passes_while_the_operator_leads(release, helm_on_cluster, core, cluster):
    checked = run_helm_test_command(release, helm_on_cluster, core, cluster)
    assert checked.returncode == 0, checked.stderr
    assert f"leads in {release.namespace}" in checked.stdout


def test_reapplying_the_examples_server_side_conflicts_with_nothing_and_replans_nothing(
        release, core, cluster, custom, kubectl):
    operator = release.operators[-1]
    wait_quiet(operator)
    state_before = {c.metadata.name: c.data for c in core.list_namespaced_config_map(release.namespace).items
                    if c.metadata.name.startswith("tessera-pool-")}
    assert state_before, "the pool's stored plan"
    start = audit_length(cluster.audit_log)
    log_before = len(operator.text())
    planned_before = {n: condition(s, "Planned") for n, s in systems(custom, release.workloads).items()}
    apply_server_side(kubectl, release.workloads)
    resyncs = operator.text().count("reconciled (")
    wait_for(lambda: operator.text().count("reconciled (") >= resyncs + 2, 60, "two more reconciles")
    state_after = {c.metadata.name: c.data for c in core.list_namespaced_config_map(release.namespace).items
                   if c.metadata.name.startswith("tessera-pool-")}
    assert state_after == state_before
    # No re-plan: no solve, nothing written to nodes, servers or plans. (Status and Events may still
    # follow the servers' availability, which KWOK's pods change on their own.)
    assert "solve of" not in operator.text()[log_before:]
    planned_after = {n: condition(s, "Planned") for n, s in systems(custom, release.workloads).items()}
    assert planned_after == planned_before
    kept_out = {"leases", "events", "compoundinferencesystems"}
    assert [w for w in writes_by(cluster.audit_log, release.user, start) if w["objectRef"]["resource"] not in kept_out] == []
    # The operator owns no spec field of the systems: it writes status only, through the status subresource.
    for system in systems(custom, release.workloads).values():
        for entry in system["metadata"]["managedFields"]:
            if entry["manager"] != "gitops":
                assert entry.get("subresource") == "status", entry["manager"]


# -- least privilege ------------------------------------------------------------

def can_i(kubectl, release: Release, *args: str) -> bool:
    answer = kubectl("auth", "can-i", f"--as={release.user}", *args, check=False)
    return answer.stdout.strip() == "yes"


CAN = [
    ("list", "nodes"), ("watch", "nodes"), ("patch", "nodes"),
    ("list", "pods", "--all-namespaces"),
    ("get", "clusterpolicies.nvidia.com/cluster-policy"),
    ("create", "configmaps", "-n", "gpu-operator"), ("patch", "configmaps/tessera-mig-parted-config", "-n", "gpu-operator"),
]
CANNOT = [
    ("get", "secrets"), ("list", "secrets", "--all-namespaces"), ("get", "secrets", "-n", "kube-system"),
    ("create", "pods", "--subresource=exec", "--all-namespaces"),
    ("create", "pods", "--subresource=attach", "--all-namespaces"),
    ("create", "pods"), ("delete", "pods", "--all-namespaces"), ("patch", "pods", "--all-namespaces"),
    ("create", "pods", "--subresource=eviction", "--all-namespaces"),  # tessera scales to zero, never evicts
    ("patch", "pods", "--subresource=status", "-n", "default"),
    ("delete", "nodes"), ("create", "nodes"), ("update", "nodes", "--subresource=status"), ("patch", "nodes", "--subresource=status"),
    ("get", "clusterpolicies.nvidia.com/other"), ("patch", "clusterpolicies.nvidia.com/cluster-policy"),
    ("patch", "configmaps/default-mig-parted-config", "-n", "gpu-operator"),
    ("get", "configmaps", "-n", "kube-system"),
    ("create", "deployments", "-n", "default"), ("list", "compoundinferencesystems.tessera.ai", "-n", "default"),
    ("patch", "compoundinferencesystems.tessera.ai", "--all-namespaces"),
    ("create", "clusterroles"), ("create", "rolebindings", "--all-namespaces"), ("escalate", "clusterroles"),
    ("impersonate", "serviceaccounts"),
    ("create", "serviceaccounts", "--subresource=token", "--all-namespaces"),
    ("create", "namespaces"), ("delete", "namespaces"),
    ("update", "leases/other-lease"), ("delete", "leases/tessera-operator"),
    ("create", "validatingadmissionpolicies.admissionregistration.k8s.io"),
]


def test_the_service_account_can_what_the_operator_does(release, kubectl):
    namespaced = [("list", "compoundinferencesystems.tessera.ai"), ("patch", "compoundinferencesystems.tessera.ai", "--subresource=status"),
                  ("list", "adapterpools.tessera.ai"), ("patch", "adapterpools.tessera.ai", "--subresource=status"),
                  ("watch", "deployments.apps"), ("create", "deployments.apps"), ("patch", "deployments.apps"),
                  ("delete", "deployments.apps"), ("patch", "services"), ("create", "events"), ("watch", "pods"),
                  ("patch", "pods", "--subresource=status"), ("patch", "poddisruptionbudgets.policy"),
                  ("delete", "poddisruptionbudgets.policy")]
    missing = [c for c in CAN if not can_i(kubectl, release, *c)]
    missing += [c for c in namespaced if not can_i(kubectl, release, *c, "-n", release.workloads)]
    missing += [c for c in [("get", "configmaps"), ("create", "configmaps"), ("patch", "configmaps"),
                            ("update", "leases/tessera-operator"), ("create", "leases")]
                if not can_i(kubectl, release, *c, "-n", release.namespace)]
    assert missing == []


@pytest.mark.parametrize("question", CANNOT, ids=lambda q: " ".join(q))
def test_the_service_account_cannot(release, kubectl, question):
    """In the namespace named, else in its own, the watched one and another."""
    scoped = "-n" in question or "--all-namespaces" in question
    scopes = [()] if scoped else [("-n", release.namespace), ("-n", release.workloads), ("-n", "default")]
    assert [scope for scope in scopes if can_i(kubectl, release, *question, *scope)] == []


def test_no_secret_is_readable_not_even_in_the_release_namespace(release, kubectl):
    for verb in ("get", "list", "watch"):
        assert not can_i(kubectl, release, verb, "secrets", "-n", release.namespace)


def node_patch(core_as_operator: client.CoreV1Api, node: str, patch: dict) -> str:
    try:
        core_as_operator.patch_node(node, patch)
        return "allowed"
    except client.ApiException as error:
        assert error.status in (403, 422), error.body
        return json.loads(error.body).get("message", "")


def test_the_admission_policy_limits_the_operators_node_changes_to_mig_its_annotations_and_unschedulable(
        release, core, cluster):
    from kubernetes import config
    kubeconfig = token_kubeconfig(core, cluster, release.namespace, release.service_account,
                                  release.tmp / "policy.kubeconfig")
    as_operator = client.CoreV1Api(config.new_client_from_config(config_file=str(kubeconfig)))
    # A node of its own, outside the pool: the serving pool stays untouched for the tests after this one.
    (node,) = create_gpu_nodes(core, 1, H100, gpus_per_node=1, name_prefix=f"vap-{release.pool.id}")
    try:
        check_node_policy(core, as_operator, node)
    finally:
        core.delete_node(node)


def check_node_policy(core: client.CoreV1Api, as_operator: client.CoreV1Api, node: str) -> None:
    core.patch_node(node, {"metadata": {"labels": {"nvidia.com/mig.config.state": "success"}}})

    def refused(patch: dict, why: str) -> None:
        message = wait_for(lambda: (m := node_patch(as_operator, node, patch)) != "allowed" and m, 30,
                           f"the policy refusing {patch}")
        assert why in message, message

    refused({"metadata": {"labels": {"team": "x"}}}, "only the nvidia.com/mig.config label")
    refused({"metadata": {"labels": {"nvidia.com/gpu.product": "NVIDIA-A100"}}}, "only the nvidia.com/mig.config label")
    refused({"metadata": {"labels": {"nvidia.com/mig.config.state": "pending"}}}, "only remove")
    refused({"metadata": {"annotations": {"example.com/owner": "x"}}}, "tessera.ai/ annotations")
    refused({"spec": {"taints": [{"key": "x", "effect": "NoSchedule"}]}}, "only spec.unschedulable")
    refused({"spec": {"providerID": "kwok://other"}}, "only spec.unschedulable")
    refused({"metadata": {"finalizers": ["example.com/keep"]}}, "owners or finalizers of a node")
    labels_before = core.read_node(node).metadata.labels
    assert node_patch(as_operator, node, {"metadata": {"labels": {
        MIG_LABEL: labels_before.get(MIG_LABEL, "all-disabled"), "nvidia.com/mig.config.state": None}}}) == "allowed"
    assert node_patch(as_operator, node, {"metadata": {"annotations": {"tessera.ai/note": "x"}}}) == "allowed"
    assert node_patch(as_operator, node, {"spec": {"unschedulable": True}}) == "allowed"
    assert node_patch(as_operator, node, {"spec": {"unschedulable": None},
                                          "metadata": {"annotations": {"tessera.ai/note": None}}}) == "allowed"
    # The admin (not the operator's ServiceAccount) is not limited by it.
    core.patch_node(node, {"metadata": {"labels": {"team": "x"}}})
    core.patch_node(node, {"metadata": {"labels": {"team": None}}})


def test_the_chart_grants_no_wildcard(helm):
    manifest = helm("template", "t", str(CHART), "--set", "watchNamespaces={a,b}").stdout
    manifest += helm("template", "t", str(CHART)).stdout
    for role in rendered(manifest, "ClusterRole") + rendered(manifest, "Role"):
        for rule in role["rules"]:
            for field in ("apiGroups", "resources", "verbs", "resourceNames"):
                assert "*" not in rule.get(field, []), (role["metadata"]["name"], rule)


# -- upgrade and uninstall ------------------------------------------------------

def test_helm_upgrade_with_changed_values_hands_over_by_the_lease_and_repartitions_nothing(
        release, helm_on_cluster, core, cluster, custom, api_client, kubectl):
    helm = helm_on_cluster
    old = release.operators[-1]
    labels_before = {n: core.read_node(n).metadata.labels.get(MIG_LABEL) for n in release.pool.nodes}
    deployments_before = {d.metadata.name: d.metadata.uid for d in children(api_client, release.workloads)[0]}
    templates_before = pod_templates(api_client, release.workloads)
    planned_before = {n: condition(s, "Planned") for n, s in systems(custom, release.workloads).items()}
    values = {**release.values, "reconcile": {"resyncSeconds": 4.0, "debounceSeconds": 0.5}, "logLevel": "debug",
              "health": {"port": free_port()}, "metrics": {"port": free_port()}}
    upgraded = helm("upgrade", release.name, str(CHART), "-n", release.namespace,
                    "-f", helm_values_file(release.tmp, values), check=False)
    assert upgraded.returncode == 0, upgraded.stderr
    start = audit_length(cluster.audit_log)
    # A rolling update: the new operator starts while the old one still leads, and waits as a standby.
    new = start_operator(release, helm, core, cluster, "operator-b")
    wait_for(lambda: "standby" in new.text(), 60, "the new operator on standby")
    assert "reconciled (" not in new.text()
    old.stop()  # SIGTERM: the old operator releases its Lease
    wait_for(lambda: "leading: took Lease" in new.text(), 30, "the new operator leading")
    wait_for(lambda: new.text().count("reconciled (") >= 2, 120, "two reconciles of the new operator")
    # The new operator reuses the stored plan and finds every layout applied. (Readiness of the servers
    # is not asked again here: it depends on KWOK's pods, which the first test already showed.)
    assert "solve of" not in new.text(), "the stored plan is reused, not solved again"
    for name, system in systems(custom, release.workloads).items():
        assert condition(system, "Planned") == planned_before[name]
        assert is_true(system, "MigLayoutApplied"), name
    assert {n: core.read_node(n).metadata.labels.get(MIG_LABEL) for n in release.pool.nodes} == labels_before
    writes = writes_by(cluster.audit_log, release.user, start)
    assert [w for w in writes if w["objectRef"]["resource"] == "nodes"] == []
    assert {d.metadata.name: d.metadata.uid for d in children(api_client, release.workloads)[0]} == deployments_before
    assert pod_templates(api_client, release.workloads) == templates_before, "no model server restarts"
    assert "--resync=4" in new.argv and "--log-level=debug" in new.argv
    # logLevel=debug prints more: kopf's lines for each watch event and handler, which info leaves out.
    assert " INFO kopf." in new.text() and " INFO kopf." not in old.text()


def pod_templates(api_client, namespace: str) -> dict[str, dict]:
    return {d.metadata.name: api_client.sanitize_for_serialization(d.spec.template)
            for d in children(api_client, namespace)[0]}


def test_the_crd_upgrade_as_notes_writes_it_replaces_the_crds_helm_installed_keeping_systems_and_server_pods(
        release, helm_on_cluster, kubectl, custom, api_client, tmp_path):
    """NOTES.txt's command, run literally on a newer chart's crds/ (a changed schema): Helm never upgrades
    crds/, this does; the systems stay, and no model server's pod template changes (no restart)."""
    notes = helm_on_cluster("get", "notes", release.name, "-n", release.namespace).stdout
    (command,) = [line.strip() for line in notes.splitlines() if line.strip().startswith("kubectl apply")]
    path = CHART / "crds" / "compoundinferencesystems.tessera.ai.yaml"
    newer = yaml.safe_load(path.read_text())
    schema = newer["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    schema["description"] = schema.get("description", "") + " (a newer chart's CRD)"
    new_chart = tmp_path / "new-chart"
    (new_chart / "crds").mkdir(parents=True)
    (new_chart / "crds" / path.name).write_text(yaml.safe_dump(newer))
    argv = shlex.split(command.replace("<new chart>", str(new_chart)))
    assert argv[:2] == ["kubectl", "apply"] and "--force-conflicts" in argv
    kept = {name: s["metadata"]["uid"] for name, s in systems(custom, release.workloads).items()}
    assert kept, "the systems of the earlier tests are there to be kept"
    templates = pod_templates(api_client, release.workloads)
    assert templates, "the model servers of the earlier tests"
    operator = release.operators[-1]
    # Owned as a Helm install owns them, whatever applied them before in this cluster (other modules do).
    kubectl("apply", "--server-side", "--field-manager=helm", "--force-conflicts", "-f", str(path))
    try:
        plain = kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump(newer), check=False)
        assert plain.returncode != 0 and "conflict" in plain.stderr.lower(), "without --force-conflicts it conflicts"
        kubectl(*argv[1:])
        wait_crd_established(api_client, "compoundinferencesystems.tessera.ai")
        served = json.loads(kubectl("get", "crd", "compoundinferencesystems.tessera.ai", "-o", "json").stdout)
        assert served["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["description"] == schema["description"]
        assert {name: s["metadata"]["uid"] for name, s in systems(custom, release.workloads).items()} == kept
        reconciles = operator.text().count("reconciled (")
        wait_for(lambda: operator.text().count("reconciled (") >= reconciles + 2, 120, "two reconciles after it")
        assert pod_templates(api_client, release.workloads) == templates
    finally:
        kubectl("apply", "--server-side", "--force-conflicts", "-f", str(path))


# -- a system with a frontend, changed, then removed ------------------------------

def stored_plans(core, release: Release) -> dict[str, dict]:
    return {c.metadata.name: c.data for c in core.list_namespaced_config_map(release.namespace).items
            if c.metadata.name.startswith("tessera-pool-")}


def of_system(items: list, system: str) -> dict[str, object]:
    return {i.metadata.name: getattr(i, "data", None) for i in items
            if (i.metadata.labels or {}).get("tessera.ai/system") == system}


def test_a_further_systems_frontend_its_replan_and_its_removal_run_on_the_charts_grants(
        release, core, cluster, custom, api_client, kubectl):
    """What a team does after the first day, on the chart's token: a fourth system with a frontend, its demand
    raised, its frontend dropped, the system deleted. Each step is a write the scenario above never makes
    (the frontend's ConfigMap created, patched, deleted; a re-plan's stored plan; servers deleted), and each
    is waited for on the object itself, so the permissions test below reads them from the audit log."""
    operator = release.operators[-1]

    def apply(**spec) -> None:
        kubectl("apply", "-n", release.workloads, "-f", "-", input=system_yaml("edge", **spec))

    def config_maps() -> dict[str, object]:
        return of_system(core.list_namespaced_config_map(release.workloads).items, "edge")

    def servers() -> dict[str, object]:
        return of_system(children(api_client, release.workloads)[0], "edge")

    plans = stored_plans(core, release)
    apply(frontend={"maxInFlight": 64})
    wait_ready(custom, release, ["edge"], operator, kubectl)
    assert stored_plans(core, release) != plans, "the re-plan with the fourth system is stored"
    first = wait_for(lambda: config_maps() or None, 60, "the frontend's ConfigMap")
    apply(frontend={"maxInFlight": 64}, demandRequestsPerSecond=400)
    wait_for(lambda: config_maps() not in ({}, first), 120, "the frontend's routing rewritten for the new plan")
    apply()
    wait_for(lambda: not config_maps(), 120, "the frontend's ConfigMap gone with spec.frontend")
    kubectl("delete", "-n", release.workloads, "compoundinferencesystem", "edge")
    wait_for(lambda: not servers(), 120, "the deleted system's servers gone")
    wait_ready(custom, release, [Path(n).stem for n in THREE_EXAMPLES], operator, kubectl)


# -- the permissions matrix -------------------------------------------------------
# Every permission the chart's Roles grant (this module's values: watchNamespaces set, profiling off), by where
# it holds: "cluster" (the ClusterRole), or the namespace of a Role: "release", "gpu-operator", "watched".
# A change that grants or drops a permission changes this matrix, or the test below fails.
MATRIX = {
    ("cluster", "nodes", "list"), ("cluster", "nodes", "watch"), ("cluster", "nodes", "patch"),
    ("cluster", "pods", "list"), ("cluster", "clusterpolicies", "get"), ("cluster", "namespaces", "get"),
    ("cluster", "customresourcedefinitions", "get"),
    ("release", "configmaps", "get"), ("release", "configmaps", "list"), ("release", "configmaps", "create"),
    ("release", "configmaps", "patch"), ("release", "configmaps", "delete"),
    ("release", "leases", "create"), ("release", "leases", "get"), ("release", "leases", "update"),
    ("release", "events", "create"),
    ("gpu-operator", "configmaps", "create"), ("gpu-operator", "configmaps", "get"),
    ("gpu-operator", "configmaps", "patch"),
    ("watched", "compoundinferencesystems", "list"), ("watched", "compoundinferencesystems", "watch"),
    ("watched", "compoundinferencesystems/status", "patch"),
    ("watched", "adapterpools", "list"), ("watched", "adapterpools", "watch"), ("watched", "adapterpools/status", "patch"),
    ("watched", "deployments", "list"), ("watched", "deployments", "watch"), ("watched", "deployments", "create"),
    ("watched", "deployments", "patch"), ("watched", "deployments", "delete"),
    ("watched", "services", "list"), ("watched", "services", "create"), ("watched", "services", "patch"),
    ("watched", "services", "delete"), ("watched", "events", "create"),
    ("watched", "poddisruptionbudgets", "list"), ("watched", "poddisruptionbudgets", "create"),
    ("watched", "poddisruptionbudgets", "patch"), ("watched", "poddisruptionbudgets", "delete"),
    ("watched", "jobs", "list"), ("watched", "jobs", "watch"), ("watched", "resourcequotas", "list"),
    ("watched", "configmaps", "list"), ("watched", "configmaps", "create"), ("watched", "configmaps", "patch"),
    ("watched", "configmaps", "delete"),
    ("watched", "pods", "watch"), ("watched", "pods/status", "patch"),
    ("watched", "endpointslices", "list"), ("watched", "endpointslices", "create"),
    ("watched", "endpointslices", "patch"), ("watched", "endpointslices", "delete"),
    ("watched", "inferencepools", "list"), ("watched", "inferencepools", "create"),
    ("watched", "inferencepools", "patch"), ("watched", "inferencepools", "delete"),
}
# Granted, and not exercised by this module's scenario (install, the examples to Ready, re-apply, upgrade, a
# fourth system with a frontend changed and removed),
# with the reason: what would exercise them. Anything else granted and unused fails the test.
NOT_EXERCISED_HERE = {
    ("watched", "adapterpools/status", "patch"): "an AdapterPool's status (this scenario applies none):"
                                                 " tests/e2e/test_adapter_pools.py",
    ("release", "configmaps", "delete"): "a pool's stored plan goes when the pool's last node goes",
    ("release", "events", "create"): "Events on the ClusterPolicy, in the release namespace: a MIG ConfigMap mismatch",
    ("gpu-operator", "configmaps", "create"): "tessera's mig-parted ConfigMap: created when missing, else patched;"
                                              " which one depends on the tests run before (asserted below)",
    ("gpu-operator", "configmaps", "patch"): "the same",
    ("watched", "deployments", "create"): "server-side apply: RBAC checks create for a new object, the audit log"
                                          " records the request as a patch",
    ("watched", "services", "create"): "the same",
    ("watched", "poddisruptionbudgets", "create"): "the same",
    ("watched", "configmaps", "create"): "the same (a frontend's ConfigMap, applied by the fourth system above)",
    ("watched", "pods/status", "patch"): "an AdapterPool server pod's readiness gate and annotation (this scenario"
                                         " applies no AdapterPool): tests/e2e/test_adapter_loading.py",
    **{("watched", "endpointslices", verb): "an adapter's route (this scenario applies no AdapterPool):"
                                            " tests/e2e/test_adapter_routes.py" for verb in ("list", "create", "patch",
                                                                                             "delete")},
    **{("watched", "inferencepools", verb): "an AdapterPool's InferencePool, where its CRD is installed (not in this"
                                            " scenario): tests/e2e/test_adapter_routes.py" for verb in (
                                                "list", "create", "patch", "delete")},
}


def granted(manifest: str, release: Release) -> set[tuple[str, str, str]]:
    where = {release.namespace: "release", "gpu-operator": "gpu-operator", release.workloads: "watched"}
    grants = set()
    for role in rendered(manifest, "ClusterRole") + rendered(manifest, "Role"):
        if not role["metadata"]["name"].startswith(f"{release.name}-") or role["metadata"]["name"].endswith(
                ("-view", "-edit")):  # the aggregated roles are users', not the operator's
            continue
        scope = where[role["metadata"]["namespace"]] if role["kind"] == "Role" else "cluster"
        grants |= {(scope, resource, verb) for rule in role["rules"] for resource in rule["resources"]
                   for verb in rule["verbs"]}
    return grants


def used(audit_log: Path, release: Release) -> tuple[set[tuple[str, str, str]], list[dict]]:
    """(scope, resource, verb) of every request the operator (its client's or kopf's user agent) made with
    the ServiceAccount's token, and those RBAC refused (not the admission policy: the policy test's own
    requests, under another user agent, are refused by it on purpose)."""
    where = {release.namespace: "release", "gpu-operator": "gpu-operator", release.workloads: "watched"}
    found, refused = set(), []
    with open(audit_log) as log:
        for line in log:
            event = json.loads(line)
            if (event.get("user", {}).get("username") != release.user or "objectRef" not in event
                    or not event.get("userAgent", "").startswith(OPERATOR_AGENTS)):
                continue
            if (event.get("annotations") or {}).get("authorization.k8s.io/decision") == "forbid":
                refused.append(event)
            ref = event["objectRef"]
            resource = ref["resource"] + (f"/{ref['subresource']}" if ref.get("subresource") else "")
            scope = where.get(ref.get("namespace"), "cluster")
            found.add((scope, resource, event["verb"]))
    return found, refused


def test_the_operator_used_every_permission_the_chart_grants_and_needed_no_other(
        release, helm_on_cluster, cluster):
    manifest = helm_on_cluster("get", "manifest", release.name, "-n", release.namespace).stdout
    assert granted(manifest, release) == MATRIX
    requests, refused = used(cluster.audit_log, release)
    assert refused == []
    # A namespaced request the Role does not grant is one of the ClusterRole's (e.g. pods listed in a namespace).
    counted = {(scope, resource, verb) if (scope, resource, verb) in MATRIX else ("cluster", resource, verb)
               for scope, resource, verb in requests}
    assert counted - MATRIX == set(), "used without a grant (admitted by a role outside the chart?)"
    assert sorted((MATRIX - counted) - set(NOT_EXERCISED_HERE)) == [], "granted but never used"
    assert {("gpu-operator", "configmaps", "create"), ("gpu-operator", "configmaps", "patch")} & counted


def test_helm_uninstall_leaves_the_crds_the_systems_their_servers_the_plans_and_the_mig_layouts(
        release, helm_on_cluster, core, cluster, api_client, kubectl):
    helm = helm_on_cluster
    for operator in release.operators:
        operator.stop()
    # The control of the helm test: a stopped operator released its Lease, and the check says so.
    unled = run_helm_test_command(release, helm, core, cluster)
    assert unled.returncode == 1 and "no operator leads" in unled.stderr, unled.stdout + unled.stderr
    labels_before = {n: core.read_node(n).metadata.labels.get(MIG_LABEL) for n in release.pool.nodes}
    helm("uninstall", release.name, "-n", release.namespace)
    selector = f"app.kubernetes.io/instance={release.name}"
    for kind in ("clusterroles", "clusterrolebindings", "validatingadmissionpolicies",
                 "validatingadmissionpolicybindings"):
        assert kubectl("get", kind, "-l", selector, "-o", "name").stdout.strip() == "", kind
    for kind in ("deployments", "services", "serviceaccounts", "roles", "rolebindings"):
        assert kubectl("get", kind, "-n", release.namespace, "-l", selector, "-o", "name").stdout.strip() == "", kind
    # What stays (docs/install.md, "Uninstall"):
    assert kubectl("get", "crd", "compoundinferencesystems.tessera.ai", check=False).returncode == 0
    assert len(systems(client.CustomObjectsApi(api_client), release.workloads)) == len(THREE_EXAMPLES)
    assert children(api_client, release.workloads)[0], "model-server Deployments keep serving"
    assert [c for c in core.list_namespaced_config_map(release.namespace).items
            if c.metadata.name.startswith("tessera-pool-")], "the stored plans"
    assert client.CoordinationV1Api(api_client).read_namespaced_lease("tessera-operator", release.namespace)
    assert core.read_namespaced_config_map("tessera-mig-parted-config", "gpu-operator")
    assert {n: core.read_node(n).metadata.labels.get(MIG_LABEL) for n in release.pool.nodes} == labels_before


def test_the_documented_removal_order_gives_the_gpus_back_and_removes_tesseras_node_annotation(
        release, core, api_client, kubectl, mig_manager):
    """The chart README's "Uninstall, giving the GPUs back" from its second step (the uninstall is the test above),
    on this release's
    namespace and pool (its first command deletes the systems of every namespace). The ClusterPolicy's
    re-pointing and the ConfigMap's deletion, its last steps, are left out: the other modules' tests share them."""
    readme = (CHART / "README.md").read_text()
    steps = ["helm uninstall", "kubectl delete compoundinferencesystems", "nvidia.com/mig.config=all-disabled",
             "tessera.ai/mig-config-requested-", "default-mig-parted-config", "delete configmap"]
    assert [readme.index(step) for step in steps] == sorted(readme.index(step) for step in steps)
    kubectl("delete", "compoundinferencesystems", "--all", "-n", release.workloads)
    kubectl("wait", "--for=delete", "pod", "-n", release.workloads, "-l", "app.kubernetes.io/managed-by=tessera",
            "--timeout=120s", check=False)
    wait_for(lambda: not core.list_namespaced_pod(release.workloads).items, 120, "the model-server pods gone")
    assert any(any(gpu_states(core.read_node(n))) for n in release.pool.nodes), "MIG layouts to give back"
    for node in release.pool.nodes:
        kubectl("label", "node", node, f"{MIG_LABEL}=all-disabled", "--overwrite")
    for node in release.pool.nodes:
        assert mig_manager.wait_for_state(node, timeout=120) == "success", mig_manager.errors.get(node)
        assert gpu_states(core.read_node(node)) == [None] * 8, node
    kubectl("annotate", "node", "-l", release.pool.selector, "tessera.ai/mig-config-requested-")
    left = {n: [k for k in core.read_node(n).metadata.annotations or {} if k.startswith("tessera.ai/")]
            for n in release.pool.nodes}
    assert left == {n: [] for n in release.pool.nodes}


def test_a_chart_without_one_permission_fails_to_serve(core, cluster, kubectl, helm, mig_manager, custom, tessera_crds,
                                                       tmp_path):
    """The control experiment of the install test: the same chart less `patch` on nodes never gets Ready."""
    pool = make_pool(core, nodes=1)
    name, namespace, workloads = f"tessera-{pool.id}", f"tessera-system-{pool.id}", f"inference-{pool.id}"
    for ns in (namespace, workloads):
        ensure_namespace(core, ns)
    values = values_for(workloads, pool.id)
    manifest = helm("template", name, str(CHART), "-n", namespace, "-f", helm_values_file(tmp_path, values)).stdout
    documents = [d for d in yaml.safe_load_all(manifest) if d and d["kind"] != "Deployment"]
    (operator_role,) = [d for d in documents if d["kind"] == "ClusterRole" and d["metadata"]["name"].endswith("-operator")]
    (nodes_rule,) = [r for r in operator_role["rules"] if r["resources"] == ["nodes"]]
    nodes_rule["verbs"].remove("patch")
    applied = kubectl("apply", "-f", "-", input=yaml.safe_dump_all(documents), check=False)
    assert applied.returncode == 0, applied.stderr
    (deployment,) = rendered(manifest, "Deployment")
    release = Release(name, namespace, workloads, pool, values)
    release.tmp = tmp_path
    kubeconfig = token_kubeconfig(core, cluster, namespace, release.service_account, tmp_path / "sa.kubeconfig")
    operator = HostOperator(deployment, kubeconfig, tmp_path, "operator-less").start()
    try:
        apply_examples(kubectl, workloads, ("single-model.yaml",))
        wait_for(lambda: "Forbidden" in operator.text(), 180, "the operator refused (403 Forbidden)")
        found = systems(custom, workloads)["single-model"]
        assert not is_true(found, "Ready")
        assert all(MIG_LABEL not in (core.read_node(n).metadata.labels or {}) or
                   core.read_node(n).metadata.labels[MIG_LABEL] == "all-disabled" for n in pool.nodes)
        assert operator.alive(), "a refused write is retried, not a crash"
    finally:
        operator.stop()
        kubectl("delete", "-f", "-", input=yaml.safe_dump_all(documents), check=False)
        for ns in (workloads, namespace):
            core.delete_namespace(ns)
        delete_pool(core, pool)


@pytest.mark.parametrize("absent_in", ["gpuOperator.namespace", "watchNamespaces"])
def test_an_install_into_an_absent_namespace_fails_naming_it_and_leaves_no_release(helm, cluster, core, kubectl,
                                                                                   tmp_path, absent_in):
    suffix = uuid.uuid4().hex[:6]
    name, namespace, absent = f"tessera-{suffix}", f"tessera-system-{suffix}", f"absent-{suffix}"
    values = {"gpuOperator": {"namespace": absent}} if absent_in == "gpuOperator.namespace" else {
        "watchNamespaces": [absent]}
    try:
        # As the README and docs/install.md write it: --create-namespace for the release's, --atomic.
        installed = helm("install", name, str(CHART), "-n", namespace, "--create-namespace", "--atomic",
                         "--timeout", "120s", "-f", helm_values_file(tmp_path, values),
                         f"--kubeconfig={cluster.kubeconfig}", check=False)
        assert installed.returncode != 0
        assert f'namespaces "{absent}" not found' in installed.stderr and "uninstalled" in installed.stderr
        assert helm("list", "-a", "-q", "-n", namespace, f"--kubeconfig={cluster.kubeconfig}").stdout.strip() == ""
        selector = f"app.kubernetes.io/instance={name}"
        for kind in ("clusterroles", "clusterrolebindings", "validatingadmissionpolicies",
                     "validatingadmissionpolicybindings"):
            assert kubectl("get", kind, "-l", selector, "-o", "name").stdout.strip() == "", kind
        for kind in ("deployments", "services", "serviceaccounts", "roles", "rolebindings"):
            assert kubectl("get", kind, "-n", namespace, "-l", selector, "-o", "name").stdout.strip() == "", kind
    finally:
        kubectl("delete", "namespace", namespace, "--wait=false", check=False)
