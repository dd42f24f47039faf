"""The shipped `tessera-frontend` demand template: the frontend's offered rate, confined to the system's namespace."""

from tessera.operator.demand.templates import DEFAULT_TEMPLATES, render
from tessera.operator.demand.promql import confine


def test_the_frontend_template_reads_every_outcome_but_invalid_of_the_system_in_its_namespace():
    query = confine(render(DEFAULT_TEMPLATES["tessera-frontend"], "traffic", "object-detection"), "shop")
    assert "tessera_frontend_requests_total" in query
    assert 'system="traffic"' in query and 'outcome!="invalid"' in query and 'namespace="shop"' in query
