"""The operator's configuration: what `tessera operator` takes on its command line."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from tessera.operator.demand.settings import DemandSettings
from tessera.planner.solve import PlannerOptions


class OperatorSettings(BaseModel):
    namespaces: list[str] = Field(default_factory=list, description="Namespaces to watch; empty: all.")
    node_selector: dict[str, str] = Field(
        default_factory=dict, description="Only nodes with these labels form pools (recommend a taint as well).")
    pool_namespaces: dict[str, str] = Field(
        default_factory=dict,
        description="GPU pool (its nvidia.com/gpu.product) -> a namespace label selector: only systems in "
                    "namespaces it matches may use that pool (others are Invalid, PoolNotAllowed); a pool "
                    "without one is open to every watched namespace.")
    state_namespace: str = Field(default="tessera-system", description="Where tessera keeps each pool's plan.")
    gpu_operator_namespace: str = Field(default="gpu-operator", description="Namespace of the mig-parted ConfigMap.")
    cluster_policy: str = Field(default="cluster-policy", description="The GPU Operator's ClusterPolicy.")
    mig_configmap_fallback: str = Field(
        default="tessera-mig-parted-config",
        description="mig-parted ConfigMap used when the ClusterPolicy names none.")
    mig_configmap: str | None = Field(
        default=None,
        description="The mig-parted ConfigMap tessera writes; a ClusterPolicy naming another one is reported. "
                    "Unset: the one the ClusterPolicy names.")
    leader_election_namespace: str | None = Field(
        default=None, description="Namespace of the leader-election Lease; unset: the pod's, else the state namespace.")
    lease_duration_s: float = Field(
        default=15.0, ge=3, description="Leader election: a Lease not renewed for this long may be taken over.")
    mig_config_propagation_s: float = Field(
        default=90.0, ge=0,
        description="Seconds between writing a MIG config and relabelling a node for it: a mounted "
                    "ConfigMap reaches mig-manager only after a delay.")
    resync_s: float = Field(default=60.0, gt=0, description="Period of the level-triggered resync.")
    debounce_s: float = Field(default=1.0, ge=0, description="Quiet time collecting events into one re-plan.")
    max_backoff_s: float = Field(
        default=60.0, ge=1, le=3600, description="Longest wait before retrying a failed reconcile (it doubles from 2 s).")
    mig_poll_s: float = Field(
        default=2.0, gt=0, le=300, description="Seconds between looks at a node that mig-manager is re-partitioning.")
    maintenance_window: str | None = Field(
        default=None, pattern=r"^(([01][0-9]|2[0-3]):[0-5][0-9]-([01][0-9]|2[0-3]):[0-5][0-9]|never)$",
        description="When set, a node whose GPUs serve is cordoned or re-partitioned only inside this daily UTC "
                    "window (HH:MM-HH:MM, may wrap midnight; 'never': never by itself) or once its annotation "
                    "tessera.ai/approve-mig-config names the MIG config it waits for. Unset: no such rule.")
    max_changing_nodes: int = Field(
        default=1, ge=1, le=64,
        description="Serving nodes of one pool that are re-partitioned at once (cordoned, drained by scaling "
                    "their Deployments to zero, re-partitioned, served again).")
    without_replacement: Literal["wait", "change"] = Field(
        default="change",
        description="A serving node whose layout must change while the plan puts what it carries nowhere else, or a "
                    "server whose replacement needs its own MIG instances: 'wait' keeps it serving (status says "
                    "why, nothing changes); 'change' goes ahead (a node: one such node per pool at a time), and "
                    "status states the replicas lost until they serve again.")
    node_not_ready_grace_s: float = Field(
        default=60.0, ge=0, le=3600,
        description="Seconds a pool node may be NotReady (a kubelet restart, a short partition) before it counts as "
                    "gone from its pool and the pool plans again without it; a MIG reboot never counts.")
    mig_failure_backoff_s: float = Field(
        default=300.0, ge=0, le=86400,
        description="Seconds a node whose mig-manager reported `failed` stays in its pool, keeping its layout and "
                    "getting no server, before it is left out of the pool (until mig-manager reports success or "
                    "another config) and the pool plans again on the healthy nodes.")
    planner: PlannerOptions = Field(
        default_factory=PlannerOptions,
        description="The planner's options for every pool plan: the solver's time limit, grids, and each "
                    "approximation's switch back to exact.")
    solve_memory_mb: int = Field(default=2048, ge=256, description="Address-space cap of each solver process.")
    solve_workers: int = Field(
        default=2, ge=1, le=64,
        description="Pools solved at the same time, each in its own solver process capped at solve_memory_mb: "
                    "the operator's memory stays below its own use plus solve_workers x solve_memory_mb.")
    stall_report_s: float = Field(
        default=0.1, gt=0, le=10,
        description="Event-loop stalls longer than this (past the 50 ms lag probe's period) are logged with every "
                    "thread's stack (operator/entry/stall_watch.py).")
    default_image: str = Field(
        default="registry.invalid/tessera/model-server:unset",
        description="Image of variants that name none (the planner still plans them).")
    server_port: int = Field(default=8000, ge=1, le=65535, description="Port of the model servers (KServe V2 HTTP).")
    adapter_server_url: str = Field(
        default="http://{pod_ip}:{port}", max_length=512, pattern=r"^https?://",
        description="How tessera reaches an AdapterPool server pod's vLLM API, to list and load its adapters: a "
                    "template with {pod_ip}, {port} (--server-port), {namespace} and {pod}. The default is the "
                    "pod's own address; the end-to-end tests point it at a stand-in server (their fake pods run "
                    "nothing).")
    adapter_fetcher_url: str = Field(
        default="http://{pod_ip}:{port}", max_length=512, pattern=r"^https?://",
        description="How tessera reaches an AdapterPool server pod's fetcher sidecar, which fetches an adapter's "
                    "files and checks their digest before each load (docs/weights.md): a template with {pod_ip}, "
                    "{port} (the sidecar's, 8001), {namespace} and {pod}. The end-to-end tests point it at a "
                    "fetcher process of their own (their fake pods run nothing).")
    adapter_server_timeout_s: float = Field(
        default=30.0, gt=0, le=600,
        description="Seconds tessera waits for one answer of a server's vLLM API (a load reads the adapter's files).")
    adapter_load_failures: int = Field(
        default=3, ge=1, le=100,
        description="Failed loads in a row after which an adapter is failed on a server pod: the pod's readiness "
                    "gate stops waiting for it, the pool is Degraded AdapterLoadFailed, and it is tried again "
                    "after a wait that doubles.")
    adapter_load_backoff_max_s: float = Field(
        default=300.0, ge=5, le=86400, description="The longest wait between tries of a failed adapter, seconds.")
    frontend_image: str = Field(
        default="registry.invalid/tessera/tessera:unset", max_length=512,
        description="tessera's own image, which runs `tessera frontend` for systems with spec.frontend, and the "
                    "weights fetchers of AdapterPool servers (`tessera weights`).")
    frontend_port: int = Field(default=8080, ge=1, le=65535, description="Port of each system's frontend Service.")
    frontend_rps_per_replica: float = Field(
        default=2000.0, gt=0, le=1e6,
        description="Requests/s one frontend process carries (a core; bench/README.md measured 2,400-6,300 per "
                    "CPU-second for 1-3 hops): its Deployment has demand / this replicas, at least one.")
    health_port: int = Field(default=8080, ge=0, le=65535, description="Liveness/readiness port; 0: off.")
    metrics_port: int = Field(default=9090, ge=0, le=65535, description="Prometheus metrics port; 0: off.")
    demand: DemandSettings = Field(default_factory=DemandSettings, description="Demand read from Prometheus.")

    profiler_image: str = Field(
        default="", max_length=512,
        description="Image with tessera's profiler (tessera's own image); empty: no profiler Jobs, plans stay on "
                    "estimates and given profiles.")
    profiling_jobs_per_pool: int = Field(default=2, ge=1, le=64, description="Profiler Jobs running at once per pool.")
    profiling_deadline_s: int = Field(default=3600, ge=60, description="activeDeadlineSeconds of a profiler Job.")
    profiling_ttl_s: int = Field(default=86400, ge=0, description="Seconds a finished profiler Job is kept.")
    profiling_ready_timeout_s: float = Field(
        default=600.0, gt=0, description="Seconds the profiler waits for the model server to become ready.")
    profiling_repartition: bool = Field(
        default=False,
        description="Profiler Jobs may re-partition a free GPU node of the pool (no pods on its GPUs, in no "
                    "system's plan) to a MIG layout with the profile to measure, when no node offers a free "
                    "instance of it; off: Jobs only use instances free in current layouts.")

    def watches(self, namespace: str) -> bool:
        return not self.namespaces or namespace in self.namespaces
