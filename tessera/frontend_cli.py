"""`tessera frontend`: one system's Open Inference Protocol endpoint (see tessera/frontend)."""

from __future__ import annotations

import string
import sys
from pathlib import Path
from typing import NoReturn

import click

from tessera.exit_codes import BAD_INPUT
from tessera.options import FiniteFloat
from tessera.planner.input_files import quote

# A plan lists every GPU of its pool (up to 10,000) with its instances.
MAX_PLAN_BYTES = 32 * 1024 * 1024


@click.command("frontend")
@click.argument("config", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--host", default="0.0.0.0", show_default=True, help="Address to listen on.")
@click.option("--port", default=8080, show_default=True, type=click.IntRange(1, 65535), help="Port to listen on.")
def frontend(config: Path, host: str, port: int) -> None:
    """Serve one system: carry each request through its task graph, with its deadline, dropping the doomed early.

    CONFIG is the frontend's file (system, task graph, each task's configurations
    with their URLs and planned shares); it is re-read when it changes or on SIGHUP.
    """
    # Imported here: the HTTP stack is only this command's.
    from tessera.frontend.server import serve
    from tessera.planner.input_files import InputError

    try:
        serve(config, host, port)
    except InputError as error:
        click.echo(f"error: {error}", err=True)
        sys.exit(BAD_INPUT)


URL_FIELDS = ("system", "task", "variant", "config", "mig", "mps", "batch")


@click.command("frontend-config")
@click.argument("system_file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.argument("plan_file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--system", "system_name", help="Which system of SYSTEM_FILE (default: its only one).")
@click.option("--url", "url_template", required=True,
              help="Each configuration's infer URL, with {system} {task} {variant} {config} (its index in the "
                   "plan) {mig} {mps} {batch}, e.g. http://{system}-{task}-{config}:8000/v2/models/{variant}/infer.")
@click.option("--hop-ms", default=1.0, show_default=True, type=FiniteFloat(0, 3_600_000),
              help="Network and handling per hop, outside the profiles (early dropping counts it).")
def frontend_config_command(system_file: Path, plan_file: Path, system_name: str | None, url_template: str,
                            hop_ms: float) -> None:
    """Write a frontend config (YAML, stdout) for one system under a plan (`tessera plan --output yaml`).

    Each configuration is weighted by its planned capacity; its batch-of-one
    latency comes from the same profiles `tessera simulate` uses.
    """
    _require_url_template(url_template)  # the option before the files
    import yaml
    from pydantic import ValidationError

    from tessera.frontend.config import frontend_config
    from tessera.planner.input_files import InputError, describe, load_yaml, validate
    from tessera.planner.plan import Plan
    from tessera.planner.profile_sources import build_profile_store
    from tessera.planner.spec_file import load_systems

    try:
        systems = load_systems(system_file)
        plan = validate(Plan, load_yaml(plan_file, MAX_PLAN_BYTES), str(plan_file))
    except InputError as error:
        _refuse(f"{error}")
    chosen = [s for s in systems if system_name in (None, s.name)]
    if len(chosen) != 1:
        _refuse(f"{system_file}: name one of {', '.join(s.name for s in systems)} with --system"
                if system_name is None else f"{system_file}: no system {system_name!r}")

    def url_for(task, index, config):  # type: ignore[no-untyped-def]
        return url_template.format(system=task.system, task=task.task, variant=task.variant, config=index,
                                   mig=config.segment.mig_profile, mps=config.segment.mps, batch=config.batch)

    try:
        config = frontend_config(chosen[0], plan, url_for, build_profile_store(chosen, plan.gpu), hop_ms)
    except InputError as error:
        _refuse(f"{error}")
    except ValidationError as error:
        _refuse(f"the frontend config of {plan_file} with --url: {describe(error)}")
    click.echo(yaml.safe_dump(config.model_dump(mode="json", exclude_none=True), sort_keys=False), nl=False)


def _require_url_template(template: str) -> None:
    """Only the named placeholders, bare: `{system.__class__}` or `{task:>99999999}` would format
    objects or pad without bound."""
    try:
        fields = list(string.Formatter().parse(template))
    except ValueError as error:
        raise click.BadParameter(f"{error}: the placeholders are {', '.join(URL_FIELDS)}", param_hint="--url") from None
    for _, name, spec, conversion in fields:
        if name is not None and (name not in URL_FIELDS or spec or conversion):
            shown = "{" + name + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "") + "}"
            raise click.BadParameter(f"{quote(name)} in {quote(shown)}: the placeholders are {', '.join(URL_FIELDS)}, "
                                     f"without format or conversion", param_hint="--url")


def _refuse(message: str) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    sys.exit(BAD_INPUT)
