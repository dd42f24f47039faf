"""Exit codes of the `tessera` command line, documented for scripts that call it.

click already exits 2 on a usage error (an unknown option, a missing file),
so every other kind of bad input uses 2 as well.
"""

OK = 0
BAD_INPUT = 2  # a file, field or option is malformed or out of range: fix the input
# valid input that no plan can satisfy: the diagnosis says what to change (`tessera place`: adapters beyond
# limits.maxServers, or a server the twin check fails after the twin gate, named with its adapters)
INFEASIBLE = 3
TIME_LIMIT = 4  # the time limit was reached before any plan was found: retry with more time
PLANNER_FAILED = 5  # a planner defect (a plan failed the independent checker): report it, with the input
