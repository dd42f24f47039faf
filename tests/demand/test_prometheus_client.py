"""The Prometheus client's readings: one number or Unknown with why (operator/demand/prometheus.py).

Answers come from a local HTTP server that records the requests it gets
(conftest.py), to check the bearer token travels only in the Authorization header.
"""

import pytest

from tessera.operator.demand.prometheus import PrometheusClient, Reason, one_number

from .conftest import vector

TOKEN = "s3cr3t-token-for-tests"


@pytest.mark.parametrize("body, reason", [
    (vector(), Reason.NO_DATA),
    (vector("NaN"), Reason.NOT_A_NUMBER),
    (vector("+Inf"), Reason.NOT_A_NUMBER),
    (vector("1", "2"), Reason.SEVERAL_SERIES),
    (vector("-3"), Reason.NEGATIVE),
    ({"status": "error", "errorType": "bad_data", "error": "parse error"}, Reason.QUERY_FAILED),
])
def test_no_number_is_unknown_with_its_reason(body, reason):
    reading = one_number(body)
    assert reading.value is None and reading.reason == reason


def test_a_present_zero_is_a_reading_of_zero():
    assert one_number(vector("0")).value == 0.0


def test_a_scalar_is_a_reading():
    assert one_number({"status": "success", "data": {"resultType": "scalar", "result": [1.0, "4.5"]}}).value == 4.5


def test_the_token_is_read_from_its_file_and_sent_only_as_a_bearer_header(prometheus_stub, tmp_path):
    url, seen = prometheus_stub.url, prometheus_stub.requests
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    reading = PrometheusClient(url, token_file=str(token_file)).instant("sum(x)")
    assert reading.value == 12.5
    assert seen[0]["headers"]["Authorization"] == f"Bearer {TOKEN}"
    assert TOKEN not in seen[0]["body"] and TOKEN not in seen[0]["path"]


def test_a_rotated_token_is_used_at_the_next_query(prometheus_stub, tmp_path):
    url, seen = prometheus_stub.url, prometheus_stub.requests
    token_file = tmp_path / "token"
    client = PrometheusClient(url, token_file=str(token_file))
    token_file.write_text("first")
    client.instant("sum(x)")
    token_file.write_text("second")
    client.instant("sum(x)")
    assert [s["headers"]["Authorization"] for s in seen] == ["Bearer first", "Bearer second"]


def test_a_slow_answer_is_a_timeout(prometheus_stub):
    prometheus_stub.delay_s = 2.0
    reading = PrometheusClient(prometheus_stub.url, timeout_s=0.3).instant("sum(x)")
    assert reading.value is None and reading.reason == Reason.TIMEOUT


def test_nothing_listening_is_unreachable():
    reading = PrometheusClient("http://127.0.0.1:9", timeout_s=1).instant("sum(x)")
    assert reading.value is None and reading.reason == Reason.UNREACHABLE
