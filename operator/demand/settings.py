"""The operator's configuration for demand read from Prometheus (part of OperatorSettings)."""

from __future__ import annotations

from pydantic import BaseModel, Field, HttpUrl

from tessera.operator.demand.templates import DEFAULT_TEMPLATES


class DemandSettings(BaseModel):
    prometheus_url: HttpUrl | None = Field(
        default=None, description="Prometheus' HTTP API base URL; unset: systems with a demandSource plan for "
                                  "their spec's rate and say so (MetricsAvailable=False).")
    token_file: str | None = Field(
        default=None, description="File holding a bearer token (a mounted Secret), read at every query so a "
                                  "rotated token is used; never logged.")
    ca_file: str | None = Field(default=None, description="CA bundle that signs Prometheus' TLS certificate.")
    timeout_s: float = Field(default=5.0, gt=0, le=120, description="Seconds per query before demand is Unknown.")
    poll_s: float = Field(default=15.0, gt=0, le=3600, description="Seconds between demand readings.")
    stabilization_s: float = Field(
        default=300.0, ge=0, le=86_400, description="Demand stays below the plan this long before a scale-down.")
    repartition_window_s: float = Field(
        default=600.0, ge=0, le=86_400,
        description="After a re-partition, no other re-partition (and no scale-down) for this long.")
    scale_down_step: float = Field(
        default=0.25, gt=0, le=1, description="Largest share of the planned demand one scale-down removes.")
    dry_run: bool = Field(default=False, description="Every system: report recommendations, apply none.")
    slo_violation_target_pct: float = Field(
        default=1.0, gt=0, le=100,
        description="A system served through its frontend has LatencySLOMet=False above this share (percent) of "
                    "requests late, dropped or failed over the last 5 minutes.")
    templates: dict[str, str] = Field(
        default_factory=lambda: dict(DEFAULT_TEMPLATES),
        description="Named PromQL templates systems may choose ($system, $entry: the system's and its entry "
                    "task's names); the namespace matcher is added to them as to users' queries.")
