"""Starts and stops a real Kubernetes control plane as plain processes.

etcd, kube-apiserver, kube-controller-manager, kube-scheduler and the KWOK
controller run directly (no container engine, no kwokctl downloads), all bound
to 127.0.0.1 on free ports, with certificates made by openssl in a temporary
folder. Nothing is fetched at start. Teardown stops exactly the PIDs started.

Command line (used by up.sh / down.sh):
    python -m cluster.controlplane up DIR    # prints the kubeconfig path
    python -m cluster.controlplane down DIR
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from .binaries import bin_dir

# Nodes KWOK manages carry this annotation; GPU and CPU fake nodes get it.
KWOK_NODE_ANNOTATION = ("kwok.x-k8s.io/node", "fake")
SERVICE_CIDR = "10.96.0.0/16"
# KWOK's pod stages, its own but for readiness gates, which it would set True by itself (the file says why).
KWOK_STAGES = Path(__file__).with_name("kwok-stages.yaml")
SERVICE_IP = "10.96.0.1"
# Node heartbeats as a kubelet sends them: KWOK renews each node's Lease in kube-node-lease (every quarter
# of its duration), and the node controller marks a node NotReady only when neither the Lease nor the
# Ready condition was renewed for the grace period. Without Leases, KWOK only refreshes the Ready
# condition from its node-heartbeat stage (every 20-45 s, later under load), which is no kubelet
# heartbeat: nodes went NotReady and back about every minute, and the model servers' pods with them
# (tests/e2e/test_cluster_smoke.py asserts they no longer do). Short values keep that test's window
# short; the kubelet stand-in beats every 5 s.
NODE_LEASE_DURATION_S = 20
NODE_MONITOR_GRACE_S = 20
NODE_MONITOR_PERIOD_S = 2
# Every write, with its user agent, in logs/audit.log: tests count what a component wrote from the
# API server's own record, not from the component's counters. Reads too, but only a ServiceAccount's
# (the chart's operator runs on one; the control plane and KWOK use the admin certificate): the chart's
# permissions matrix compares what the operator used with what its Roles grant.
AUDIT_POLICY = """apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  verbs: ["create", "update", "patch", "delete", "deletecollection"]
- level: Metadata
  userGroups: ["system:serviceaccounts"]
  verbs: ["get", "list", "watch"]
- level: None
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def die_with_parent_prefix(enabled: bool = True) -> list[str]:
    """Command prefix so a child gets SIGTERM when its parent dies (util-linux
    setpriv sets PR_SET_PDEATHSIG, kept across exec): a killed test run leaves
    no cluster behind. Empty where setpriv is missing."""
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "SIGTERM", "--"] if enabled and setpriv else []


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def make_certificates(pki: Path) -> None:
    """CA, API server serving cert, admin client cert and service-account key.

    The admin is in system:masters, so every component can use one kubeconfig.
    The service-account key lets the token controller mint tokens, which the
    ServiceAccount admission of pods needs.
    """
    pki.mkdir(parents=True, exist_ok=True)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    _openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "3",
             "-subj", "/CN=tessera-test-ca", cwd=pki)
    (pki / "san.ext").write_text(
        f"subjectAltName=IP:127.0.0.1,IP:{SERVICE_IP},DNS:localhost,DNS:kubernetes,"
        "DNS:kubernetes.default,DNS:kubernetes.default.svc\n"
        "extendedKeyUsage=serverAuth\n"
    )
    (pki / "client.ext").write_text("extendedKeyUsage=clientAuth\n")
    for name, subject, ext in (
        ("apiserver", "/CN=kube-apiserver", "san.ext"),
        ("admin", "/O=system:masters/CN=tessera-admin", "client.ext"),
    ):
        _openssl("req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", subject, cwd=pki)
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                 "-CAcreateserial", "-days", "3", "-extfile", ext, "-out", f"{name}.crt", cwd=pki)
    _openssl("genrsa", "-out", "sa.key", "2048", cwd=pki)
    _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=pki)


def write_kubeconfig(path: Path, server: str, pki: Path) -> None:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "tessera-test", "cluster": {
            "server": server, "certificate-authority": str(pki / "ca.crt")}}],
        "users": [{"name": "admin", "user": {
            "client-certificate": str(pki / "admin.crt"), "client-key": str(pki / "admin.key")}}],
        "contexts": [{"name": "tessera-test", "context": {"cluster": "tessera-test", "user": "admin"}}],
        "current-context": "tessera-test",
    }
    path.write_text(json.dumps(config, indent=2))  # JSON is valid YAML


@dataclass
class ControlPlane:
    """A running control plane; `workdir` holds certificates, data and logs."""

    workdir: Path
    bins: Path = field(default_factory=bin_dir)
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)
    server: str = ""
    # Fixtures: SIGTERM the cluster if pytest itself is killed. up.sh: keep it.
    die_with_parent: bool = True

    @property
    def kubeconfig(self) -> Path:
        return self.workdir / "kubeconfig"

    @property
    def pki(self) -> Path:
        return self.workdir / "pki"

    @property
    def audit_log(self) -> Path:
        return self.workdir / "logs" / "audit.log"

    def log(self, component: str) -> Path:
        return self.workdir / "logs" / f"{component}.log"

    def start(self, timeout: float = 120) -> "ControlPlane":
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / "logs").mkdir(exist_ok=True)
        make_certificates(self.pki)
        try:
            self._start_etcd()
            self._start_apiserver(timeout)
            kc = str(self.kubeconfig)
            delegated = [f"--kubeconfig={kc}", f"--authentication-kubeconfig={kc}",
                         f"--authorization-kubeconfig={kc}", "--leader-elect=false",
                         "--bind-address=127.0.0.1"]
            self._spawn("kube-controller-manager", [
                *delegated, f"--secure-port={free_port()}",
                f"--service-account-private-key-file={self.pki / 'sa.key'}",
                f"--root-ca-file={self.pki / 'ca.crt'}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--concurrent-deployment-syncs=10", "--concurrent-replicaset-syncs=10",
                f"--node-monitor-grace-period={NODE_MONITOR_GRACE_S}s",
                f"--node-monitor-period={NODE_MONITOR_PERIOD_S}s",
            ])
            self._spawn("kube-scheduler", [*delegated, f"--secure-port={free_port()}"])
            self._start_kwok()
        except BaseException:
            self.stop()
            raise
        self._write_pids()
        return self

    def _spawn(self, name: str, args: list[str], env: dict | None = None) -> None:
        logfile = open(self.log(name), "ab")
        # Own session: a Ctrl-C in pytest does not kill the cluster half-way;
        # stop() ends these PIDs explicitly.
        self.processes[name] = subprocess.Popen(
            [*die_with_parent_prefix(self.die_with_parent), str(self.bins / name), *args],
            stdout=logfile, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True, env=env)
        logfile.close()

    def _start_etcd(self) -> None:
        client, peer = free_port(), free_port()
        self.etcd_url = f"http://127.0.0.1:{client}"
        self._spawn("etcd", [
            "--name=default", f"--data-dir={self.workdir / 'etcd'}",
            f"--listen-client-urls={self.etcd_url}", f"--advertise-client-urls={self.etcd_url}",
            f"--listen-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-cluster=default=http://127.0.0.1:{peer}",
            "--unsafe-no-fsync", "--log-level=warn",
        ])

    def _start_apiserver(self, timeout: float) -> None:
        port = free_port()
        self.server = f"https://127.0.0.1:{port}"
        pki = self.pki
        policy = self.workdir / "audit-policy.yaml"
        policy.write_text(AUDIT_POLICY)
        self._spawn("kube-apiserver", [
            f"--audit-policy-file={policy}", f"--audit-log-path={self.audit_log}", "--audit-log-format=json",
            f"--etcd-servers={self.etcd_url}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={port}",
            f"--cert-dir={pki}",
            f"--tls-cert-file={pki / 'apiserver.crt'}", f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={pki / 'ca.crt'}",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--authorization-mode=RBAC",
            "--allow-privileged=true",
            # A loopback address is not a valid Endpoints IP: skip the reconciler.
            "--endpoint-reconciler-type=none",
            "--profiling=false",
        ])
        write_kubeconfig(self.kubeconfig, self.server, pki)
        self._wait_ready(timeout)

    def _start_kwok(self) -> None:
        key, value = KWOK_NODE_ANNOTATION
        self._spawn("kwok", [
            f"--kubeconfig={self.kubeconfig}",
            "--manage-all-nodes=false",
            f"--manage-nodes-with-annotation-selector={key}={value}",
            f"--server-address=127.0.0.1:{free_port()}",
            "--node-ip=127.0.0.1",
            "--cidr=10.244.0.1/16",
            f"--node-lease-duration-seconds={NODE_LEASE_DURATION_S}",
            f"--config={KWOK_STAGES}",
        ], env={**os.environ, "HOME": str(self.workdir)})  # no ~/.kwok/kwok.yaml leaks in

    def _ssl_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.pki / "ca.crt"))
        ctx.load_cert_chain(str(self.pki / "admin.crt"), str(self.pki / "admin.key"))
        return ctx

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        ctx = self._ssl_context()
        last = ""
        while time.monotonic() < deadline:
            for name, proc in self.processes.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited with {proc.returncode}; see {self.log(name)}:\n"
                                       + self.log(name).read_text()[-3000:])
            try:
                with urllib.request.urlopen(f"{self.server}/readyz", context=ctx, timeout=5) as r:
                    if r.status == 200:
                        return
            except Exception as e:  # not up yet
                last = str(e)
            time.sleep(0.3)
        raise TimeoutError(f"kube-apiserver not ready after {timeout}s ({last}); see {self.log('kube-apiserver')}")

    def check_alive(self) -> None:
        dead = {n: p.returncode for n, p in self.processes.items() if p.poll() is not None}
        if dead:
            raise RuntimeError(f"control-plane processes exited: {dead}; logs in {self.workdir / 'logs'}")

    def _write_pids(self) -> None:
        pids = {name: proc.pid for name, proc in self.processes.items()}
        (self.workdir / "pids.json").write_text(json.dumps(pids))

    def stop(self) -> None:
        # Reverse start order: KWOK and controllers first, etcd last.
        for proc in reversed(list(self.processes.values())):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        self.processes.clear()


def stop_by_pidfile(workdir: Path) -> None:
    """Stops the processes an earlier `up` started, by the PIDs it recorded."""
    pidfile = workdir / "pids.json"
    pids = json.loads(pidfile.read_text())
    for pid in reversed(list(pids.values())):
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            continue
        for _ in range(150):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        else:
            os.kill(pid, signal.SIGKILL)
    pidfile.unlink()


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("up", "down"):
        print(__doc__, file=sys.stderr)
        return 2
    workdir = Path(argv[1]).resolve()
    if argv[0] == "up":
        cp = ControlPlane(workdir, die_with_parent=False).start()
        cp.processes.clear()  # leave them running for `down`
        print(cp.kubeconfig)
    else:
        stop_by_pidfile(workdir)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
