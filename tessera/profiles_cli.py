"""`tessera profiles export|import`: measured profiles between a cluster's ConfigMaps and a CSV file.

The CSV is what `tessera plan --measured FILE` reads, so a laptop plans on
what a cluster's profiler Jobs measured, and another cluster starts from it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console
from rich.table import Table

from tessera.operator.settings import OperatorSettings
from tessera.planner.input_files import InputError, load_yaml
from tessera.planner.measured import ProfileRow, profile_rows_csv, read_profiles_csv

if TYPE_CHECKING:  # the Kubernetes client loads only for the commands that talk to a cluster
    from tessera.operator.cluster import Cluster

DEFAULT_NAMESPACE = OperatorSettings().state_namespace
# Kubeconfigs embed certificates: many clusters' worth stay far below this.
MAX_KUBECONFIG_BYTES = 1024 * 1024
CLUSTER_TIMEOUT_S = 5.0  # seconds per attempt of one API call: a hung server is refused in about 20 s


@contextmanager
def _reaching_the_cluster(kubeconfig: str | None) -> Iterator[None]:
    """A cluster that cannot be reached, or refuses, is one line naming it, never the client's traceback."""
    from kubernetes.client.rest import ApiException
    from kubernetes.config.config_exception import ConfigException
    from urllib3.exceptions import HTTPError

    cluster = f"the cluster of {kubeconfig}" if kubeconfig else "the cluster"
    try:
        yield
    except ConfigException as error:
        if kubeconfig:
            raise InputError(f"{kubeconfig}: not a usable kubeconfig: {str(error)[:300]}") from None
        raise click.ClickException(f"no cluster configured: {str(error)[:300]}; pass --kubeconfig") from None
    except ApiException as error:
        raise click.ClickException(f"{cluster} refused: {error.status} {error.reason}") from None
    except (HTTPError, OSError) as error:
        reason = getattr(error, "reason", None) or error  # urllib3's retries wrap the connection's own error
        raise click.ClickException(f"cannot reach {cluster}: {str(reason)[:300]}") from None


def _cluster(kubeconfig: str | None, namespace: str) -> Cluster:
    from tessera.operator.cluster import Cluster
    from tessera.operator.entry.process import api_client

    if kubeconfig:  # read within bounds first: the client's own reader gives tracebacks for a broken file
        document = load_yaml(kubeconfig, MAX_KUBECONFIG_BYTES)
        if not isinstance(document, dict):
            raise InputError(f"{kubeconfig}: expected a kubeconfig (a mapping), got {type(document).__name__}")

    api = api_client(kubeconfig)
    # The client waits forever unless a call says otherwise: a server that accepts a connection and
    # never answers would hang the command. Each attempt (urllib3 retries three times) now ends.
    request = api.rest_client.request

    def timed(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        kwargs["_request_timeout"] = kwargs.get("_request_timeout") or CLUSTER_TIMEOUT_S
        return request(method, url, *args, **kwargs)

    api.rest_client.request = timed  # type: ignore[method-assign]
    return Cluster(api, OperatorSettings(state_namespace=namespace))


def _summary(rows: list[ProfileRow], title: str) -> Table:
    table = Table(title=title)
    for column in ("variant", "image", "digest", "GPU", "segment", "batches", "p99 ms (smallest batch)",
                   "req/s (largest batch)"):
        table.add_column(column)
    groups: dict[tuple[str, str, str, str, str, int], list[ProfileRow]] = {}
    for row in rows:
        groups.setdefault((row.variant, row.image, row.image_digest, row.gpu, row.mig_profile, row.mps), []).append(row)
    for (variant, image, digest, gpu, mig, mps), members in groups.items():
        members.sort(key=lambda r: r.batch)
        table.add_row(variant, image or "-", digest[:19] or "-", gpu, f"{mig}" + (f" x{mps} MPS" if mps > 1 else ""),
                      ",".join(str(r.batch) for r in members), f"{members[0].p99_ms:g}",
                      f"{members[-1].throughput_rps:g}")
    return table


@click.group("profiles")
def profiles() -> None:
    """Measured profiles: export a cluster's profiler results, import them into another cluster."""


_kubeconfig = click.option("--kubeconfig", type=click.Path(exists=True, dir_okay=False),
                           help="The cluster's kubeconfig (default: in cluster, else ~/.kube/config).")
_namespace = click.option("--namespace", default=DEFAULT_NAMESPACE, show_default=True,
                          help="The operator's state namespace, where its profiles ConfigMaps are.")


@profiles.command("export")
@_kubeconfig
@_namespace
@click.option("--from-file", "from_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Read the ConfigMaps from this file (`kubectl get configmap -o yaml`) instead of a cluster.")
@click.option("--output", "-o", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the CSV here (default: standard output).")
def export_command(kubeconfig: str | None, namespace: str, from_file: Path | None, output: Path | None) -> None:
    """Write the measured profiles as the CSV `tessera plan --measured` reads."""
    from tessera.operator.profiling import exchange

    if from_file:
        configmaps = exchange.configmaps_in_file(from_file)
    else:
        with _reaching_the_cluster(kubeconfig):
            configmaps = exchange.cluster_configmaps(_cluster(kubeconfig, namespace))
    rows = exchange.export_rows(configmaps)
    text = profile_rows_csv(rows)
    if output is None:
        click.echo(text, nl=False)
    else:
        output.write_text(text)
    Console(stderr=True).print(_summary(rows, f"{len(rows)} measured profile(s) exported"))


@profiles.command("import")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@_kubeconfig
@_namespace
def import_command(file: Path, kubeconfig: str | None, namespace: str) -> None:
    """Merge the profiles of FILE (a `tessera profiles export` CSV) into the cluster's ConfigMaps."""
    from tessera.operator.profiling import exchange

    # every row checked before any cluster is contacted; refused input exits BAD_INPUT through the main group
    rows = read_profiles_csv(file)
    try:
        entries = exchange.entries_of_rows(rows)
    except InputError as error:
        raise InputError(f"{file}: {error}") from None
    with _reaching_the_cluster(kubeconfig):
        exchange.import_entries(_cluster(kubeconfig, namespace), entries)
    Console(stderr=True).print(_summary(rows, f"{len(rows)} measured profile(s) imported into {namespace}"))
