"""Prometheus metrics, one registry per app (tests build many apps in one process)."""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

# A plan served from the cache takes well under a millisecond; the long tail is cold
# evaluations (rejections compute verified suggestions) and probes.
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter("attnplan_http_requests", "HTTP requests by route template, method and status",
                                ("route", "method", "status"), registry=r)
        self.latency = Histogram("attnplan_http_request_seconds", "HTTP request latency by route template",
                                 ("route",), buckets=LATENCY_BUCKETS, registry=r)
        self.plans = Counter("attnplan_plans", "plan answers by status and backend per phase",
                             ("status", "prefill", "decode"), registry=r)
        self.probe_failures = Counter("attnplan_probe_failures", "node probes that raised or overran their deadline",
                                      registry=r)
        self.artifactory_checks = Counter("attnplan_artifactory_checks", "background artifactory reachability checks",
                                          ("result",), registry=r)
        for result in ("reachable", "unreachable", "error"):
            self.artifactory_checks.labels(result=result)  # exported as 0 before the first check
        self.ready = Gauge("attnplan_ready", "1 once the node's facts are known", registry=r)

    def exposition(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


class MetricsMiddleware:
    """Counts and times every request, labelled by route template (never the raw path: a
    scanner's random URLs must not mint new series)."""

    def __init__(self, app, metrics: Metrics, known_paths: frozenset[str]):  # type: ignore[no-untyped-def]
        self.app = app
        self.metrics = metrics
        self.known_paths = known_paths

    async def __call__(self, scope, receive, send):  # type: ignore[no-untyped-def]
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        t0 = time.perf_counter()
        status = 500

        async def send_status(message):  # type: ignore[no-untyped-def]
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            route = getattr(scope.get("route"), "path", None)
            if route is None:
                path = scope["path"]
                route = path if path in self.known_paths else "unmatched"
            method = scope["method"] if scope["method"] in _METHODS else "other"
            self.metrics.latency.labels(route).observe(time.perf_counter() - t0)
            self.metrics.requests.labels(route, method, str(status)).inc()
