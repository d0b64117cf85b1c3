"""Preflight over HTTP against real node services (uvicorn + api.create_app, declared devices)
and hand-written faulty servers, all on 127.0.0.1.

Faults: refused connection, a node that never answers, one that hangs mid-response, one that
closes the connection, garbage JSON, schema-invalid JSON, 500, 401, a 503 that recovers, a
node that starts listening only after the first attempts. Each must become that node's row,
never abort the run. Ctrl-C (SIGINT to a real subprocess) prints what was gathered.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

import pytest

from attnplan.rest.app import create_app
from attnplan.rest.server import BackgroundServer
from attnplan.cli.main import main as cli_main
from attnplan.policy import plan_for, simulated_node
from attnplan.preflight.http import HttpOptions, parse_hosts, query_hosts
from attnplan.preflight.model import NamedConfig
from attnplan.preflight.report import build_report

ROOT = Path(__file__).resolve().parents[1]
LLAMA = ["--head-dim", "128", "--num-heads", "32", "--num-kv-heads", "8"]
LLAMA_CFG = {"head_dim": 128, "num_qo_heads": 32, "num_kv_heads": 8}
TOKEN = "pf-t0ken-never-printed"


# -- tiny faulty servers -----------------------------------------------------------------------
class RawServer:
    """An asyncio TCP server on 127.0.0.1:0 in a thread; ``handler(reader, writer, n)`` decides
    what the 'node' does with its n-th connection."""

    def __init__(self, handler: Callable):
        self.handler = handler
        self.connections = 0
        self.bodies: list[bytes] = []  # each request's body, in arrival order
        self.requested = threading.Event()
        self.loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    async def _serve(self) -> None:
        self._stop = asyncio.Event()

        async def on_conn(reader, writer):
            self.connections += 1
            n = self.connections
            try:
                self.bodies.append(await read_request(reader))
                self.requested.set()
                await self.handler(reader, writer, n, self._stop)
            except (ConnectionError, asyncio.IncompleteReadError):
                pass
            finally:
                writer.close()

        server = await asyncio.start_server(on_conn, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        async with server:
            await self._stop.wait()

    def _run(self) -> None:
        self.loop.run_until_complete(self._serve())

    def __enter__(self) -> "RawServer":
        self.thread.start()
        assert self._ready.wait(10)
        self.host = f"127.0.0.1:{self.port}"
        return self

    def __exit__(self, *exc) -> None:
        self.loop.call_soon_threadsafe(self._stop.set)
        self.thread.join(5)


async def read_request(reader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    return await reader.readexactly(length) if length else b""


def respond(status: int, body: bytes, ctype: bytes = b"application/json") -> bytes:
    return (b"HTTP/1.1 %d X\r\nContent-Type: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
            % (status, ctype, len(body)) + body)


async def hang(reader, writer, n, stop):
    await stop.wait()  # accept, read the request, never answer


async def midway(reader, writer, n, stop):
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 5000\r\n\r\n"
                 + b'{"status": "ok", "node": {')
    await writer.drain()
    await stop.wait()  # half an answer, then silence


async def close_early(reader, writer, n, stop):
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 900\r\n\r\n{\"sta")
    await writer.drain()  # then the handler returns and the connection closes mid-body


async def garbage(reader, writer, n, stop):
    writer.write(respond(200, b"<html>this is not json{"))
    await writer.drain()


def wire(answer) -> dict:
    """An answer as the node service sends it (attnplan.rest.service.render_answer)."""
    return {"schema_version": "1", **answer.to_json(trace=False)}


async def schema_invalid(reader, writer, n, stop):
    body = wire(plan_for(LLAMA_CFG, simulated_node("B200")))
    body["status"] = "maybe"
    del body["config"]
    writer.write(respond(200, json.dumps(body).encode()))
    await writer.drain()


async def server_error(reader, writer, n, stop):
    writer.write(respond(500, b'{"detail": "internal server error"}'))
    await writer.drain()


def recovering(device: str):
    answer = json.dumps(wire(plan_for(LLAMA_CFG, simulated_node(device)))).encode()

    async def handler(reader, writer, n, stop):
        if n == 1:
            writer.write(respond(503, b'{"detail": "node facts not ready: probing"}'))
        else:
            writer.write(respond(200, answer))
        await writer.drain()

    return handler


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


# -- fixtures ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def services():
    """Real node services: two B200, one H100, one GB300 with flashinfer 0.6.7 (the SM103 hang
    rule), one B200 that needs a token."""
    nodes = {
        "b200a": (simulated_node("B200"), None),
        "b200b": (simulated_node("B200"), None),
        "h100": (simulated_node("H100"), None),
        "gb300": (simulated_node("GB300", flashinfer_version="0.6.7"), None),
        "secure": (simulated_node("B200"), TOKEN),
    }
    servers = {k: BackgroundServer(create_app(node=n, token=t)) for k, (n, t) in nodes.items()}
    for s in servers.values():
        s.__enter__()
    yield {k: f"127.0.0.1:{s.port}" for k, s in servers.items()}
    for s in servers.values():
        s.__exit__(None, None, None)


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    rc = cli_main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def by_name(report: dict) -> dict[str, dict]:
    return {n["name"]: n for n in report["nodes"]}


# -- tests -------------------------------------------------------------------------------------
def test_good_nodes_ok_grouped_and_heterogeneity(services, capsys, monkeypatch):
    monkeypatch.delenv("ATTNPLAN_TOKEN", raising=False)
    hosts = ",".join(services[k] for k in ("b200a", "b200b", "h100"))
    # vLLM's FlashInfer backend asked for by name: the FlashInfer kernels each node runs are compared
    rc, out, _ = run_cli(capsys, "preflight", "--hosts", hosts, *LLAMA, "--attention-backend", "FLASHINFER", "--json")
    data = json.loads(out)
    assert rc == 0, out
    assert data["schema_version"] == "1" and data["rules_revision"]
    assert data["query"]["source"] == "hosts" and len(data["query"]["configs"]) == 1
    nodes = by_name(data)
    b = nodes[services["b200a"]]
    assert b["status"] == "ok" and b["device"] == "B200" and b["capability"] == "10.0"
    assert (b["results"][0]["prefill"], b["results"][0]["decode"], b["results"][0]["kv_layout"]) == \
        ("trtllm-gen", "trtllm-gen", "HND")
    h = nodes[services["h100"]]
    # vLLM 0.33 (the default engine layer) decodes with XQA on 9.0 when the artifactory check passes
    assert (h["results"][0]["prefill"], h["results"][0]["decode"], h["results"][0]["kv_layout"]) == ("fa3", "xqa", "NHD")
    # the two B200 are one group (same fingerprint, same result), the H100 another
    assert b["group"] == nodes[services["b200b"]]["group"] != h["group"]
    assert b["fingerprint"] == nodes[services["b200b"]]["fingerprint"] != h["fingerprint"]
    assert len(data["groups"]) == 2 and sorted(g["count"] for g in data["groups"]) == [1, 2]
    # heterogeneous: the minority (H100) is 'warn', never 'pass' silently
    assert data["summary"]["heterogeneous"] is True
    fields = {w["field"] for w in data["warnings"] if w["kind"] == "heterogeneous"}
    assert fields == {"prefill", "decode", "kv_layout"}
    assert h["verdict"] == "warn" and b["verdict"] == "pass"
    assert "prefill trtllm-gen on 2 nodes vs fa3 on 1" in data["summary"]["line"]


def test_text_report_groups_and_summary(services, capsys, monkeypatch):
    monkeypatch.delenv("ATTNPLAN_TOKEN", raising=False)
    hosts = ",".join(services[k] for k in ("b200a", "b200b", "h100", "gb300"))
    rc, out, _ = run_cli(capsys, "preflight", "--hosts", hosts, *LLAMA)
    assert rc == 0
    last = out.strip().splitlines()[-1]
    assert last.startswith("4 nodes: 4 ok, 0 rejected, 0 unreachable; heterogeneous:")
    # the GB300 on flashinfer 0.6.7 falls back to fa2 (trtllm.sm103-hang): a third plan
    assert "fa2" in out and "trtllm-gen" in out and "GB300" in out
    assert "would mix kernels" in out


def test_rejection_lists_rules_and_exit_1(services, capsys, monkeypatch):
    monkeypatch.delenv("ATTNPLAN_TOKEN", raising=False)
    hosts = ",".join(services[k] for k in ("b200a", "h100"))
    # NVFP4 KV at head_dim 64: trtllm-gen reads it on 10.x; on 9.0 fa2 misreads it (kernel layer),
    # vLLM 0.33 refuses it (engine layer) and XQA reads NVFP4 only on 12.x.
    rc, out, _ = run_cli(capsys, "preflight", "--hosts", hosts, *LLAMA, "--head-dim", "64", "--kv-cache-dtype", "nvfp4",
                         "--json")
    assert rc == 1
    data = json.loads(out)
    nodes = by_name(data)
    assert nodes[services["b200a"]]["status"] == "ok"
    h = nodes[services["h100"]]
    assert h["status"] == "rejected" and h["verdict"] == "fail"
    assert "vllm.nvfp4" in set(h["results"][0]["violations"])
    g = next(g for g in data["groups"] if g["id"] == h["group"])
    details = g["results"][0]["details"]
    assert any(v["rule"] == "vllm.nvfp4" and v["observed"]["config.head_dim"] == 64 for v in details)
    assert any(v["rule"] == "vllm.nvfp4" and v["observed"]["node.capability_major"] == 9 for v in details)
    assert any(s["field"] == "kv_cache_dtype" for s in g["results"][0]["suggestions"])
    assert any(w["kind"] == "mixed" for w in data["warnings"])


def test_faults_become_rows_never_abort(services, capsys, monkeypatch):
    monkeypatch.delenv("ATTNPLAN_TOKEN", raising=False)
    refused = f"127.0.0.1:{free_port()}"
    with RawServer(hang) as hung, RawServer(midway) as mid, RawServer(garbage) as junk, \
            RawServer(schema_invalid) as bad, RawServer(server_error) as err, RawServer(close_early) as closer:
        hosts = [services["b200a"], refused, hung.host, mid.host, junk.host, bad.host, err.host, closer.host,
                 services["secure"]]
        t0 = time.monotonic()
        rc, out, _ = run_cli(capsys, "preflight", "--hosts", ",".join(hosts), *LLAMA, "--json",
                             "--timeout", "1.5", "--retries", "1")
        took = time.monotonic() - t0
    data = json.loads(out)
    assert rc == 3, data["summary"]
    assert took < 8, took  # concurrent: the slow nodes cost one timeout, not one each
    n = by_name(data)
    assert n[services["b200a"]]["status"] == "ok"
    expect = {
        refused: ("unreachable", "connection refused"),
        hung.host: ("unreachable", "no answer within 1.5s"),
        mid.host: ("unreachable", "hung mid-response"),
        junk.host: ("error", "malformed JSON"),
        bad.host: ("error", "schema-invalid answer"),
        err.host: ("error", "HTTP 500"),
        closer.host: ("unreachable", "closed"),
        services["secure"]: ("error", "HTTP 401"),
    }
    for host, (status, words) in expect.items():
        row = n[host]
        assert row["status"] == status, (host, row)
        assert row["verdict"] == "error" and words in row["reason"], (host, row["reason"])
        assert row["results"][0]["verdict"] == "error"  # never a pass
    assert "ATTNPLAN_TOKEN" in n[services["secure"]]["reason"]
    s = data["summary"]
    assert (s["nodes"], s["ok"], s["unreachable"], s["error"]) == (9, 1, 4, 4)
    assert s["line"].startswith("9 nodes: 1 ok, 0 rejected, 4 unreachable, 4 errors")


def test_bearer_token_from_env_and_never_printed(services, capsys, monkeypatch):
    monkeypatch.setenv("ATTNPLAN_TOKEN", TOKEN)
    rc, out, err = run_cli(capsys, "preflight", "--hosts", services["secure"], *LLAMA, "--json")
    assert rc == 0
    assert TOKEN not in out and TOKEN not in err
    assert json.loads(out)["query"]["options"]["token"] is True
    monkeypatch.setenv("ATTNPLAN_TOKEN", "wrong")
    rc, out, _ = run_cli(capsys, "preflight", "--hosts", services["secure"], *LLAMA, "--json")
    assert rc == 3 and "was refused" in json.loads(out)["nodes"][0]["reason"]


def test_retries_on_503_and_on_connect_errors(capsys, monkeypatch):
    monkeypatch.delenv("ATTNPLAN_TOKEN", raising=False)
    port = free_port()
    started = {}

    def late_start():
        time.sleep(0.4)  # refused for the first attempt(s)
        started["srv"] = BackgroundServer(create_app(node=simulated_node("H100")), port=port).__enter__()

    t = threading.Thread(target=late_start)
    with RawServer(recovering("B200")) as flaky:
        t.start()
        configs = [NamedConfig("llama", plan_for(LLAMA_CFG, simulated_node("B200")).config)]
        sink: dict = {}
        opts = HttpOptions(timeout=8, retries=4, backoff=0.25)
        asyncio.run(query_hosts(parse_hosts([f"{flaky.host},127.0.0.1:{port}"]), configs, opts, sink))
        t.join()
        assert flaky.connections == 2  # 503, then the answer
    try:
        assert sink[0].kind == "answered" and sink[0].answers[0].node.gpu_name.value == "B200"
        assert sink[1].kind == "answered", sink[1].reason
        assert sink[1].answers[0].node.gpu_name.value == "H100"
    finally:
        started["srv"].__exit__(None, None, None)
    # and without retries the same late node is a row, not an exception
    sink = {}
    asyncio.run(query_hosts(parse_hosts([f"127.0.0.1:{free_port()}"]), configs, HttpOptions(retries=0), sink))
    assert sink[0].kind == "unreachable" and sink[0].reason == "connection refused"


def test_several_configs_from_yaml(services, capsys, monkeypatch, tmp_path):
    monkeypatch.delenv("ATTNPLAN_TOKEN", raising=False)
    (tmp_path / "m.yaml").write_text(
        "- name: llama\n  model_config: " + str(ROOT / "examples" / "llama-3.1-8b.json") + "\n"
        "- {name: gemma, model_config: " + str(ROOT / "examples" / "gemma-2-9b.json") + "}\n"
        "- {name: nvfp4, head_dim: 64, num_qo_heads: 32, num_kv_heads: 8, kv_cache_dtype: nvfp4}\n"
        "- {name: kernel, head_dim: 128, num_qo_heads: 32, num_kv_heads: 8, engine: flashinfer}\n")
    hosts = ",".join(services[k] for k in ("b200a", "h100"))
    rc, out, _ = run_cli(capsys, "preflight", "--hosts", hosts, "--configs", str(tmp_path / "m.yaml"), "--json")
    data = json.loads(out)
    assert [c["name"] for c in data["query"]["configs"]] == ["llama", "gemma", "nvfp4", "kernel"]
    assert [c["engine"] for c in data["query"]["configs"]] == [None, None, None, "flashinfer"]
    h = by_name(data)[services["h100"]]
    # gemma: vLLM 0.33 runs FLASH_ATTN on 9.0, which keeps the soft cap (its FlashInfer XQA would drop it):
    # the command runs; nvfp4 at head 64 finds no backend of vLLM's
    assert [c["status"] for c in h["results"]] == ["ok", "ok", "rejected", "ok"]
    assert [c["outcome"] for c in h["results"]] == ["runs", "runs", "fails-at-startup", "runs"]
    # the node planned each config for the engine layer asked: vLLM's own FLASH_ATTN, fa2 for the kernel layer
    assert (h["results"][0]["decode"], h["results"][3]["decode"]) == ("FLASH_ATTN", "fa2")
    assert rc == 1
    # gemma's soft-cap keeps B200 off trtllm-gen (trtllm.softcap): checked by the node, reported here
    b = by_name(data)[services["b200a"]]
    assert b["results"][1]["prefill"] != "trtllm-gen"


def test_report_builder_marks_interrupted_nodes_skip_not_pass():
    cfg = [NamedConfig("c", plan_for(LLAMA_CFG, simulated_node("B200")).config)]
    from attnplan.preflight.model import Outcome

    outs = [Outcome(name="a", answers=[plan_for(LLAMA_CFG, simulated_node("B200"))]),
            Outcome(name="b", kind="skipped", reason="interrupted")]
    r = build_report(source="hosts", targets=["a", "b"], configs=cfg, outcomes=outs, interrupted=True)
    assert r.summary.exit_code == 130 and r.summary.interrupted
    assert r.nodes[1].verdict == "skip" and r.nodes[1].results[0].verdict == "skip"
    assert "1 skipped (interrupted)" in r.summary.line


def test_ctrl_c_prints_partial_report(services):
    with RawServer(hang) as hung:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        env.pop("ATTNPLAN_TOKEN", None)
        # Ctrl-C as a terminal delivers it: the child's SIGINT at its default, whatever this process
        # inherited (a run started in the background by a non-interactive shell ignores SIGINT, and an
        # ignored signal stays ignored across exec - Python then installs no KeyboardInterrupt).
        proc = subprocess.Popen(
            [sys.executable, "-m", "attnplan", "preflight", "--hosts", f"{services['b200a']},{hung.host}", *LLAMA,
             "--json", "--timeout", "60"],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        try:
            assert hung.requested.wait(30), "preflight never reached the hanging node"
            time.sleep(0.5)  # the good node answers in milliseconds
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=20)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 130, (proc.returncode, err)
    assert "Traceback" not in err
    data = json.loads(out)
    n = by_name(data)
    assert n[services["b200a"]]["status"] == "ok"
    assert n[hung.host]["status"] == "skipped" and n[hung.host]["reason"] == "interrupted"
    assert data["summary"]["interrupted"] is True and data["summary"]["exit_code"] == 130


def test_engine_is_sent_only_when_asked_and_an_answer_for_another_engine_does_not_count(capsys, monkeypatch):
    """A node older than the ``engine`` field rejects unknown keys (PlanRequest extra="forbid"):
    a preflight that asks for no engine sends none; one that does gets the node's own answer
    checked against the engine it asked for."""
    monkeypatch.delenv("ATTNPLAN_TOKEN", raising=False)
    answer = json.dumps(wire(plan_for(LLAMA_CFG, simulated_node("H100")))).encode()  # the vllm layer's

    async def node(reader, writer, n, stop):
        writer.write(respond(200, answer))
        await writer.drain()

    with RawServer(node) as srv:
        rc, out, _ = run_cli(capsys, "preflight", "--hosts", srv.host, *LLAMA, "--json")
        assert rc == 0 and json.loads(out)["nodes"][0]["results"][0]["decode"] == "FLASH_ATTN"  # vLLM's own pick
        assert "engine" not in json.loads(srv.bodies[-1])
        rc, out, _ = run_cli(capsys, "preflight", "--hosts", srv.host, *LLAMA, "--engine", "flashinfer", "--json")
        assert json.loads(srv.bodies[-1])["engine"] == "flashinfer"
        row = json.loads(out)["nodes"][0]
        assert rc == 3 and row["status"] == "error" and "answered for another engine" in row["reason"]
        rc, out, _ = run_cli(capsys, "preflight", "--hosts", srv.host, *LLAMA, "--engine", "vllm==0.33.0", "--json")
        assert rc == 0 and json.loads(srv.bodies[-1])["engine"] == "vllm==0.33.0"


def test_engine_over_http_plans_on_the_node(services, capsys, monkeypatch):
    monkeypatch.delenv("ATTNPLAN_TOKEN", raising=False)
    rc, out, _ = run_cli(capsys, "preflight", "--hosts", services["h100"], *LLAMA, "--engine", "flashinfer", "--json")
    data = json.loads(out)
    assert rc == 0 and data["query"]["configs"][0]["engine"] == "flashinfer"
    expected = plan_for(LLAMA_CFG, simulated_node("H100"), engine="flashinfer").plan
    assert data["nodes"][0]["results"][0]["decode"] == expected.decode.backend == "fa2"
