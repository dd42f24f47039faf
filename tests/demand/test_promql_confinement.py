"""A tenant's PromQL reads only its namespace: the matcher in every selector (operator/demand/promql.py).

The parse tree is checked, not the text: every vector selector of the
confined query must carry namespace="tenant-a" and no other namespace matcher.
"""

import promql_parser as pp
import pytest

from tessera.operator.demand.promql import QueryRejected, confine, selectors

HOSTILE = [
    'sum(rate(requests_total[1m]))',
    '{__name__=~".+"}',
    'requests_total{namespace="tenant-b"}',
    'requests_total{namespace!="tenant-a"}',
    'requests_total{namespace=~"tenant-.*"}',
    'requests_total{namespace!~"tenant-a"}',
    'requests_total{namespace="tenant-a"} or requests_total{namespace="tenant-b"}',
    'requests_total unless on(namespace) {namespace="tenant-b"}',
    'max_over_time(rate(requests_total{namespace="tenant-b"}[1m])[10m:30s])',
    'label_replace(requests_total, "namespace", "tenant-a", "namespace", ".*")',
    'sum by (namespace) (requests_total) / on() group_left sum(other_total)',
    'requests_total offset 5m @ 100',
    'absent(requests_total{namespace="tenant-b"})',
    'count({namespace="tenant-b", __name__!=""}) > 0 and vector(1)',
]


def confined_selectors(query: str):
    return selectors(pp.parse(confine(query, "tenant-a")))


@pytest.mark.parametrize("query", HOSTILE)
def test_every_selector_of_a_hostile_query_reads_only_the_tenants_namespace(query):
    found = confined_selectors(query)
    assert found
    for selector in found:
        branches = selector.matchers.or_matchers or [selector.matchers.matchers]
        for branch in branches:
            on_namespace = [(m.op, m.value) for m in branch if m.name == "namespace"]
            assert on_namespace == [(pp.MatchOp.Equal, "tenant-a")], (query, str(selector))


def test_the_rest_of_the_query_is_kept():
    assert confine('sum(rate(requests_total{model="yolo"}[1m]))', "tenant-a") == \
        'sum(rate(requests_total{model="yolo",namespace="tenant-a"}[1m]))'


def test_a_query_without_selectors_stays_as_it_is():
    assert confine("vector(3)", "tenant-a") == "vector(3)"


@pytest.mark.parametrize("query", ["sum(rate(x[1m]", 'x{namespace="a"', "1 +"])
def test_invalid_promql_is_rejected_with_the_parsers_reason(query):
    with pytest.raises(QueryRejected, match="not valid PromQL"):
        confine(query, "tenant-a")


def test_or_between_matchers_inside_a_selector_is_refused_not_guessed():
    with pytest.raises(QueryRejected, match="not supported"):
        confine('requests_total{job="a" or namespace="tenant-b"}', "tenant-a")
