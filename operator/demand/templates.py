"""Query templates shipped for the counters common model servers export.

Completed-request counters fall when a server is overloaded (it completes
only what it can), so each default adds the backlog drained over
BACKLOG_DRAIN_S: a queue that grows reads as more demand, not less. Names
and labels are the servers' own (Triton's `model`, MLServer's `model_name`);
the operator adds the system's namespace matcher to every selector.

- triton: `nv_inference_request_success` counts requests Triton completed
  successfully per model (a request of a batch of 8 counts once);
  `nv_inference_pending_request_count` is a gauge of requests received and
  not yet executing.
- mlserver: `model_infer_request_success` counts inference requests MLServer
  completed successfully per model; `batch_request_queue` is a histogram of
  the adaptive-batching queue's length, whose `_sum`/`_count` rates give the
  mean queue length.
- tessera-frontend: `tessera_frontend_requests_total` counts every request
  the system's frontend (docs/frontend.md) received, by outcome: answered,
  late, dropped early or refused for overload all count, so the offered rate
  does not fall under overload and needs no backlog term; `invalid` bodies
  are not demand.
"""

from __future__ import annotations

BACKLOG_DRAIN_S = 60
RATE_WINDOW = "1m"
FRONTEND_TEMPLATE = "tessera-frontend"
"""The demand source of a system with spec.frontend and no demandSource (when the operator reads Prometheus)."""

DEFAULT_TEMPLATES: dict[str, str] = {
    "triton": (
        f'sum(rate(nv_inference_request_success{{model="$entry"}}[{RATE_WINDOW}]))'
        f' + sum(nv_inference_pending_request_count{{model="$entry"}}) / {BACKLOG_DRAIN_S}'),
    "mlserver": (
        f'sum(rate(model_infer_request_success{{model_name="$entry"}}[{RATE_WINDOW}]))'
        f' + sum(rate(batch_request_queue_sum{{model_name="$entry"}}[{RATE_WINDOW}]))'
        f' / clamp_min(sum(rate(batch_request_queue_count{{model_name="$entry"}}[{RATE_WINDOW}])), 1e-9)'
        f' / {BACKLOG_DRAIN_S}'),
    FRONTEND_TEMPLATE: (
        f'sum(rate(tessera_frontend_requests_total{{system="$system",outcome!="invalid"}}[{RATE_WINDOW}]))'),
}


def render(template: str, system: str, entry: str) -> str:
    """The template with its placeholders filled (names are DNS-1035 labels: safe inside a PromQL string)."""
    return template.replace("$system", system).replace("$entry", entry)
