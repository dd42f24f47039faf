"""Operator with many systems: apply -> Ready, event-loop stalls and memory at 5, 10 and 20 systems (issue 29).

One command: `nice .venv/bin/python -P bench/operator_many_systems.py [--before REF] [--edit-s 300]`
(about 20 minutes with --before). Each scenario starts the real test cluster (tests/cluster: etcd,
kube-apiserver, controller-manager, scheduler, KWOK), the MIG-manager stand-in with its configured
delays, fake H100 nodes and `tessera operator` as a subprocess, then applies N systems at once: copies
of traffic-analysis, social-media and ar-assistant in turn, each under its own name (the examples'
demand, unchanged). Scenarios: 5, 10 and 20 systems on 16 nodes x 8 GPUs, 20 systems on 100 nodes x 8.

Measured per scenario:
- seconds from apply to every system Ready, and less the stand-in's configured delays (3 s);
- the largest event-loop stall (the operator's tessera_event_loop_lag_max_seconds) and the stalls the
  stall watch logged with stacks (this tree's operator with --stall-report 0.03: every stall over 30 ms
  past the 50 ms probe; an older tree at its fixed 100 ms), kept in bench/results/ for where they are;
- memory as proportional set size (PSS, /proc/PID/smaps_rollup), sampled every 0.25 s: the operator
  process, each solve worker at its largest, and the sum of the operator and all its descendants (PSS
  counts pages a worker shares with its parent once, where summed RSS counts them in each); the
  operator's peak RSS (VmHWM) beside it. Each worker is capped by --solve-memory (default 2048 MB of
  address space), at most --solve-workers (default 2) at a time;
- with --edit-s S (after the 20 systems on 16 nodes are Ready): one edit every 2 s to one system's
  demand while one more system is applied; the seconds until that one is Ready (or "not Ready" after S).

With --distinct-demands each tree runs each scenario a second time with every copy's demand its example's less
i % for the i-th copy (labelled "demands distinct"): no two systems alike, so the planner solves every part (it
solves a part once for systems alike but for the name, planner/decompose.py), the honest figure for pools of
different systems.

With --before REF the same scenarios run, each right after this tree's, with the operator of git REF
(its package tree staged from `git archive` and put first on PYTHONPATH). Results:
bench/results/operator_many_systems.{json,md}, the memory plot operator_many_systems_memory.png and the
logged stalls operator_many_systems_stalls.txt.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "bench"))

from kubernetes import client, config  # noqa: E402

from cluster.binaries import bin_dir  # noqa: E402
from cluster.controlplane import ControlPlane, free_port  # noqa: E402
from cluster.gpu_nodes import create_gpu_nodes  # noqa: E402
from cluster.gpu_operator import install_cluster_policy  # noqa: E402
from cluster.kube import ensure_namespace, wait_crd_established, wait_for, wait_node_ready  # noqa: E402
from cluster.mig_manager_standin import MigManagerStandIn  # noqa: E402
from operator_apply_to_ready import (APPLY_S, CONFIGMAP_DELAY_S, EXAMPLES, PROPAGATION_S, peak_rss_mb,  # noqa: E402
                                     scrape, stop_all)

RESULTS = REPO / "bench" / "results"
NAMESPACE = "bench"
SCENARIOS = ((100, 20), (16, 20), (16, 10), (16, 5))
"""(nodes of 8 H100s, systems applied at once), the stall target first."""
EDITS_ON = (16, 20)
EDIT_PERIOD_S = 2.0
SAMPLE_S = 0.25
READY_TIMEOUT_S = 600
STALL_REPORT_S = 0.03
STALL_LINE = "event loop has not run"
STALLS_KEPT = 10
"""Stack logs kept per scenario in the results (the operator's log has them all)."""
CPU_WAIT = re.compile(r"event loop stalled (\d+) ms \((\d+) ms of it waiting for a CPU\)")
SOLVE_LINE = re.compile(r"solve of \d+ system\(s\) on \d+ GPUs: .*?\(([\d.]+) s\)(?: \[(.*?)\])?\n")
"""A solve as the operator logs it: its seconds, and (this tree) how the plan was made, building and HiGHS seconds."""
STAND_IN_DELAYS_S = CONFIGMAP_DELAY_S + APPLY_S + PROPAGATION_S
LATE = "late-arrival"
DISTINCT = ", demands distinct"
"""The label's ending of a run with --distinct-demands' systems."""


def system_documents(count: int, distinct: bool = False) -> list[dict]:
    """`count` systems: the three examples in turn, each copy named after its example and its number; `distinct`:
    the i-th copy's demand lowered by i % (no two alike, so the planner solves every part)."""
    examples = [yaml.safe_load((REPO / "examples" / f"{name}.yaml").read_text()) for name in EXAMPLES]
    documents = []
    for i in range(count):
        document = json.loads(json.dumps(examples[i % len(examples)]))
        document["metadata"]["name"] = f"{document['metadata']['name']}-{i}"
        if distinct:
            document["spec"]["demandRequestsPerSecond"] *= 1 - i / 100
        documents.append(document)
    return documents


def pss_mb(pid: int) -> float:
    """Proportional set size: each shared page counted once over the processes sharing it."""
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return 0.0
    found = re.search(r"^Pss:\s+(\d+) kB", text, re.MULTILINE)
    return int(found.group(1)) / 1024 if found else 0.0


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (solve workers, and a fork server's children if the planner uses one)."""
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            children = [int(p) for p in (task / "children").read_text().split()]
        except OSError:
            continue
        for child in children:
            found += [child, *descendants(child)]
    return found


def is_solve_worker(pid: int) -> bool:
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False
    return "resource_tracker" not in command


@dataclass
class MemorySampler:
    """The operator's and its descendants' memory, sampled in a thread until stopped."""
    pid: int
    operator_pss_mb: float = 0.0
    worker_pss_mb: float = 0.0
    summed_pss_mb: float = 0.0
    workers_seen: set[int] = field(default_factory=set)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> "MemorySampler":
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            own = pss_mb(self.pid)
            workers = {p: pss_mb(p) for p in descendants(self.pid) if is_solve_worker(p)}
            self.workers_seen |= set(workers)
            self.operator_pss_mb = max(self.operator_pss_mb, own)
            self.worker_pss_mb = max([self.worker_pss_mb, *workers.values()])
            self.summed_pss_mb = max(self.summed_pss_mb, own + sum(workers.values()))


def staged_tree(ref: str, folder: Path) -> Path:
    """The package tree of git `ref` (planner/ -> tessera/planner, ...) as setup.py maps it."""
    source = folder / "source"
    source.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(REPO), "archive", ref], check=True, capture_output=True).stdout
    tarfile.open(fileobj=io.BytesIO(archive)).extractall(source, filter="data")
    subprocess.run([sys.executable, "-P", "setup.py", "-q", "build_py", "--build-lib", str(folder / "tree")],
                   cwd=source, check=True, capture_output=True)
    return folder / "tree"


def all_ready(custom: client.CustomObjectsApi, names: set[str]) -> bool:
    items = custom.list_namespaced_custom_object("tessera.ai", "v1alpha1", NAMESPACE, "compoundinferencesystems")["items"]
    ready = {i["metadata"]["name"] for i in items
             if any(c["type"] == "Ready" and c["status"] == "True" for c in (i.get("status") or {}).get("conditions") or [])}
    return names <= ready


def wait_until(check: Callable[[], bool], timeout_s: float, operator: subprocess.Popen, what: str) -> None:
    started = time.monotonic()
    while not check():
        if operator.poll() is not None:
            raise RuntimeError(f"the operator exited while waiting for {what}")
        if time.monotonic() - started > timeout_s:
            raise TimeoutError(f"{what}: not after {timeout_s:.0f} s")
        time.sleep(0.2)


class Editor:
    """One merge patch of a system's demand every 2 s (alternating two values), in a thread."""

    def __init__(self, custom: client.CustomObjectsApi, name: str, demand: float) -> None:
        self.custom, self.name, self.demand = custom, name, demand
        self.edits = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> "Editor":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(EDIT_PERIOD_S):
            self.edits += 1
            patch = {"spec": {"demandRequestsPerSecond": self.demand + self.edits % 2}}
            self.custom.patch_namespaced_custom_object("tessera.ai", "v1alpha1", NAMESPACE, "compoundinferencesystems",
                                                       self.name, patch)


def edits_while_applying(custom, kubectl: Callable[..., None], operator: subprocess.Popen, edit_s: float) -> dict:
    """One system edited every 2 s while one more is applied: seconds until that one is Ready."""
    edited = system_documents(1)[0]
    late = system_documents(2)[1]
    late["metadata"]["name"] = LATE
    editor = Editor(custom, edited["metadata"]["name"], edited["spec"]["demandRequestsPerSecond"]).start()
    time.sleep(EDIT_PERIOD_S)
    try:
        started = time.monotonic()
        kubectl("apply", "-n", NAMESPACE, "-f", "-", stdin=yaml.safe_dump(late))
        try:
            wait_until(lambda: all_ready(custom, {LATE}), edit_s, operator, "the late system")
            seconds: float | None = time.monotonic() - started
        except TimeoutError:
            seconds = None
    finally:
        editor.stop()
    return {"late_ready_s": None if seconds is None else round(seconds, 1), "edits": editor.edits,
            "edit_window_s": edit_s}


def operator_command(kubeconfig: Path, metrics_port: int, tree: Path | None, time_limit_s: float | None = None
                     ) -> list[str]:
    command = [sys.executable, "-P", "-m", "tessera", "operator", "--kubeconfig", str(kubeconfig),
               "--namespace", NAMESPACE, "--mig-config-propagation", str(PROPAGATION_S), "--debounce", "0.3",
               "--metrics-port", str(metrics_port), "--health-port", str(free_port())]
    if time_limit_s is not None:
        command += ["--solve-time-limit", str(time_limit_s)]
    settings = ((tree / "tessera" / "operator") if tree else REPO / "operator") / "settings.py"
    if "stall_report_s" in settings.read_text():
        command += ["--stall-report", str(STALL_REPORT_S)]
    return command


def run(nodes: int, count: int, tree: Path | None, workdir: Path, edit_s: float, time_limit_s: float | None = None,
        distinct: bool = False) -> dict:
    bins = bin_dir()
    cluster = ControlPlane(workdir / "cluster", bins=bins).start()
    standin = operator = sampler = None
    try:
        api = config.new_client_from_config(config_file=str(cluster.kubeconfig))
        core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)

        def kubectl(*args: str, stdin: str | None = None) -> None:
            done = subprocess.run([str(bins / "kubectl"), "--kubeconfig", str(cluster.kubeconfig), *args], input=stdin,
                                  text=True, capture_output=True)
            if done.returncode:
                raise RuntimeError(f"kubectl {' '.join(args)}: {done.stderr.strip()}")

        kubectl("apply", "-f", str(REPO / "crds"))
        wait_crd_established(api, "compoundinferencesystems.tessera.ai")
        ensure_namespace(core, "gpu-operator")
        ensure_namespace(core, NAMESPACE)
        install_cluster_policy(api, "tessera-mig-parted-config")
        standin = MigManagerStandIn(core, configmap_delay=CONFIGMAP_DELAY_S, apply_seconds=APPLY_S).start()
        for name in create_gpu_nodes(core, nodes, "NVIDIA-H100-80GB-HBM3", gpus_per_node=8):
            wait_node_ready(core, name)
        wait_for(lambda: core.list_namespaced_service_account(NAMESPACE).items, 60, "default service account")
        metrics_port = free_port()
        env = {**os.environ, "PYTHONSAFEPATH": "1"}
        if tree is not None:
            env["PYTHONPATH"] = str(tree)
        log_path = workdir / "operator.log"
        with open(log_path, "wb") as log:
            operator = subprocess.Popen(operator_command(cluster.kubeconfig, metrics_port, tree, time_limit_s), stdout=log,
                                        stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=workdir, env=env)
        wait_for(lambda: b"reconciled" in log_path.read_bytes(), 120, "the operator's first reconcile")
        sampler = MemorySampler(operator.pid).start()
        documents = system_documents(count, distinct)
        started = time.monotonic()
        kubectl("apply", "-n", NAMESPACE, "-f", "-", stdin=yaml.safe_dump_all(documents))
        try:
            wait_until(lambda: all_ready(custom, {d["metadata"]["name"] for d in documents}), READY_TIMEOUT_S, operator,
                       f"{count} systems Ready")
            to_ready: float | None = time.monotonic() - started
        except TimeoutError:
            to_ready = None
        edits = edits_while_applying(custom, kubectl, operator, edit_s) if edit_s and to_ready else None
        sampler.stop()
        metrics = scrape(metrics_port)
        text = log_path.read_text(errors="replace")
        solves = [float(s) for s, _ in SOLVE_LINE.findall(text)]
        return {
            "nodes": nodes, "gpus_per_node": 8, "systems": count, "solve_time_limit_s": time_limit_s,
            "load_average": [round(x, 1) for x in os.getloadavg()],
            "apply_to_ready_s": None if to_ready is None else round(to_ready, 1),
            "apply_to_ready_less_stand_in_delays_s": None if to_ready is None else round(to_ready - STAND_IN_DELAYS_S, 1),
            "solve_s": solves,
            "solve_split": [split for _, split in SOLVE_LINE.findall(text) if split],
            "event_loop_lag_max_ms": round(1000 * (metrics.get("tessera_event_loop_lag_max_seconds") or 0), 1),
            "event_loop_lag_samples": metrics.get("tessera_event_loop_lag_seconds_count"),
            "stalls_logged": text.count(STALL_LINE),
            "own_stall_max_ms": own_stall_max_ms(text, "--stall-report" in operator_command(cluster.kubeconfig, 0, tree)),
            "stall_logs": stall_blocks(text),
            "operator_peak_pss_mb": round(sampler.operator_pss_mb, 1),
            "operator_peak_rss_mb": round(peak_rss_mb(operator.pid), 1),
            "worker_peak_pss_mb": round(sampler.worker_pss_mb, 1),
            "summed_peak_pss_mb": round(sampler.summed_pss_mb, 1),
            "workers_seen": len(sampler.workers_seen),
            "edits": edits,
        }
    finally:
        if sampler is not None:
            sampler.stop()
        stop_all(operator, standin, cluster)


def own_stall_max_ms(text: str, split_logged: bool) -> float | None:
    """The largest part of a logged stall that was not the loop's thread waiting for a CPU (the machine's load);
    None for an operator that does not log the split."""
    found = [max(0, int(lag) - int(waited)) for lag, waited in CPU_WAIT.findall(text)]
    return max(found, default=0) if split_logged else None


def stall_blocks(text: str) -> list[str]:
    """The stall watch's log entries (each: a line, then the threads' stacks up to the next log line)."""
    blocks, current = [], None
    for line in text.splitlines():
        if STALL_LINE in line:
            current = [line]
            blocks.append(current)
        elif current is not None and (line.startswith((" ", "--")) or not line.strip()):
            current.append(line)
        else:
            current = None
    return ["\n".join(b) for b in blocks]


ROWS = [
    ("apply -> all Ready", lambda r: f"{r['apply_to_ready_s']} s" if r["apply_to_ready_s"] else f"not in {READY_TIMEOUT_S} s"),
    ("less the stand-in's delays (3 s)", lambda r: f"{r['apply_to_ready_less_stand_in_delays_s']} s"
     if r["apply_to_ready_s"] else "-"),
    ("solves in the worker (as logged)", lambda r: ", ".join(f"{s:.1f}" for s in r["solve_s"]) + " s"),
    ("the solves' models built, HiGHS (as logged)", lambda r: "; ".join(r.get("solve_split") or []) or "not logged"),
    ("largest event-loop stall (target < 50 ms)", lambda r: f"{r['event_loop_lag_max_ms']:.0f} ms"),
    ("load average (1, 5, 15 min) at Ready", lambda r: ", ".join(str(x) for x in r.get("load_average") or []) or "-"),
    ("solve time limit", lambda r: f"{r['solve_time_limit_s']:g} s" if r.get("solve_time_limit_s") else "60 s (default)"),
    ("largest stall less its wait for a CPU (stalls over 30 ms)", lambda r: "not logged"
     if r.get("own_stall_max_ms") is None else f"{r['own_stall_max_ms']:.0f} ms"),
    ("stalls logged with stacks (this tree: over 30 ms; d9b08aa and older: over 100 ms)",
     lambda r: str(r["stalls_logged"])),
    ("operator peak PSS (target <= 200 MB)", lambda r: f"{r['operator_peak_pss_mb']:.0f} MB"),
    ("operator peak RSS (VmHWM)", lambda r: f"{r['operator_peak_rss_mb']:.0f} MB"),
    ("largest solve worker's peak PSS (cap --solve-memory 2048 MB)", lambda r: f"{r['worker_peak_pss_mb']:.0f} MB"),
    ("operator + workers, peak summed PSS", lambda r: f"{r['summed_peak_pss_mb']:.0f} MB"),
]


def markdown(results: list[dict]) -> str:
    lines = ["# Operator with many systems (issue 29)", ""]
    for nodes, count in SCENARIOS:
        pair = [r for r in results if r["nodes"] == nodes and r["systems"] == count]
        if not pair:
            continue
        labels = [r["operator"] for r in pair]
        lines += [f"## {count} systems on {nodes} nodes x 8 H100", "", "| measure | " + " | ".join(labels) + " |",
                  "| --- |" + " --- |" * len(pair)]
        lines += [f"| {name} | " + " | ".join(value(r) for r in pair) + " |" for name, value in ROWS]
        for r in pair:
            if r.get("edits"):
                e = r["edits"]
                waited = (f"Ready after {e['late_ready_s']} s" if e["late_ready_s"] is not None
                          else f"not Ready in {e['edit_window_s']:.0f} s")
                lines.append(f"| {r['operator']}: one more system applied while another is edited every 2 s "
                             f"({e['edits']} edits) | {waited} |")
        lines.append("")
    return "\n".join(lines)


def plot(results: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(7, 4.5))
    for label in dict.fromkeys(r["operator"] for r in results):
        mine = sorted((r for r in results if r["operator"] == label and r["nodes"] == 16), key=lambda r: r["systems"])
        counts = [r["systems"] for r in mine]
        axis.plot(counts, [r["operator_peak_pss_mb"] for r in mine], marker="o", label=f"{label}: operator")
        axis.plot(counts, [r["worker_peak_pss_mb"] for r in mine], marker="s", linestyle="--",
                  label=f"{label}: largest solve worker")
    axis.set_xlabel("systems applied at once (16 nodes x 8 H100)")
    axis.set_ylabel("peak PSS, MB")
    axis.set_xticks([count for nodes, count in SCENARIOS if nodes == 16])
    axis.grid(alpha=0.3)
    axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", help="git ref of an older operator, run right after this tree's in each scenario")
    parser.add_argument("--edit-s", type=float, default=300.0,
                        help="Seconds of edits while one more system is applied (after 20 systems on 16 nodes); 0: none.")
    parser.add_argument("--only", choices=[f"{n}x{c}" for n, c in SCENARIOS], action="append",
                        help="Run only these scenarios (NODESxSYSTEMS; repeatable).")
    parser.add_argument("--name", default="operator_many_systems", help="Results file name under bench/results.")
    parser.add_argument("--keep-logs", type=Path, help="Copy each operator's log into this folder.")
    parser.add_argument("--solve-time-limit", type=float,
                        help="The operators' --solve-time-limit (default: theirs, 60 s); the same for before and after.")
    parser.add_argument("--distinct-demands", action="store_true",
                        help="Also run each tree with every copy's demand distinct (labelled '..., demands "
                             "distinct'): no two systems alike, so no part of the planner's is solved once for several.")
    parser.add_argument("--add-to", action="store_true",
                        help="Keep the other scenarios' rows of the results file --name names (a rerun of one "
                             "scenario after a run was cut short); their logged stalls are not kept.")
    args = parser.parse_args()
    results = kept_rows(args.name, args.only or []) if args.add_to else []
    with tempfile.TemporaryDirectory(prefix="tessera-bench-many-") as folder:
        trees: dict[str, Path | None] = {"after": None}
        if args.before:
            trees[f"before ({args.before})"] = staged_tree(args.before, Path(folder) / "before")
        if args.distinct_demands:
            trees = {**trees, **{label + DISTINCT: tree for label, tree in trees.items()}}
        for nodes, count in SCENARIOS:
            if args.only and f"{nodes}x{count}" not in args.only:
                continue
            for label, tree in trees.items():
                edit_s = args.edit_s if (nodes, count) == EDITS_ON and label == "after" else 0.0
                print(f"{label}: {count} systems on {nodes} nodes", flush=True)
                workdir = Path(tempfile.mkdtemp(dir=folder))
                try:
                    result = {"operator": label, **run(nodes, count, tree, workdir, edit_s, args.solve_time_limit,
                                                        label.endswith(DISTINCT))}
                finally:
                    if args.keep_logs and (workdir / "operator.log").exists():
                        args.keep_logs.mkdir(parents=True, exist_ok=True)
                        shutil.copy(workdir / "operator.log",
                                    args.keep_logs / f"{re.sub(r'[^a-z0-9]+', '-', label)}-{nodes}x{count}.log")
                print({k: v for k, v in result.items() if k != "stall_logs"}, flush=True)
                results.append(result)
                write_results(results, args.name)  # after each scenario: a run cut short keeps what it measured
    print(markdown(results))


def kept_rows(name: str, rerun: list[str]) -> list[dict]:
    """The rows of an earlier run's results file, less the scenarios run again."""
    path = RESULTS / f"{name}.json"
    rows = json.loads(path.read_text()) if path.exists() else []
    return [{**row, "stall_logs": None} for row in rows if f"{row['nodes']}x{row['systems']}" not in rerun]


def write_results(results: list[dict], name: str) -> None:
    RESULTS.mkdir(exist_ok=True)
    stalls = "".join(f"== {r['operator']}: {r['systems']} systems on {r['nodes']} nodes, "
                     + (f"the first {STALLS_KEPT} of {len(r['stall_logs'])} ==\n" + "\n".join(r["stall_logs"][:STALLS_KEPT])
                        if r["stall_logs"] is not None else "kept from an earlier run (--add-to): its stalls are in git history ==")
                     + "\n" for r in results)
    (RESULTS / f"{name}_stalls.txt").write_text(stalls)
    (RESULTS / f"{name}.json").write_text(json.dumps([{k: v for k, v in r.items() if k != "stall_logs"} for r in results],
                                                     indent=2) + "\n")
    (RESULTS / f"{name}.md").write_text(markdown(results))
    plot(results, RESULTS / f"{name}_memory.png")


if __name__ == "__main__":
    main()
