"""The v1alpha1 API on a real kube-apiserver: crds/ install, every example
reads back exactly as written, the typed status is accepted and printed, and
a corpus of malformed objects is rejected by the API server itself with a
message naming the field.

Malformed objects are sent with dryRun=All, so the API server runs its full
validation (schema, list-map uniqueness, CEL) without storing anything, and
with fieldValidation=Strict, as kubectl sends them; one case without it
documents that unknown fields are then dropped silently.
"""

from __future__ import annotations

import copy
import json
import uuid
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from cluster.kube import ensure_namespace, wait_for
from tessera.operator.api.v1alpha1 import ConditionType, Phase, SystemStatus
from tessera.operator.api.crds import GROUP, KINDS, VERSION

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
PLURALS = {name: kind.plural for name, kind in KINDS.items()}
DIGEST = "sha256:" + "0" * 64


def example_objects() -> list[Path]:
    """Every Kubernetes object among the examples (the twin's workload files are not objects)."""
    return sorted(p for p in EXAMPLES.rglob("*.yaml")
                  if yaml.safe_load(p.read_text()).get("apiVersion", "").startswith(GROUP))


@pytest.fixture(scope="module")
def api_namespace(core) -> str:
    name = f"api-{uuid.uuid4().hex[:6]}"
    ensure_namespace(core, name)
    yield name
    core.delete_namespace(name)


@pytest.fixture(scope="module")
def custom(api_client, tessera_crds) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api_client)


def test_both_crds_are_established_and_answer_to_their_short_names(kubectl, tessera_crds, api_namespace):
    assert tessera_crds == ["adapterpools.tessera.ai", "compoundinferencesystems.tessera.ai"]
    for short in ("cis", "ap", "tessera"):
        kubectl("get", short, "-n", api_namespace)


def test_kubectl_explain_teaches_the_fields(kubectl, tessera_crds):
    def explains(field: str, text: str) -> bool:
        # The API server publishes a new CRD's OpenAPI a little after it is Established.
        return text in kubectl("explain", field, check=False).stdout

    wait_for(lambda: explains("compoundinferencesystems.spec.slo.latencyMilliseconds",
                              "End-to-end latency bound on every source-to-sink path"), 60, "explain of a system field")
    wait_for(lambda: explains("adapterpools.spec.adapters.weights.digest", "sha256"), 60, "explain of a pool field")


@pytest.mark.parametrize("path", example_objects(), ids=lambda p: p.stem)
def test_every_example_applies_and_reads_back_unchanged(kubectl, tessera_crds, api_namespace, path):
    sent = yaml.safe_load(path.read_text())
    kubectl("apply", "--server-side", "--field-manager=tessera-tests", "-n", api_namespace, "-f", str(path))
    plural = PLURALS[sent["kind"]]
    got = json.loads(kubectl("get", "-n", api_namespace, f"{plural}.{GROUP}", sent["metadata"]["name"],
                             "-o", "json").stdout)
    assert got["spec"] == sent["spec"]
    assert (got["apiVersion"], got["kind"], got["metadata"]["name"]) == (
        sent["apiVersion"], sent["kind"], sent["metadata"]["name"])


def test_a_typed_status_is_stored_and_shown_in_the_columns(kubectl, custom, api_namespace):
    system = yaml.safe_load((EXAMPLES / "single-model.yaml").read_text())
    system["metadata"] = {"name": "status-shown"}
    custom.create_namespaced_custom_object(GROUP, VERSION, api_namespace, "compoundinferencesystems", system)
    status = SystemStatus.model_validate({
        "observedGeneration": 1, "phase": Phase.READY,
        "conditions": [{"type": ConditionType.READY, "status": "True", "reason": "PlanApplied",
                        "message": "every server is ready", "lastTransitionTime": "2026-12-01T05:00:00Z"}],
        "plan": {"gpuProduct": "A100-80GB", "gpus": 2, "slices": 9, "poolSlices": 28, "poolSharePercent": 32.1,
                 "predictedLatencyMilliseconds": 187.5,
                 "predictedAccuracy": 0.988, "demandRequestsPerSecond": 200, "servedRequestsPerSecond": 200,
                 "profileSources": {"measured": 1},
                 "tasks": [{"name": "image-classification", "variant": "resnet101", "configurations": [
                     {"migProfile": "3g.40gb", "mpsDegree": 2, "batchSize": 8, "replicas": 3}]}]},
    })
    body = {"status": status.model_dump(mode="json", exclude_none=True)}
    custom.patch_namespaced_custom_object_status(GROUP, VERSION, api_namespace, "compoundinferencesystems",
                                                 "status-shown", body)
    stored = custom.get_namespaced_custom_object(GROUP, VERSION, api_namespace, "compoundinferencesystems",
                                                 "status-shown")
    assert SystemStatus.model_validate(stored["status"]) == status
    table = kubectl("get", "cis", "status-shown", "-n", api_namespace).stdout.split("\n")
    assert table[0].split() == ["NAME", "READY", "PHASE", "GPUS", "SLICES", "POOL-%", "ACCURACY", "LATENCY-MS",
                                "FRONTEND", "AGE"]
    assert table[1].split()[:8] == ["status-shown", "True", "Ready", "2", "9", "32.1", "0.988", "187.5"]


def test_a_status_outside_its_schema_is_rejected(custom, api_namespace):
    system = yaml.safe_load((EXAMPLES / "single-model.yaml").read_text())
    system["metadata"] = {"name": "status-checked"}
    custom.create_namespaced_custom_object(GROUP, VERSION, api_namespace, "compoundinferencesystems", system)
    with pytest.raises(ApiException) as raised:
        custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, api_namespace, "compoundinferencesystems", "status-checked",
            {"status": {"phase": "Running", "plan": {"gpus": -1}}})
    message = json.loads(raised.value.body)["message"]
    assert "status.phase" in message and "status.plan.gpus" in message


# ---- the corpus of malformed objects ----------------------------------------------------------

def system() -> dict:
    return {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "CompoundInferenceSystem", "metadata": {"name": "bad"},
        "spec": {
            "slo": {"latencyMilliseconds": 250, "accuracy": 0.9}, "demandRequestsPerSecond": 50,
            "tasks": [
                {"name": "detect", "variants": [{"name": "small", "accuracy": 0.9, "gpuMemoryGigabytes": 2},
                                                {"name": "large", "accuracy": 1.0, "gpuMemoryGigabytes": 4}]},
                {"name": "classify", "variants": [{"name": "resnet50", "accuracy": 1.0, "gpuMemoryGigabytes": 3}]},
            ],
            "edges": [{"source": "detect", "target": "classify", "factor": 2, "factorByVariant": {"large": 3}}],
            "profiles": [{"task": "detect", "variant": "small", "gpuProduct": "H100-80GB", "migProfile": "1g.10gb",
                          "batchSize": 1, "latencyMilliseconds": 5, "throughputRequestsPerSecond": 200}],
        },
    }


def pool() -> dict:
    return {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "AdapterPool", "metadata": {"name": "bad"},
        "spec": {
            "baseModel": {"name": "Qwen/Qwen2.5-7B-Instruct", "image": "vllm/vllm-openai:v0.8.5",
                          "maxModelLengthTokens": 32768, "weights": {"uri": "hf://Qwen/Qwen2.5-7B-Instruct",
                                                                     "digest": DIGEST}},
            "gpuProduct": "H100-80GB",
            "serviceBound": {"minServedFraction": 0.9},
            "adapters": [adapter("a"), adapter("b")],
        },
    }


def adapter(name: str) -> dict:
    return {"name": name, "rank": 16, "expectedRequestsPerSecond": 1.0,
            "weights": {"uri": f"s3://adapters/{name}", "digest": DIGEST}}


def variant(o):
    return o["spec"]["tasks"][0]["variants"][0]


# (case id, base object, mutation, text the API server's message must contain)
CORPUS = [
    # wrong types
    ("latency-is-a-string", system, lambda o: o["spec"]["slo"].update(latencyMilliseconds="fast"),
     "spec.slo.latencyMilliseconds"),
    ("demand-is-a-list", system, lambda o: o["spec"].update(demandRequestsPerSecond=[50]),
     "spec.demandRequestsPerSecond"),
    ("rank-is-a-float", pool, lambda o: o["spec"]["adapters"][0].update(rank=16.5), "spec.adapters[0].rank"),
    ("tasks-is-a-map", system, lambda o: o["spec"].update(tasks={"detect": {}}), "spec.tasks"),
    # out-of-range numbers
    ("latency-zero", system, lambda o: o["spec"]["slo"].update(latencyMilliseconds=0),
     "spec.slo.latencyMilliseconds"),
    ("latency-beyond-an-hour", system, lambda o: o["spec"]["slo"].update(latencyMilliseconds=3_600_001),
     "spec.slo.latencyMilliseconds"),
    ("negative-demand", system, lambda o: o["spec"].update(demandRequestsPerSecond=-1),
     "spec.demandRequestsPerSecond"),
    ("accuracy-slo-above-one", system, lambda o: o["spec"]["slo"].update(accuracy=1.5), "spec.slo.accuracy"),
    ("variant-accuracy-zero", system, lambda o: variant(o).update(accuracy=0),
     "spec.tasks[0].variants[0].accuracy"),
    ("gpu-memory-too-large", system, lambda o: variant(o).update(gpuMemoryGigabytes=2048),
     "spec.tasks[0].variants[0].gpuMemoryGigabytes"),
    ("edge-factor-zero", system, lambda o: o["spec"]["edges"][0].update(factor=0), "spec.edges[0].factor"),
    ("factor-by-variant-negative", system, lambda o: o["spec"]["edges"][0]["factorByVariant"].update(large=-3),
     "spec.edges[0].factorByVariant.large"),
    ("port-above-65535", system, lambda o: variant(o).update(port=70000), "spec.tasks[0].variants[0].port"),
    ("profile-batch-zero", system, lambda o: o["spec"]["profiles"][0].update(batchSize=0),
     "spec.profiles[0].batchSize"),
    ("mps-degree-above-48", system, lambda o: o["spec"]["profiles"][0].update(mpsDegree=49),
     "spec.profiles[0].mpsDegree"),
    ("adapter-rank-zero", pool, lambda o: o["spec"]["adapters"][0].update(rank=0), "spec.adapters[0].rank"),
    ("served-fraction-above-one", pool, lambda o: o["spec"]["serviceBound"].update(minServedFraction=1.2),
     "spec.serviceBound.minServedFraction"),
    ("max-model-length-too-short", pool, lambda o: o["spec"]["baseModel"].update(maxModelLengthTokens=100),
     "spec.baseModel.maxModelLengthTokens"),
    # non-finite numbers: JSON has no NaN or Infinity, so they come as strings (see also the 1e999 test below)
    ("demand-nan", system, lambda o: o["spec"].update(demandRequestsPerSecond="NaN"),
     "spec.demandRequestsPerSecond"),
    ("latency-infinity", system, lambda o: o["spec"]["slo"].update(latencyMilliseconds="Infinity"),
     "spec.slo.latencyMilliseconds"),
    ("adapter-rate-inf", pool, lambda o: o["spec"]["adapters"][0].update(expectedRequestsPerSecond=".inf"),
     "spec.adapters[0].expectedRequestsPerSecond"),
    # enums
    ("priority-unknown", system, lambda o: o["spec"].update(priority="speed"), "spec.priority"),
    ("percentile-p90", system, lambda o: o["spec"]["slo"].update(percentile="p90"), "spec.slo.percentile"),
    ("gpu-product-unknown", pool, lambda o: o["spec"].update(gpuProduct="V100-16GB"), "spec.gpuProduct"),
    # duplicate names (list-maps)
    ("duplicate-task", system, lambda o: o["spec"]["tasks"].append(copy.deepcopy(o["spec"]["tasks"][0])),
     "spec.tasks[2]"),
    ("duplicate-variant", system, lambda o: o["spec"]["tasks"][0]["variants"].append(dict(variant(o))),
     "spec.tasks[0].variants[2]"),
    ("duplicate-edge", system, lambda o: o["spec"]["edges"].append(dict(o["spec"]["edges"][0])),
     "spec.edges[1]"),
    ("duplicate-adapter", pool, lambda o: o["spec"]["adapters"].append(adapter("a")), "spec.adapters[2]"),
    # dangling edges and other cross-field rules (CEL)
    ("edge-from-unknown-task", system, lambda o: o["spec"]["edges"][0].update(source="ghost"), "spec.edges"),
    ("edge-to-unknown-task", system, lambda o: o["spec"]["edges"][0].update(target="ghost"), "spec.edges"),
    ("edge-to-itself", system, lambda o: o["spec"]["edges"][0].update(target="detect"), "spec.edges[0].target"),
    ("adapter-without-rate-or-demand-source", pool,
     lambda o: o["spec"]["adapters"][0].pop("expectedRequestsPerSecond"), "spec.adapters"),
    ("service-bound-empty", pool, lambda o: o["spec"].update(serviceBound={}), "spec.serviceBound"),
    # missing fields
    ("no-spec", system, lambda o: o.pop("spec"), "spec"),
    ("no-slo", system, lambda o: o["spec"].pop("slo"), "spec.slo"),
    ("no-demand", system, lambda o: o["spec"].pop("demandRequestsPerSecond"), "spec.demandRequestsPerSecond"),
    ("variant-without-gpu-memory", system, lambda o: variant(o).pop("gpuMemoryGigabytes"),
     "spec.tasks[0].variants[0].gpuMemoryGigabytes"),
    ("no-tasks", system, lambda o: o["spec"].update(tasks=[]), "spec.tasks"),
    ("adapter-without-digest", pool, lambda o: o["spec"]["adapters"][0]["weights"].pop("digest"),
     "spec.adapters[0].weights.digest"),
    # bad names and strings
    ("task-name-with-underscore", system, lambda o: o["spec"]["tasks"][1].update(name="car_classification"),
     "spec.tasks[1].name"),
    ("variant-name-upper-case", system, lambda o: variant(o).update(name="ResNet50"),
     "spec.tasks[0].variants[0].name"),
    ("task-name-64-characters", system, lambda o: o["spec"]["tasks"][1].update(name="t" * 64),
     "spec.tasks[1].name"),
    ("object-name-with-underscore", system, lambda o: o["metadata"].update(name="traffic_analysis"),
     "metadata.name"),
    ("object-name-64-characters", system, lambda o: o["metadata"].update(name="s" * 64), "metadata.name"),
    ("mig-profile-malformed", system, lambda o: o["spec"]["profiles"][0].update(migProfile="big"),
     "spec.profiles[0].migProfile"),
    ("digest-not-sha256", pool, lambda o: o["spec"]["adapters"][0]["weights"].update(digest="md5:abc"),
     "spec.adapters[0].weights.digest"),
    ("weights-uri-ftp", pool, lambda o: o["spec"]["baseModel"]["weights"].update(uri="ftp://models/qwen"),
     "spec.baseModel.weights.uri"),
    ("image-600-characters", system, lambda o: variant(o).update(image="r/" + "i" * 598),
     "spec.tasks[0].variants[0].image"),
    # oversized lists
    ("65-tasks", system, lambda o: o["spec"].update(tasks=[
        {"name": f"t{i}", "variants": [{"name": "v", "accuracy": 1, "gpuMemoryGigabytes": 1}]} for i in range(65)]),
     "spec.tasks"),
    ("65-server-args", system, lambda o: variant(o).update(args=["--x"] * 65), "spec.tasks[0].variants[0].args"),
    ("2001-adapters", pool, lambda o: o["spec"].update(adapters=[adapter(f"a{i}") for i in range(2001)]),
     "spec.adapters"),
    # unknown fields, rejected under fieldValidation=Strict
    ("unknown-spec-field", system, lambda o: o["spec"].update(replicas=3), 'unknown field "spec.replicas"'),
    ("snake-case-field", system, lambda o: o["spec"]["slo"].update(latency_ms=250),
     'unknown field "spec.slo.latency_ms"'),
    ("unknown-adapter-field", pool, lambda o: o["spec"]["adapters"][0].update(path="/x"),
     'unknown field "spec.adapters[0].path"'),
]


def create(custom, namespace, body, strict=True) -> tuple[int, dict]:
    """POST with dryRun=All; the HTTP status and the decoded answer (the object, or the API server's Status)."""
    api = custom.api_client
    # json.dumps writes inf as Infinity, which no JSON parser takes; 1e999 is valid JSON that overflows float64.
    raw = json.dumps(body).replace("Infinity", "1e999")
    query = "dryRun=All" + ("&fieldValidation=Strict" if strict else "")
    response = api.rest_client.pool_manager.request(
        "POST", f"{api.configuration.host}/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURALS[body['kind']]}"
                f"?{query}", body=raw.encode(), headers={"Content-Type": "application/json", "Accept": "application/json"})
    return response.status, json.loads(response.data)


def test_the_corpus_is_at_least_thirty_cases_and_its_base_objects_are_valid(custom, api_namespace):
    assert len(CORPUS) >= 30
    for base in (system, pool):
        status, answer = create(custom, api_namespace, base())
        assert status == 201, answer


@pytest.mark.parametrize("case,base,mutate,field", CORPUS, ids=[c[0] for c in CORPUS])
def test_a_malformed_object_is_rejected_naming_the_field(custom, api_namespace, case, base, mutate, field):
    body = base()
    mutate(body)
    status, answer = create(custom, api_namespace, body)
    assert status in (400, 422), answer
    assert field in answer["message"], answer["message"]


def test_a_number_beyond_float64_is_refused_before_validation_without_naming_the_field(custom, api_namespace):
    """The limit of the API server: 1e999 (valid JSON, the only way to send an infinity) fails decoding, so
    no field is named; kubectl refuses YAML's .inf/.nan itself ("json: unsupported value: +Inf"), and
    `tessera plan` rejects them naming the field (allow_inf_nan=False in the models)."""
    body = system()
    body["spec"]["slo"]["latencyMilliseconds"] = float("inf")
    status, answer = create(custom, api_namespace, body)
    assert status == 400
    assert "cannot unmarshal number 1e999" in answer["message"]


def test_without_strict_field_validation_an_unknown_field_is_dropped_silently(custom, api_namespace):
    """What a client that does not ask for strict validation gets: the object, minus the field."""
    body = system()
    body["spec"]["slo"]["latency_ms"] = 100
    status, created = create(custom, api_namespace, body, strict=False)
    assert status == 201, created
    assert created["spec"]["slo"] == {"latencyMilliseconds": 250, "accuracy": 0.9}
