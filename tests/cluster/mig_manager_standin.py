"""MIG-manager STAND-IN: a test double for the NVIDIA GPU Operator's mig-manager.

The real mig-manager needs GPUs. This stand-in follows the same contract on
KWOK's fake nodes, so the operator can be tested against it:

- It watches the node label `nvidia.com/mig.config`. When the value changes
  (or `nvidia.com/mig.config.state` is removed, which asks for a retry), it
  sets `nvidia.com/mig.config.state=pending`.
- It reads the mig-parted config (`version: v1`, `mig-configs`) from the
  ConfigMap the ClusterPolicy names (`spec.migManager.config.name`; the
  configured name when there is no ClusterPolicy), key `config.yaml`, as the
  ConfigMap looked `configmap_delay` seconds
  ago: a mounted ConfigMap reaches the real mig-manager only after a lag, so a
  config written just before relabelling may not be seen yet.
- It sets `failed` for a missing config name, a malformed config, a layout the
  hardware would refuse (unknown profile, too many instances, invalid
  placement; see mig_table.py, its own table), while pods still hold that
  node's GPUs (it does not drain), or on a node a test made faulty
  (`refuse`). A `failed` leaves the node's GPUs, resources and labels as they
  were. Otherwise it rewrites the node's allocatable
  `nvidia.com/mig-<profile>` / `nvidia.com/gpu` resources and GFD labels to the
  applied layout and sets `success`.
- On a node a test marked with `reboot`, it passes through `rebooting` first,
  as mig-manager does when a MIG mode change needs a host reboot
  (WITH_REBOOT): `pending`, `rebooting`, then the apply and `success`.
- `heal` ends a node's fault and applies the node's config again, as a
  restarted mig-manager pod does with the config its label names.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import deque

import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from . import gpu_nodes, gpu_operator, mig_table
from .gpu_nodes import HANDLED_ANNOTATION, MIG_CONFIG, MIG_RESOURCE_PREFIX, MIG_STATE, STATE_ANNOTATION

log = logging.getLogger(__name__)
DONE_STATES = ("success", "failed")


class MigManagerStandIn:
    def __init__(
        self,
        api: client.CoreV1Api,
        namespace: str = "gpu-operator",
        configmap: str = "tessera-mig-parted-config",
        key: str = "config.yaml",
        configmap_delay: float = 2.0,
        apply_seconds: float = 0.5,
        poll_seconds: float = 0.2,
        cluster_policy: str | None = "cluster-policy",
    ):
        self.api = api
        self.namespace, self.configmap, self.key = namespace, configmap, key
        self.configmap_delay = configmap_delay
        self.apply_seconds = apply_seconds
        self.poll_seconds = poll_seconds
        self.cluster_policy = cluster_policy
        self._snapshots: deque[tuple[float, str | None]] = deque()
        self.errors: dict[str, str] = {}  # node -> reason of the last `failed`
        self.reboot_seconds = 3.0
        self._faulty: dict[str, str] = {}  # node -> why its hardware refuses every layout (`refuse`)
        self._rebooting: set[str] = set()  # nodes whose applies pass through `rebooting` (`reboot`)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mig-manager-standin", daemon=True)

    def start(self) -> "MigManagerStandIn":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    # -- faults a test injects ----------------------------------------------
    def refuse(self, node_name: str, why: str = "the GPUs refuse the MIG configuration") -> None:
        """From now on every apply on the node fails, as on hardware that refuses MIG changes."""
        self._faulty[node_name] = why

    def heal(self, node_name: str) -> None:
        """The node's fault is repaired and mig-manager restarted: it applies the config the label names again."""
        self._faulty.pop(node_name, None)
        self.api.patch_node(node_name, {"metadata": {"annotations": {HANDLED_ANNOTATION: None}}})

    def reboot(self, node_name: str) -> None:
        """From now on every apply on the node goes through `rebooting` (a host reboot) before it succeeds."""
        self._rebooting.add(node_name)

    # -- loop -------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._snapshot_configmap()
                for node in self.api.list_node(label_selector=MIG_CONFIG).items:
                    if self._wants_apply(node):
                        self._reconfigure_unless_gone(node)
            except Exception:  # keep the stand-in alive; tests see the log
                log.exception("mig-manager stand-in loop error")
            self._stop.wait(self.poll_seconds)

    def _snapshot_configmap(self) -> None:
        if self.cluster_policy:
            # A changed name behaves like a changed file: seen only after the lag.
            named = gpu_operator.mig_configmap_name(self.api.api_client, self.cluster_policy)
            self.configmap = named or self.configmap
        try:
            cm = self.api.read_namespaced_config_map(self.configmap, self.namespace)
            data = (cm.data or {}).get(self.key)
        except ApiException as e:
            if e.status != 404:
                raise
            data = None
        now = time.monotonic()
        if not self._snapshots or self._snapshots[-1][1] != data:
            self._snapshots.append((now, data))
        # Keep only the newest snapshot already older than the delay, and newer ones.
        while len(self._snapshots) > 1 and self._snapshots[1][0] <= now - self.configmap_delay:
            self._snapshots.popleft()

    def visible_config(self) -> str | None:
        """The ConfigMap key as a mounted file would show it now (lagging)."""
        cutoff = time.monotonic() - self.configmap_delay
        visible = None
        for stamp, data in self._snapshots:
            if stamp <= cutoff:
                visible = data
        return visible

    @staticmethod
    def _wants_apply(node: client.V1Node) -> bool:
        labels = node.metadata.labels or {}
        handled = (node.metadata.annotations or {}).get(HANDLED_ANNOTATION)
        return handled != labels[MIG_CONFIG] or labels.get(MIG_STATE) is None

    # -- one reconfiguration ---------------------------------------------
    def _reconfigure_unless_gone(self, node: client.V1Node) -> None:
        try:
            self._reconfigure(node)
        except ApiException as e:
            if e.status != 404:  # a test deleted the node meanwhile
                raise

    def _reconfigure(self, node: client.V1Node) -> None:
        name = node.metadata.name
        wanted = node.metadata.labels[MIG_CONFIG]
        # One patch: wait_for_state never sees the old success for the new value.
        self.api.patch_node(name, {"metadata": {"labels": {MIG_STATE: "pending"},
                                                "annotations": {HANDLED_ANNOTATION: wanted}}})
        time.sleep(self.apply_seconds)
        if name in self._rebooting:
            self._set_state(name, "rebooting")
            time.sleep(self.reboot_seconds)
        node = self.api.read_node(name)
        try:
            if name in self._faulty:
                raise mig_table.LayoutRefused(f"{name}: {self._faulty[name]}")
            self._refuse_if_gpus_in_use(name)
            product = node.metadata.labels["nvidia.com/gpu.product"]
            gpus = self._apply(product, gpu_nodes.gpu_states(node), wanted)
        except mig_table.LayoutRefused as e:
            self.errors[name] = str(e)
            log.info("stand-in: %s -> failed: %s", name, e)
            self._set_state(name, "failed")
            return
        self.errors.pop(name, None)
        self._write_node(node, product, gpus)
        self._set_state(name, "success")

    def _refuse_if_gpus_in_use(self, node_name: str) -> None:
        pods = self.api.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node_name}").items
        for pod in pods:
            if pod.status.phase in ("Succeeded", "Failed"):
                continue
            for c in pod.spec.containers + (pod.spec.init_containers or []):
                res = c.resources
                asked = {**((res and res.requests) or {}), **((res and res.limits) or {})}
                if any(r == "nvidia.com/gpu" or r.startswith(MIG_RESOURCE_PREFIX) for r in asked):
                    raise mig_table.LayoutRefused(
                        f"pod {pod.metadata.namespace}/{pod.metadata.name} still holds GPUs on {node_name}")

    def _apply(self, product: str, gpus: list, wanted: str) -> list:
        text = self.visible_config()
        if text is None:
            raise mig_table.LayoutRefused(f"ConfigMap {self.namespace}/{self.configmap} key {self.key} not visible")
        return apply_mig_config(product, gpus, text, wanted)

    def _write_node(self, node: client.V1Node, product: str, gpus: list) -> None:
        labels, resources = gpu_nodes.render(product, gpus)
        # Null removes a key in a strategic merge patch: drop stale MIG entries.
        stale_labels = {k: None for k in node.metadata.labels if k.startswith(MIG_RESOURCE_PREFIX)}
        self.api.patch_node(node.metadata.name, {"metadata": {
            "labels": {**stale_labels, **labels},
            "annotations": {STATE_ANNOTATION: json.dumps(gpus)},
        }})
        status = {}
        for field in ("capacity", "allocatable"):
            current = getattr(node.status, field) or {}
            stale = {k: None for k in current if k.startswith(MIG_RESOURCE_PREFIX)}
            status[field] = {**stale, **resources}
        self.api.patch_node_status(node.metadata.name, {"status": status})

    def _set_state(self, node_name: str, state: str) -> None:
        self.api.patch_node(node_name, {"metadata": {"labels": {MIG_STATE: state}}})

    # -- helpers for tests --------------------------------------------------
    def wait_for_state(self, node_name: str, states=DONE_STATES, timeout: float = 60) -> str:
        """Waits until the node's mig.config.state is one of `states` for the
        node's current mig.config value, and returns it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            node = self.api.read_node(node_name)
            labels = node.metadata.labels or {}
            state = labels.get(MIG_STATE)
            handled = (node.metadata.annotations or {}).get(HANDLED_ANNOTATION)
            if state in states and handled == labels.get(MIG_CONFIG):
                return state
            time.sleep(0.2)
        raise TimeoutError(f"{node_name}: mig.config.state not in {states} after {timeout}s")


# -- mig-parted config, as the hardware would take it (no cluster needed) ---

def apply_mig_config(product: str, gpus: list, text: str, wanted: str) -> list:
    """New per-GPU states after applying mig-config `wanted` from mig-parted
    config `text` to GPUs in states `gpus`; raises LayoutRefused where
    mig-parted would fail. GPUs no entry names keep their state."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise mig_table.LayoutRefused(f"config is not YAML: {e}") from e
    if not isinstance(doc, dict) or doc.get("version") != "v1" or not isinstance(doc.get("mig-configs"), dict):
        raise mig_table.LayoutRefused("config needs `version: v1` and a `mig-configs` map")
    entries = doc["mig-configs"].get(wanted)
    if not isinstance(entries, list):
        raise mig_table.LayoutRefused(f"mig-config {wanted!r} not found in the visible config")
    new = list(gpus)
    touched: set[int] = set()
    for entry in entries:
        if not isinstance(entry, dict):
            raise mig_table.LayoutRefused(f"entry {entry!r} is not a map")
        indices = _devices(entry, len(gpus))
        if touched & set(indices):
            raise mig_table.LayoutRefused(f"GPUs {sorted(touched & set(indices))} appear in two entries")
        touched |= set(indices)
        if entry.get("mig-enabled") is True:
            devices = entry.get("mig-devices") or {}
            if not isinstance(devices, dict):
                raise mig_table.LayoutRefused("mig-devices must be a map of profile to count")
            mig_table.place(product, devices)
            state = {p: n for p, n in devices.items() if n}
        elif entry.get("mig-enabled") is False:
            if entry.get("mig-devices"):
                raise mig_table.LayoutRefused("mig-devices given with mig-enabled: false")
            state = None
        else:
            raise mig_table.LayoutRefused("each entry needs mig-enabled: true or false")
        for i in indices:
            new[i] = state
    return new


def _devices(entry: dict, gpu_count: int) -> list[int]:
    devices = entry.get("devices")
    if devices == "all":
        return list(range(gpu_count))
    if isinstance(devices, list) and all(isinstance(d, int) and not isinstance(d, bool) for d in devices):
        bad = [d for d in devices if not 0 <= d < gpu_count]
        if bad:
            raise mig_table.LayoutRefused(f"devices {bad} do not exist (node has {gpu_count} GPUs)")
        return devices
    raise mig_table.LayoutRefused(f"devices must be `all` or a list of GPU indices, not {devices!r}")
