"""A kubelet stand-in for one node: the test plays the kubelet, so nothing else completes its pods.

KWOK completes every Job pod on the nodes it manages by itself (phase
Succeeded, exit code 0, no termination message), which would make a check of
a profiler Job's result vacuous. This node carries no KWOK annotation, so
KWOK leaves it alone; the stand-in keeps it Ready the way a kubelet does (its
Lease in kube-node-lease and its Ready condition's heartbeat), and writes a
pod's status only when the test says so, in the shape a real kubelet writes
through the pods/status subresource: phase, and per container
`state.terminated` with exitCode, reason, message (the termination message),
startedAt, finishedAt and containerID, and the `imageID` the container runtime
reports for the image it pulled (`repo@sha256:<digest>`; the test may name the
digest, as a registry would by what the tag points to when the node pulls it).
Nothing tessera-specific is written: an operator that read anything else would
find nothing.
"""

from __future__ import annotations

import copy
import threading
from datetime import datetime, timezone

from kubernetes import client
from kubernetes.client.rest import ApiException

from .gpu_nodes import GpuState, node_body

HEARTBEAT_S = 5.0
LEASE_NAMESPACE = "kube-node-lease"


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _micro_now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class KubeletStandIn:
    def __init__(self, core: client.CoreV1Api, name: str, product: str, gpus: list[GpuState],
                 labels: dict[str, str] | None = None) -> None:
        self.core = core
        self.coordination = client.CoordinationV1Api(core.api_client)
        self.name = name
        self.product = product
        self.gpus = gpus
        self.labels = labels or {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._image_ids: dict[str, dict[str, str]] = {}  # pod uid -> image reference -> imageID pulled for it

    # -- the node ------------------------------------------------------------------
    def start(self) -> "KubeletStandIn":
        body = node_body(self.name, self.product, self.gpus, "custom")
        body["metadata"]["annotations"] = {k: v for k, v in body["metadata"]["annotations"].items()
                                           if not k.startswith("kwok.x-k8s.io/")}
        body["metadata"]["labels"].update(self.labels)
        body["metadata"]["labels"]["type"] = "kubelet-standin"
        self.core.create_node(body)
        self._heartbeat()
        self._thread = threading.Thread(target=self._beat, name=f"kubelet-{self.name}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        for delete in (lambda: self.core.delete_node(self.name),
                       lambda: self.coordination.delete_namespaced_lease(self.name, LEASE_NAMESPACE)):
            try:
                delete()
            except ApiException as error:
                if error.status != 404:
                    raise

    def report_not_ready(self) -> None:
        """Heartbeats stop and Ready turns False, as a kubelet whose container runtime went down posts it. Nothing
        turns the node Ready again: KWOK does not manage it, and the node controller moves a node whose kubelet
        went silent on to Unknown, never to True."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        now = _now()
        self.core.patch_node_status(self.name, {"status": {"conditions": [{
            "type": "Ready", "status": "False", "reason": "KubeletNotReady", "message": "container runtime is down",
            "lastHeartbeatTime": now, "lastTransitionTime": now}]}})

    def _beat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            try:
                self._heartbeat()
            except ApiException:
                continue  # the next beat tries again, as a kubelet does

    def _heartbeat(self) -> None:
        now = _now()
        ready = {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status",
                 "lastHeartbeatTime": now, "lastTransitionTime": now}
        node = self.core.read_node(self.name)
        before = next((c for c in node.status.conditions or [] if c.type == "Ready" and c.status == "True"), None)
        if before is not None:
            ready["lastTransitionTime"] = before.last_transition_time.strftime("%Y-%m-%dT%H:%M:%SZ")
        capacity = node_body(self.name, self.product, self.gpus, "custom")["status"]["capacity"]
        self.core.patch_node_status(self.name, {"status": {"conditions": [ready], "capacity": capacity,
                                                           "allocatable": capacity}})
        lease = {"metadata": {"name": self.name, "namespace": LEASE_NAMESPACE},
                 "spec": {"holderIdentity": self.name, "leaseDurationSeconds": 40, "renewTime": _micro_now()}}
        try:
            self.coordination.patch_namespaced_lease(self.name, LEASE_NAMESPACE, lease)
        except ApiException as error:
            if error.status != 404:
                raise
            self.coordination.create_namespaced_lease(LEASE_NAMESPACE, lease)

    # -- its pods --------------------------------------------------------------------
    def pods(self) -> list[client.V1Pod]:
        return self.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={self.name}").items

    def run(self, pod: client.V1Pod, image_ids: dict[str, str] | None = None) -> None:
        """Started: the sidecar (init container with restartPolicy Always) and the containers running.

        `image_ids`: image reference -> the imageID its pull reported (`repo@sha256:...`, or the
        `docker-pullable://` form); other images report `<image>@sha256:000...`. Kept for `finish`.
        """
        self._image_ids[pod.metadata.uid] = dict(image_ids or {})
        now = _now()
        running = {"running": {"startedAt": now}}
        self._write(pod, "Running", [self._status(c, pod, running, ready=True, started=True)
                                     for c in pod.spec.init_containers or []],
                    [self._status(c, pod, running, ready=True, started=True) for c in pod.spec.containers])

    def finish(self, pod: client.V1Pod, container: str, exit_code: int, message: str) -> None:
        """`container` exited with `exit_code`, its termination message `message`; the kubelet then stops
        the sidecars (SIGTERM: exit 143) and ends the pod Succeeded or Failed by the regular containers."""
        now = _now()

        def terminated(code: int, text: str | None) -> dict:
            state = {"exitCode": code, "reason": "Completed" if code == 0 else "Error", "startedAt": now,
                     "finishedAt": now, "containerID": f"containerd://{pod.metadata.uid[:12]}{code}"}
            if text:
                state["message"] = text
            return {"terminated": state}

        init = [self._status(c, pod, terminated(143, None), ready=False, started=False)
                for c in pod.spec.init_containers or []]
        regular = [self._status(c, pod, terminated(exit_code if c.name == container else 0,
                                                   message if c.name == container else None), ready=False,
                                started=False) for c in pod.spec.containers]
        self._write(pod, "Succeeded" if exit_code == 0 else "Failed", init, regular)

    def _status(self, container, pod: client.V1Pod, state: dict, ready: bool, started: bool) -> dict:
        image_id = self._image_ids.get(pod.metadata.uid, {}).get(container.image,
                                                                 f"{container.image}@sha256:{'0' * 64}")
        return {"name": container.name, "image": container.image, "imageID": image_id,
                "ready": ready, "started": started, "restartCount": 0, "state": copy.deepcopy(state),
                "containerID": f"containerd://{pod.metadata.uid[:12]}"}

    def _write(self, pod: client.V1Pod, phase: str, init: list[dict], regular: list[dict]) -> None:
        now = _now()
        done = phase in ("Succeeded", "Failed")
        conditions = [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
            {"type": "Initialized", "status": "True", "lastTransitionTime": now},
            {"type": "ContainersReady", "status": "False" if done else "True", "lastTransitionTime": now},
            {"type": "Ready", "status": "False" if done else "True", "lastTransitionTime": now},
        ]
        status = {"phase": phase, "conditions": conditions, "hostIP": "127.0.0.1", "podIP": "10.244.9.9",
                  "startTime": now, "initContainerStatuses": init, "containerStatuses": regular}
        self.core.patch_namespaced_pod_status(pod.metadata.name, pod.metadata.namespace, {"status": status})
