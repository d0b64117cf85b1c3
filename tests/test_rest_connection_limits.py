"""Issue 16, the REST service: silent and slow-header connections are closed, connections are
capped without locking out health probes, refresh is coalesced, token rules, no token in URLs or
logs, /docs without a CDN, schema and code agree on node.device.

Every socket test bounds its own waits (socket timeouts, deadlines): a regression fails the test,
it never hangs the suite.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time

import httpx
import pytest

from attnplan.cli.main import main as cli_main
from attnplan.policy import simulated_node
from attnplan.node import NodeCache
from attnplan.rest.app import create_app
from attnplan.rest.logs import RateLimit, redact
from attnplan.rest.security import check_token, resolve_token
from attnplan.rest.server import BackgroundServer

LLAMA = {"head_dim": 128, "num_qo_heads": 32, "num_kv_heads": 8}
TOKEN = "0123456789abcdef-token"


def closed_within(sock: socket.socket, seconds: float) -> bool:
    """True when the server closes ``sock`` (EOF or reset) within ``seconds``."""
    sock.settimeout(0.2)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if sock.recv(4096) == b"":
                return True
        except socket.timeout:
            continue
        except OSError:  # reset
            return True
    return False


def connect(srv: BackgroundServer) -> socket.socket:
    return socket.create_connection((srv.host, srv.port), timeout=5)


# -- header deadline ---------------------------------------------------------------------------
def test_silent_and_dripping_connections_are_closed_after_the_header_deadline():
    with BackgroundServer(create_app(node=simulated_node("B200")), header_timeout=0.5) as srv:
        silent = connect(srv)
        drip = connect(srv)
        t0 = time.monotonic()
        drip.sendall(b"GET /healthz HTTP/1.1\r\n")
        for _ in range(4):  # a byte every 0.2 s: each byte must not extend the deadline
            time.sleep(0.2)
            try:
                drip.sendall(b"X")
            except OSError:
                break
        assert closed_within(silent, 5) and closed_within(drip, 5)
        assert time.monotonic() - t0 < 5
        # A prompt request is served, and its keep-alive connection is reused within the deadline.
        with httpx.Client(base_url=srv.url, timeout=5) as c:
            assert c.get("/healthz").status_code == 200
            assert c.get("/healthz").status_code == 200
        guard = srv.config.http.attnplan_guard
        assert guard.timed_out >= 2


def test_keep_alive_connection_idle_past_the_deadline_is_closed():
    with BackgroundServer(create_app(node=simulated_node("B200")), header_timeout=0.5) as srv:
        s = connect(srv)
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        s.settimeout(5)
        assert b"200 OK" in s.recv(4096)
        s.sendall(b"GET /heal")  # the next request, never finished
        assert closed_within(s, 5)


# -- connection cap --------------------------------------------------------------------------
def _raise_nofile(need: int) -> None:
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < need:
        pytest.skip(f"RLIMIT_NOFILE hard limit {hard} < {need} descriptors this test needs")
    if soft != resource.RLIM_INFINITY and soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))


def test_healthz_answers_within_1s_while_5000_idle_connections_are_held():
    n, cap = 5000, 500
    _raise_nofile(n + cap + 512)  # client and server share this process
    held: list[socket.socket] = []
    # A long header deadline: only the cap protects the server here.
    with BackgroundServer(create_app(node=simulated_node("B200")), max_connections=cap, header_timeout=60) as srv:
        try:
            for _ in range(n):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                s.setblocking(False)
                s.connect_ex((srv.host, srv.port))
                held.append(s)
            time.sleep(0.5)  # let the server accept (and evict) them
            guard = srv.config.http.attnplan_guard
            for _ in range(3):
                t0 = time.monotonic()
                r = httpx.get(srv.url + "/healthz", timeout=5)
                elapsed = time.monotonic() - t0
                assert r.status_code == 200 and elapsed < 1.0, elapsed
            assert len(guard.open) <= cap
            assert guard.evicted > 0  # silent ones made room (the rest may still wait in the listen backlog)
        finally:
            for s in held:
                s.close()


def test_busy_connections_are_never_evicted():
    release = threading.Event()

    def slow_probe():
        release.wait(10)
        return simulated_node("B200")

    app = create_app(node_cache=NodeCache(slow_probe), refresh_interval=0)
    with BackgroundServer(app, max_connections=2, header_timeout=30) as srv:
        release.set()
        with httpx.Client(base_url=srv.url, timeout=10) as c:
            deadline = time.monotonic() + 10
            while c.get("/readyz").status_code != 200 and time.monotonic() < deadline:
                time.sleep(0.05)
        release.clear()
        busy = connect(srv)
        busy.sendall(b"GET /v1/node?refresh=true HTTP/1.1\r\nHost: x\r\n\r\n")  # waits on the probe
        time.sleep(0.3)
        others = [connect(srv) for _ in range(3)]  # each evicts an idle one, or is refused
        time.sleep(0.3)
        release.set()
        busy.settimeout(10)
        assert b"200 OK" in busy.recv(65536)
        for s in others + [busy]:
            s.close()


# -- refresh -----------------------------------------------------------------------------------
def test_refresh_is_coalesced_and_needs_the_token_on_loopback():
    calls = []

    def probe():
        calls.append(time.monotonic())
        time.sleep(0.2)
        return simulated_node("B200")

    app = create_app(node_cache=NodeCache(probe), token=TOKEN, refresh_interval=60)
    with BackgroundServer(app) as srv, httpx.Client(base_url=srv.url, timeout=10) as c:
        deadline = time.monotonic() + 10
        while c.get("/readyz").status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert c.get("/v1/node", params={"refresh": "true"}).status_code == 401  # loopback too
        threads_before = threading.active_count()
        auth = {"Authorization": f"Bearer {TOKEN}"}

        async def many() -> list[int]:
            async with httpx.AsyncClient(base_url=srv.url, timeout=10, headers=auth) as ac:
                rs = await asyncio.gather(*(ac.get("/v1/node", params={"refresh": "true"}) for _ in range(40)))
            return [r.status_code for r in rs]

        assert asyncio.run(many()) == [200] * 40
        nodes = app.state.attnplan.nodes
        assert nodes.probes_started == 1  # the start-up probe answers every refresh within the interval
        assert threading.active_count() <= threads_before + 3


def test_refresh_after_the_interval_probes_once_for_concurrent_callers():
    calls = []

    def probe():
        calls.append(1)
        time.sleep(0.3)
        return simulated_node("B200")

    app = create_app(node_cache=NodeCache(probe), refresh_interval=0)
    with BackgroundServer(app) as srv:
        with httpx.Client(base_url=srv.url, timeout=10) as c:
            deadline = time.monotonic() + 10
            while c.get("/readyz").status_code != 200 and time.monotonic() < deadline:
                time.sleep(0.05)
        before = app.state.attnplan.nodes.probes_started

        async def many() -> list[int]:
            async with httpx.AsyncClient(base_url=srv.url, timeout=10) as ac:
                rs = await asyncio.gather(*(ac.get("/v1/node", params={"refresh": "true"}) for _ in range(20)))
            return [r.status_code for r in rs]

        assert asyncio.run(many()) == [200] * 20
        assert app.state.attnplan.nodes.probes_started - before <= 2  # shared, not one per caller


# -- tokens ------------------------------------------------------------------------------------
def test_server_token_is_stripped_like_the_clients():
    assert resolve_token(None, {"ATTNPLAN_TOKEN": TOKEN + "\n"}) == TOKEN
    with BackgroundServer(create_app(node=simulated_node("B200"), token=TOKEN + "\n")) as srv:
        r = httpx.get(srv.url + "/v1/node", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=5)
        assert r.status_code == 200


@pytest.mark.parametrize("value", [" ", "\n", "\t \n"])
def test_blank_token_is_refused(capsys, monkeypatch, value):
    monkeypatch.setenv("ATTNPLAN_TOKEN", value)
    assert cli_main(["serve", "--device", "B200", "--port", "1"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "blank" in err


@pytest.mark.parametrize("value", ["a", "short-token-15ch"[:15]])
def test_short_token_is_refused_for_a_public_bind(capsys, monkeypatch, value):
    monkeypatch.setenv("ATTNPLAN_TOKEN", value)
    assert cli_main(["serve", "--device", "B200", "--host", "0.0.0.0", "--port", "1"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "at least 16" in err and "short-token" not in err  # never echoed
    check_token(value, "127.0.0.1")  # loopback: the operator's choice
    check_token("x" * 16, "0.0.0.0")


def test_token_in_the_url_is_refused_and_never_logged():
    lines: list[str] = []

    class Capture(logging.Handler):
        def emit(self, record):
            lines.append(record.getMessage())

    with BackgroundServer(create_app(node=simulated_node("B200"), token=TOKEN), access_log=True,
                          log_level="info") as srv:
        handler = Capture()
        logging.getLogger("uvicorn.access").addHandler(handler)
        try:
            for params in ({"token": TOKEN}, {"access_token": TOKEN, "x": "1"}):
                r = httpx.get(srv.url + "/v1/node", params=params, timeout=5,
                              headers={"Authorization": f"Bearer {TOKEN}"})
                assert r.status_code == 400 and "Authorization" in r.json()["detail"] and TOKEN not in r.text
            r = httpx.get(srv.url + "/healthz", params={"token": TOKEN}, timeout=5)
            assert r.status_code == 400
            time.sleep(0.2)
        finally:
            logging.getLogger("uvicorn.access").removeHandler(handler)
    assert lines and all(TOKEN not in line for line in lines)
    assert any("/v1/node?[redacted]" in line for line in lines)
    assert redact("/v1/node?token=abc&x=1") == "/v1/node?[redacted]"


# -- logs --------------------------------------------------------------------------------------
def test_repeated_errors_are_rate_limited_then_summarised():
    now = [0.0]
    f = RateLimit(burst=5, window=10, clock=lambda: now[0])

    def rec(msg: str) -> logging.LogRecord:
        return logging.LogRecord("asyncio", logging.ERROR, __file__, 1, msg, None, None)

    passed = sum(f.filter(rec("socket.accept() out of system resource")) for _ in range(10_000))
    assert passed == 5
    assert f.filter(rec("another message"))
    now[0] = 11.0
    r = rec("socket.accept() out of system resource")
    assert f.filter(r) and "9995 more like this" in r.msg
    for name in ("asyncio", "uvicorn.error"):
        with BackgroundServer(create_app(node=simulated_node("B200"))):
            assert any(isinstance(x, RateLimit) for x in logging.getLogger(name).filters), name


# -- docs and schema -------------------------------------------------------------------------------
def test_docs_off_by_default_and_served_from_local_assets(tmp_path, capsys):
    with BackgroundServer(create_app(node=simulated_node("B200"))) as srv:
        assert httpx.get(srv.url + "/docs", timeout=5).status_code == 404
    (tmp_path / "swagger-ui-bundle.js").write_text("window.SwaggerUIBundle = function () {};\n")
    (tmp_path / "swagger-ui.css").write_text("body {}\n")
    with BackgroundServer(create_app(node=simulated_node("B200"), token=TOKEN, docs_dir=tmp_path)) as srv:
        page = httpx.get(srv.url + "/docs", timeout=5)
        assert page.status_code == 200 and "/docs/assets/swagger-ui-bundle.js" in page.text
        assert "http://" not in page.text and "https://" not in page.text  # nothing from a CDN
        assert "default-src 'none'" in page.headers["content-security-policy"]
        js = httpx.get(srv.url + "/docs/assets/swagger-ui-bundle.js", timeout=5)
        assert js.status_code == 200 and "SwaggerUIBundle" in js.text
        assert httpx.get(srv.url + "/docs/assets/other.js", timeout=5).status_code == 404
    assert cli_main(["serve", "--device", "B200", "--port", "1", "--docs", str(tmp_path / "nope")]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_schema_and_code_agree_on_empty_device():
    with BackgroundServer(create_app(node=simulated_node("B200"))) as srv, httpx.Client(base_url=srv.url) as c:
        schema = c.get("/openapi.json").json()
        spec = schema["components"]["schemas"]["NodeSpec"]["properties"]["device"]
        options = spec.get("anyOf", [spec])
        assert any(o.get("minLength") == 1 for o in options)
        for device in ("", "   "):
            r = c.post("/v1/plan", json={"config": LLAMA, "node": {"device": device}})
            assert r.status_code == 422 and r.json()["detail"][0]["field"] == "node.device"


def test_serve_limits_are_validated(capsys):
    for flags in (["--max-connections", "0"], ["--header-timeout", "nan"], ["--header-timeout", "0"]):
        assert cli_main(["serve", "--device", "B200", "--port", "1", *flags]) == 2
        assert len(capsys.readouterr().err.strip().splitlines()) == 1



def test_server_under_a_1024_descriptor_limit_survives_5000_idle_connections_without_a_log_flood(tmp_path):
    """The issue's own setup: `serve` with RLIMIT_NOFILE 1024 (soft and hard), 5,000 silent
    connections. Before: accept() hit EMFILE, /healthz timed out, the log grew by megabytes."""
    import os
    import re
    import resource
    import subprocess
    import sys
    from pathlib import Path

    n = 5000
    _raise_nofile(n + 512)
    root = Path(__file__).resolve().parents[1]

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))

    log = tmp_path / "serve.log"
    env = dict(os.environ, PYTHONPATH=str(root))
    env.pop("ATTNPLAN_TOKEN", None)
    with open(log, "wb") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "attnplan", "serve", "--device", "B200", "--port", "0",
                                 "--header-timeout", "60", "--no-access-log"],
                                stdout=fh, stderr=subprocess.STDOUT, env=env, preexec_fn=limit)
    held: list[socket.socket] = []
    try:
        deadline = time.monotonic() + 60
        port = None
        while port is None and time.monotonic() < deadline and proc.poll() is None:
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", log.read_text(errors="replace"))
            port = int(m.group(1)) if m else None
            time.sleep(0.1)
        assert port, log.read_text(errors="replace")
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", port))
            held.append(s)
        time.sleep(2)
        for _ in range(5):
            t0 = time.monotonic()
            r = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5)
            assert r.status_code == 200 and time.monotonic() - t0 < 1.0
        time.sleep(1)
        assert log.stat().st_size < 64 * 1024, log.read_text(errors="replace")[-2000:]
        assert "Too many open files" not in log.read_text(errors="replace")
    finally:
        for s in held:
            s.close()
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
