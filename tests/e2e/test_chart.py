"""The chart rendered and checked without a cluster: lint, values schema, what each value switches,
the alerts under promtool, the image's Dockerfile under hadolint. (Under tests/e2e for the built helm.)"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tessera.operator.settings import OperatorSettings
from tessera.operator_cli import operator, operator_settings

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "tessera"


def render(helm, *args: str) -> list[dict]:
    out = helm("template", "tessera", str(CHART), "-n", "tessera-system", *args).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def kinds(documents: list[dict]) -> list[str]:
    return sorted(d["kind"] for d in documents)


def test_helm_lint_is_clean_in_strict_mode(helm):
    lint = helm("lint", "--strict", str(CHART))
    assert "1 chart(s) linted, 0 chart(s) failed" in lint.stdout


def test_the_default_install_is_one_operator_without_a_disruption_budget(helm):
    documents = render(helm)
    (deployment,) = [d for d in documents if d["kind"] == "Deployment"]
    assert deployment["spec"]["replicas"] == 1
    assert "PodDisruptionBudget" not in kinds(documents)
    assert {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "Service", "ServiceAccount"} <= set(
        kinds(documents))
    assert not {"ServiceMonitor", "PrometheusRule"} & set(kinds(documents))


def test_a_disruption_budget_comes_with_a_second_replica(helm):
    documents = render(helm, "--set", "replicaCount=2")
    (pdb,) = [d for d in documents if d["kind"] == "PodDisruptionBudget"]
    assert pdb["spec"]["minAvailable"] == 1


def test_the_operator_container_is_locked_down(helm):
    (deployment,) = [d for d in render(helm) if d["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert pod["securityContext"]["runAsNonRoot"] and pod["securityContext"]["runAsUser"] == 65532
    assert container["securityContext"] == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                            "capabilities": {"drop": ["ALL"]}}
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["resources"]["limits"]["memory"] and container["resources"]["requests"]["cpu"]
    assert deployment["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}


def test_every_value_reaches_the_operators_command_line(helm):
    (deployment,) = [d for d in render(
        helm, "--set", "watchNamespaces={a,b}", "--set", "poolNodeSelector.tessera\\.ai/pool=h100",
        "--set", "gpuOperator.migConfigMap=mine", "--set", "solver.memoryMB=4096", "--set", "solver.workers=3",
        "--set", "leaderElection.leaseDurationSeconds=20",
        "--set", "poolNamespaces.NVIDIA-H100-80GB-HBM3=tessera.ai/gpu-tenant in (true\\,yes)") if d["kind"] == "Deployment"]
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    for expected in ("--namespace=a", "--namespace=b", "--node-selector=tessera.ai/pool=h100", "--mig-configmap=mine",
                     "--solve-memory=4096", "--solve-workers=3", "--lease-duration=20", "--state-namespace=tessera-system",
                     "--leader-election-namespace=tessera-system",
                     "--pool-namespaces=NVIDIA-H100-80GB-HBM3=tessera.ai/gpu-tenant in (true,yes)"):
        assert expected in args
    # The rendered command line is one the CLI accepts.
    check = subprocess.run([sys.executable, "-P", "-m", "tessera", *args[:args.index("operator") + 1], "--help"],
                           capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    options = {a.split("=")[0] for a in args if a.startswith("--")} - {"--log-level"}
    assert all(option in check.stdout for option in options), options


def test_a_maintenance_window_reaches_the_command_line_only_when_set(helm):
    assert not [a for a in operator_args(render(helm)) if a.startswith("--maintenance-window")]
    assert "--maintenance-window=02:00-04:00" in operator_args(
        render(helm, "--set", "reconcile.maintenanceWindow=02:00-04:00"))


def operator_args(documents: list[dict]) -> list[str]:
    (deployment,) = [d for d in documents if d["kind"] == "Deployment"]
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    return args[args.index("operator") + 1:]


def test_the_charts_default_planner_and_demand_settings_are_the_operators_own(helm):
    params = operator.make_context("operator", operator_args(render(helm))).params
    params.pop("kubeconfig")
    settings = operator_settings(params)
    assert settings.planner == OperatorSettings().planner
    assert settings.demand == OperatorSettings().demand


def test_planner_demand_and_profiling_values_reach_the_operators_command_line(helm):
    documents = render(
        helm, "--set", "planner.tierRatio=1", "--set", "planner.busyInstances=0", "--set", "planner.exactUpToGpus=64",
        "--set", "planner.queueing=true", "--set-json", "planner.latencySpread=1.3",
        "--set", "planner.routing=per-request", "--set", "planner.connections=32", "--set", "planner.parallelParts=1",
        "--set", "planner.batches={1,8,64,128}", "--set", "demand.prometheus.url=https://prometheus.monitoring:9090",
        "--set", "demand.prometheus.tokenSecret.name=prometheus-reader",
        "--set", "demand.prometheus.caConfigMap.name=prometheus-ca", "--set", "demand.dryRun=true",
        "--set-json", "demand.sloViolationTargetPercent=0.5",
        "--set", "demand.templates.entry-rate=sum(rate(requests_total[1m]))",
        "--set", "profiling.enabled=true", "--set", "profiling.repartition=true", "--set", "image.tag=1.2.3")
    args = operator_args(documents)
    for expected in ("--tier-ratio=1", "--busy-instances=0", "--exact-up-to=64", "--batches=1,8,64,128",
                     "--queueing", "--latency-spread=1.3", "--routing=per-request", "--connections=32",
                     "--parallel-parts=1", "--prometheus-url=https://prometheus.monitoring:9090", "--demand-dry-run",
                     "--slo-violation-target=0.5",
                     "--prometheus-token-file=/var/run/secrets/tessera/prometheus-token/token",
                     "--prometheus-ca-file=/etc/tessera/prometheus-ca/ca.crt",
                     "--demand-template=entry-rate=sum(rate(requests_total[1m]))",
                     "--profiler-image=ghcr.io/tessera-ai/tessera:1.2.3", "--profiling-jobs-per-pool=2",
                     "--profiling-repartition"):
        assert expected in args, (expected, args)
    (deployment,) = [d for d in documents if d["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["prometheus-token"]["secret"] == {"secretName": "prometheus-reader",
                                                     "items": [{"key": "token", "path": "token"}]}
    assert volumes["prometheus-ca"]["configMap"]["name"] == "prometheus-ca"
    mounts = {m["name"]: m for m in pod["containers"][0]["volumeMounts"]}
    assert mounts["prometheus-token"]["readOnly"] and mounts["prometheus-ca"]["readOnly"]


def test_without_a_token_secret_nothing_is_mounted_and_no_profiler_runs(helm):
    documents = render(helm)
    args = operator_args(documents)
    assert not [a for a in args if a.startswith(("--prometheus-url", "--prometheus-token-file", "--profiler-image",
                                                        "--profiling-repartition"))]
    (deployment,) = [d for d in documents if d["kind"] == "Deployment"]
    assert [v["name"] for v in deployment["spec"]["template"]["spec"]["volumes"]] == ["tmp"]


def test_a_namespace_scoped_install_grants_workload_rights_only_in_its_namespaces(helm):
    documents = render(helm, "--set", "watchNamespaces={team-a}")
    (cluster_role,) = [d for d in documents if d["kind"] == "ClusterRole" and d["metadata"]["name"].endswith("-operator")]
    assert {r for rule in cluster_role["rules"] for r in rule["resources"]} == {
        "nodes", "pods", "clusterpolicies", "namespaces", "customresourcedefinitions"}
    (namespaces,) = [rule for rule in cluster_role["rules"] if rule["resources"] == ["namespaces"]]
    assert set(namespaces["resourceNames"]) == {"tessera-system", "gpu-operator", "team-a"}  # read, for the preflight
    workloads = [d for d in documents if d["kind"] == "Role" and d["metadata"]["namespace"] == "team-a"]
    assert len(workloads) == 1 and "deployments" in str(workloads[0]["rules"])


@pytest.mark.parametrize("values, field", [
    (["--set", "replicaCount=0"], "replicaCount"),
    (["--set", "gpuOperator.migConfigMap=default-mig-parted-config"], "migConfigMap"),
    (["--set", "leaderElection.leaseDurationSeconds=1"], "leaseDurationSeconds"),
    (["--set", "watchNamespaces={Bad_Name}"], "watchNamespaces"),
    (["--set", "solver.memoryMB=64"], "memoryMB"),
    (["--set", "solver.workers=0"], "workers"),
    (["--set", "typo=1"], "typo"),
    (["--set", "planner.tierRatio=0.5"], "tierRatio"),
    (["--set-json", "planner.latencySpread=0.5"], "latencySpread"),
    (["--set", "planner.queueing=maybe"], "queueing"),
    (["--set", "planner.routing=round-robin"], "routing"),
    (["--set", "planner.batches={0,8}"], "batches"),
    (["--set", "demand.prometheus.url=prometheus:9090"], "url"),
    (["--set", "demand.prometheus.tokenSecret.name=Bad_Secret"], "name"),
    (["--set", "demand.scaleDownStep=0"], "scaleDownStep"),
    (["--set", "demand.templates.Bad_Name=up"], "Bad_Name"),
    (["--set", "profiling.jobsPerPool=0"], "jobsPerPool"),
    (["--set", "profiling.repartition=yes"], "repartition"),
    (["--set", "reconcile.maintenanceWindow=2-4"], "maintenanceWindow"),
], ids=["no-replica", "gpu-operators-own-configmap", "short-lease", "bad-namespace", "tiny-solver", "no-solver-worker", "unknown-key",
        "tier-below-exact", "spread-below-one", "queueing-not-a-boolean", "unknown-routing", "batch-zero", "url-without-scheme", "bad-secret-name", "no-scale-down-step",
        "bad-template-name", "no-profiler-job", "repartition-not-a-boolean",
        "window-not-a-range"])
def test_the_values_schema_refuses_bad_values_naming_the_field(helm, values, field):
    refused = helm("template", "tessera", str(CHART), *values, check=False)
    assert refused.returncode != 0 and field in refused.stderr, refused.stderr


def test_monitoring_objects_come_with_their_values(helm):
    documents = render(helm, "--set", "metrics.serviceMonitor.enabled=true", "--set",
                       "metrics.prometheusRule.enabled=true", "--set", "metrics.dashboard.enabled=true")
    (rule,) = [d for d in documents if d["kind"] == "PrometheusRule"]
    assert rule["spec"] == yaml.safe_load((CHART / "files" / "alerts.yaml").read_text())
    (dashboard,) = [d for d in documents if d["kind"] == "ConfigMap"]
    panels = json.loads(dashboard["data"]["tessera.json"])["panels"]
    assert any("tessera_pool_gpus_planned" in t["expr"] for p in panels for t in p["targets"])
    assert [d for d in documents if d["kind"] == "ServiceMonitor"][0]["spec"]["endpoints"][0]["port"] == "metrics"


def test_the_alerts_pass_their_promtool_unit_tests():
    promtool = shutil.which("promtool")
    assert promtool, "promtool comes with Debian's prometheus (tests/cluster/setup.sh installs it)"
    result = subprocess.run([promtool, "test", "rules", str(REPO / "tests" / "helm" / "alerts_test.yaml")],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_dockerfile_is_hadolint_clean():
    hadolint = Path(sys.executable).parent / "hadolint"
    result = subprocess.run([str(hadolint), str(REPO / "Dockerfile")], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


def test_the_gitops_layouts_apply_the_crds_before_the_systems():
    argo = REPO / "examples" / "gitops" / "argocd" / "apps"
    waves = {yaml.safe_load(p.read_text())["metadata"]["name"]:
             int(yaml.safe_load(p.read_text())["metadata"]["annotations"]["argocd.argoproj.io/sync-wave"])
             for p in argo.glob("*.yaml")}
    assert waves["tessera"] < waves["inference-systems"]
    flux = yaml.safe_load((REPO / "examples" / "gitops" / "flux" / "inference-systems.yaml").read_text())
    assert flux["spec"]["dependsOn"] == [{"name": "tessera"}]
    release = yaml.safe_load((REPO / "examples" / "gitops" / "flux" / "release" / "helmrelease.yaml").read_text())
    assert release["spec"]["install"]["crds"] == release["spec"]["upgrade"]["crds"] == "CreateReplace"
    for path in (REPO / "examples" / "gitops").rglob("*.yaml"):
        for document in yaml.safe_load_all(path.read_text()):
            for key in ("path",):
                source = (document.get("spec") or {}).get("source") or {}
                if key in source:
                    assert (REPO / source[key]).is_dir(), (path, source[key])


GITOPS = REPO / "examples" / "gitops"


def kustomize(cluster_bins, folder: str) -> list[dict]:
    """`kubectl kustomize` as Argo CD and Flux run it: kustomize's default load restrictions."""
    built = subprocess.run([str(cluster_bins / "kubectl"), "kustomize", str(REPO / folder)],
                           capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    return [d for d in yaml.safe_load_all(built.stdout) if d]


def test_the_gitops_kustomizations_build_with_plain_kubectl_kustomize(cluster_bins):
    systems = kustomize(cluster_bins, "examples")
    assert sorted((d["kind"], d["metadata"]["name"]) for d in systems) == [
        ("CompoundInferenceSystem", "ar-assistant"), ("CompoundInferenceSystem", "social-media"),
        ("CompoundInferenceSystem", "traffic-analysis"), ("Namespace", "inference")]
    assert {d["metadata"].get("namespace") for d in systems if d["kind"] != "Namespace"} == {"inference"}
    assert [d["kind"] for d in kustomize(cluster_bins, "examples/gitops/flux/release")] == ["Namespace", "HelmRelease"]
    # What the pipelines point at: these two kustomizations, the chart, and Argo CD's folder of Applications.
    specs = [yaml.safe_load(path.read_text()).get("spec") or {} for path in GITOPS.rglob("*.yaml")]
    pointed = {((spec.get("source") or {}).get("path") or spec.get("path") or "").removeprefix("./") for spec in specs}
    assert pointed - {""} == {"examples", "examples/gitops/flux/release", "charts/tessera", "examples/gitops/argocd/apps"}


def test_the_gitops_layouts_pass_a_server_dry_run_apply(cluster_bins, kubectl, helm, tessera_crds, mig_manager,
                                                         tmp_path):
    """What each pipeline applies, dry-run on the real API server (its CRDs' schemas, admission, RBAC
    objects): the systems' kustomization, and the chart rendered with the Argo CD Application's and the
    Flux HelmRelease's values (`helm template --include-crds --skip-tests`: Argo CD applies no test hook,
    Flux runs tests only when told to)."""
    argo = yaml.safe_load((GITOPS / "argocd" / "apps" / "tessera.yaml").read_text())["spec"]
    flux = yaml.safe_load((GITOPS / "flux" / "release" / "helmrelease.yaml").read_text())["spec"]

    def values_file(name: str, values: dict) -> str:
        (tmp_path / name).write_text(json.dumps(values))
        return str(tmp_path / name)
    def without_prometheus_operator(manifest: str) -> str:
        # The test cluster has no Prometheus Operator: its kinds (ServiceMonitor, PrometheusRule) stay out.
        return yaml.safe_dump_all([d for d in yaml.safe_load_all(manifest)
                                   if d and not d["apiVersion"].startswith("monitoring.coreos.com/")])
    rendered = {
        "systems": yaml.safe_dump_all(kustomize(cluster_bins, "examples")),
        "argocd": helm("template", argo["source"]["helm"]["releaseName"], str(CHART), "--include-crds", "--skip-tests",
                       "-n", argo["destination"]["namespace"],
                       "-f", values_file("argo.json", argo["source"]["helm"]["valuesObject"])).stdout,
        "flux": helm("template", "tessera", str(CHART), "--include-crds", "--skip-tests", "-n", "tessera-system",
                     "-f", values_file("flux.json", flux["values"])).stdout,
    }
    created = []
    for namespace in ("inference", "tessera-system"):  # as Argo CD's CreateNamespace and Flux's Namespace do first
        if kubectl("create", "namespace", namespace, check=False).returncode == 0:
            created.append(namespace)
    try:
        for name, manifest in rendered.items():
            applied = kubectl("apply", "--dry-run=server", "-f", "-", input=without_prometheus_operator(manifest),
                              check=False)
            assert applied.returncode == 0, (name, applied.stderr)
            assert "(server dry run)" in applied.stdout, name
    finally:
        for namespace in created:
            kubectl("delete", "namespace", namespace, "--wait=false")


def documented_values(text: str) -> set[str]:
    """The value paths docs/install.md's tables name: `a.b.c`, with `/ .d` meaning `a.b.d` in the same cell."""
    names = set()
    for line in text.splitlines():
        if not line.startswith("| `"):
            continue
        cell = line.split("|")[1]
        last = ""
        for name in re.findall(r"`([^`]+)`", cell):
            if name.startswith(".") and last:
                name = last.rsplit(".", 1)[0] + name
            names.add(name)
            last = name
    return names


def value_paths(values: dict, prefix: str = "") -> set[str]:
    """Leaf paths of values.yaml; a map meant to be filled (empty, or labels) is one leaf."""
    paths = set()
    for key, value in values.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value and key != "labels":
            paths |= value_paths(value, f"{path}.")
        else:
            paths.add(path)
    return paths


def test_every_value_of_the_chart_is_in_the_values_tables_of_docs_install():
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    documented = documented_values((REPO / "docs" / "install.md").read_text())
    missing = {path for path in value_paths(values)
               if path not in documented and not any(path.startswith(f"{d}.") for d in documented)}
    assert missing == set()


def test_the_packaged_chart_carries_its_readme_with_the_upgrade_and_uninstall_steps(helm):
    readme = helm("show", "readme", str(CHART)).stdout
    assert "kubectl apply --server-side --force-conflicts -f <new chart>/crds/" in readme
    assert "nvidia.com/mig.config=all-disabled" in readme and "tessera.ai/mig-config-requested-" in readme


def test_notes_give_the_crd_upgrade_command_with_force_conflicts_and_point_into_the_chart(helm, cluster):
    notes = helm("install", "tessera", str(CHART), "-n", "tessera-system", "--dry-run=client",
                 f"--kubeconfig={cluster.kubeconfig}").stdout
    assert "kubectl apply --server-side --force-conflicts -f <new chart>/crds/" in notes
    assert "helm show readme" in notes and "docs/" not in notes


def test_a_schema_error_names_the_field_and_what_to_do_not_a_failed_combinator(helm):
    refused = helm("template", "tessera", str(CHART), "--set", "gpuOperator.migConfigMap=default-mig-parted-config",
                   check=False)
    assert refused.returncode != 0
    assert "'allOf' failed" not in refused.stderr and "'not' failed" not in refused.stderr
    assert "gpuOperator.migConfigMap" in refused.stderr and "ClusterPolicy" in refused.stderr


def test_jobs_may_be_created_only_with_profiling_on(helm):
    def job_verbs(*args: str) -> set[str]:
        documents = render(helm, *args)
        (role,) = [d for d in documents if d["kind"] == "ClusterRole" and d["metadata"]["name"].endswith("-operator")]
        return {verb for rule in role["rules"] if "jobs" in rule["resources"] for verb in rule["verbs"]}
    assert job_verbs() == {"list", "watch"}
    assert job_verbs("--set", "profiling.enabled=true") == {"list", "watch", "create", "patch"}


def test_namespaces_may_be_listed_only_with_a_pool_access_rule(helm):
    def namespace_verbs(*args: str) -> set[str]:
        documents = render(helm, *args)
        (role,) = [d for d in documents if d["kind"] == "ClusterRole" and d["metadata"]["name"].endswith("-operator")]
        return {verb for rule in role["rules"] if "namespaces" in rule["resources"] and not rule.get("resourceNames")
                for verb in rule["verbs"]}
    assert namespace_verbs() == set()
    assert namespace_verbs("--set", "poolNamespaces.NVIDIA-H100-80GB-HBM3=team=vision") == {"list"}
