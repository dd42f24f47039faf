"""One request carried through a system's task graph, with its deadline.

Every source task gets the client's inputs. When a task answers, each edge
below it makes the child's requests as its mode says: the task's outputs,
the client's original inputs, or one request per item of a named output
(`split`). A child with several parents waits for all of them and gets
their contributions together, each input named `<parent>.<name>`. The
system's response gathers every sink's outputs (`<task>.<output>`, items of
a split joined in order along the first dimension).

Before every hop the frontend applies early dropping's rule
(`tessera.planner.dropping`, the one `tessera simulate` applies on arrival
at a stage): the remaining budget against the hop, a batch of one on the
configuration it is routed to and the least time of the stages after it.
The hop carries the remaining budget to the server (BUDGET_HEADER), for
servers that drop at batch start. The first failure or drop cancels the
rest of the request.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import orjson

from tessera.frontend.config import Configuration, FrontendConfig
from tessera.frontend.tensors import BadResponse, Tensor, gather, parse_response, split
from tessera.frontend.upstream import Upstream, UpstreamError
from tessera.planner.dropping import doomed, least_time_after, needed_s
from tessera.planner.model import Edge

BUDGET_HEADER = "Tessera-Budget-Ms"
MS = 1e-3


class Dropped(Exception):
    """Dropped early at `task`: the budget left could not cover what the path ahead needs."""

    def __init__(self, task: str, remaining_s: float, needed: float) -> None:
        super().__init__(f"dropped early before task {task!r}: {remaining_s * 1e3:.1f} ms of the deadline left, "
                         f"the rest of its path needs {needed * 1e3:.1f} ms by the plan")
        self.task = task


class TaskFailed(Exception):
    """Task `task` failed; `status` is what the frontend answers (502, or 504 on a timeout)."""

    def __init__(self, task: str, detail: str, status: int = 502) -> None:
        super().__init__(f"task {task!r} failed: {detail}")
        self.task = task
        self.status = status


class Picker:
    """Smooth weighted round-robin: each configuration gets requests in proportion to its weight, evenly spaced."""

    def __init__(self, configurations: list[Configuration]) -> None:
        self.configurations = configurations
        self.weights = [c.weight for c in configurations]
        self.total = sum(self.weights)
        self.current = [0.0] * len(configurations)

    def pick(self) -> Configuration:
        if len(self.configurations) == 1:
            return self.configurations[0]
        best = 0
        for i, weight in enumerate(self.weights):
            self.current[i] += weight
            if self.current[i] > self.current[best]:
                best = i
        self.current[best] -= self.total
        return self.configurations[best]


@dataclass
class Route:
    task: str
    picker: Picker
    after_s: float  # least time the stages below this task need
    children: list[Edge] = field(default_factory=list)
    parents: list[str] = field(default_factory=list)


class Graph:
    """A config compiled for serving: routes per task, sources and sinks, the dropping settings."""

    def __init__(self, config: FrontendConfig) -> None:
        self.config = config
        self.system = config.system
        self.slo_s = config.slo_ms * MS
        self.hop_s = config.hop_ms * MS
        self.dropping = config.settings.early_dropping
        self.margin_s = config.settings.drop_margin_ms * MS
        names = [t.name for t in config.tasks]
        children = {name: [e for e in config.edges if e.source == name] for name in names}
        parents = {name: [e.source for e in config.edges if e.target == name] for name in names}
        single = {t.name: min(c.single_ms for c in t.configurations) * MS for t in config.tasks}
        after = least_time_after(_topological(names, parents), {n: [e.target for e in children[n]] for n in names},
                                 single, self.hop_s)
        self.routes = {t.name: Route(t.name, Picker(t.configurations), after[t.name], children[t.name],
                                     parents[t.name]) for t in config.tasks}
        self.sources = [n for n in names if not parents[n]]
        self.sinks = [n for n in names if not children[n]]


def _topological(names: list[str], parents: dict[str, list[str]]) -> list[str]:
    order: list[str] = []
    seen: set[str] = set()

    def visit(name: str) -> None:
        if name not in seen:
            seen.add(name)
            for parent in parents[name]:
                visit(parent)
            order.append(name)

    for name in names:
        visit(name)
    return order


async def _fan(coroutines: list[Coroutine[Any, Any, None]]) -> None:
    """Run these branches of the graph; the first to fail cancels the others and is raised as itself."""
    if len(coroutines) == 1:  # a chain: no task to create
        await coroutines[0]
    elif coroutines:
        try:
            async with asyncio.TaskGroup() as group:
                for coroutine in coroutines:
                    group.create_task(coroutine)
        except BaseExceptionGroup as errors:
            raise errors.exceptions[0] from None


StageObserver = Callable[[str, str, float], None]  # (task, configuration, seconds)


class Run:
    """One client request through `graph`; `execute()` returns the system's outputs or raises."""

    def __init__(self, graph: Graph, upstream: Upstream, inputs: list[Tensor], deadline: float,
                 observe: StageObserver) -> None:
        self.graph = graph
        self.upstream = upstream
        self.inputs = inputs
        self.deadline = deadline
        self.observe = observe
        self.loop = asyncio.get_running_loop()
        self.sink_outputs: dict[str, list[tuple[tuple[int, ...], list[Tensor]]]] = {s: [] for s in graph.sinks}
        self.joins: dict[str, dict[str, list[Tensor]]] = {}

    async def execute(self) -> list[Tensor]:
        await _fan([self._task(source, self.inputs, ()) for source in self.graph.sources])
        outputs: list[Tensor] = []
        for sink in self.graph.sinks:
            instances = [o for _, o in sorted(self.sink_outputs[sink], key=lambda item: item[0])]
            if instances:
                try:
                    outputs += gather(sink, instances)
                except BadResponse as error:
                    raise TaskFailed(sink, str(error)) from None
        return outputs

    async def _task(self, task: str, inputs: list[Tensor], key: tuple[int, ...]) -> None:
        outputs = await self._hop(task, inputs)
        route = self.graph.routes[task]
        if not route.children:
            self.sink_outputs[task].append((key, outputs))
        below: list[tuple[str, list[Tensor], tuple[int, ...]]] = []  # (task, inputs, key): made before any runs
        for edge in route.children:
            passed = self.inputs if edge.mode == "request" else outputs
            child = self.graph.routes[edge.target]
            if len(child.parents) > 1:  # a join (never below a split: the spec refuses it)
                contributions = self.joins.setdefault(edge.target, {})
                contributions[task] = [{**t, "name": f"{task}.{t['name']}"} for t in passed]
                if len(contributions) == len(child.parents):  # the last parent runs it
                    below.append((edge.target, [t for p in child.parents for t in contributions[p]], key))
            elif edge.mode == "split":
                assert edge.split_output is not None
                try:
                    items = split(outputs, edge.split_output)
                except KeyError:
                    raise TaskFailed(task, f"its response has no output {edge.split_output!r} to split "
                                           f"for {edge.target!r}") from None
                below += [(edge.target, item, (*key, i)) for i, item in enumerate(items)]
            else:
                below.append((edge.target, passed, key))
        await _fan([self._task(*child_request) for child_request in below])

    async def _hop(self, task: str, inputs: list[Tensor]) -> list[Tensor]:
        graph = self.graph
        route = graph.routes[task]
        configuration = route.picker.pick()
        started = self.loop.time()
        remaining = self.deadline - started
        if graph.dropping:
            needed = needed_s(configuration.single_ms * MS, route.after_s, graph.hop_s)
            if doomed(remaining, needed, graph.margin_s):
                raise Dropped(task, remaining, float(needed))
        headers = {BUDGET_HEADER: f"{max(remaining, 0.0) * 1e3:.3f}", "Content-Type": "application/json"}
        try:
            status, body = await self.upstream.post(configuration.url, orjson.dumps({"inputs": inputs}), headers)
        except TimeoutError:
            raise TaskFailed(task, f"no answer from {configuration.url} within "
                                   f"{self.upstream.timeout_s:g} s", 504) from None
        except UpstreamError as error:
            raise TaskFailed(task, f"{configuration.url}: {error}") from None
        if status != 200:
            raise TaskFailed(task, f"{configuration.url} answered HTTP {status}: "
                                   f"{body[:300].decode(errors='replace')}")
        try:
            outputs = parse_response(body)
        except BadResponse as error:
            raise TaskFailed(task, f"{configuration.url} sent a malformed response: {error}") from None
        self.observe(task, configuration.name, self.loop.time() - started)
        return outputs
