"""A fork server for the corpus: imports tessera once, then runs each case in a forked child of its own.

Importing the command line (pyomo, HiGHS, numpy) costs about 2 s of CPU, 90%
of what most cases cost; forking a process that has already imported it
keeps every case a process of its own at a fraction of the time. The
server reads one JSON request per line (argv, folder), forks, redirects the
child's stdin to /dev/null and its stdout and stderr to files in the
folder, caps its address space, runs `tessera ARGV` there, and reaps it
with `os.wait4`, so the rusage it reports (CPU time, peak resident memory)
is that one child's. A child still running after the kill time is killed.
It answers one JSON line per request. Run as `python -P -c SOURCE`.
"""

SOURCE = r'''
import json, os, resource, signal, sys, threading, time, traceback

from tessera.cli import main

KILL_AFTER_S, ADDRESS_SPACE_CAP = float(sys.argv[1]), int(sys.argv[2])


def child(request):
    os.chdir(request["folder"])
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    for fd, name in ((1, ".stdout"), (2, ".stderr")):
        os.dup2(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), fd)
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE_CAP, ADDRESS_SPACE_CAP))
    code = 1
    try:
        main(request["argv"], prog_name="tessera")
        code = 0
    except SystemExit as exit:
        code = exit.code if isinstance(exit.code, int) else (0 if exit.code is None else 1)
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


for line in sys.stdin:
    request = json.loads(line)
    sys.stdout.flush()
    started = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        child(request)
    killer = threading.Timer(KILL_AFTER_S, lambda: os.kill(pid, signal.SIGKILL))
    killer.start()
    _, status, usage = os.wait4(pid, 0)
    killer.cancel()
    print(json.dumps({"code": os.waitstatus_to_exitcode(status), "seconds": time.perf_counter() - started,
                      "cpu_seconds": usage.ru_utime + usage.ru_stime, "max_rss_mb": usage.ru_maxrss / 1024,
                      "load": os.getloadavg()[0]}), flush=True)
'''
