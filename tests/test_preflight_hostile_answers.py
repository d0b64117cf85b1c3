"""Issue 16, preflight and CLI: no node answer and no host string can crash the run or count as a
pass; files that could hang or blow up the parser are bad input; node strings reach the terminal
without control characters; a bug exits 70 with one line.

Each case reproduced the fault before the fix (RecursionError / InvalidURL / IDNAError
tracebacks with exit 1, AttributeError on ``--simulate ""``, a FIFO hanging forever, a node with
``plan: null`` or a capability of 10^30 counted as a pass).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from attnplan.cli.main import main
from attnplan.policy import make_config, plan_for, simulated_node
from attnplan.preflight.model import NamedConfig, Outcome
from attnplan.preflight.report import build_report, render_text

LLAMA = ["--head-dim", "128", "--num-heads", "32", "--num-kv-heads", "8"]
CFG = make_config({"head_dim": 128, "num_qo_heads": 32, "num_kv_heads": 8})
ROOT = Path(__file__).resolve().parents[1]


def wire(answer, **changes) -> dict:
    body = {"schema_version": "1", **answer.to_json(trace=False)}
    body.update(changes)
    return body


class Node:
    """A fake node service answering every request with one fixed status and body."""

    def __init__(self, body: bytes, status: int = 200):
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                n = int(self.headers.get("content-length") or 0)
                self.rfile.read(n)
                self.send_response(outer.status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(outer.body)))
                self.end_headers()
                self.wfile.write(outer.body)

            def log_message(self, *a):
                pass

        self.body, self.status = body, status
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.host = f"127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def one_line(err: str) -> bool:
    return len(err.strip().splitlines()) == 1 and "Traceback" not in err


def preflight_rows(capsys, nodes: list[Node], *extra: str) -> tuple[int, dict]:
    rc, out, err = run(capsys, "preflight", "--hosts", ",".join(n.host for n in nodes), *LLAMA, *extra, "--json",
                       "--retries", "0", "--timeout", "10")
    return rc, {r["name"]: r for r in json.loads(out)["nodes"]}


def test_deeply_nested_answer_is_that_nodes_error_row_and_healthy_nodes_are_reported(capsys, monkeypatch):
    monkeypatch.delenv("ATTNPLAN_TOKEN", raising=False)
    good = Node(json.dumps(wire(plan_for(CFG, simulated_node("B200")))).encode())
    deep = Node(b"[" * 100_000)
    deep_error = Node(b"[" * 100_000, status=500)  # the error body is parsed too (for its detail)
    try:
        rc, rows = preflight_rows(capsys, [good, deep, deep_error])
    finally:
        for n in (good, deep, deep_error):
            n.close()
    assert rc == 3  # some node answered unusably: never 1 (rejected), never a traceback
    assert rows[good.host]["status"] == "ok" and rows[good.host]["verdict"] == "pass"
    assert rows[deep.host]["status"] == "error" and "nested deeper" in rows[deep.host]["reason"]
    assert rows[deep_error.host]["status"] == "error" and "HTTP 500" in rows[deep_error.host]["reason"]


B200 = plan_for(CFG, simulated_node("B200"))
# NVFP4 KV at head_dim 64 on an H100: fa2 misreads it, vLLM 0.33 refuses it, XQA reads NVFP4 on 12.x only.
REJECTED_ARGS = ("--head-dim", "64", "--kv-cache-dtype", "nvfp4")
REJECTED = plan_for(make_config({"head_dim": 64, "num_qo_heads": 32, "num_kv_heads": 8, "kv_cache_dtype": "nvfp4"}),
                    simulated_node("H100"))
assert REJECTED.status == "rejected"  # the premise of the tests below


@pytest.mark.parametrize("name,body,why", [
    ("ok without plan", wire(B200, plan=None), "status ok without a plan"),
    ("capability 1e30", wire(B200, node={**wire(B200)["node"], "capability": {"value": 10**30, "source": "measured"}}),
     "capability"),
    ("capability string 1e30", wire(B200, node={**wire(B200)["node"], "capability": {"value": "1e30", "source": "measured"}}),
     "capability"),
    ("gpu name list", wire(B200, node={**wire(B200)["node"], "gpu_name": {"value": ["B200"], "source": "measured"}}),
     "gpu_name"),
    ("no schema_version", {k: v for k, v in wire(B200).items() if k != "schema_version"}, "no schema_version"),
    ("wrong schema_version", wire(B200, schema_version="2"), "schema_version '2'"),
    ("rejected without rules", wire(REJECTED, violations=[]), "rejected without any violated rule"),
    ("not an object", ["ok"], "expected a JSON object"),
])
def test_answers_that_do_not_count_are_error_rows_never_pass_or_rejected(capsys, monkeypatch, name, body, why):
    monkeypatch.delenv("ATTNPLAN_TOKEN", raising=False)
    node = Node(json.dumps(body).encode())
    nvfp4 = isinstance(body, dict) and body.get("config", {}).get("kv_cache_dtype") == "nvfp4"
    extra = REJECTED_ARGS if nvfp4 else ()
    try:
        rc, rows = preflight_rows(capsys, [node], *extra)
    finally:
        node.close()
    row = rows[node.host]
    assert rc == 3, name
    assert row["status"] == "error" and row["verdict"] == "error", name
    assert why in row["reason"], (name, row["reason"])
    assert all(c["verdict"] == "error" for c in row["results"])


def test_rejection_still_counts_as_rejected(capsys, monkeypatch):
    monkeypatch.delenv("ATTNPLAN_TOKEN", raising=False)
    node = Node(json.dumps(wire(REJECTED)).encode())
    try:
        rc, rows = preflight_rows(capsys, [node], *REJECTED_ARGS)
    finally:
        node.close()
    assert rc == 1 and rows[node.host]["status"] == "rejected" and rows[node.host]["results"][0]["violations"]


@pytest.mark.parametrize("hosts", ["999.999.999.999:1", "xn--invalid-.example:1", "", " , ", "host name:1",
                                   "a\x1b[2J:1"])
def test_mistyped_hosts_exit_2_with_one_line(capsys, hosts):
    rc, out, err = run(capsys, "preflight", "--hosts", hosts, *LLAMA)
    assert rc == 2 and one_line(err) and err.startswith("attnplan: error: hosts"), err


def test_simulate_empty_spec_exits_2(capsys):
    rc, _, err = run(capsys, "preflight", "--simulate", "", *LLAMA)
    assert rc == 2 and one_line(err) and "simulate" in err
    rc, _, err = run(capsys, "preflight", "--hosts-file", "", *LLAMA)
    assert rc == 2 and one_line(err) and "hosts_file" in err


def _cli(*argv: str, timeout: float = 60) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("ATTNPLAN_TOKEN", None)
    return subprocess.run([sys.executable, "-m", "attnplan", *argv], capture_output=True, text=True,
                          timeout=timeout, env=env, stdin=subprocess.DEVNULL)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_fifo_as_hosts_file_or_configs_exits_2_without_hanging(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    for argv in (["--hosts-file", str(fifo), *LLAMA], ["--simulate", "B200=1", "--configs", str(fifo)]):
        p = _cli("preflight", *argv, timeout=60)  # the test's own bound: a hang fails it, not the suite
        assert p.returncode == 2 and one_line(p.stderr) and "not a regular file" in p.stderr, p.stderr


def test_configs_yaml_deep_nesting_and_duplicate_keys_exit_2(capsys, tmp_path):
    deep = tmp_path / "deep.yaml"
    deep.write_text("[" * 200_000 + "]" * 200_000)
    rc, _, err = run(capsys, "preflight", "--simulate", "B200=1", "--configs", str(deep))
    assert rc == 2 and one_line(err) and "nested deeper" in err
    block = tmp_path / "block.yaml"
    block.write_text("".join("  " * i + "- \n" for i in range(300)))
    rc, _, err = run(capsys, "preflight", "--simulate", "B200=1", "--configs", str(block))
    assert rc == 2 and one_line(err) and "nested deeper" in err
    dup = tmp_path / "dup.yaml"
    dup.write_text("- {head_dim: 128, num_qo_heads: 32, head_dim: 64}\n")
    rc, _, err = run(capsys, "preflight", "--simulate", "B200=1", "--configs", str(dup))
    assert rc == 2 and one_line(err) and "duplicate key 'head_dim'" in err


def test_text_report_strips_control_characters_from_node_strings():
    evil = "B200\x1b[2J\x1b]0;pwned\x07\r\n1  999  fake-node  B200  ok\u202e"
    answer = plan_for(CFG, simulated_node("B200"))
    node = answer.node.with_fact(gpu_name=answer.node.gpu_name.model_copy(update={"value": evil}))
    answer = answer.model_copy(update={"node": node})
    bad = Outcome(name="n\rforged", address="http://n:1", kind="error", reason="HTTP 500: boom\n2  1  forged  ok")
    report = build_report(source="hosts", targets=["x"], configs=[NamedConfig("config", CFG)],
                          outcomes=[Outcome(name="good\x1b[31m", answers=[answer]), bad])
    for per_node in (False, True):
        text = render_text(report, per_node=per_node, color=False)
        assert "\x1b" not in text and "\r" not in text and "\u202e" not in text and "\x07" not in text
        assert not any(line.startswith(("1  999", "2  1  forged")) for line in text.splitlines())
    colored = render_text(report, color=True)
    assert "\x1b[2J" not in colored and "\x1b]0" not in colored  # only our own colour codes remain


def test_fallbacks_are_read_from_typed_field_not_note_text():
    old = plan_for(CFG, simulated_node("GB300", flashinfer_version="0.6.7"))
    assert old.fallbacks, "GB300 on 0.6.7 skips trtllm-gen (trtllm.sm103-hang)"
    no_notes = old.model_copy(update={"notes": ()})
    report = build_report(source="simulate", targets=["x"], configs=[NamedConfig("config", CFG)],
                          outcomes=[Outcome(name="gb300-0", answers=[no_notes])])
    text = render_text(report)
    assert "falls back on config" in text and "[trtllm.sm103-hang]" in text
    assert report.groups[0].results[0].fallbacks[0]["skipped"] == old.fallbacks[0].skipped
    # A node on an older attnplan sends no fallbacks: none shown, nothing parsed out of notes.
    legacy = old.model_copy(update={"fallbacks": ()})
    report = build_report(source="simulate", targets=["x"], configs=[NamedConfig("config", CFG)],
                          outcomes=[Outcome(name="gb300-0", answers=[legacy])])
    assert "falls back" not in render_text(report)


def test_uncaught_error_exits_70_with_one_line(capsys, monkeypatch):
    import attnplan.cli.preflight as pf

    def boom(_args):
        raise RuntimeError("something\nbroke")

    monkeypatch.setattr(pf, "run", boom)
    monkeypatch.delenv("ATTNPLAN_DEBUG", raising=False)
    rc, _, err = run(capsys, "preflight", "--simulate", "B200=1", *LLAMA)
    assert rc == 70 and one_line(err) and "internal error: RuntimeError: something broke" in err
