"""Tenant isolation for user PromQL: the system's namespace matcher in every selector.

What prom-label-proxy does, on the parse tree of a real PromQL parser
(promql-parser, the Python binding of GreptimeDB's Rust parser) rather than
on text: every vector selector, wherever it sits (inside functions,
aggregations, subqueries, either side of `or`/`and`/`unless`), loses whatever matchers on `namespace` the
user wrote (`!=`, regexes, another namespace) and gets `namespace="<ns>"`.
The rewritten query is parsed again and every selector checked, so a
printer defect cannot silently widen what a tenant reads.
"""

from __future__ import annotations

import promql_parser as pp

NAMESPACE_LABEL = "namespace"


class QueryRejected(ValueError):
    """The query does not parse, or cannot be confined to the namespace."""


def confine(query: str, namespace: str) -> str:
    """`query` reading only series whose `namespace` label equals `namespace`."""
    try:
        tree = pp.parse(query)
    except (ValueError, TypeError) as error:
        raise QueryRejected(f"not valid PromQL: {error}") from None
    try:
        confined = str(pp.transform(tree, post_visit=lambda node: _confined_selector(node, namespace)))
    except QueryRejected:
        raise
    except (ValueError, TypeError) as error:
        raise QueryRejected(f"cannot confine the query to namespace {namespace}: {error}") from None
    try:
        check = pp.parse(confined)
    except (ValueError, TypeError) as error:  # the printer wrote what the parser rejects
        raise QueryRejected(f"cannot confine the query to namespace {namespace}: {error}") from None
    if not all(_is_confined(s, namespace) for s in selectors(check)):
        raise QueryRejected(f"cannot confine the query to namespace {namespace}")
    return confined


def selectors(tree: pp.Expr) -> list[pp.VectorSelector]:
    found: list[pp.VectorSelector] = []

    def visit(node: pp.Expr) -> bool:
        if isinstance(node, pp.VectorSelector):
            found.append(node)
        elif isinstance(node, pp.MatrixSelector):
            found.append(node.vector_selector)
        return True

    pp.walk(tree, pre_visit=visit)
    return found


def _own(namespace: str) -> pp.Matcher:
    return pp.Matcher(pp.MatchOp.Equal, NAMESPACE_LABEL, namespace)


def _without_namespace(matchers: list[pp.Matcher], namespace: str) -> list[pp.Matcher]:
    return [m for m in matchers if m.name != NAMESPACE_LABEL] + [_own(namespace)]


def _confined_selector(node: pp.Expr, namespace: str) -> pp.Expr | None:
    if not isinstance(node, pp.VectorSelector):
        return None
    matchers = node.matchers
    if matchers.or_matchers:
        # promql-parser 0.12 prints such selectors in a form it cannot parse back: refused, not guessed.
        raise QueryRejected("`or` between matchers inside one selector is not supported; "
                            "join two selectors with the `or` operator instead")
    node.matchers = pp.Matchers(_without_namespace(list(matchers.matchers), namespace))
    # transform() keeps a node returned as it came; a fresh parse of the edited selector replaces it.
    return pp.parse(str(node))


def _is_confined(selector: pp.VectorSelector, namespace: str) -> bool:
    branches = selector.matchers.or_matchers or [selector.matchers.matchers]
    return all(
        any(m.name == NAMESPACE_LABEL and m.op == pp.MatchOp.Equal and m.value == namespace for m in branch)
        and all(m.name != NAMESPACE_LABEL or (m.op == pp.MatchOp.Equal and m.value == namespace) for m in branch)
        for branch in branches)
