"""A contract type for import-linter (scripts/checks.sh puts this folder on its path).

`forbidden_when_present` is import-linter's `forbidden`, except that modules of the
project that do not exist yet are left out instead of failing the run: the rule is
stated once and holds from the commit that adds them (the operator's builders and
its API client). External forbidden modules are kept as they are.
"""

from importlinter.contracts.forbidden import ForbiddenContract


class ForbiddenWhenPresentContract(ForbiddenContract):
    def check(self, graph, verbose):
        def present(expression) -> bool:
            name = expression.expression
            internal = name.split(".")[0] in self.session_options.get("root_packages", [])
            return expression.has_wildcard_expression() or not internal or name in graph.modules

        self.source_modules = [e for e in self.source_modules if present(e)]
        self.forbidden_modules = [e for e in self.forbidden_modules if present(e)]
        return super().check(graph, verbose)
