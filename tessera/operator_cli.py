"""`tessera operator`: run the kopf operator against a cluster."""

from __future__ import annotations

import click

from tessera.operator.demand.settings import DemandSettings
from tessera.operator.settings import OperatorSettings
from tessera.options import field_range
from tessera.planner_options_cli import planner_options, take_planner_options

DEFAULTS = OperatorSettings()


def _selector(_ctx, _param, values: tuple[str, ...]) -> dict[str, str]:
    selector = {}
    for value in values:
        key, sep, label = value.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{value!r} is not KEY=VALUE")
        selector[key] = label
    return selector


@click.command("operator")
@click.option("--kubeconfig", type=click.Path(exists=True, dir_okay=False),
              help="Run out of cluster with this kubeconfig (default: in cluster, else ~/.kube/config).")
@click.option("--namespace", "namespaces", multiple=True, help="Watch this namespace (repeatable); default: all.")
@click.option("--node-selector", "node_selector", multiple=True, callback=_selector, metavar="KEY=VALUE",
              help="Only nodes with this label form GPU pools (repeatable).")
@click.option("--pool-namespaces", "pool_namespaces", multiple=True, callback=_selector, metavar="POOL=SELECTOR",
              help="Only namespaces matching the label SELECTOR may use the GPU pool POOL (its "
                   "nvidia.com/gpu.product; repeatable, one per pool). Default: every watched namespace.")
@click.option("--state-namespace", default=DEFAULTS.state_namespace, show_default=True,
              help="Namespace where each pool's plan is stored.")
@click.option("--gpu-operator-namespace", default=DEFAULTS.gpu_operator_namespace, show_default=True,
              help="Namespace of the mig-parted ConfigMap that the ClusterPolicy names.")
@click.option("--cluster-policy", default=DEFAULTS.cluster_policy, show_default=True,
              help="Name of the GPU Operator's ClusterPolicy.")
@click.option("--mig-configmap", default=None,
              help="The mig-parted ConfigMap tessera writes (set in the ClusterPolicy by the admin); a ClusterPolicy "
                   "naming another is reported. Default: whichever the ClusterPolicy names.")
@click.option("--leader-election-namespace", default=None,
              help="Namespace of the leader-election Lease. Default: the pod's, else --state-namespace.")
@click.option("--lease-duration", "lease_duration_s", type=field_range(OperatorSettings, "lease_duration_s"),
              default=DEFAULTS.lease_duration_s, show_default=True,
              help="Seconds after which another operator may take over a Lease that was not renewed.")
@click.option("--mig-config-propagation", "mig_config_propagation_s",
              type=field_range(OperatorSettings, "mig_config_propagation_s"),
              default=DEFAULTS.mig_config_propagation_s, show_default=True,
              help="Seconds between writing a MIG config and relabelling nodes for it.")
@click.option("--resync", "resync_s", type=field_range(OperatorSettings, "resync_s"), default=DEFAULTS.resync_s, show_default=True,
              help="Seconds between level-triggered resyncs.")
@click.option("--debounce", "debounce_s", type=field_range(OperatorSettings, "debounce_s"), default=DEFAULTS.debounce_s,
              show_default=True, help="Quiet seconds that collect events into one re-plan.")
@click.option("--max-backoff", "max_backoff_s", type=field_range(OperatorSettings, "max_backoff_s"),
              default=DEFAULTS.max_backoff_s, show_default=True,
              help="Longest wait in seconds before retrying a failed reconcile (the wait doubles from 2 s).")
@click.option("--mig-poll", "mig_poll_s", type=field_range(OperatorSettings, "mig_poll_s"),
              default=DEFAULTS.mig_poll_s, show_default=True,
              help="Seconds between looks at a node that mig-manager is re-partitioning.")
@click.option("--maintenance-window", default=DEFAULTS.maintenance_window, metavar="HH:MM-HH:MM|never",
              help="Re-partition or cordon a node whose GPUs serve only inside this daily UTC window, or once the "
                   "node's annotation tessera.ai/approve-mig-config names the config it waits for. Default: no rule.")
@click.option("--max-changing-nodes", type=field_range(OperatorSettings, "max_changing_nodes"),
              default=DEFAULTS.max_changing_nodes, show_default=True,
              help="Serving nodes of one pool re-partitioned at once (cordoned, their Deployments scaled to zero).")
@click.option("--without-replacement", type=click.Choice(["wait", "change"]), default=DEFAULTS.without_replacement,
              show_default=True,
              help="When the plan puts what a serving node to re-partition carries nowhere else: wait (keep "
                   "serving), or change it anyway, one such node per pool at a time, the loss stated in status.")
@click.option("--node-not-ready-grace", "node_not_ready_grace_s",
              type=field_range(OperatorSettings, "node_not_ready_grace_s"), default=DEFAULTS.node_not_ready_grace_s,
              show_default=True,
              help="Seconds a pool node may be NotReady before its pool plans again without it (a MIG reboot never "
                   "counts; an admin's cordon takes it out at once).")
@click.option("--mig-failure-backoff", "mig_failure_backoff_s",
              type=field_range(OperatorSettings, "mig_failure_backoff_s"), default=DEFAULTS.mig_failure_backoff_s,
              show_default=True,
              help="Seconds a node whose mig-manager reported failed keeps its layout before it is left out of "
                   "its pool (until its state changes) and the pool plans again without it.")
@planner_options("--solve-time-limit")
@click.option("--solve-memory", "solve_memory_mb", type=field_range(OperatorSettings, "solve_memory_mb"), default=DEFAULTS.solve_memory_mb,
              show_default=True, help="Memory cap of each solver process, MB.")
@click.option("--solve-workers", type=field_range(OperatorSettings, "solve_workers"), default=DEFAULTS.solve_workers,
              show_default=True,
              help="Pools solved at the same time, each in a solver process of its own (at most this many times "
                   "--solve-memory in all).")
@click.option("--stall-report", "stall_report_s", type=field_range(OperatorSettings, "stall_report_s"),
              default=DEFAULTS.stall_report_s, show_default=True,
              help="Log the threads' stacks when the event loop stalls longer than this many seconds.")
@click.option("--default-image", default=DEFAULTS.default_image, show_default=True,
              help="Model-server image for variants that name none.")
@click.option("--adapter-server-url", default=DEFAULTS.adapter_server_url, show_default=True,
              help="How tessera reaches an AdapterPool server pod's vLLM API: a template with {pod_ip}, {port}, "
                   "{namespace} and {pod} (the end-to-end tests' stand-in address).")
@click.option("--adapter-fetcher-url", default=DEFAULTS.adapter_fetcher_url, show_default=True,
              help="How tessera reaches an AdapterPool server pod's fetcher sidecar, asked to fetch an adapter's "
                   "files and check their digest before each load: a template with {pod_ip}, {port} (8001), "
                   "{namespace} and {pod} (the end-to-end tests' fetcher address).")
@click.option("--adapter-server-timeout", "adapter_server_timeout_s",
              type=field_range(OperatorSettings, "adapter_server_timeout_s"),
              default=DEFAULTS.adapter_server_timeout_s, show_default=True,
              help="Seconds to wait for one answer of a server's vLLM API.")
@click.option("--adapter-load-failures", "adapter_load_failures",
              type=field_range(OperatorSettings, "adapter_load_failures"), default=DEFAULTS.adapter_load_failures,
              show_default=True,
              help="Failed loads in a row that mark an adapter failed on a server pod (its pod turns Ready without "
                   "it; it is retried with back-off).")
@click.option("--adapter-load-backoff-max", "adapter_load_backoff_max_s",
              type=field_range(OperatorSettings, "adapter_load_backoff_max_s"),
              default=DEFAULTS.adapter_load_backoff_max_s, show_default=True,
              help="Longest wait in seconds between tries of a failed adapter (the wait doubles from 10 s).")
@click.option("--frontend-image", default=DEFAULTS.frontend_image, show_default=True,
              help="tessera's own image, for the frontend of each system with spec.frontend.")
@click.option("--frontend-port", type=field_range(OperatorSettings, "frontend_port"), default=DEFAULTS.frontend_port,
              show_default=True, help="Port of each system's frontend Service.")
@click.option("--frontend-requests-per-replica", "frontend_rps_per_replica",
              type=field_range(OperatorSettings, "frontend_rps_per_replica"),
              default=DEFAULTS.frontend_rps_per_replica, show_default=True,
              help="Requests/s one frontend process carries: each system's frontend runs demand / this replicas.")
@click.option("--health-port", type=field_range(OperatorSettings, "health_port"), default=DEFAULTS.health_port, show_default=True,
              help="Port of /healthz and /readyz; 0: off.")
@click.option("--metrics-port", type=field_range(OperatorSettings, "metrics_port"), default=DEFAULTS.metrics_port, show_default=True,
              help="Port of the Prometheus metrics; 0: off.")
@click.option("--profiler-image", default=DEFAULTS.profiler_image,
              help="tessera's image, for profiler Jobs that measure variants on the pool's MIG segments; "
                   "unset: no profiling, plans rest on estimates and given profiles.")
@click.option("--profiling-jobs-per-pool", type=field_range(OperatorSettings, "profiling_jobs_per_pool"), default=DEFAULTS.profiling_jobs_per_pool,
              show_default=True, help="Profiler Jobs running at once per GPU pool.")
@click.option("--profiling-repartition/--no-profiling-repartition", default=DEFAULTS.profiling_repartition,
              show_default=True,
              help="Let profiler Jobs re-partition a free GPU node of the pool (no pods on its GPUs, in no plan) "
                   "to a MIG layout with the profile they measure, when no node offers a free instance of it.")
@click.option("--prometheus-url", help="Prometheus' HTTP API base URL, for systems whose demand comes from it.")
@click.option("--prometheus-token-file", type=click.Path(dir_okay=False),
              help="File with a bearer token for Prometheus (a mounted Secret); read at every query, never logged.")
@click.option("--prometheus-ca-file", type=click.Path(exists=True, dir_okay=False),
              help="CA bundle for Prometheus' TLS certificate.")
@click.option("--prometheus-timeout", "prometheus_timeout_s", type=field_range(DemandSettings, "timeout_s"),
              default=DEFAULTS.demand.timeout_s, show_default=True, help="Seconds per query; then demand is Unknown.")
@click.option("--demand-poll", "demand_poll_s", type=field_range(DemandSettings, "poll_s"), default=DEFAULTS.demand.poll_s,
              show_default=True, help="Seconds between demand readings.")
@click.option("--scale-down-stabilization", "stabilization_s", type=field_range(DemandSettings, "stabilization_s"),
              default=DEFAULTS.demand.stabilization_s, show_default=True,
              help="Seconds demand stays below the plan before a scale-down.")
@click.option("--repartition-window", "repartition_window_s", type=field_range(DemandSettings, "repartition_window_s"),
              default=DEFAULTS.demand.repartition_window_s, show_default=True,
              help="Seconds after a re-partition without another (nor a scale-down).")
@click.option("--scale-down-step", type=field_range(DemandSettings, "scale_down_step"),
              default=DEFAULTS.demand.scale_down_step, show_default=True,
              help="Largest share of the planned demand one scale-down removes.")
@click.option("--slo-violation-target", "slo_violation_target_pct",
              type=field_range(DemandSettings, "slo_violation_target_pct"),
              default=DEFAULTS.demand.slo_violation_target_pct, show_default=True,
              help="Percent of requests late, dropped or failed (5 min, at a system's frontend) above which "
                   "LatencySLOMet is False.")
@click.option("--demand-dry-run", is_flag=True, help="Report demand recommendations (status, metrics), apply none.")
@click.option("--demand-template", "templates", multiple=True, callback=_selector, metavar="NAME=PROMQL",
              help="A named demand query systems may choose (repeatable; adds to the Triton and MLServer ones).")
def operator(kubeconfig, **options) -> None:
    """Run the tessera operator (kopf): plan every GPU pool, partition MIG, run the model servers."""
    from tessera.operator.entry.main import run

    run(operator_settings(options), kubeconfig)


def operator_settings(options: dict) -> OperatorSettings:
    """The operator's configuration from the command's parameters (less --kubeconfig)."""
    options = dict(options)
    options["namespaces"] = list(options["namespaces"])
    options["demand"] = demand_settings(options)
    options["planner"] = take_planner_options(options)
    return OperatorSettings(**options)


def demand_settings(options: dict) -> DemandSettings:
    """Takes the demand options out of `options`."""
    return DemandSettings(
        prometheus_url=options.pop("prometheus_url"), token_file=options.pop("prometheus_token_file"),
        ca_file=options.pop("prometheus_ca_file"), timeout_s=options.pop("prometheus_timeout_s"),
        poll_s=options.pop("demand_poll_s"), stabilization_s=options.pop("stabilization_s"),
        repartition_window_s=options.pop("repartition_window_s"), scale_down_step=options.pop("scale_down_step"),
        dry_run=options.pop("demand_dry_run"), slo_violation_target_pct=options.pop("slo_violation_target_pct"),
        templates={**DEFAULTS.demand.templates, **options.pop("templates")})
