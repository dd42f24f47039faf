"""No input crashes tessera, hangs it, or gets a wrong answer: the corpus, each case a child process.

Every case of corpus.py runs `tessera ...` as a child process of its own, in
its own folder: a fork of a server that has imported the command line once
(forkserver.py; the import is 90% of a fresh interpreter's cost). A few
servers run at once. Each test then asserts on one child: its exit code,
that its message names the file (or option) and the field, that it printed
no traceback and no Python warning (a numpy RuntimeWarning is a number gone
wrong that the input's checks missed), that it took at most 10 s, and that
its peak resident memory was at most 500 MB.

Peak memory is that child's own: its server reaps it with `os.wait4(pid)`,
which returns the rusage of the one process it reaps, so a small case cannot
hide behind a large one (`getrusage(RUSAGE_CHILDREN)` reports the largest
child so far and would pass vacuously). It includes what the child inherits
from the server (the imported command line, about 90 MB), as a fresh process
would hold it.

Time is the child's CPU time (user + system, from its own rusage): the work
it does, which a loop or an unbounded input would blow. Wall time is held to
the same 10 s where the machine is not oversubscribed (load average at most
its cores); on a shared machine running eight test suites at once, a child
that does 1 s of work can wait 10 s for a core, which says nothing about
tessera. A child that blocks instead of working is killed at 60 s and fails.
An address-space cap of 4 GiB keeps a memory bomb from taking the machine
down, far above the 500 MB asserted.
"""

from __future__ import annotations

import json
import os
import queue
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from .corpus import Case, corpus
from .forkserver import SOURCE

MAX_SECONDS = 10.0
MAX_RSS_MB = 500.0
KILL_AFTER_S = 60.0
ADDRESS_SPACE_CAP = 4 << 30
MAX_MESSAGE_LINES = 8
PARALLEL = max(2, min(4, os.cpu_count() or 2))
PYTHON_WARNING = re.compile(r"\b[A-Z]\w*Warning: ")
CASES = corpus()


@dataclass
class Outcome:
    code: int
    stdout: str
    stderr: str
    seconds: float
    cpu_seconds: float
    max_rss_mb: float
    oversubscribed: bool  # the machine's load average exceeded its cores when the child ended


def _write_files(folder: Path, case: Case) -> None:
    for name, content in case.files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if callable(content):
            content(path)
        elif isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)


class ForkServer:
    """One server process; `run` forks one child per case and returns its outcome."""

    def __init__(self) -> None:
        env = {**os.environ, "PYTHONSAFEPATH": "1", "COLUMNS": "200", "OPENBLAS_NUM_THREADS": "1",
               "OMP_NUM_THREADS": "1"}
        self.process = subprocess.Popen(
            [sys.executable, "-P", "-c", SOURCE, str(KILL_AFTER_S), str(ADDRESS_SPACE_CAP)], env=env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)

    def run(self, case: Case, folder: Path) -> Outcome:
        folder.mkdir(parents=True)
        _write_files(folder, case)
        self.process.stdin.write(json.dumps({"argv": case.argv, "folder": str(folder)}) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        assert line, f"the fork server died running {case.id} (exit {self.process.poll()})"
        answer = json.loads(line)
        return Outcome(answer["code"], (folder / ".stdout").read_text(errors="replace"),
                       (folder / ".stderr").read_text(errors="replace"), answer["seconds"], answer["cpu_seconds"],
                       answer["max_rss_mb"], answer["load"] > (os.cpu_count() or 1))

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=30)


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict[str, Outcome]:
    root = tmp_path_factory.mktemp("hostile")
    started = time.perf_counter()
    todo: queue.Queue[Case] = queue.Queue()
    for case in CASES:
        todo.put(case)
    results: dict[str, Outcome] = {}

    def work() -> None:
        server = ForkServer()
        try:
            while True:
                try:
                    case = todo.get_nowait()
                except queue.Empty:
                    return
                results[case.id] = server.run(case, root / case.id)
        finally:
            server.close()

    workers = [threading.Thread(target=work) for _ in range(PARALLEL)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    print(f"\nhostile corpus: {len(CASES)} children, {PARALLEL} at a time, {time.perf_counter() - started:.1f} s wall, "
          f"{sum(o.cpu_seconds for o in results.values()):.1f} s CPU in all, at most "
          f"{max(o.cpu_seconds for o in results.values()):.1f} s CPU and "
          f"{max(o.max_rss_mb for o in results.values()):.0f} MB in one child")
    return results


def test_the_corpus_is_large_and_covers_every_input_path():
    assert len(CASES) >= 80
    assert len({case.id for case in CASES}) == len(CASES)
    commands = {" ".join(case.argv[:2]) if case.argv[0] in ("twin", "profiles") else case.argv[0] for case in CASES}
    assert {"plan", "capacity", "place", "simulate", "twin run", "twin predict", "twin validate", "twin fit-memory",
            "profiles import", "profiles export"} <= commands


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_hostile_input_gets_a_clear_answer_within_bounds(case: Case, outcomes: dict[str, Outcome]):
    outcome = outcomes[case.id]
    output = outcome.stdout + outcome.stderr
    expected = case.code if isinstance(case.code, tuple) else (case.code,)
    assert outcome.code in expected, f"exit {outcome.code}, expected {case.code}:\n{output[-3000:]}"
    assert "Traceback" not in output, output[-3000:]
    assert not PYTHON_WARNING.search(output), output[-3000:]
    for words in case.says:
        assert words in output, f"message lacks {words!r}:\n{output[-3000:]}"
    if case.code in (1, 2):  # refused input, or a cluster out of reach: a message, not a dump
        message = outcome.stderr.strip().splitlines()
        assert 1 <= len(message) <= MAX_MESSAGE_LINES, outcome.stderr[-3000:]
        assert len(outcome.stderr) <= 2000, f"message of {len(outcome.stderr)} characters"
    assert outcome.cpu_seconds <= MAX_SECONDS, f"took {outcome.cpu_seconds:.1f} s of CPU"
    assert outcome.seconds <= MAX_SECONDS or outcome.oversubscribed, f"took {outcome.seconds:.1f} s"
    assert outcome.max_rss_mb <= MAX_RSS_MB, f"peak resident memory {outcome.max_rss_mb:.0f} MB"
