"""The hostile-input corpus: malformed and absurd inputs on every input path of the command line.

Each case is a command line (after `tessera`), the files it reads (written
into the case's own folder, its working directory), the exit code expected
and the words its message must contain: the file (or option) and the field.
Classes: file-level (empty, binary, not UTF-8, too large, alias bombs, deep
nesting, bad YAML), schema (missing, wrong type, unknown, out of range,
non-finite, huge, duplicate, dangling, cyclic, exploding graphs), numerics
(coefficients that make a MILP meaningless), options, and the twin's
workloads, profiles and CSVs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import yaml

GPU = "H100-80GB"
MIG_PROFILES = ["1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]
SLICES = {"1g.10gb": 1, "1g.20gb": 1, "2g.20gb": 2, "3g.40gb": 3, "4g.40gb": 4, "7g.80gb": 7}
FAST = ["--time-limit", "5", "--levels", "4", "--gpus", "2"]

FileContent = str | bytes | Callable[[Path], None]


@dataclass
class Case:
    id: str
    argv: list[str]
    files: dict[str, FileContent] = field(default_factory=dict)
    says: tuple[str, ...] = ()
    code: int | tuple[int, ...] = 2  # several: an outcome another issue is retyping (infeasible: 1 today, 3 next)


# ---- spec documents (the field names live here only) -----------------------------------------

def spec() -> dict:
    """A valid CompoundInferenceSystem: detect -> classify, given profiles on every MIG profile."""
    return {
        "apiVersion": "tessera.ai/v1alpha1",
        "kind": "CompoundInferenceSystem",
        "metadata": {"name": "tiny"},
        "spec": {
            "slo": {"latencyMilliseconds": 100, "accuracy": 0.9},
            "demandRequestsPerSecond": 100,
            "tasks": [{"name": t, "variants": [{"name": f"{t}-v", "accuracy": 0.9, "gpuMemoryGigabytes": 2}]}
                      for t in ("detect", "classify")],
            "edges": [{"source": "detect", "target": "classify", "factor": 1.0}],
            "profiles": [
                {"task": t, "variant": f"{t}-v", "gpuProduct": GPU, "migProfile": p, "batchSize": 1,
                 "latencyMilliseconds": 10, "throughputRequestsPerSecond": 100 * SLICES[p]}
                for t in ("detect", "classify") for p in MIG_PROFILES
            ],
        },
    }


DELETE = object()


def _set(node, keys: list[str], value) -> None:
    *parents, last = keys
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node.setdefault(key, {})
    if isinstance(node, list):
        node[int(last)] = value
    elif value is DELETE:
        del node[last]
    else:
        node[last] = value


def spec_yaml(**changes) -> str:
    """The valid spec with changes: a dotted path (`slo.latencyMilliseconds`, `edges.0.factor`: inside `spec`;
    `kind`, `metadata.name`: from the top) and its new value; DELETE removes the field."""
    return changed_yaml(spec(), changes)


def pool() -> dict:
    """A valid AdapterPool: two adapters at expected rates on one base model."""
    weights = {"uri": "s3://adapters/a", "digest": "sha256:" + "0" * 64}
    return {
        "apiVersion": "tessera.ai/v1alpha1",
        "kind": "AdapterPool",
        "metadata": {"name": "tiny-pool"},
        "spec": {
            "baseModel": {"name": "Qwen/Qwen2.5-7B-Instruct", "image": "vllm/vllm-openai:v0.8.5",
                          "maxModelLengthTokens": 32768, "weights": weights},
            "gpuProduct": GPU,
            "serviceBound": {"minServedFraction": 0.9},
            "adapters": [{"name": n, "rank": 16, "expectedRequestsPerSecond": 0.5, "weights": weights}
                         for n in ("sales", "support")],
        },
    }


def pool_yaml(**changes) -> str:
    """The valid AdapterPool with changes, as `spec_yaml`."""
    return changed_yaml(pool(), changes)


def changed_yaml(out: dict, changes: dict) -> str:
    for path, value in changes.items():
        keys = path.split(".")
        if keys[0] not in ("apiVersion", "kind", "metadata", "spec"):
            keys = ["spec", *keys]
        _set(out, keys, value)
    return yaml.safe_dump(out, sort_keys=False)


def chain_spec(tasks: int) -> str:
    names = [f"t{i}" for i in range(tasks)]
    document = spec()
    document["spec"]["tasks"] = [{"name": n, "variants": [{"name": "v", "accuracy": 1, "gpuMemoryGigabytes": 1}]} for n in names]
    document["spec"]["edges"] = [{"source": a, "target": b} for a, b in zip(names, names[1:])]
    document["spec"]["profiles"] = []
    return yaml.safe_dump(document)


def wide_spec(tasks: int, variants: int) -> dict:
    """A schema-valid system of `tasks` x `variants`, no edges (each task its own path), every variant estimated
    from its figures (no profiles): its MILP grows with tasks x variants until it exceeds the solver's caps."""
    document = spec()
    document["metadata"]["name"] = f"wide-{tasks}x{variants}"
    document["spec"]["tasks"] = [
        {"name": f"t{t}", "variants": [
            {"name": f"v{v}", "accuracy": round(0.9 + 0.1 * (v + 1) / variants, 4), "gpuMemoryGigabytes": 4 + v,
             "gigaflopsPerRequest": 8.0 + 2 * v, "parametersMillions": 25.0 + 5 * v, "layers": 50 + v}
            for v in range(variants)]}
        for t in range(tasks)]
    document["spec"]["edges"] = []
    document["spec"]["profiles"] = []
    return document


def diamond_spec(layers: int) -> str:
    """Layers of two tasks, each feeding both of the next layer's: 2^layers paths from few tasks."""
    names = [[f"l{i}a", f"l{i}b"] for i in range(layers)]
    document = spec()
    document["spec"]["tasks"] = [{"name": n, "variants": [{"name": "v", "accuracy": 1, "gpuMemoryGigabytes": 1}]}
                                 for layer in names for n in layer]
    document["spec"]["edges"] = [{"source": a, "target": b} for i in range(layers - 1)
                                 for a in names[i] for b in names[i + 1]]
    document["spec"]["profiles"] = []
    return yaml.safe_dump(document)


def alias_bomb(levels: int = 9) -> str:
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def kind_alias_bomb() -> str:
    """An alias bomb where an error message would quote it: in `kind`."""
    return alias_bomb() + "apiVersion: tessera.ai/v1alpha1\nkind: *a8\nmetadata: {name: x}\nspec: {}\n"


def sparse(size: int) -> Callable[[Path], None]:
    def write(path: Path) -> None:
        with path.open("wb") as handle:
            handle.truncate(size)
    return write


def deep_flow(depth: int) -> str:
    return "[" * depth + "]" * depth


def deep_block(depth: int) -> str:
    return "".join("  " * i + f"k{i}:\n" for i in range(depth)) + "  " * depth + "v\n"


# ---- twin files ---------------------------------------------------------------------------------

def workload(**changes) -> str:
    document = {"model": "qwen", "max_loras": 8, "max_rank": 16, "duration_s": 60,
                "adapters": {"count": 16, "ranks": [8, 16], "rates": [0.1, 0.05]}}
    for key, value in changes.items():
        if value is DELETE:
            document.pop(key)
        else:
            document[key] = value
    return yaml.safe_dump(document, sort_keys=False)


QWEN = Path(__file__).resolve().parents[2] / "planner" / "twin" / "profiles" / "qwen2.5-7b-instruct.yaml"


def profile(**changes) -> str:
    document = yaml.safe_load(QWEN.read_text())
    for path, value in changes.items():
        keys = path.split(".")
        node = document
        for key in keys[:-1]:
            node = node[key]
        if value is DELETE:
            node.pop(keys[-1])
        else:
            node[keys[-1]] = value
    return yaml.safe_dump(document, sort_keys=False)


PARVA_HEADER = "Mig instance,Batch size,Workload Number,Throughput,Latency\n"
KV_HEADER = "model,max_loras,max_lora_rank,gpu_kv_cache_tokens\n"
RUNS_HEADER = ("status,throughput_tok_s,rate_counts,served_adapters,adapter_ranks,max_loras,max_lora_rank,"
               "total_prompts_sent,duration_s\n")


# ---- the corpus ---------------------------------------------------------------------------------

def plan_case(id: str, text: FileContent, *says: str, code: int = 2, extra: tuple[str, ...] = ()) -> Case:
    return Case(id, ["plan", "spec.yaml", *FAST, *extra], {"spec.yaml": text}, ("spec.yaml", *says), code)


def spec_cases() -> list[Case]:
    big_name = "n" * 100_000
    return [
        # file level
        plan_case("spec-empty", "", "no systems"),
        plan_case("spec-only-comments", "# nothing\n---\n# here\n", "no systems"),
        plan_case("spec-binary", b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) * 8, "binary"),
        plan_case("spec-latin1", "name: caf\xe9\n".encode("latin-1"), "UTF-8"),
        plan_case("spec-50mb", sparse(50 * 1024 * 1024), "over the limit"),
        plan_case("spec-alias-bomb", alias_bomb(), "aliases"),
        plan_case("spec-alias-bomb-in-kind", kind_alias_bomb(), "aliases"),
        plan_case("spec-merge-key-bomb", alias_bomb(4) + "".join(f"m{i}: {{<<: *a3}}\n" for i in range(40)), "aliases"),
        plan_case("spec-deep-flow", deep_flow(100_000), "nest"),
        plan_case("spec-deep-block", deep_block(500), "nested deeper"),
        plan_case("spec-deep-dash", "- " * 100_000 + "x\n", "nested deeper"),
        plan_case("spec-not-yaml", "spec: [unclosed\n  tasks: {\n", "not valid YAML"),
        plan_case("spec-python-tag", "!!python/object/apply:os.system ['echo pwned']\n", "not valid YAML"),
        plan_case("spec-scalar", "42\n", "expected a mapping"),
        plan_case("spec-list", "- a\n- b\n", "expected a mapping"),
        plan_case("spec-many-documents", "---\n".join([spec_yaml()] * 70), "over the limit"),
        plan_case("spec-bad-timestamp", "demandRequestsPerSecond: 2001-02-30\n", "not valid YAML"),
        # object shape
        plan_case("spec-wrong-kind", spec_yaml(kind="Pod"), "kind"),
        plan_case("spec-long-kind", spec_yaml(kind="K" * 200_000), "kind"),
        plan_case("spec-wrong-api-version", spec_yaml(apiVersion="v1"), "apiVersion"),
        plan_case("spec-metadata-scalar", spec_yaml(metadata="x"), "metadata.name"),
        plan_case("spec-metadata-name-number", spec_yaml(**{"metadata.name": 7}), "metadata.name"),
        plan_case("spec-spec-list", spec_yaml(spec=[1, 2]), "spec"),
        plan_case("spec-name-mismatch", spec_yaml(name="other"), "spec.name"),
        # fields
        plan_case("spec-missing-slo", spec_yaml(slo=DELETE), "spec.slo", "Field required"),
        plan_case("spec-missing-demand", spec_yaml(demandRequestsPerSecond=DELETE), "demandRequestsPerSecond"),
        plan_case("spec-demand-string", spec_yaml(demandRequestsPerSecond="lots"), "demandRequestsPerSecond"),
        plan_case("spec-demand-negative", spec_yaml(demandRequestsPerSecond=-5), "demandRequestsPerSecond"),
        plan_case("spec-demand-inf", spec_yaml(demandRequestsPerSecond=float("inf")), "demandRequestsPerSecond", "finite"),
        plan_case("spec-demand-nan", spec_yaml(demandRequestsPerSecond=float("nan")), "demandRequestsPerSecond", "finite"),
        plan_case("spec-demand-1e999", spec_yaml().replace("demandRequestsPerSecond: 100", "demandRequestsPerSecond: 1e999"),
                  "demandRequestsPerSecond", "finite"),
        plan_case("spec-demand-huge-int", spec_yaml().replace("demandRequestsPerSecond: 100", "demandRequestsPerSecond: " + "9" * 400),
                  "demandRequestsPerSecond"),
        plan_case("spec-demand-1e12", spec_yaml(demandRequestsPerSecond=1e12), "demandRequestsPerSecond"),
        plan_case("spec-demand-tiny", spec_yaml(demandRequestsPerSecond=1e-9), "demandRequestsPerSecond"),
        plan_case("spec-latency-inf", spec_yaml(**{"slo.latencyMilliseconds": float("inf")}), "latencyMilliseconds", "finite"),
        plan_case("spec-latency-zero", spec_yaml(**{"slo.latencyMilliseconds": 0}), "slo.latencyMilliseconds"),
        plan_case("spec-latency-1e300", spec_yaml(**{"slo.latencyMilliseconds": 1e300}), "latencyMilliseconds"),
        plan_case("spec-accuracy-above-one", spec_yaml(**{"slo.accuracy": 1.5}), "slo.accuracy"),
        plan_case("spec-percentile-p95", spec_yaml(**{"slo.percentile": "p95"}), "slo.percentile"),
        plan_case("spec-priority-bogus", spec_yaml(priority="speed"), "priority"),
        plan_case("spec-unknown-field", spec_yaml(replicas=3), "replicas"),
        plan_case("spec-variant-accuracy-inf", spec_yaml(**{"tasks.0.variants.0.accuracy": float("inf")}),
                  "tasks[0].variants[0].accuracy", "finite"),
        plan_case("spec-variant-memory-negative", spec_yaml(**{"tasks.0.variants.0.gpuMemoryGigabytes": -1}),
                  "tasks[0].variants[0].gpuMemoryGigabytes"),
        plan_case("spec-no-variants", spec_yaml(**{"tasks.0.variants": []}), "tasks[0].variants"),
        plan_case("spec-no-tasks", spec_yaml(tasks=[], edges=[], profiles=[]), "tasks"),
        plan_case("spec-duplicate-task", spec_yaml(**{"tasks.1.name": "detect"}), "duplicate task"),
        plan_case("spec-huge-task-name", spec_yaml(**{"tasks.0.name": big_name}), "spec.tasks[0].name"),
        plan_case("spec-task-name-not-dns", spec_yaml(**{"tasks.0.name": "Detect_Task"}), "spec.tasks[0].name"),
        plan_case("spec-dangling-edge", spec_yaml(**{"edges.0.target": "ghost"}), "edges[0].target", "ghost"),
        plan_case("spec-self-edge", spec_yaml(**{"edges.0.target": "detect"}), "edges[0]", "feeds itself"),
        plan_case("spec-cycle", spec_yaml(edges=[{"source": "detect", "target": "classify"},
                                                 {"source": "classify", "target": "detect"}]), "edges", "cycle"),
        plan_case("spec-edge-factor-zero", spec_yaml(**{"edges.0.factor": 0}), "edges[0].factor"),
        plan_case("spec-edge-factor-1e15", spec_yaml(**{"edges.0.factor": 1e15}), "edges[0].factor"),
        plan_case("spec-factor-by-variant-nan", spec_yaml(**{"edges.0.factorByVariant": {"detect-v": float("nan")}}),
                  "factorByVariant", "finite"),
        plan_case("spec-chain-1500", chain_spec(1500), "spec.tasks", "at most 64"),
        plan_case("spec-diamond-32", diamond_spec(32), "paths", "limit"),
        plan_case("spec-profile-unknown-variant", spec_yaml(**{"profiles.0.variant": "ghost"}), "profiles[0].variant"),
        plan_case("spec-profile-throughput-1e15", spec_yaml(**{"profiles.0.throughputRequestsPerSecond": 1e15}), "throughputRequestsPerSecond"),
        plan_case("spec-profile-latency-tiny", spec_yaml(**{"profiles.0.latencyMilliseconds": 1e-12}), "latencyMilliseconds"),
        plan_case("spec-profile-bad-mig", spec_yaml(**{"profiles.0.migProfile": "9g.999gb"}), "profiles[0].migProfile"),
        plan_case("spec-profile-batch-zero", spec_yaml(**{"profiles.0.batchSize": 0}), "profiles[0].batchSize"),
        # valid input that no plan satisfies: infeasible, not bad input
        Case("spec-slo-unreachable", ["plan", "spec.yaml", *FAST], {"spec.yaml": spec_yaml(**{"slo.latencyMilliseconds": 5})},
             ("latency SLO",), code=(1, 3)),
        Case("capacity-slo-unreachable", ["capacity", "spec.yaml", *FAST, "--features", "A+S+T,A+S+T"],
             {"spec.yaml": spec_yaml(**{"slo.latencyMilliseconds": 5})}, ("SLO unreachable",), code=0),
        Case("spec-pool-too-small", ["plan", "spec.yaml", *FAST[:-1], "1"],
             {"spec.yaml": spec_yaml(demandRequestsPerSecond=5000)}, ("demand served",), code=3),
    ]


def pool_cases() -> list[Case]:
    def place(id: str, text: FileContent, *says: str) -> Case:
        return Case(id, ["place", "pool.yaml", "--no-twin", "--baselines", ""], {"pool.yaml": text},
                    ("pool.yaml", *says))

    return [
        place("pool-alias-bomb", alias_bomb(), "aliases"),
        place("pool-huge", sparse(10 * 1024 * 1024), "over the limit"),
        place("pool-wrong-kind", pool_yaml(kind="CompoundInferenceSystem"), "kind", "AdapterPool"),
        place("pool-missing-service-bound", pool_yaml(serviceBound=DELETE), "spec.serviceBound", "Field required"),
        place("pool-missing-rank", pool_yaml(**{"adapters.1.rank": DELETE}), "spec.adapters[1].rank", "Field required"),
        place("pool-rank-zero", pool_yaml(**{"adapters.0.rank": 0}), "spec.adapters[0].rank"),
        place("pool-rank-huge", pool_yaml(**{"adapters.0.rank": 10**9}), "spec.adapters[0].rank"),
        place("pool-rate-nan", pool_yaml(**{"adapters.0.expectedRequestsPerSecond": float("nan")}),
              "expectedRequestsPerSecond", "finite"),
        place("pool-snake-case", pool_yaml(service_bound={"min_served_fraction": 0.9}), "service_bound"),
        place("pool-demand-source-only", pool_yaml(demandSource={"query": "sum by (adapter) (rate(x[5m]))"},
                                                   **{"adapters.0.expectedRequestsPerSecond": DELETE}),
              "spec.adapters[0].expectedRequestsPerSecond", "demandSource"),
        place("pool-prompt-lengths-other", pool_yaml(meanPromptTokens=4000), "spec.meanPromptTokens"),
    ]


def option_cases() -> list[Case]:
    good = {"spec.yaml": spec_yaml()}

    def opt(id: str, command: str, *args: str, says: tuple[str, ...]) -> Case:
        return Case(id, [command, "spec.yaml", *args], good, says)

    return [
        opt("opt-levels-million", "plan", "--levels", "1000000", says=("--levels", "1<=x<=100")),
        opt("opt-levels-zero", "plan", "--levels", "0", says=("--levels",)),
        opt("opt-levels-digits", "plan", "--levels", "9" * 5000, says=("--levels",)),
        opt("opt-gpus-zero", "plan", "--gpus", "0", says=("--gpus",)),
        opt("opt-gpus-1e30", "capacity", "--gpus", "1" + "0" * 30, says=("--gpus",)),
        opt("opt-headroom-nan", "plan", "--headroom", "nan", says=("--headroom", "finite")),
        opt("opt-headroom-inf", "plan", "--headroom", "inf", says=("--headroom", "finite")),
        opt("opt-headroom-negative", "capacity", "--headroom", "-1", says=("--headroom",)),
        opt("opt-time-limit-inf", "plan", "--time-limit", "inf", says=("--time-limit", "finite")),
        opt("opt-time-limit-zero", "plan", "--time-limit", "0", says=("--time-limit",)),
        opt("opt-features-bogus-long", "plan", "--features", "X" * 100_000, says=("--features", "unknown feature")),
        opt("opt-gpu-unknown", "plan", "--gpu", "H9000", says=("--gpu",)),
        opt("opt-simulate-duration-year", "simulate", "--duration", "31536000", says=("--duration",)),
        opt("opt-simulate-spread-nan", "simulate", "--spread", "nan", says=("--spread", "finite")),
        opt("opt-simulate-seed-negative", "simulate", "--seed", "-1", says=("--seed",)),
        Case("opt-simulate-trace-nan", ["simulate", "spec.yaml", *FAST, "--trace", "t.csv"],
             {**good, "t.csv": "time_s,rate\n0,1\n1,nan\n"}, ("--trace", "t.csv:3", "finite")),
        Case("opt-simulate-trace-span", ["simulate", "spec.yaml", *FAST, "--trace", "t.csv"],
             {**good, "t.csv": "time_s,rate\n0,1\n1e300,1\n"}, ("--trace", "t.csv:3", "limit")),
        Case("opt-simulate-requests-over-limit", ["simulate", "spec.yaml", *FAST, "--duration", "86400"],
             {"spec.yaml": spec_yaml(demandRequestsPerSecond=1000)}, ("--duration", "limit")),
        opt("opt-output-bogus", "plan", "--output", "pdf", says=("--output",)),
        Case("opt-measured-missing", ["plan", "spec.yaml", "--measured", "nowhere"], good, ("--measured",)),
        Case("opt-file-missing", ["plan", "missing.yaml"], {}, ("missing.yaml",)),
        Case("opt-file-is-dir", ["plan", "."], {}, ("'.'", "directory")),
        Case("opt-too-many-files", ["plan", *["spec.yaml"] * 65], good, ("FILES", "limit")),
        Case("opt-same-system-twice", ["plan", "spec.yaml", "spec.yaml", *FAST], good, ("FILES", "repeat")),
        Case("opt-twin-seed-negative", ["twin", "run", "w.yaml", "--seed", "-1"], {"w.yaml": workload()}, ("--seed",)),
        Case("opt-twin-seed-huge", ["twin", "run", "w.yaml", "--seed", "9" * 40], {"w.yaml": workload()}, ("--seed",)),
        Case("opt-twin-validate-workers-million", ["twin", "validate", "--workers", "1000000"], {}, ("--workers",)),
        Case("opt-twin-validate-seeds-zero", ["twin", "validate", "--seeds", "0"], {}, ("--seeds",)),
        Case("opt-twin-sweep-configs-zero", ["twin", "sweep", "--configs", "0"], {}, ("--configs",)),
        Case("opt-twin-reseed-band-nan", ["twin", "reseed", "--band", "nan"], {}, ("--band", "finite")),
        Case("opt-twin-calibrate-max-rank-zero", ["twin", "calibrate", "--max-rank", "0", "--out", "p.yaml"], {},
             ("--max-rank",)),
        Case("opt-twin-predict-runs-seeds-huge", ["twin", "predict-runs", "--seeds", "100000"], {}, ("--seeds",)),
    ]


def twin_cases() -> list[Case]:
    def run(id: str, text: FileContent, *says: str, command: str = "run", extra: tuple[str, ...] = (),
            files: dict | None = None) -> Case:
        return Case(id, ["twin", command, "w.yaml", *extra], {"w.yaml": text, **(files or {})}, ("w.yaml", *says))

    return [
        run("twin-empty", "", "expected a mapping"),
        run("twin-binary", bytes(range(256)) * 4, "binary"),
        run("twin-alias-bomb", alias_bomb(), "aliases"),
        run("twin-deep", deep_flow(100_000), "nest"),
        run("twin-huge", sparse(10 * 1024 * 1024), "over the limit"),
        run("twin-list", "- 1\n- 2\n", "expected a mapping"),
        run("twin-missing-adapters", workload(adapters=DELETE), "adapters", "Field required"),
        run("twin-missing-max-loras", workload(max_loras=DELETE), "max_loras"),
        run("twin-adapters-string", workload(adapters="many"), "adapters"),
        run("twin-unknown-key", workload(max_lora=8), "max_lora"),
        run("twin-negative-rate", workload(adapters=[{"rank": 8, "rate": -1}]), "adapters", "[0].rate"),
        run("twin-rate-nan", workload(adapters=[{"rank": 8, "rate": float("nan")}]), "adapters", "finite"),
        run("twin-rate-inf-cycle", workload(adapters={"count": 4, "ranks": [8], "rates": [float("inf")]}),
            "adapters", "finite"),
        run("twin-rank-zero", workload(adapters=[{"rank": 0, "rate": 1}]), "adapters", "[0].rank"),
        run("twin-rank-million", workload(adapters={"count": 4, "ranks": [10**6], "rates": [1]}), "adapters", "ranks"),
        run("twin-count-billion", workload(adapters={"count": 10**9, "ranks": [8], "rates": [1]}), "adapters", "count"),
        run("twin-all-rates-zero", workload(adapters={"count": 4, "ranks": [8], "rates": [0]}), "adapters", "rate"),
        run("twin-duration-year", workload(duration_s=365 * 86400), "duration_s"),
        run("twin-duration-negative", workload(duration_s=-5), "duration_s"),
        run("twin-duration-zero", workload(duration_s=0), "duration_s"),
        run("twin-arrivals-over-limit", workload(duration_s=86400, adapters={"count": 100, "ranks": [8], "rates": [10]}),
            "adapters", "expected arrivals", "limit"),
        run("twin-n-arrivals-trillion", workload(n_arrivals=10**12), "n_arrivals"),
        run("twin-max-loras-zero", workload(max_loras=0), "max_loras"),
        run("twin-max-loras-huge", workload(max_loras=10**9), "max_loras"),
        run("twin-max-rank-below-ranks", workload(max_rank=8), "max_rank"),
        run("twin-mean-input-negative", workload(mean_input=-3), "mean_input"),
        run("twin-outstanding-cap-zero", workload(outstanding_cap=0), "outstanding_cap"),
        run("twin-max-num-seqs-zero", workload(max_num_seqs=0), "max_num_seqs"),
        run("twin-model-unknown", workload(model="gpt-17"), "model", "unknown profile"),
        run("twin-model-missing-profile", workload(model="nowhere.yaml"), "nowhere.yaml", "cannot be read"),
        Case("twin-json-out-no-folder", ["twin", "run", "w.yaml", "--json-out", "nowhere/x.json"],
             {"w.yaml": workload()}, ("--json-out", "nowhere")),
        Case("twin-png-is-a-folder", ["twin", "run", "w.yaml", "--png", "."], {"w.yaml": workload()}, ("--png",)),
        run("twin-predict-negative-rate", workload(adapters=[{"rank": 8, "rate": -1}]), "adapters", "[0].rate",
            command="predict"),
        run("twin-predict-hour-over-limit", workload(duration_s=1, adapters={"count": 100, "ranks": [8], "rates": [10]}),
            "--twin", "limit", command="predict", extra=("--twin",)),
        # profile files, named by a workload's model
        run("profile-missing-step", workload(model="p.yaml"), "p.yaml", "step", files={"p.yaml": profile(step=DELETE)}),
        run("profile-zero-step-time", workload(model="p.yaml"), "p.yaml", "step.a_ms",
            files={"p.yaml": profile(**{"step.a_ms": 0})}),
        run("profile-negative-load", workload(model="p.yaml"), "p.yaml", "load_ms",
            files={"p.yaml": profile(load_ms={8: -3.0})}),
        run("profile-memory-nan", workload(model="p.yaml"), "p.yaml", "memory", "finite",
            files={"p.yaml": profile(**{"memory.c0": float("nan")})}),
        run("profile-block-size-zero", workload(model="p.yaml"), "p.yaml", "block_size",
            files={"p.yaml": profile(block_size=0)}),
        run("profile-scalar", workload(model="p.yaml"), "p.yaml", "expected a profile mapping", files={"p.yaml": "7\n"}),
        run("profile-alias-bomb", workload(model="p.yaml"), "p.yaml", "aliases", files={"p.yaml": alias_bomb()}),
    ]


def csv_cases() -> list[Case]:
    def measured(id: str, text: FileContent, *says: str) -> Case:
        return Case(id, ["plan", "spec.yaml", *FAST, "--measured", "m"],
                    {"spec.yaml": spec_yaml(), "m/resnet.csv": text}, ("resnet.csv", *says))

    def kv(id: str, text: FileContent, *says: str) -> Case:
        return Case(id, ["twin", "fit-memory", "kv.csv", "--model", "qwen"], {"kv.csv": text}, ("kv.csv", *says))

    def runs(id: str, text: FileContent, *says: str) -> Case:
        return Case(id, ["twin", "validate", "--runs-csv", "runs.csv", "--seeds", "1", "--limit", "1"],
                    {"runs.csv": text}, ("runs.csv", *says))

    return [
        measured("csv-measured-bad-header", "a,b,c\n1,2,3\n", "header"),
        measured("csv-measured-throughput-nan", PARVA_HEADER + "1,1,1,nan,0.01\n", "Throughput", "finite"),
        measured("csv-measured-latency-inf", PARVA_HEADER + "1,1,1,50,inf\n", "Latency", "finite"),
        measured("csv-measured-slices-nine", PARVA_HEADER + "9,1,1,50,0.01\n", "Mig instance"),
        measured("csv-measured-batch-zero", PARVA_HEADER + "1,0,1,50,0.01\n", "Batch size"),
        measured("csv-measured-text-cell", PARVA_HEADER + "1,one,1,50,0.01\n", "Batch size"),
        measured("csv-measured-extra-cells", PARVA_HEADER + "1,1,1,50,0.01,7,8\n", "more cells"),
        measured("csv-measured-binary", b"\x00\x01\x02" * 100, "binary"),
        measured("csv-measured-huge", sparse(64 * 1024 * 1024), "over the limit"),
        measured("csv-measured-throughput-1e12", PARVA_HEADER + "1,1,1,1e12,0.01\n", "Throughput"),
        Case("csv-measured-empty-dir", ["plan", "spec.yaml", *FAST, "--measured", "m"],
             {"spec.yaml": spec_yaml(), "m/readme.txt": "no csv here\n"}, ("m", "no *.csv")),
        kv("csv-kv-missing-columns", "model,max_loras\nqwen,8\n", "header", "gpu_kv_cache_tokens"),
        kv("csv-kv-negative-tokens", KV_HEADER + "qwen,8,16,-5\n", "gpu_kv_cache_tokens"),
        kv("csv-kv-text-rank", KV_HEADER + "qwen,8,big,5\n", "max_lora_rank"),
        kv("csv-kv-nan", KV_HEADER + "qwen,8,16,nan\n", "gpu_kv_cache_tokens", "finite"),
        runs("csv-runs-missing-columns", "status,throughput_tok_s\nok,5\n", "header"),
        runs("csv-runs-bad-rate-counts", RUNS_HEADER + "ok,5,1.0y3,4,8 16,8,16,100,3600\n", "runs.csv:2"),
        runs("csv-runs-huge-rank", RUNS_HEADER + "ok,5,1.0x3,4,99999,8,16,100,3600\n", "adapter_ranks"),
        runs("csv-runs-arrivals-billion", RUNS_HEADER + "ok,5,1.0x3,4,8,8,16,1000000000,3600\n", "total_prompts_sent"),
    ]


def hot_pool(adapters: int, rate: float) -> str:
    """An AdapterPool of many adapters at one rate (each with its own weights: no YAML aliases)."""
    document = pool()
    template = document["spec"]["adapters"][0]
    document["spec"]["adapters"] = [{**template, "name": f"a{i}", "expectedRequestsPerSecond": rate,
                                     "weights": dict(template["weights"])} for i in range(adapters)]
    return yaml.safe_dump(document, sort_keys=False)


def placement_cases() -> list[Case]:
    """`tessera place` past the file's schema: ranks vLLM refuses, rates the twin check cannot simulate,
    idle adapters, twin profiles, earlier placements."""
    def place(id: str, text: str, *says: str, code: int = 2, extra: tuple[str, ...] = (),
              files: dict | None = None) -> Case:
        return Case(id, ["place", "pool.yaml", "--baselines", "", *extra], {"pool.yaml": text, **(files or {})},
                    says, code)

    rates = "adapters.{}.expectedRequestsPerSecond".format
    previous = {"model": "qwen2.5-7b-instruct", "placement": {"strategy": "tessera", "servers": [
        {"index": 0, "adapters": ["sales", "support"], "max_loras": 2, "max_lora_rank": 17, "rate_rps": 1.0}]}}

    def changed(report: dict, **server: object) -> dict:
        """The report with its one server's fields changed."""
        return {**report, "placement": {"strategy": "tessera", "servers": [{**report["placement"]["servers"][0], **server}]}}

    return [
        place("place-rank-between-vllm-ranks", pool_yaml(**{"adapters.0.rank": 17, "adapters.1.rank": 9}),
              '"max_lora_rank": 32', code=0, extra=("--no-twin", "--output", "json")),
        place("place-rate-top-of-range", pool_yaml(**{rates(0): 1e7}),
              "pool.yaml", "spec.adapters[0].expectedRequestsPerSecond", "twin's limit", "--no-twin"),
        place("place-rates-stacked-by-a-baseline", pool_yaml(**{rates(0): 500, rates(1): 400}),
              "pool.yaml", "spec.adapters[0].expectedRequestsPerSecond", "maxbase", "--baselines", code=2,
              extra=("--baselines", "maxbase")),
        place("place-rate-top-without-twin", pool_yaml(**{rates(0): 1e7}), "tessera", code=3, extra=("--no-twin",)),
        place("place-2000-adapters-at-top-rate-without-twin", hot_pool(2000, 1e7), "lower bound", code=3,
              extra=("--no-twin", "--baselines", "maxbase,maxbase*,dlora,random")),
        place("place-2000-adapters-at-top-rate", hot_pool(2000, 1e7), "spec.adapters[0].expectedRequestsPerSecond",
              extra=("--baselines", "maxbase,maxbase*,dlora,random")),
        place("place-rates-zero", pool_yaml(**{rates(0): 0, rates(1): 0}), "pass", code=0),
        place("place-twin-profile-unknown", pool_yaml(**{"baseModel.twinProfile": "gpt-17"}),
              "pool.yaml", "spec.baseModel.twinProfile", "gpt-17"),
        place("place-twin-profile-broken", pool_yaml(**{"baseModel.twinProfile": "p.yaml"}),
              "pool.yaml", "spec.baseModel.twinProfile", "p.yaml", "step", files={"p.yaml": profile(step=DELETE)}),
        place("place-twin-profile-without-predictors", pool_yaml(**{"baseModel.twinProfile": "p.yaml"}),
              "pool.yaml", "spec.baseModel.twinProfile", "no trained predictors",
              files={"p.yaml": profile(model="mistral-7b")}),
        place("place-previous-rank-not-vllm", pool_yaml(), "previous.json", "placement.servers[0].max_lora_rank",
              "8, 16, 32", extra=("--no-twin", "--previous", "previous.json"),
              files={"previous.json": json.dumps(previous)}),
        place("opt-place-seed-negative", pool_yaml(), "--seed", extra=("--seed", "-5")),
        place("opt-place-workers-million", pool_yaml(), "--workers", "1<=x<=64", extra=("--workers", "1000000")),
        place("opt-place-baselines-long", pool_yaml(), "--baselines", "unknown baselines",
              extra=("--baselines", "X" * 100_000)),
        place("place-previous-slots-zero", pool_yaml(), "previous.json", "placement.servers[0].max_loras",
              extra=("--no-twin", "--previous", "previous.json"),
              files={"previous.json": json.dumps(changed(previous, max_loras=0, max_lora_rank=16))}),
        place("place-previous-adapter-twice", pool_yaml(), "previous.json", "on two servers",
              extra=("--no-twin", "--previous", "previous.json"),
              files={"previous.json": json.dumps({**previous, "placement": {"strategy": "tessera", "servers": [
                  dict(server, max_lora_rank=16, index=i) for i, server in enumerate(previous["placement"]["servers"] * 2)]}})}),
        place("place-previous-list", pool_yaml(), "previous.json", "a mapping",
              extra=("--no-twin", "--previous", "previous.json"), files={"previous.json": "[1, 2]"}),
        Case("twin-max-rank-not-vllm", ["twin", "run", "w.yaml"],
             {"w.yaml": workload(max_rank=17, adapters={"count": 4, "ranks": [8], "rates": [1]})},
             ("w.yaml", "max_rank", "8, 16, 32, 64, 128, 256, 320, 512")),
        Case("capacity-demand-zero", ["capacity", "spec.yaml", *FAST, "--features", "A+S+T"],
             {"spec.yaml": spec_yaml(demandRequestsPerSecond=0)}, ("spec.yaml", "spec.demandRequestsPerSecond")),
    ]


def trace_cases() -> list[Case]:
    def trace(id: str, text: FileContent, *says: str, code: int = 2) -> Case:
        return Case(id, ["simulate", "spec.yaml", *FAST, "--trace", "t.csv", "--png", "s.png"],
                    {"spec.yaml": spec_yaml(), "t.csv": text}, says if code != 2 else ("--trace", "t.csv", *says), code)

    return [
        trace("trace-huge-finite-rates", "time_s,rate\n0,1e308\n1,1e308\n2,3e307\n3,1\n", "Trace t: 3 s", code=0),
        trace("trace-binary", b"time_s,rate\n\x00\x01\x02" * 100, "binary"),
        trace("trace-latin1", "time_s,rate\n0,1\n1,caf\xe9\n".encode("latin-1"), "UTF-8"),
        trace("trace-huge", sparse(8 * 1024 * 1024), "over the limit"),
        trace("trace-rows-over-limit", "time_s,rate\n" + "".join(f"{i / 10},1\n" for i in range(100_001)), "100000 rows"),
        trace("trace-header", "when,how_much\n0,1\n1,1\n", "header", "time_s,rate"),
        trace("trace-idle", "time_s,rate\n0,0\n5,0\n10,7\n", "every rate is 0"),
        trace("trace-text-rate", "time_s,rate\n0,1\n1,lots\n", "t.csv:3", "two numbers"),
        trace("trace-one-sample", "time_s,rate\n0,1\n", "two samples"),
        Case("trace-p95-zero", ["simulate", "spec.yaml", *FAST, "--trace", "t.csv", "--plan-for", "p95", "--png", "s.png"],
             {"spec.yaml": spec_yaml(), "t.csv": "time_s,rate\n" + "".join(f"{i},0\n" for i in range(100)) + "100,1000\n101,0\n"},
             ("--plan-for", "p95 rate of 0")),
        Case("simulate-demand-zero", ["simulate", "spec.yaml", *FAST, "--trace", "constant", "--duration", "10",
                                      "--png", "s.png"], {"spec.yaml": spec_yaml(demandRequestsPerSecond=0)},
             ("processes busy 0.0%", "Not simulated"), code=0),
    ]


PROFILES_HEADER = ("variant,image,gpuProduct,migProfile,mpsDegree,batchSize,latencyP50Milliseconds,"
                   "latencyP99Milliseconds,throughputRequestsPerSecond\n")
GOOD_PROFILE_ROW = "resnet50,,H100-80GB,1g.10gb,1,1,1,2,100\n"
# Nothing listens on the discard port of the loopback: a cluster that cannot be reached.
UNREACHABLE_KUBECONFIG = yaml.safe_dump({
    "apiVersion": "v1", "kind": "Config", "current-context": "c",
    "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:9", "insecure-skip-tls-verify": True}}],
    "users": [{"name": "u", "user": {"token": "t"}}], "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]})


def profiles_cases() -> list[Case]:
    def imported(id: str, text: FileContent, *says: str) -> Case:
        return Case(id, ["profiles", "import", "p.csv", "--kubeconfig", "kubeconfig"],
                    {"p.csv": text, "kubeconfig": UNREACHABLE_KUBECONFIG}, ("p.csv", *says))

    def exported(id: str, text: FileContent, *says: str) -> Case:
        return Case(id, ["profiles", "export", "--from-file", "cm.yaml"], {"cm.yaml": text}, ("cm.yaml", *says))

    unreachable = ("cannot reach the cluster of kubeconfig", "Connection refused")
    return [
        imported("profiles-import-unknown-gpu", PROFILES_HEADER + GOOD_PROFILE_ROW + "resnet50,,H9000,1g.10gb,1,1,1,2,100\n",
                 "p.csv:3", "gpuProduct", "H9000"),
        imported("profiles-import-unknown-mig", PROFILES_HEADER + "resnet50,,H100-80GB,9g.99gb,1,1,1,2,100\n",
                 "p.csv:2", "migProfile", "9g.99gb"),
        imported("profiles-import-p50-above-p99", PROFILES_HEADER + "resnet50,,H100-80GB,1g.10gb,1,1,3,2,100\n",
                 "p.csv:2", "latencyP99Milliseconds"),
        imported("profiles-import-throughput-nan", PROFILES_HEADER + "resnet50,,H100-80GB,1g.10gb,1,1,1,2,nan\n",
                 "p.csv:2", "throughputRequestsPerSecond"),
        imported("profiles-import-variant-not-a-label", PROFILES_HEADER + "Caf\u00e9_Net,,H100-80GB,1g.10gb,1,1,1,2,100\n",
                 "p.csv:2", "variant"),
        imported("profiles-import-binary", bytes(range(256)) * 4, "binary"),
        imported("profiles-import-missing-column", "variant,gpuProduct\nresnet50,H100-80GB\n", "header"),
        imported("profiles-import-too-many-batches", PROFILES_HEADER + "".join(
            f"resnet50,,H100-80GB,1g.10gb,1,{b},1,2,100\n" for b in range(1, 40)), "batch sizes"),
        Case("profiles-import-unreachable-cluster", ["profiles", "import", "p.csv", "--kubeconfig", "kubeconfig"],
             {"p.csv": PROFILES_HEADER + GOOD_PROFILE_ROW, "kubeconfig": UNREACHABLE_KUBECONFIG}, unreachable, code=1),
        Case("profiles-export-unreachable-cluster", ["profiles", "export", "--kubeconfig", "kubeconfig"],
             {"kubeconfig": UNREACHABLE_KUBECONFIG}, unreachable, code=1),
        Case("profiles-kubeconfig-not-yaml", ["profiles", "export", "--kubeconfig", "kc"], {"kc": "{{{\n"},
             ("kc", "not valid YAML")),
        Case("profiles-kubeconfig-binary", ["profiles", "import", "p.csv", "--kubeconfig", "kc"],
             {"p.csv": PROFILES_HEADER + GOOD_PROFILE_ROW, "kc": b"\x00\xff" * 300}, ("kc", "binary")),
        Case("profiles-kubeconfig-list", ["profiles", "export", "--kubeconfig", "kc"], {"kc": "- 1\n"},
             ("kc", "expected a kubeconfig")),
        Case("profiles-kubeconfig-without-context", ["profiles", "export", "--kubeconfig", "kc"],
             {"kc": "apiVersion: v1\nkind: Config\n"}, ("kc", "not a usable kubeconfig", "current-context")),
        exported("profiles-export-list-document", "- a\n- b\n", "expected a Kubernetes object or List"),
        exported("profiles-export-items-mapping", "kind: List\nitems: {a: 1}\n", "items", "expected a list"),
        exported("profiles-export-odd-items", "kind: List\nitems: [7, [1], {kind: ConfigMap, metadata: [x]}]\n",
                 "no tessera profiles ConfigMap"),
        exported("profiles-export-alias-bomb", alias_bomb(), "aliases"),
        exported("profiles-export-binary", b"\x7fELF" + bytes(range(256)), "binary"),
        exported("profiles-export-bad-yaml", "kind: [unclosed\n", "not valid YAML"),
        exported("profiles-export-data-list", yaml.safe_dump({"kind": "ConfigMap", "metadata": {
            "name": "p", "labels": {"tessera.ai/component": "profiles"}}, "data": [1, 2]}), "data", "mapping"),
    ]


def frontend_config_cases() -> list[Case]:
    """`tessera frontend-config SYSTEM PLAN --url`: the plan file and the URL template."""
    url = "http://{system}-{task}:8000/v2/models/{variant}/infer"

    def config(id: str, plan: FileContent, *says: str, template: str = url) -> Case:
        return Case(id, ["frontend-config", "spec.yaml", "plan.yaml", "--url", template],
                    {"spec.yaml": spec_yaml(), "plan.yaml": plan}, says)

    return [
        config("frontend-plan-alias-bomb", alias_bomb(), "plan.yaml", "aliases"),
        config("frontend-plan-binary", bytes(range(256)) * 4, "plan.yaml", "binary"),
        config("frontend-plan-huge", sparse(40 * 1024 * 1024), "plan.yaml", "over the limit"),
        config("frontend-plan-list", "- 1\n", "plan.yaml", "valid dictionary"),
        config("frontend-plan-not-a-plan", "gpu: H100-80GB\n", "plan.yaml", "pool_gpus", "Field required"),
        config("frontend-url-attribute", "{}", "--url", "{system.__class__}", template="http://{system.__class__}/"),
        config("frontend-url-padding", "{}", "--url", "{task:>99999999}", template="http://{task:>99999999}/"),
        config("frontend-url-unknown", "{}", "--url", "{host}", template="http://{host}/"),
        Case("frontend-hop-nan", ["frontend-config", "spec.yaml", "plan.yaml", "--url", url, "--hop-ms", "nan"],
             {"spec.yaml": spec_yaml(), "plan.yaml": "{}"}, ("--hop-ms", "finite")),
    ]


def corpus() -> list[Case]:
    return (spec_cases() + pool_cases() + option_cases() + twin_cases() + csv_cases() + placement_cases()
            + trace_cases() + profiles_cases() + frontend_config_cases())
