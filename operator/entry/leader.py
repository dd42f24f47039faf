"""Leader election on a coordination.k8s.io/v1 Lease: one operator writes at a time.

A rolling update briefly runs two operators; kopf's peering only pauses
handlers and is not a lease, so tessera takes a Lease before it reconciles
and keeps it by renewing. The rules (those of client-go's leaderelection):

- A candidate takes the Lease when nobody holds it, or when its holder's
  record has not changed for `lease_duration_s` *as this candidate observed
  it* (its own monotonic clock, never the timestamps written by another
  machine's clock). Every write to the Lease carries the resourceVersion read,
  so two candidates cannot both win: the API server refuses the second.
- The leader renews every `retry_s`. Its writes are allowed only until
  `renew_deadline_s` after it *sent* its last successful renewal. A
  candidate cannot see that renewal before it was sent, so it takes over no
  earlier than send time + `lease_duration_s`: the leader stops writing
  `lease_duration_s - renew_deadline_s` before anyone else may start, a
  margin for clock rate differences and a write in flight (each write's
  HTTP timeout is cut to end before the lease could expire).
- A leader that cannot renew in time stops writing at once and shuts the
  process down (kubelet restarts it as a candidate); on a clean stop it
  releases the Lease so the next operator need not wait out the duration.

The operator's API client is guarded (`guard_writes`): every non-read
request fails while this process is not the leader, whatever module sends it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

log = logging.getLogger("tessera.operator")
READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
LEASE_NAME = "tessera-operator"


class NotLeader(RuntimeError):
    """A write was attempted while this process does not hold the Lease (or may no longer rely on it)."""


@dataclass(frozen=True)
class LeaseTiming:
    lease_duration_s: float = 15.0
    renew_deadline_s: float = 10.0
    retry_s: float = 2.0

    def __post_init__(self) -> None:
        if not 0 < self.retry_s < self.renew_deadline_s < self.lease_duration_s:
            raise ValueError("leader election needs 0 < retry < renew deadline < lease duration, got "
                             f"{self.retry_s}, {self.renew_deadline_s}, {self.lease_duration_s}")

    @classmethod
    def for_duration(cls, lease_duration_s: float) -> LeaseTiming:
        """client-go's proportions (15 s / 10 s / 2 s) scaled to one lease duration."""
        return cls(lease_duration_s, lease_duration_s * 2 / 3, lease_duration_s * 2 / 15)


def default_identity() -> str:
    """The pod's name where the Deployment sets POD_NAME, else the host name; plus a per-process suffix."""
    return f"{os.environ.get('POD_NAME') or socket.gethostname()}_{uuid.uuid4().hex[:8]}"


class LeaderElector:
    """Takes, renews and releases one Lease. Blocking calls; the async loop runs them in a thread."""

    def __init__(self, api_client: client.ApiClient, namespace: str, name: str = LEASE_NAME,
                 identity: str | None = None, timing: LeaseTiming | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.api = client.CoordinationV1Api(api_client)
        self.namespace, self.name = namespace, name
        self.identity = identity or default_identity()
        self.timing = timing or LeaseTiming()
        self.clock = clock
        self._valid_until = 0.0
        """Monotonic time until which this process may write (0: not leader)."""
        self._observed: tuple[Any, float] | None = None
        """(the holder's record as last read, the monotonic time it was first seen so)."""

    # -- what the rest of the operator asks ------------------------------------
    def may_write(self) -> bool:
        return self.clock() < self._valid_until

    def write_time_left(self) -> float:
        return max(0.0, self._valid_until - self.clock())

    # -- one attempt -----------------------------------------------------------
    def try_acquire_or_renew(self) -> bool:
        """One round: take or renew the Lease if the rules allow; True while this process leads."""
        sent = self.clock()
        try:
            lease = self.api.read_namespaced_lease(self.name, self.namespace)
        except ApiException as error:
            if error.status != 404:
                return self._failed(f"reading Lease {self.namespace}/{self.name}: {error.reason}")
            return self._create(sent)
        spec = lease.spec or client.V1LeaseSpec()
        holder = spec.holder_identity or ""
        metadata = lease.metadata or client.V1ObjectMeta()
        record = (holder, spec.renew_time, spec.lease_transitions, metadata.resource_version)
        if self._observed is None or self._observed[0] != record:
            self._observed = (record, sent)
        if holder and holder != self.identity:
            if sent - self._observed[1] < (spec.lease_duration_seconds or self.timing.lease_duration_s):
                self._valid_until = 0.0
                return False
            log.info("Lease %s/%s: holder %s has not renewed for a lease duration; taking over",
                     self.namespace, self.name, holder)
        transitions = (spec.lease_transitions or 0) + (0 if holder == self.identity else 1)
        lease.spec = self._spec(transitions, acquire_time=spec.acquire_time if holder == self.identity else None)
        try:
            self.api.replace_namespaced_lease(self.name, self.namespace, lease)  # resourceVersion: optimistic
        except ApiException as error:
            return self._failed(f"updating Lease {self.namespace}/{self.name}: {error.status} {error.reason}")
        return self._won(sent, first=holder != self.identity)

    def release(self) -> None:
        """Gives the Lease up (clean stop): the next candidate need not wait out the duration."""
        was_leader, self._valid_until = self._valid_until > 0, 0.0
        if not was_leader:
            return
        try:
            lease = self.api.read_namespaced_lease(self.name, self.namespace)
            spec = lease.spec
            if spec is None or spec.holder_identity != self.identity:
                return
            spec.holder_identity = None
            spec.lease_duration_seconds = 1
            spec.renew_time = datetime.now(timezone.utc)
            self.api.replace_namespaced_lease(self.name, self.namespace, lease)
            log.info("released Lease %s/%s", self.namespace, self.name)
        except ApiException as error:
            log.warning("could not release Lease %s/%s (%s); the next operator waits for it to expire",
                        self.namespace, self.name, error.reason)

    # -- helpers ---------------------------------------------------------------
    def _spec(self, transitions: int, acquire_time: Any = None) -> client.V1LeaseSpec:
        now = datetime.now(timezone.utc)
        return client.V1LeaseSpec(holder_identity=self.identity, lease_duration_seconds=round(
            self.timing.lease_duration_s) or 1, acquire_time=acquire_time or now, renew_time=now,
            lease_transitions=transitions)

    def _create(self, sent: float) -> bool:
        body = client.V1Lease(metadata=client.V1ObjectMeta(name=self.name, namespace=self.namespace),
                              spec=self._spec(0))
        try:
            self.api.create_namespaced_lease(self.namespace, body)
        except ApiException as error:
            if error.status == 404 and self._create_namespace():
                return self._create(sent)
            return self._failed(f"creating Lease {self.namespace}/{self.name}: {error.status} {error.reason}")
        return self._won(sent, first=True)

    def _create_namespace(self) -> bool:
        """Out of cluster the Lease's namespace may not exist yet (in cluster it is the pod's own)."""
        try:
            client.CoreV1Api(self.api.api_client).create_namespace(
                client.V1Namespace(metadata=client.V1ObjectMeta(name=self.namespace)))
        except ApiException as error:
            if error.status != 409:
                log.warning("the Lease's namespace %s is missing and cannot be created: %s", self.namespace,
                            error.reason)
                return False
        return True

    def _won(self, sent: float, first: bool) -> bool:
        self._valid_until = sent + self.timing.renew_deadline_s
        self._observed = None
        if first:
            log.info("leading: took Lease %s/%s as %s", self.namespace, self.name, self.identity)
        return True

    def _failed(self, why: str) -> bool:
        """A round that could not read or write the Lease; leadership lasts only until its deadline."""
        log.warning("leader election: %s", why)
        return self.may_write()

    # -- the async loops -------------------------------------------------------
    async def acquire(self) -> None:
        """Returns once this process leads (retrying every `retry_s`)."""
        waiting_logged = False
        while not await asyncio.to_thread(self.try_acquire_or_renew):
            if not waiting_logged:
                log.info("standby: Lease %s/%s is held by another operator; waiting", self.namespace, self.name)
                waiting_logged = True
            await asyncio.sleep(self.timing.retry_s)

    async def keep(self, on_lost: Callable[[], None]) -> None:
        """Renews until cancelled; calls `on_lost` once renewal missed the deadline."""
        while True:
            await asyncio.sleep(self.timing.retry_s)
            if not await asyncio.to_thread(self.try_acquire_or_renew):
                self._valid_until = 0.0
                log.error("lost Lease %s/%s (not renewed within %.0f s): stopping all writes and exiting",
                          self.namespace, self.name, self.timing.renew_deadline_s)
                on_lost()
                return


def guard_writes(api_client: client.ApiClient, elector: LeaderElector) -> None:
    """Makes every write through `api_client` require the Lease, its HTTP timeout ending before the Lease could.

    Reads pass: a standby operator may warm up, it only must not change the cluster.
    """
    request = api_client.rest_client.request  # (method, url, ..., _request_timeout=...) in every client version

    def guarded(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        if method.upper() not in READ_METHODS:
            left = elector.write_time_left()
            if left <= 0:
                raise NotLeader(f"{method} {url.split('?')[0]}: this operator does not hold the Lease "
                                f"{elector.namespace}/{elector.name}")
            margin = elector.timing.lease_duration_s - elector.timing.renew_deadline_s
            kwargs["_request_timeout"] = _shorter(kwargs.get("_request_timeout"), left + margin)
        return request(method, url, *args, **kwargs)

    api_client.rest_client.request = guarded  # type: ignore[method-assign]


def _shorter(current: Any, limit: float) -> float:
    if isinstance(current, (int, float)) and current > 0:
        return min(float(current), limit)
    return limit
