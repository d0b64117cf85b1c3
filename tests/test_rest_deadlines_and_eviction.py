"""Issue 24, the service: body and request deadlines, refusals that close the connection, the
connection cap evicting clients that drip a body, and plans computed off the event loop.

Each case failed before (a body dripped a byte every 2 s held its connection forever; 401/413/422
left the connection open for the client to keep sending; 1,000 dripping connections starved
``/healthz``; a 230 ms plan stalled every other request). No timed assertions: deadlines are set
short and the checks are about what happens, with generous waits for it to happen.
"""

from __future__ import annotations

import json
import socket
import threading
import time

import httpx
import pytest

from attnplan.policy import simulated_node
from attnplan.rest import service as service_mod
from attnplan.rest.app import create_app
from attnplan.rest.server import BackgroundServer

TOKEN = "service-token-0123456789"
BODY = json.dumps({"config": {"head_dim": 128, "num_qo_heads": 32, "num_kv_heads": 8}}).encode()


def app(**kw):
    return create_app(node=simulated_node("B200"), **kw)


def connect(srv) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
    return s


def read_until_closed(s: socket.socket, limit: float = 30.0) -> bytes:
    """Everything the server sends until it closes (raises if it is still open after ``limit``)."""
    s.settimeout(limit)
    out = b""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            chunk = s.recv(65536)
        except ConnectionResetError:
            return out
        if not chunk:
            return out
        out += chunk
    raise AssertionError(f"connection still open after {limit}s; got {out[:200]!r}")


def head(path: str = "/v1/plan", length: int = 60000, extra: str = "") -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {length}\r\n{extra}\r\n").encode()


def test_a_body_that_never_completes_gets_408_and_the_connection_closes():
    with BackgroundServer(app(), body_timeout=0.5) as srv:
        s = connect(srv)
        s.sendall(head() + b"{")
        got = read_until_closed(s)
        guard = srv.config.http.attnplan_guard
    assert got.startswith(b"HTTP/1.1 408 ") and b"connection: close" in got.lower(), got[:300]
    assert guard.body_timed_out == 1


def test_a_dripped_body_is_timed_from_its_headers_not_from_the_last_byte():
    with BackgroundServer(app(), body_timeout=1.0) as srv:
        s = connect(srv)
        s.sendall(head())
        stop = threading.Event()

        def drip() -> None:
            while not stop.is_set():
                try:
                    s.sendall(b" ")
                except OSError:
                    return
                time.sleep(0.2)

        threading.Thread(target=drip, daemon=True).start()
        try:
            got = read_until_closed(s)
        finally:
            stop.set()
    assert got.startswith(b"HTTP/1.1 408 "), got[:200]


@pytest.mark.parametrize("case", ["401", "413", "422", "415"])
def test_refusals_close_the_connection(case):
    kw = {"token": TOKEN} if case == "401" else {}
    with BackgroundServer(app(**kw)) as srv:
        s = connect(srv)
        if case == "401":  # headers of a large body, none of it sent: the client could keep it open
            s.sendall(head())
        elif case == "413":
            s.sendall(head(length=1_000_000))
        elif case == "422":
            bad = b'{"config": {"head_dim": "x", "num_qo_heads": 32}}'
            s.sendall(head(length=len(bad)) + bad)
        else:
            s.sendall(head(length=2).replace(b"application/json", b"text/plain") + b"{}")
        got = read_until_closed(s)
    status = got.split(b" ", 2)[1].decode()
    assert status == case and b"connection: close" in got.lower(), got[:300]


def test_a_good_request_keeps_its_connection():
    with BackgroundServer(app()) as srv:
        with httpx.Client(base_url=srv.url, timeout=30) as c:
            r1 = c.post("/v1/plan", content=BODY, headers={"content-type": "application/json"})
            r2 = c.get("/healthz")
        guard = srv.config.http.attnplan_guard
    assert r1.status_code == 200 and r2.status_code == 200
    assert "close" not in r1.headers.get("connection", "")
    assert guard.body_timed_out == guard.request_timed_out == 0


def test_dripping_bodies_are_evicted_for_a_health_probe():
    with BackgroundServer(app(), max_connections=20, body_timeout=600) as srv:
        held = []
        for _ in range(20):
            s = connect(srv)
            s.sendall(head())
            held.append(s)
        guard = srv.config.http.attnplan_guard
        deadline = time.monotonic() + 30
        while len(guard.receiving) < 20 and time.monotonic() < deadline:
            time.sleep(0.05)
        receiving = len(guard.receiving)
        r = httpx.get(srv.url + "/healthz", timeout=30)
        evicted = guard.evicted
        for s in held:
            s.close()
    assert receiving == 20 and r.status_code == 200 and evicted >= 1


def test_a_request_past_its_deadline_is_answered_503(monkeypatch):
    real = service_mod.render_answer

    def slow(*a, **kw):
        time.sleep(3)
        return real(*a, **kw)

    monkeypatch.setattr(service_mod, "render_answer", slow)
    with BackgroundServer(app(), request_timeout=0.5) as srv:
        r = httpx.post(srv.url + "/v1/plan", content=BODY, headers={"content-type": "application/json"}, timeout=30)
        guard = srv.config.http.attnplan_guard
    assert r.status_code == 503 and "not answered within" in r.json()["detail"]
    assert guard.request_timed_out == 1


def test_a_slow_plan_does_not_stall_other_requests(monkeypatch):
    real = service_mod.render_answer
    release = threading.Event()

    def blocked(*a, **kw):
        release.wait(60)
        return real(*a, **kw)

    monkeypatch.setattr(service_mod, "render_answer", blocked)
    with BackgroundServer(app()) as srv:
        result = {}

        def slow_plan() -> None:
            result["plan"] = httpx.post(srv.url + "/v1/plan", content=BODY,
                                        headers={"content-type": "application/json"}, timeout=90)

        t = threading.Thread(target=slow_plan)
        t.start()
        time.sleep(0.3)  # let the plan reach its worker thread
        try:
            health = [httpx.get(srv.url + "/healthz", timeout=30).status_code for _ in range(5)]
            pending = t.is_alive()
        finally:
            release.set()
            t.join(60)
    # /healthz answered five times while the plan was still being computed (on the loop it could not).
    assert health == [200] * 5 and pending and result["plan"].status_code == 200
