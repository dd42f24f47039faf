"""The chart's operator run out of cluster: KWOK runs no containers, so the operator Deployment's pod
never runs; its container (command, args, env as rendered) runs as a host process instead, on a
TokenRequest token of the chart's ServiceAccount, so every call is authorized by the chart's RBAC and
admitted by its admission policy, exactly as in a cluster. Used by tests/e2e/test_helm_install.py and
the local try-out (cluster/tryout.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from kubernetes import client

from .controlplane import ControlPlane, die_with_parent_prefix


def token_kubeconfig(core: client.CoreV1Api, cluster: ControlPlane, namespace: str, service_account: str, path: Path) -> Path:
    """A kubeconfig holding a TokenRequest token of the ServiceAccount (what the kubelet mounts in a pod)."""
    request = core.create_namespaced_service_account_token(
        service_account, namespace, {"spec": {"expirationSeconds": 7200}})
    config = {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "test", "cluster": {"server": cluster.server,
                                                  "certificate-authority": str(cluster.pki / "ca.crt")}}],
        "users": [{"name": service_account, "user": {"token": request.status.token}}],
        "contexts": [{"name": "sa", "context": {"cluster": "test", "user": service_account}}],
        "current-context": "sa",
    }
    path.write_text(json.dumps(config))
    return path


class HostOperator:
    """The rendered Deployment's container, run as a host process with the ServiceAccount's token."""

    def __init__(self, deployment: dict, kubeconfig: Path, logdir: Path, pod_name: str) -> None:
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        assert container["command"] == ["tessera"], container["command"]
        self.argv = [sys.executable, "-P", "-m", "tessera", *container["args"], f"--kubeconfig={kubeconfig}"]
        namespace = deployment["metadata"]["namespace"]
        field_values = {"metadata.name": pod_name, "metadata.namespace": namespace}
        self.env = {"PATH": "/usr/bin:/bin"}
        for variable in container["env"]:
            if "value" in variable:
                self.env[variable["name"]] = variable["value"]
            else:
                self.env[variable["name"]] = field_values[variable["valueFrom"]["fieldRef"]["fieldPath"]]
        self.env["HOME"] = str(logdir)  # the rendered /tmp is the pod's emptyDir
        self.log = logdir / f"{pod_name}.log"
        self.process: subprocess.Popen | None = None

    def start(self) -> "HostOperator":
        with open(self.log, "wb") as out:
            self.process = subprocess.Popen([*die_with_parent_prefix(), *self.argv], stdout=out,
                                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=self.env,
                                            start_new_session=True, cwd=self.log.parent)
        return self

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self) -> None:
        if self.alive():
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""
