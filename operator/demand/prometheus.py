"""A Prometheus HTTP API client for one instant query that must yield one number.

Unknown is not zero: a failure of any kind (unreachable, timeout, an error
answer, an empty result, NaN or infinity, several series) is a `Reading`
without a value and with a reason a user can act on. The bearer token is
read from its file at every query (a rotated Secret is picked up) and goes
only into the Authorization header: it is never logged, and messages
(which reach status and Events) are built from the query and the answer,
never from the request's headers.
"""

from __future__ import annotations

import json
import math
import socket
import ssl
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tessera.operator.demand.settings import DemandSettings

MAX_ANSWER_BYTES = 1 << 20
MESSAGE_CHARS = 300


class Reason:
    """MetricsAvailable=False reasons."""

    NOT_CONFIGURED = "PrometheusNotConfigured"
    UNREACHABLE = "PrometheusUnreachable"
    TIMEOUT = "QueryTimeout"
    QUERY_FAILED = "QueryFailed"
    QUERY_REJECTED = "QueryRejected"
    UNKNOWN_TEMPLATE = "UnknownTemplate"
    NO_DATA = "NoData"
    NOT_A_NUMBER = "NotANumber"
    SEVERAL_SERIES = "SeveralSeries"
    NEGATIVE = "NegativeRate"


@dataclass(frozen=True)
class Reading:
    value: float | None
    reason: str = ""
    message: str = ""

    @property
    def known(self) -> bool:
        return self.value is not None


def unknown(reason: str, message: str) -> Reading:
    return Reading(None, reason, message[:MESSAGE_CHARS])


@dataclass(frozen=True)
class PrometheusClient:
    url: str
    timeout_s: float = 5.0
    token_file: str | None = None
    ca_file: str | None = None

    def instant(self, query: str) -> Reading:
        """The query's one number now, or Unknown with why."""
        body = self.answer(query)
        return body if isinstance(body, Reading) else one_number(body)

    def answer(self, query: str) -> dict | Reading:
        """The instant query's JSON answer, or Unknown with why no answer came (an error answer is returned:
        its reading is the caller's, as `one_number`'s)."""
        request = urllib.request.Request(
            self.url.rstrip("/") + "/api/v1/query",
            data=urllib.parse.urlencode({"query": query, "timeout": f"{self.timeout_s:g}s"}).encode(),
            headers={"Content-Type": "application/x-www-form-urlencoded", "Accept": "application/json",
                     **self._authorization()},
            method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s, context=self._tls()) as answer:
                body = json.loads(answer.read(MAX_ANSWER_BYTES))
        except urllib.error.HTTPError as error:
            return unknown(Reason.QUERY_FAILED, f"Prometheus answered HTTP {error.code}: {_error_text(error)}")
        except (TimeoutError, socket.timeout):
            return unknown(Reason.TIMEOUT, f"no answer from Prometheus within {self.timeout_s:g} s")
        except urllib.error.URLError as error:
            if isinstance(error.reason, (TimeoutError, socket.timeout)):
                return unknown(Reason.TIMEOUT, f"no answer from Prometheus within {self.timeout_s:g} s")
            return unknown(Reason.UNREACHABLE, f"cannot reach Prometheus at {self.url}: {error.reason}")
        except (OSError, ValueError) as error:
            return unknown(Reason.UNREACHABLE, f"cannot read Prometheus' answer: {type(error).__name__}")
        return body if isinstance(body, dict) else unknown(Reason.QUERY_FAILED, "the answer is not a JSON object")

    def _authorization(self) -> dict[str, str]:
        if not self.token_file:
            return {}
        token = Path(self.token_file).read_text().strip()
        return {"Authorization": f"Bearer {token}"} if token else {}

    def _tls(self) -> ssl.SSLContext | None:
        if not self.url.startswith("https:"):
            return None
        return ssl.create_default_context(cafile=self.ca_file)


def client_of(settings: "DemandSettings") -> PrometheusClient | None:
    """The operator's Prometheus client (None: no --prometheus-url), for systems and AdapterPools alike."""
    if not settings.prometheus_url:
        return None
    return PrometheusClient(str(settings.prometheus_url), settings.timeout_s, settings.token_file, settings.ca_file)


def one_number(body: dict) -> Reading:
    """An instant query's JSON answer as one finite, non-negative number, or Unknown."""
    if body.get("status") != "success":
        return unknown(Reason.QUERY_FAILED, f"{body.get('errorType', 'error')}: {body.get('error', '')}")
    data = body.get("data") or {}
    kind, result = data.get("resultType"), data.get("result") or []
    if kind == "scalar":
        values = [result]
    elif kind == "vector":
        values = [series.get("value") for series in result]
    else:
        return unknown(Reason.QUERY_FAILED, f"the query gives a {kind}, not an instant vector or a scalar")
    if not values:
        return unknown(Reason.NO_DATA, "the query returned no series (no data is not zero demand)")
    if len(values) > 1:
        labels = [json.dumps(series.get("metric", {}), sort_keys=True) for series in result[:2]]
        return unknown(Reason.SEVERAL_SERIES,
                       f"the query returned {len(values)} series (e.g. {', '.join(labels)}); sum them in the query")
    try:
        value = float(values[0][1])
    except (TypeError, ValueError, IndexError):
        return unknown(Reason.QUERY_FAILED, "the answer holds no number")
    if not math.isfinite(value):
        return unknown(Reason.NOT_A_NUMBER, f"the query returned {value} (no data is not zero demand)")
    if value < 0:
        return unknown(Reason.NEGATIVE, f"the query returned {value:g}, a negative rate")
    return Reading(value)


def _error_text(error: urllib.error.HTTPError) -> str:
    try:
        body = json.loads(error.read(MAX_ANSWER_BYTES))
        return f"{body.get('errorType', '')}: {body.get('error', '')}"
    except (OSError, ValueError):
        return error.reason if isinstance(error.reason, str) else ""
