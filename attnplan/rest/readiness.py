"""The node the service plans for: declared facts, or this machine probed in the background.

Requests only ever read what is already known. The probe runs in a thread at start-up (and on
``?refresh=true``); the artifactory check runs in another thread on a TTL, because an HTTP
round-trip to a remote host must never sit on a request's path. Until the first probe is done,
``readiness()`` says why the service is not ready instead of making anyone wait.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Callable, Optional

from attnplan.policy import NodeFacts
from attnplan.node import NodeCache, ProbeIO, probe_node
from attnplan.node.probe import needs_artifactory_check
from attnplan.policy import Fact
from attnplan.node.probe import (ARTIFACTORY_TTL_S, DEFAULT_ARTIFACTORY, DEFAULT_TIMEOUT_S, artifactory_policy,
                                   check_artifactory)

from .metrics import Metrics

log = logging.getLogger("attnplan.api")

# A probe (NVML, package metadata, a directory walk) that has not finished by then is stuck:
# it is counted as a failure once, and /readyz keeps saying how long it has been running.
PROBE_DEADLINE_S = 30.0
# Until a first probe succeeds, a failed one is retried this often (liveness stays green, so
# nothing else would restart the process).
PROBE_RETRY_S = 10.0
# ``?refresh=true`` within this long of the last finished probe is answered from it: a client
# looping on refresh cannot make the node re-probe (and spawn threads) faster than this.
REFRESH_INTERVAL_S = 10.0


class NotReady(Exception):
    """The node's facts are not known yet; ``reason`` says why."""

    def __init__(self, reason: str):
        self.reason = reason
        super().__init__(reason)


class NodeService:
    def __init__(self, *, metrics: Metrics, node: Optional[NodeFacts] = None, node_cache: Optional[NodeCache] = None,
                 probe_io: Optional[ProbeIO] = None, artifactory_ttl: float = ARTIFACTORY_TTL_S,
                 artifactory_timeout: float = DEFAULT_TIMEOUT_S, probe_deadline: float = PROBE_DEADLINE_S,
                 refresh_interval: float = REFRESH_INTERVAL_S, clock: Callable[[], float] = time.monotonic):
        self.metrics = metrics
        self.declared = node
        self.io = probe_io or ProbeIO()
        # The app's own probe skips the artifactory: the refresher thread owns that fact.
        self.cache = node_cache or NodeCache(lambda: probe_node(self.io, check_artifactory_now=False))
        self.artifactory_ttl = artifactory_ttl
        self.artifactory_timeout = artifactory_timeout
        self.probe_deadline = probe_deadline
        self.refresh_interval = refresh_interval
        self._clock = clock
        self._probed_at: Optional[float] = None  # when the last probe finished
        self.probes_started = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._probe_done = threading.Event()
        self._probing_since: Optional[float] = None
        self._probe_error: Optional[str] = None
        self._probe_thread: Optional[threading.Thread] = None
        self._artifactory: Optional[tuple[Fact, Fact]] = None
        self._artifactory_thread: Optional[threading.Thread] = None
        self._base: Optional[NodeFacts] = None
        self._served: Optional[NodeFacts] = node

    # -- lifecycle ---------------------------------------------------------------------
    def start(self) -> None:
        if self.declared is not None:
            self.metrics.ready.set(1)
            return
        known = self.cache.peek()
        if known is not None:
            self._set_base(known)
        else:
            self._start_probe(refresh=False)
        self._artifactory_thread = threading.Thread(target=self._artifactory_loop, name="attnplan-artifactory",
                                                    daemon=True)
        self._artifactory_thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    # -- what requests read --------------------------------------------------------------
    def node(self) -> NodeFacts:
        """The facts to plan for; ``NotReady`` until the first probe is done."""
        served = self._served
        if served is None:
            raise NotReady(self.readiness()[1])
        return served

    def readiness(self) -> tuple[bool, str]:
        if self._served is not None:
            return True, "node facts " + ("declared" if self.declared is not None else "probed")
        with self._lock:
            since, error = self._probing_since, self._probe_error
        if since is not None:
            running = self._clock() - since
            return False, f"probing since {running:.1f}s" + (f" (last attempt failed: {error})" if error else "")
        return False, f"probe failed: {error} (retrying every {PROBE_RETRY_S:.0f}s)" if error else "probe not started"

    def refresh(self, timeout: float) -> NodeFacts:
        """Re-probe (one probe at a time; concurrent callers share it) and wait up to ``timeout``."""
        if self.declared is not None:
            return self.declared
        done = self._start_probe(refresh=True)
        if not done.wait(timeout):
            raise NotReady(f"re-probe still running after {timeout:.0f}s")
        with self._lock:
            error = self._probe_error
        if error:
            raise NotReady(f"probe failed: {error}")
        return self.node()

    async def refresh_async(self, timeout: float) -> NodeFacts:
        """``refresh`` for a request: coalesced (one probe in flight, shared by every caller; a
        probe finished less than ``refresh_interval`` ago is the answer) and awaited without
        holding a worker thread per caller."""
        if self.declared is not None:
            return self.declared
        with self._lock:
            probed_at, error = self._probed_at, self._probe_error
        if (probed_at is not None and error is None and self._served is not None
                and self._clock() - probed_at < self.refresh_interval):
            return self._served
        done = self._start_probe(refresh=True)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not done.is_set():
            if loop.time() >= deadline:
                raise NotReady(f"re-probe still running after {timeout:.0f}s")
            await asyncio.sleep(0.05)
        with self._lock:
            error = self._probe_error
        if error:
            raise NotReady(f"probe failed: {error}")
        return self.node()

    # -- the probe -------------------------------------------------------------------------
    def _start_probe(self, refresh: bool) -> threading.Event:
        with self._lock:
            if self._probe_thread is not None and self._probe_thread.is_alive():
                return self._probe_done
            self._probe_done = threading.Event()
            self._probing_since = self._clock()
            self.probes_started += 1
            done = self._probe_done
            self._probe_thread = threading.Thread(target=self._probe, args=(refresh, done), name="attnplan-probe",
                                                  daemon=True)
            self._probe_thread.start()
            watchdog = threading.Timer(self.probe_deadline, self._overran, args=(done,))
            watchdog.daemon = True
            watchdog.start()
            return done

    def _retry(self) -> None:
        if self._served is None and not self._stop.is_set():
            self._start_probe(refresh=True)

    def _overran(self, done: threading.Event) -> None:
        if not done.is_set():
            self.metrics.probe_failures.inc()
            log.warning("node probe still running after %.1fs", self.probe_deadline)

    def _probe(self, refresh: bool, done: threading.Event) -> None:
        error: Optional[str] = None
        try:
            self._set_base(self.cache.get(refresh=refresh))
        except Exception as exc:  # noqa: BLE001 - an injected probe may raise anything; say so on /readyz
            error = f"{type(exc).__name__}: {exc}"
            self.metrics.probe_failures.inc()
            log.warning("node probe failed: %s", error)
        with self._lock:
            self._probing_since = None
            self._probe_error = error
            self._probed_at = self._clock()
        done.set()
        if error and self._served is None and not self._stop.is_set():
            retry = threading.Timer(PROBE_RETRY_S, self._retry)
            retry.daemon = True
            retry.start()
        self._wake.set()  # the artifactory loop may now know whether to check

    def _set_base(self, node: NodeFacts) -> None:
        with self._lock:
            self._base = node
            self._publish()
        self.metrics.ready.set(1)

    def _publish(self) -> None:
        # Called with the lock held: the served node is the probed one plus the artifactory fact.
        base = self._base
        if base is None:
            return
        if self._artifactory is not None:
            url, reach = self._artifactory
            node = base.with_fact(artifactory_url=url, artifactory_reachable=reach)
        elif self._should_check(base):
            node = base.with_fact(artifactory_reachable=Fact.unknown("being checked in the background"))
        else:
            node = base
        # Keep the same object when nothing changed, so answer caches keyed by it stay warm.
        if node != self._served:
            self._served = node

    # -- the artifactory -------------------------------------------------------------------
    def _should_check(self, node: NodeFacts) -> bool:
        # Which nodes need it is decided in one place only (node/probe.py needs_artifactory_check).
        policy = artifactory_policy(self.io.env)
        return policy == "always" or (policy == "auto" and needs_artifactory_check(node))

    def _artifactory_loop(self) -> None:
        while not self._stop.is_set():
            # Cleared before looking, so a probe finishing meanwhile still wakes the next wait.
            self._wake.clear()
            with self._lock:
                base = self._base
            if base is not None and self._should_check(base):
                try:
                    url, reach = check_artifactory(self.io, self.artifactory_timeout)
                    result = "reachable" if reach.value else "unreachable"
                except Exception as exc:  # noqa: BLE001 - an injected checker may raise; the fact says why
                    url = Fact.measured(self.io.env.get("FLASHINFER_CUBINS_REPOSITORY", DEFAULT_ARTIFACTORY))
                    reach = Fact.unknown(f"check failed: {type(exc).__name__}")
                    result = "error"
                self.metrics.artifactory_checks.labels(result=result).inc()
                with self._lock:
                    self._artifactory = (url, reach)
                    self._publish()
                wait = self.artifactory_ttl
            else:
                wait = None  # nothing to check until a probe tells us the node's capability
            self._wake.wait(wait)
