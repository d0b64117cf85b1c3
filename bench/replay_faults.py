"""Replay every fault of issues 16 and 24 against a fresh ``serve``, the CLI and the preflight.

    python bench/replay_faults.py            # every case, full size (5,000 idle connections)
    python bench/replay_faults.py --quick    # reduced sizes (tests/test_fault_replay.py)
    python bench/replay_faults.py --skip-owner h1,h3
    python bench/replay_faults.py --only i40r4-labels --details   # issue 40's fourth round, every input not held

One line per case: ``held`` or ``failed``, the case id, the issue item, who owns the fix, and
what was seen. Exit 0 only if every case that ran held. Owners: ``h2`` (hardening: preflight,
REST, CLI output), ``h1`` (policy: probe deadlines, artifactory facts, rule-pack limits),
``h3`` (model configs: hfconfig, ``--device ""``), ``integrator`` (one-line changes in files no
helper owns, e.g. ``matrix -o`` in cli/plan.py), ``landed`` (already fixed on main), ``h24``
(issue 24, items ``24.1``-``24.13`` and ``24.also``; ``h27`` owns 24.8, 24.9 and the transformers
warnings), ``i40r4`` (issue 40's fourth round: cases ``i40r4-*``, thousands of inputs in-process, one
tally line "issue 40 round four: ..." with the crash classes found). Every CLI case runs in a subprocess with a timeout: a hang is ``failed``, never a stuck
replay. Timeouts are generous (a loaded 2-core CI machine starts a CLI in seconds): a check is
about time only where the fault was about time, and then says so.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable, Optional

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

LLAMA = ["--head-dim", "128", "--num-heads", "32", "--num-kv-heads", "8"]
TOKEN = "replay-token-0123456789"
CASES: list[tuple[str, str, str, Callable[["Ctx"], tuple[bool, str]]]] = []


def case(cid: str, item: str, owner: str) -> Callable:
    def deco(fn: Callable[["Ctx"], tuple[bool, str]]) -> Callable:
        CASES.append((cid, f"#{item}", owner, fn))
        return fn
    return deco


class Ctx:
    def __init__(self, tmp: Path, quick: bool):
        self.tmp = tmp
        self.quick = quick
        self.timeout = 120.0  # a hang still fails; a slow, loaded machine does not
        self.http = 60.0  # client timeout for requests whose speed is not what the case checks


# -- helpers ---------------------------------------------------------------------------------
class Result:
    def __init__(self, rc: Optional[int], out: str, err: str, seconds: float):
        self.rc, self.out, self.err, self.seconds = rc, out, err, seconds

    @property
    def hung(self) -> bool:
        return self.rc is None

    def one_line(self, code: int = 2) -> bool:
        return self.rc == code and len(self.err.strip().splitlines()) == 1 and "Traceback" not in self.err

    def say(self) -> str:
        if self.hung:
            return f"hung past {self.seconds:.0f}s"
        tail = self.err.strip().splitlines()[-1][:140] if self.err.strip() else ""
        return f"exit {self.rc} in {self.seconds:.1f}s: {tail}"


def cli(ctx: Ctx, *argv: str, env: Optional[dict[str, str]] = None, timeout: Optional[float] = None) -> Result:
    e = dict(os.environ, PYTHONPATH=str(ROOT))
    e.pop("ATTNPLAN_TOKEN", None)
    e.update(env or {})
    t0 = time.monotonic()
    try:
        p = subprocess.run([sys.executable, "-m", "attnplan", *argv], capture_output=True, text=True,
                           timeout=timeout or ctx.timeout, env=e, stdin=subprocess.DEVNULL, errors="replace")
        return Result(p.returncode, p.stdout, p.stderr, time.monotonic() - t0)
    except subprocess.TimeoutExpired:
        return Result(None, "", "", time.monotonic() - t0)


def exit2(r: Result) -> tuple[bool, str]:
    return r.one_line(2), r.say()


class FakeNode:
    """A node service answering every POST with one status and body."""

    def __init__(self, body: bytes, status: int = 200, headers: Optional[dict[str, str]] = None):
        outer = self

        class H(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                self.rfile.read(int(self.headers.get("content-length") or 0))
                self.send_response(outer.status)
                self.send_header("content-type", "application/json")
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.send_header("content-length", str(len(outer.body)))
                self.end_headers()
                self.wfile.write(outer.body)

            def log_message(self, *a):
                pass

        self.body, self.status = body, status
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.host = f"127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def __enter__(self) -> "FakeNode":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class Dripper:
    """Accepts connections and sends one byte a second, forever (a slow artifactory)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.stop = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        self.sock.settimeout(0.2)
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except (socket.timeout, OSError):
                continue
            threading.Thread(target=self._drip, args=(conn,), daemon=True).start()

    def _drip(self, conn: socket.socket) -> None:
        data = b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n" + b"x" * 100000
        try:
            for b in data:
                if self.stop.is_set():
                    break
                conn.sendall(bytes([b]))
                time.sleep(1)
        except OSError:
            pass
        conn.close()

    def __enter__(self) -> "Dripper":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop.set()
        self.sock.close()


class Serve:
    """A fresh ``attnplan serve`` subprocess on a free loopback port."""

    def __init__(self, ctx: Ctx, *args: str, env: Optional[dict[str, str]] = None, nofile: Optional[int] = None):
        self.log = ctx.tmp / f"serve-{time.monotonic_ns()}.log"
        e = dict(os.environ, PYTHONPATH=str(ROOT))
        e.pop("ATTNPLAN_TOKEN", None)
        e.update(env or {})

        def limit() -> None:
            if nofile:
                import resource

                resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

        with open(self.log, "wb") as fh:
            self.proc = subprocess.Popen([sys.executable, "-m", "attnplan", "serve", "--port", "0", *args],
                                         stdout=fh, stderr=subprocess.STDOUT, env=e, preexec_fn=limit)
        deadline = time.monotonic() + 60
        self.port = 0
        while not self.port and time.monotonic() < deadline and self.proc.poll() is None:
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", self.text())
            self.port = int(m.group(1)) if m else 0
            time.sleep(0.1)
        if not self.port:
            self.close()
            raise RuntimeError(f"serve did not start: {self.text()[-300:]}")
        self.url = f"http://127.0.0.1:{self.port}"

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)

    def __enter__(self) -> "Serve":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def wire(answer: Any, **changes: Any) -> bytes:
    body = {"schema_version": "1", **answer.to_json(trace=False)}
    body.update(changes)
    return json.dumps(body).encode()


def preflight_json(ctx: Ctx, *hosts: str, extra: tuple[str, ...] = ()) -> tuple[Result, dict[str, dict]]:
    r = cli(ctx, "preflight", "--hosts", ",".join(hosts), *LLAMA, *extra, "--json", "--retries", "0")
    try:
        rows = {n["name"]: n for n in json.loads(r.out)["nodes"]}
    except (ValueError, KeyError, TypeError):
        rows = {}
    return r, rows


def hf_config(path: Path, **over: Any) -> Path:
    data = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
            "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "torch_dtype": "bfloat16"}
    data.update(over)
    path.write_text(json.dumps(data))
    return path


def packs_copy(ctx: Ctx, name: str) -> Path:
    from attnplan.rules import PACKS_DIR

    d = ctx.tmp / name
    shutil.copytree(PACKS_DIR, d)
    return d


# -- 1. preflight crashes ----------------------------------------------------------------------
@case("preflight-deep-json-node", "1", "h2")
def _(ctx: Ctx) -> tuple[bool, str]:
    from attnplan.policy import make_config, plan_for, simulated_node

    good = wire(plan_for(make_config({"head_dim": 128, "num_qo_heads": 32, "num_kv_heads": 8}), simulated_node("B200")))
    with FakeNode(good) as ok, FakeNode(b"[" * 100_000) as deep:
        r, rows = preflight_json(ctx, ok.host, deep.host)
        held = (r.rc == 3 and rows.get(ok.host, {}).get("status") == "ok"
                and rows.get(deep.host, {}).get("status") == "error" and "Traceback" not in r.err)
        return held, f"exit {r.rc}; deep node: {rows.get(deep.host, {}).get('reason')}"


@case("preflight-mistyped-hosts", "1", "h2")
def _(ctx: Ctx) -> tuple[bool, str]:
    seen = []
    for h in ("999.999.999.999:1", "xn--invalid-.example:1", ""):
        r = cli(ctx, "preflight", "--hosts", h, *LLAMA)
        if not r.one_line(2):
            return False, f"{h!r}: {r.say()}"
        seen.append(r.rc)
    return True, f"exits {seen}, one line each"


# -- 2. CLI inputs -------------------------------------------------------------------------------
@case("hfconfig-zero-heads", "2", "h3")
def _(ctx: Ctx) -> tuple[bool, str]:
    p = hf_config(ctx.tmp / "zero-heads.json", num_attention_heads=0, head_dim=None)
    r1 = cli(ctx, "plan", "--device", "B200", "--model-config", str(p))
    y = ctx.tmp / "zero.yaml"
    y.write_text(f"- model_config: {p}\n")
    r2 = cli(ctx, "preflight", "--simulate", "B200=1", "--configs", str(y))
    return r1.one_line(2) and r2.one_line(2), f"plan: {r1.say()}; preflight: {r2.say()}"


@case("presets-zero-heads", "2", "h3")
def _(ctx: Ctx) -> tuple[bool, str]:
    import httpx

    from attnplan.policy import simulated_node
    from attnplan.rest.app import create_app
    from attnplan.rest.server import BackgroundServer

    d = ctx.tmp / "presets"
    d.mkdir(exist_ok=True)
    hf_config(d / "zero.json", num_attention_heads=0, head_dim=None)
    hf_config(d / "fine.json")
    with BackgroundServer(create_app(node=simulated_node("B200"), examples_dir=d), log_level="critical") as srv:
        r = httpx.get(srv.url + "/v1/presets", timeout=ctx.http)
    body = r.json() if r.headers.get("content-type", "").startswith("application/json") else {}
    held = r.status_code == 200 and any("zero" in e for e in body.get("errors", []))
    return held, f"HTTP {r.status_code}: errors={body.get('errors')}"


@case("hfconfig-deep-nesting", "2", "h3")
def _(ctx: Ctx) -> tuple[bool, str]:
    p = ctx.tmp / "deep-config.json"
    p.write_text('{"a": ' + "[" * 200_000 + "]" * 200_000 + "}")
    return exit2(cli(ctx, "plan", "--device", "B200", "--model-config", str(p)))


@case("configs-yaml-deep-nesting", "2", "h2")
def _(ctx: Ctx) -> tuple[bool, str]:
    p = ctx.tmp / "deep.yaml"
    p.write_text("[" * 200_000 + "]" * 200_000)
    return exit2(cli(ctx, "preflight", "--simulate", "B200=1", "--configs", str(p)))


@case("model-config-dev-zero", "2", "h3")
def _(ctx: Ctx) -> tuple[bool, str]:
    return exit2(cli(ctx, "plan", "--device", "B200", "--model-config", "/dev/zero"))


@case("model-config-fifo", "2", "h3")
def _(ctx: Ctx) -> tuple[bool, str]:
    fifo = ctx.tmp / "model.fifo"
    os.mkfifo(fifo)
    return exit2(cli(ctx, "plan", "--device", "B200", "--model-config", str(fifo)))


@case("hosts-file-fifo", "2", "h2")
def _(ctx: Ctx) -> tuple[bool, str]:
    fifo = ctx.tmp / "hosts.fifo"
    os.mkfifo(fifo)
    return exit2(cli(ctx, "preflight", "--hosts-file", str(fifo), *LLAMA))


@case("configs-fifo", "2", "h2")
def _(ctx: Ctx) -> tuple[bool, str]:
    fifo = ctx.tmp / "configs.fifo"
    os.mkfifo(fifo)
    return exit2(cli(ctx, "preflight", "--simulate", "B200=1", "--configs", str(fifo)))


@case("matrix-output-missing-dir", "2", "integrator")
def _(ctx: Ctx) -> tuple[bool, str]:
    return exit2(cli(ctx, "matrix", "-o", "/nonexistent/m.md"))


@case("matrix-output-directory", "2", "integrator")
def _(ctx: Ctx) -> tuple[bool, str]:
    return exit2(cli(ctx, "matrix", "-o", str(ctx.tmp)))


@case("labels-output-directory", "2", "h2")
def _(ctx: Ctx) -> tuple[bool, str]:
    return exit2(cli(ctx, "labels", "--device", "B200", "--output", str(ctx.tmp)))


@case("preflight-simulate-empty", "2", "h2")
def _(ctx: Ctx) -> tuple[bool, str]:
    return exit2(cli(ctx, "preflight", "--simulate", "", *LLAMA))


# -- 3. rule packs -------------------------------------------------------------------------------
def _pack_case(ctx: Ctx, name: str, text: str, *, raw: Optional[bytes] = None, timeout: float = 120) -> tuple[bool, str]:
    d = packs_copy(ctx, name)
    f = d / "zz-evil.yaml"
    if raw is not None:
        f.write_bytes(raw)
    else:
        f.write_text(text)
    r = cli(ctx, "rules", "--rules", str(d), timeout=timeout)
    return r.one_line(2) and r.seconds < timeout, r.say()


RULE = """pack: evil
rules:
  - id: evil.rule
    title: evil
    reason: evil
    source: replay
    backends: [fa2]
"""


@case("rulepack-alias-bomb", "3", "h1")
def _(ctx: Ctx) -> tuple[bool, str]:
    # Inside a condition: 9 anchors, each nine of the previous: 9^10 values once expanded.
    levels = ["&a0 [1, 1, 1, 1, 1, 1, 1, 1, 1]"]
    levels += [f"&a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 10)]
    return _pack_case(ctx, "alias", RULE + "    require: {fact: config.head_dim, in: [" + ", ".join(levels) + "]}\n"
                                           "    message: m\n")


@case("rulepack-deep-flow", "3", "h1")
def _(ctx: Ctx) -> tuple[bool, str]:
    return _pack_case(ctx, "deep", RULE + "    require: " + "[" * 100_000 + "]" * 100_000 + "\n")


@case("rulepack-deep-not", "3", "h1")
def _(ctx: Ctx) -> tuple[bool, str]:
    cond = "{fact: node.capability_major, eq: 10}"
    for _ in range(3000):
        cond = "{not: " + cond + "}"
    return _pack_case(ctx, "not", RULE + f"    require: {cond}\n")


@case("rulepack-not-utf8", "3", "h1")
def _(ctx: Ctx) -> tuple[bool, str]:
    return _pack_case(ctx, "utf8", "", raw=b"pack: evil\nrules: []\n# \xff\xfe\n")


@case("rulepack-duplicate-require", "3", "h1")
def _(ctx: Ctx) -> tuple[bool, str]:
    return _pack_case(ctx, "dup", RULE + "    require: {fact: node.capability_major, eq: 10}\n"
                                         "    require: {fact: node.capability_major, eq: 9}\n    message: m\n")


@case("rulepack-divisible-by-zero", "3", "h1")
def _(ctx: Ctx) -> tuple[bool, str]:
    return _pack_case(ctx, "div0", RULE + "    require: {fact: config.head_dim, divisible_by: 0}\n    message: m\n")


@case("configs-duplicate-key", "3", "h2")
def _(ctx: Ctx) -> tuple[bool, str]:
    p = ctx.tmp / "dup.yaml"
    p.write_text("- {head_dim: 128, num_qo_heads: 32, head_dim: 64}\n")
    return exit2(cli(ctx, "preflight", "--simulate", "B200=1", "--configs", str(p)))


# -- 4. serve with a bad pack ---------------------------------------------------------------------
@case("serve-bad-pack-not-ready", "4", "landed")
def _(ctx: Ctx) -> tuple[bool, str]:
    import httpx

    d = packs_copy(ctx, "broken")
    (d / "core.yaml").write_text("pack: core\nrules: [\n")
    with Serve(ctx, "--device", "B200", "--rules", str(d)) as srv:
        ready = httpx.get(srv.url + "/readyz", timeout=ctx.http)
        plan = httpx.post(srv.url + "/v1/plan", json={"config": {"head_dim": 128, "num_qo_heads": 32}}, timeout=ctx.http)
    return ready.status_code == 503 and plan.status_code == 503, f"/readyz {ready.status_code}, /v1/plan {plan.status_code}"


# -- 5. idle connections -----------------------------------------------------------------------------
@case("serve-silent-connection-closed", "5", "h2")
def _(ctx: Ctx) -> tuple[bool, str]:
    with Serve(ctx, "--device", "B200", "--header-timeout", "1") as srv:
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=ctx.http)
        s.sendall(b"GET /healthz HTTP/1.1\r\n")
        t0 = time.monotonic()
        s.settimeout(0.25)
        closed = False
        while time.monotonic() - t0 < 10 and not closed:
            try:
                s.sendall(b"X")
                closed = s.recv(10) == b""
            except socket.timeout:
                continue
            except OSError:
                closed = True
        s.close()
        return closed, f"closed after {time.monotonic() - t0:.1f}s" if closed else "still open after 10s"


@case("serve-idle-flood-1024-fds", "5", "h2")
def _(ctx: Ctx) -> tuple[bool, str]:
    import httpx
    import resource

    n = 600 if ctx.quick else 5000
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < n + 256:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, n + 512), hard))
    held = []
    with Serve(ctx, "--device", "B200", "--header-timeout", "60", "--no-access-log",
               nofile=(256 if ctx.quick else 1024)) as srv:
        try:
            for _ in range(n):
                s = socket.socket()
                s.setblocking(False)
                s.connect_ex(("127.0.0.1", srv.port))
                held.append(s)
            time.sleep(1.5)
            worst = 0.0
            for _ in range(5):
                t0 = time.monotonic()
                r = httpx.get(srv.url + "/healthz", timeout=ctx.http)
                worst = max(worst, time.monotonic() - t0)
                if r.status_code != 200:
                    return False, f"/healthz {r.status_code}"
            size = srv.log.stat().st_size
        except httpx.HTTPError as exc:
            return False, f"/healthz failed: {type(exc).__name__}"
        finally:
            for s in held:
                s.close()
    return worst < 1.0 and size < 64 * 1024, f"{n} idle: /healthz worst {worst * 1000:.0f} ms, log {size} bytes"


# -- 6. refresh -------------------------------------------------------------------------------------
@case("refresh-coalesced-and-authed", "6", "h2")
def _(ctx: Ctx) -> tuple[bool, str]:
    import httpx

    from attnplan.policy import simulated_node
    from attnplan.node import NodeCache
    from attnplan.rest.app import create_app
    from attnplan.rest.server import BackgroundServer

    def probe() -> Any:
        time.sleep(0.1)
        return simulated_node("B200")

    app = create_app(node_cache=NodeCache(probe), token=TOKEN)
    with BackgroundServer(app, log_level="critical") as srv:
        deadline = time.monotonic() + 20
        while httpx.get(srv.url + "/readyz", timeout=ctx.http).status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.05)
        anon = httpx.get(srv.url + "/v1/node", params={"refresh": "true"}, timeout=ctx.http).status_code
        threads = threading.active_count()

        async def many() -> list[int]:
            async with httpx.AsyncClient(base_url=srv.url, timeout=20,
                                         headers={"Authorization": f"Bearer {TOKEN}"}) as c:
                rs = await asyncio.gather(*(c.get("/v1/node", params={"refresh": "true"}) for _ in range(80)))
            return [r.status_code for r in rs]

        codes = asyncio.run(many())
        probes = app.state.attnplan.nodes.probes_started
        grown = threading.active_count() - threads
    held = anon == 401 and codes == [200] * 80 and probes <= 2 and grown <= 3
    return held, f"no token: {anon}; 80 refreshes: {probes} probe(s), threads +{grown}"


# -- 7. artifactory deadline -------------------------------------------------------------------------
@case("artifactory-drip-total-deadline", "7", "h1")
def _(ctx: Ctx) -> tuple[bool, str]:
    with Dripper() as d:
        r = cli(ctx, "node", "--json", timeout=30,
                env={"ATTNPLAN_ARTIFACTORY_CHECK": "always", "FLASHINFER_CUBINS_REPOSITORY": f"http://127.0.0.1:{d.port}/"})
    return r.rc == 0 and r.seconds < 20, r.say()


# -- 8. preflight trust --------------------------------------------------------------------------------
@case("preflight-control-characters", "8", "h2")
def _(ctx: Ctx) -> tuple[bool, str]:
    from attnplan.policy import make_config, plan_for, simulated_node

    a = plan_for(make_config({"head_dim": 128, "num_qo_heads": 32, "num_kv_heads": 8}), simulated_node("B200"))
    node = json.loads(wire(a))["node"]
    node["gpu_name"]["value"] = "B200\x1b[2J\r\n9  999  forged  ok"
    with FakeNode(wire(a, node=node)) as n:
        r = cli(ctx, "preflight", "--hosts", n.host, *LLAMA, "--per-node")
    bad = [c for c in ("\x1b", "\r") if c in r.out] + (["forged row"] if re.search(r"^9  999", r.out, re.M) else [])
    return not bad and r.rc in (0, 3), f"exit {r.rc}; control characters in output: {bad or 'none'}"


@case("preflight-untrusted-answers", "8", "h2")
def _(ctx: Ctx) -> tuple[bool, str]:
    from attnplan.policy import make_config, plan_for, simulated_node

    a = plan_for(make_config({"head_dim": 128, "num_qo_heads": 32, "num_kv_heads": 8}), simulated_node("B200"))
    node = json.loads(wire(a))["node"]
    bodies = {
        "plan-null": wire(a, plan=None),
        "capability-1e30": wire(a, node={**node, "capability": {"value": 10**30, "source": "measured"}}),
        "gpu-name-list": wire(a, node={**node, "gpu_name": {"value": ["B200"], "source": "measured"}}),
        "no-schema-version": json.dumps({k: v for k, v in json.loads(wire(a)).items() if k != "schema_version"}).encode(),
        "schema-version-2": wire(a, schema_version="2"),
    }
    wrong = []
    for name, body in bodies.items():
        with FakeNode(body) as n:
            r, rows = preflight_json(ctx, n.host)
        row = rows.get(n.host, {})
        if not (r.rc == 3 and row.get("verdict") == "error"):
            wrong.append(f"{name}: exit {r.rc} verdict {row.get('verdict')}")
    return not wrong, "; ".join(wrong) or f"{len(bodies)} bad answers: error rows, exit 3"


# -- 9. tokens -------------------------------------------------------------------------------------------
@case("token-server-side-whitespace", "9", "h2")
def _(ctx: Ctx) -> tuple[bool, str]:
    import httpx

    with Serve(ctx, "--device", "B200", env={"ATTNPLAN_TOKEN": TOKEN + "\n"}) as srv:
        r = httpx.get(srv.url + "/v1/node", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=ctx.http)
    return r.status_code == 200, f"HTTP {r.status_code}"


@case("token-blank-or-short-public", "9", "h2")
def _(ctx: Ctx) -> tuple[bool, str]:
    r1 = cli(ctx, "serve", "--device", "B200", "--host", "0.0.0.0", "--port", "1", env={"ATTNPLAN_TOKEN": " "})
    r2 = cli(ctx, "serve", "--device", "B200", "--host", "0.0.0.0", "--port", "1", env={"ATTNPLAN_TOKEN": "a"})
    return r1.one_line(2) and r2.one_line(2), f"blank: {r1.say()}; 'a': {r2.say()}"


@case("token-in-url-refused-not-logged", "9", "h2")
def _(ctx: Ctx) -> tuple[bool, str]:
    import httpx

    with Serve(ctx, "--device", "B200", env={"ATTNPLAN_TOKEN": TOKEN}) as srv:
        r = httpx.get(srv.url + "/v1/node", params={"token": TOKEN}, timeout=ctx.http)
        time.sleep(0.3)
        logged = TOKEN in srv.text()
    return r.status_code in (400, 401) and not logged, f"HTTP {r.status_code}; token in log: {logged}"


# -- 10. /docs ------------------------------------------------------------------------------------------
@case("docs-no-cdn", "10", "h2")
def _(ctx: Ctx) -> tuple[bool, str]:
    import httpx

    with Serve(ctx, "--device", "B200") as srv:
        r = httpx.get(srv.url + "/docs", timeout=ctx.http)
    cdn = "cdn." in r.text or "https://" in r.text
    return not cdn, f"/docs HTTP {r.status_code}; CDN reference: {cdn}"


# -- 11. facts and schema ----------------------------------------------------------------------------------
@case("device-empty", "11", "h3")
def _(ctx: Ctx) -> tuple[bool, str]:
    return exit2(cli(ctx, "plan", "--device", "", *LLAMA))


@case("artifactory-file-url", "11", "h1")
def _(ctx: Ctx) -> tuple[bool, str]:
    r = cli(ctx, "node", "--json", env={"ATTNPLAN_ARTIFACTORY_CHECK": "always",
                                        "FLASHINFER_CUBINS_REPOSITORY": "file:///etc/passwd"})
    try:
        fact = json.loads(r.out)["node"]["artifactory_reachable"]
    except (ValueError, KeyError):
        return False, r.say()
    return fact.get("value") is not True, f"artifactory_reachable={fact}"


@case("cubin-dir-missing-has-reason", "11", "h1")
def _(ctx: Ctx) -> tuple[bool, str]:
    r = cli(ctx, "node", "--json", env={"FLASHINFER_CUBIN_DIR": "/nonexistent/attnplan-cubins"})
    try:
        fact = json.loads(r.out)["node"]["cubin_dir_has_cubins"]
    except (ValueError, KeyError):
        return False, r.say()
    detail = str(fact.get("detail") or "").lower().replace("/nonexistent/attnplan-cubins", "")
    reason = any(w in detail for w in ("not exist", "no such", "missing", "not a directory", "unreadable", "cannot"))
    return fact.get("value") is not True and reason, f"cubin_dir_has_cubins={fact}"


@case("softcap-nan", "11", "h3")
def _(ctx: Ctx) -> tuple[bool, str]:
    p = ctx.tmp / "nan.json"
    p.write_text(hf_config(ctx.tmp / "base.json").read_text()[:-1] + ', "attn_logit_softcapping": NaN}')
    return exit2(cli(ctx, "plan", "--device", "B200", "--model-config", str(p)))


@case("openapi-device-min-length", "11", "h2")
def _(ctx: Ctx) -> tuple[bool, str]:
    import httpx

    with Serve(ctx, "--device", "B200") as srv:
        schema = httpx.get(srv.url + "/openapi.json", timeout=ctx.http).json()
        r = httpx.post(srv.url + "/v1/plan", json={"config": {"head_dim": 128, "num_qo_heads": 32},
                                                   "node": {"device": ""}}, timeout=ctx.http)
    spec = schema["components"]["schemas"]["NodeSpec"]["properties"]["device"]
    min_len = any(o.get("minLength") == 1 for o in spec.get("anyOf", [spec]))
    return min_len and r.status_code == 422, f"schema minLength=1: {min_len}; POST device '': HTTP {r.status_code}"


@case("engine-uncovered-or-hostile", "12", "h7")
def _(ctx: Ctx) -> tuple[bool, str]:
    # An engine the rules do not model, or one carrying control characters, is a 422 naming the
    # field over REST and exit 2 with one line on the CLI: never a guess, never a 500.
    import httpx

    body = {"config": {"head_dim": 128, "num_qo_heads": 32, "num_kv_heads": 8}, "node": {"device": "H100"}}
    bad = ["vllm==0.1.0", "sglang==0.4.0", "vllm==\x1b[2J", "x" * 65, "flashinfer==0.7.2"]
    wrong = []
    with Serve(ctx, "--device", "B200") as srv:
        for e in bad:
            r = httpx.post(srv.url + "/v1/plan", json={**body, "engine": e}, timeout=ctx.http)
            fields = [d.get("field") for d in r.json().get("detail", [])] if r.status_code == 422 else None
            if fields != ["engine"]:
                wrong.append(f"REST {e[:12]!r}: HTTP {r.status_code} {fields}")
        m = httpx.get(srv.url + "/v1/matrix", params={"engine": "sglang==0.4.0"}, timeout=ctx.http)
        if m.status_code != 422:
            wrong.append(f"matrix: HTTP {m.status_code}")
    # (`plan` echoes the escape today: cli/main.py's printer, outside this case's owner)
    for cmd, clean in ((["plan", "--device", "H100", *LLAMA], True),
                       (["preflight", "--simulate", "H100=1", *LLAMA], True), (["labels", "--device", "H100"], True)):
        r = cli(ctx, *cmd, "--engine", "vllm==\x1b[2J")
        if not r.one_line(2) or (clean and "\x1b" in r.err):
            wrong.append(f"{cmd[0]}: {r.say()}")
    return not wrong, "; ".join(wrong) or "422 naming engine on REST, exit 2 one line on the CLI"


# -- 12. --rules everywhere ----------------------------------------------------------------------------------
@case("rules-dir-every-command", "12", "h2")
def _(ctx: Ctx) -> tuple[bool, str]:
    d = packs_copy(ctx, "broken12")
    (d / "core.yaml").write_text("pack: core\nrules: [\n")
    cmds = {"plan": ["plan", "--device", "B200", *LLAMA], "explain": ["explain", "--device", "B200", *LLAMA],
            "matrix": ["matrix"], "preflight": ["preflight", "--simulate", "B200=1", *LLAMA],
            "labels": ["labels", "--device", "B200"]}
    wrong = []
    for name, argv in cmds.items():
        r = cli(ctx, *argv, "--rules", str(d))
        if not (r.one_line(2) and "core.yaml" in r.err):
            wrong.append(f"{name}: {r.say()}")
    return not wrong, "; ".join(wrong) or f"{', '.join(cmds)} (and serve: case serve-bad-pack-not-ready) refuse it"


# == issue 24 ================================================================================
DOUBLING = "c0: &c0 {fact: config.head_dim, eq: 128}\n" + "".join(
    f"c{i}: &c{i} {{all: [*c{i - 1}, *c{i - 1}]}}\n" for i in range(1, 32))


def _raw_http(port: int, data: bytes, wait: float) -> tuple[bytes, bool]:
    """Send ``data``; everything answered until the server closes (True) or ``wait`` passes (False)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=wait)
    s.sendall(data)
    out, closed = b"", False
    end = time.monotonic() + wait
    try:
        while time.monotonic() < end:
            s.settimeout(max(0.1, end - time.monotonic()))
            chunk = s.recv(65536)
            if not chunk:
                closed = True
                break
            out += chunk
    except socket.timeout:
        pass
    except OSError:
        closed = True
    finally:
        s.close()
    return out, closed


@case("i24-slow-body-flood", "24.1", "h24")
def _(ctx: Ctx) -> tuple[bool, str]:
    # Clients that send complete headers of a 60,000-byte body, then a byte every 2 s; and with a
    # token, unauthenticated ones. The service answers 408 past the body deadline, closes on 401,
    # evicts dripping bodies at the connection cap, and /healthz answers within 1 s throughout
    # (the fault: 0 of 29 probes in 30 s). The 1 s is the item's own requirement.
    import resource

    n, cap = (150, 100) if ctx.quick else (1100, 1000)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < n + 256:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, n + 512), hard))
    head = (b"POST /v1/plan HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 60000\r\n\r\n")
    with Serve(ctx, "--device", "B200", "--body-timeout", "8", "--max-connections", str(cap), "--no-access-log",
               env={"ATTNPLAN_TOKEN": TOKEN}) as srv:
        got401, closed401 = _raw_http(srv.port, head, ctx.http)
        held: list[socket.socket] = []
        try:
            for _ in range(n):
                s = socket.create_connection(("127.0.0.1", srv.port), timeout=ctx.http)
                s.sendall(head.replace(b"Host: x\r\n", f"Host: x\r\nAuthorization: Bearer {TOKEN}\r\n".encode()) + b"{")
                held.append(s)
            # Let the server accept the burst it was just sent (as serve-idle-flood-1024-fds does):
            # the item is the dripping bodies held open, not a backlog of 1,100 connects.
            time.sleep(1.5)
            worst, codes = 0.0, []
            for _ in range(10):
                t0 = time.monotonic()
                with socket.create_connection(("127.0.0.1", srv.port), timeout=ctx.http) as p:
                    p.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                    codes.append(p.recv(64)[9:12])
                worst = max(worst, time.monotonic() - t0)
                time.sleep(0.2)
            # The survivors of the eviction get 408 once their body deadline passes.
            held[-1].settimeout(ctx.http)
            try:
                late = held[-1].recv(4096)
            except OSError as exc:  # evicted (reset) instead of timed out: also closed, but say so
                late = f"reset ({type(exc).__name__})".encode()
        finally:
            for s in held:
                s.close()
    ok401 = got401.startswith(b"HTTP/1.1 401") and closed401
    held_ = ok401 and codes == [b"200"] * 10 and worst < 1.0 and late.startswith(b"HTTP/1.1 408")
    return held_, (f"401 closed: {ok401}; {n} dripping bodies (cap {cap}): /healthz {sum(c == b'200' for c in codes)}/10, "
                   f"worst {worst * 1000:.0f} ms; a dripping body got {late[:12]!r}")


@case("i24-rulepack-doubling-aliases", "24.2", "h24")
def _(ctx: Ctx) -> tuple[bool, str]:
    d = packs_copy(ctx, "doubling")
    (d / "zz-evil.yaml").write_text(DOUBLING + RULE + "    require: *c31\n")
    r = cli(ctx, "rules", "--rules", str(d))
    return r.one_line(2) and "expands to more than" in r.err, r.say()


@case("i24-configs-doubling-aliases", "24.3", "h24")
def _(ctx: Ctx) -> tuple[bool, str]:
    p = ctx.tmp / "configs.yaml"
    p.write_text(DOUBLING + "list:\n  - *c31\n")
    r = cli(ctx, "preflight", "--simulate", "B200=1", "--configs", str(p))
    return r.one_line(2) and "expands to more than" in r.err, r.say()


@case("i24-unhashable-keys", "24.4", "h24")
def _(ctx: Ctx) -> tuple[bool, str]:
    wrong = []
    for i, evil in enumerate(("{[a, b]: 1}: 2\n", "? [a]\n")):
        d = packs_copy(ctx, f"unhashable{i}")
        (d / "zz-evil.yaml").write_text(RULE + "    require: {fact: config.head_dim, eq: 128}\n" + evil)
        c = ctx.tmp / f"c{i}.yaml"
        c.write_text("- {head_dim: 128, num_qo_heads: 32}\n- " + evil)
        for what, r in (("pack", cli(ctx, "rules", "--rules", str(d))),
                        ("configs", cli(ctx, "preflight", "--simulate", "B200=1", "--configs", str(c))),
                        ("ATTNPLAN_RULES", cli(ctx, "plan", "--device", "B200", *LLAMA, env={"ATTNPLAN_RULES": str(d)}))):
            if not (r.one_line(2) and "line" in r.err and (".yaml" in r.err)):
                wrong.append(f"{what} {evil.strip()!r}: {r.say()}")
    return not wrong, "; ".join(wrong) or "pack, --configs and ATTNPLAN_RULES: exit 2 naming file and line"


@case("i24-huge-yaml-integer", "24.5", "h24")
def _(ctx: Ctx) -> tuple[bool, str]:
    d = packs_copy(ctx, "hugeint")
    (d / "zz-evil.yaml").write_text(RULE + "    require: {fact: config.head_dim, eq: " + "9" * 4400 + "}\n")
    c = ctx.tmp / "c.yaml"
    c.write_text("- {head_dim: " + "1" * 4400 + ", num_qo_heads: 32}\n")
    r1, r2 = cli(ctx, "rules", "--rules", str(d)), cli(ctx, "preflight", "--simulate", "B200=1", "--configs", str(c))
    return r1.one_line(2) and r2.one_line(2), f"pack: {r1.say()}; configs: {r2.say()}"


def _model_dir(ctx: Ctx, name: str, **over: Any) -> Path:
    d = ctx.tmp / name
    d.mkdir()
    hf_config(d / "config.json", **{"num_hidden_layers": 32, **over})
    return d


@case("i24-layer-count", "24.6", "h24")
def _(ctx: Ctx) -> tuple[bool, str]:
    wrong = []
    for n in (10_000_000,) if ctx.quick else (10_000_000, 10**9):
        d = _model_dir(ctx, f"layers{n}", num_hidden_layers=n)
        for how, r in (("config.json", cli(ctx, "plan", "--device", "B200", "--model-config", str(d / "config.json"))),
                       ("--hf-overrides", cli(ctx, "vllm", "serve", str(_model_dir(ctx, f"base{n}")), "--device", "B200",
                                              "--hf-overrides", json.dumps({"num_hidden_layers": n})))):
            if not (r.one_line(2) and "num_hidden_layers" in r.err):
                wrong.append(f"{n} via {how}: {r.say()}")
    return not wrong, "; ".join(wrong) or "10^7 and 10^9 layers: exit 2 naming num_hidden_layers (config.json and --hf-overrides)"


@case("i24-model-config-fields", "24.7", "h24")
def _(ctx: Ctx) -> tuple[bool, str]:
    mla = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "kv_lora_rank": 512,
           "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128}
    h1 = {"architectures": ["FalconH1ForCausalLM"], "model_type": "falcon_h1", "mamba_n_heads": 8, "mamba_d_head": 64,
          "mamba_d_state": 16}
    cases = {"layer_types": {"layer_types": [["x"]] * 32},
             "mscale_all_dim": {**mla, "rope_scaling": {"type": "yarn", "factor": 40, "mscale_all_dim": "x"}},
             "mscale_all_dim ": {**mla, "rope_scaling": {"type": "yarn", "factor": 40, "mscale_all_dim": [1]}},
             "mamba_expand": h1, "mamba_expand ": {**h1, "mamba_expand": 1e308}}
    wrong = []
    # Each CLI run loads transformers (seconds on a loaded machine): --quick replays two of the five
    # here (tests/test_hostile_inputs.py checks all of them in process).
    for i, (field, over) in enumerate(cases.items()):
        if ctx.quick and i not in (0, 4):
            continue
        d = _model_dir(ctx, f"m{i}", **over)
        r = cli(ctx, "plan", "--device", "B200", "--model-config", str(d / "config.json"))
        if not (r.one_line(2) and field.strip() in r.err):
            wrong.append(f"{field.strip()}: {r.say()}")
        if i == 4 or (i == 0 and not ctx.quick):  # and through vllm serve --hf-overrides
            r = cli(ctx, "vllm", "serve", str(_model_dir(ctx, f"o{i}")), "--device", "B200", "--hf-overrides", json.dumps(over))
            if not r.one_line(2):
                wrong.append(f"{field.strip()} via --hf-overrides: {r.say()}")
    return not wrong, "; ".join(wrong) or f"{len(cases)} bad fields: exit 2 naming each"


@case("i24-rules-path-too-long", "24.10", "h24")
def _(ctx: Ctx) -> tuple[bool, str]:
    r = cli(ctx, "rules", env={"ATTNPLAN_RULES": "/" + "a" * 5000})
    return r.one_line(2) and len(r.err) < 500, r.say()


@case("i24-preflight-stacked-gzip", "24.11", "h24")
def _(ctx: Ctx) -> tuple[bool, str]:
    import gzip
    import zlib

    from attnplan.policy import make_config, plan_for, simulated_node

    good = wire(plan_for(make_config({"head_dim": 128, "num_qo_heads": 32, "num_kv_heads": 8}), simulated_node("B200")))
    mib = 64 if ctx.quick else 1024  # decoded size of the single layer (the fault: ~1.1 GB)
    z = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)  # gzip, streamed: never 1 GiB in memory
    block = b" " * (1 << 20)
    inner = b"".join(z.compress(block) for _ in range(mib)) + z.flush()
    double, triple = gzip.compress(inner, 9), gzip.compress(gzip.compress(inner, 9), 9)
    with FakeNode(good) as ok, FakeNode(double, headers={"content-encoding": "gzip, gzip"}) as g2, \
            FakeNode(triple, headers={"content-encoding": "gzip, gzip, gzip"}) as g3, \
            FakeNode(inner, headers={"content-encoding": "gzip"}) as g1:
        r, rows = preflight_json(ctx, ok.host, g2.host, g3.host, g1.host)
    kinds = {h: rows.get(h, {}).get("status") for h in (ok.host, g2.host, g3.host, g1.host)}
    held = (r.rc == 3 and kinds[ok.host] == "ok" and all(kinds[h] == "error" for h in (g2.host, g3.host, g1.host))
            and "Traceback" not in r.err)
    return held, f"exit {r.rc} in {r.seconds:.1f}s; rows {list(kinds.values())}; {rows.get(g2.host, {}).get('reason')}"


@case("i24-preflight-ok-with-violations", "24.12", "h24")
def _(ctx: Ctx) -> tuple[bool, str]:
    from attnplan.policy import make_config, plan_for, simulated_node

    cfg = make_config({"head_dim": 128, "num_qo_heads": 32, "num_kv_heads": 8})
    ok = plan_for(cfg, simulated_node("B200"))
    bad = plan_for(make_config({"head_dim": 100, "num_qo_heads": 32, "num_kv_heads": 8}), simulated_node("B200"))
    with FakeNode(wire(ok, violations=json.loads(wire(bad))["violations"])) as n:
        r, rows = preflight_json(ctx, n.host)
    row = rows.get(n.host, {})
    return r.rc == 3 and row.get("status") == "error", f"exit {r.rc}; row {row.get('status')}: {row.get('reason')}"


@case("i24-rules-directory-total", "24.13", "h24")
def _(ctx: Ctx) -> tuple[bool, str]:
    d = packs_copy(ctx, "bigdir")
    packs = 4 if ctx.quick else 40
    rule = ("  - id: big.r{i}\n    title: t\n    reason: r\n    source: s\n    backends: [fa2]\n"
            "    require: {{fact: config.head_dim, eq: 128}}\n")
    for p in range(packs):
        body = "".join(rule.format(i=f"{p}x{i}") for i in range(7000))  # ~1 MB each
        (d / f"big{p:02d}.yaml").write_text(f"pack: big{p}\nrules:\n" + body[:1_000_000].rsplit("  - id:", 1)[0])
    r = cli(ctx, "rules", "--rules", str(d))
    return r.one_line(2) and "bytes in all" in r.err, r.say()


@case("i24-strict-floats-and-empty-engine", "24.also", "h24")
def _(ctx: Ctx) -> tuple[bool, str]:
    import httpx

    cfg = {"head_dim": 128, "num_qo_heads": 32, "num_kv_heads": 8}
    wrong = []
    with Serve(ctx, "--device", "B200") as srv:
        for field, value in (("logits_soft_cap", "128"), ("logits_soft_cap", True), ("sm_scale", "0.1"), ("sm_scale", True)):
            r = httpx.post(srv.url + "/v1/plan", json={"config": {**cfg, field: value}}, timeout=ctx.http)
            fields = [d.get("field") for d in r.json().get("detail", [])] if r.status_code == 422 else None
            if fields != [f"config.{field}"]:
                wrong.append(f"{field}={value!r}: HTTP {r.status_code} {fields}")
        r = httpx.post(srv.url + "/v1/plan", json={"config": cfg, "engine": "vllm=="}, timeout=ctx.http)
        if r.status_code != 422:
            wrong.append(f"engine 'vllm==': HTTP {r.status_code}")
    c = cli(ctx, "plan", "--device", "H100", *LLAMA, "--engine", "vllm==")
    if not c.one_line(2):
        wrong.append(f"CLI --engine vllm==: {c.say()}")
    return not wrong, "; ".join(wrong) or "\"128\"/true refused as floats (422 naming the field); vllm== refused (422, exit 2)"


# -- issue 40: hostile inputs of classes 3, 4, 5, 7 and 8 (owner h40) ----------------------------------------
# Each case below replays many inputs and adds them to TALLY: a crash is an exception outside attnplan's
# error tree, exit 70 / a traceback, an HTTP 500 or a dropped connection; a hang is a timeout; wrong is an
# answer that holds but says the wrong thing (a file's contents in an error, a replaced device, ...).
TALLY = {"inputs": 0, "crashes": 0, "hangs": 0, "wrong": 0}
SECRET = "SECRET-5f1c0ffee"


def _count(kind: Optional[str], what: str, bad: list[str]) -> None:
    TALLY["inputs"] += 1
    if kind is not None:
        TALLY[kind] += 1
        bad.append(f"{kind}: {what}"[:160])


def _in_process(fn: Callable[[], Any], what: str, bad: list[str], expect: type) -> Any:
    """Run ``fn``; it must raise ``expect`` (an attnplan error class), never anything else."""
    from attnplan.policy import AttnplanError

    try:
        fn()
    except expect as exc:
        _count(None, what, bad)
        return exc
    except AttnplanError as exc:
        _count("wrong", f"{what}: {type(exc).__name__} {str(exc)[:80]}", bad)
    except Exception as exc:  # noqa: BLE001 - the crash being counted
        _count("crashes", f"{what}: {type(exc).__name__}: {str(exc)[:80]}", bad)
    else:
        _count("wrong", f"{what}: accepted", bad)
    return None


def _http(client: Any, what: str, bad: list[str], method: str, url: str, *, want: tuple[int, ...] = (422,),
          leak: tuple[str, ...] = (SECRET,), **kw: Any) -> Any:
    import httpx

    try:
        r = client.request(method, url, **kw)
    except httpx.TimeoutException:
        _count("hangs", what, bad)
        return None
    except httpx.HTTPError as exc:
        _count("crashes", f"{what}: {type(exc).__name__}", bad)
        return None
    if r.status_code >= 500 and r.status_code != 503:
        _count("crashes", f"{what}: HTTP {r.status_code}", bad)
    elif r.status_code not in want or any(s and s in r.text for s in leak):
        _count("wrong", f"{what}: HTTP {r.status_code} {r.text[:100]}", bad)
    else:
        _count(None, what, bad)
    return r


def _cli40(ctx: Ctx, what: str, bad: list[str], *argv: str, want: int = 2, leak: tuple[str, ...] = (SECRET,),
           env: Optional[dict[str, str]] = None) -> Result:
    r = cli(ctx, *argv, env=env)
    if r.hung:
        _count("hangs", what, bad)
    elif r.rc == 70 or "Traceback" in r.err:
        _count("crashes", f"{what}: {r.say()}", bad)
    elif r.rc != want or any(s in r.out + r.err for s in leak) or (want == 2 and not r.one_line(2)):
        _count("wrong", f"{what}: {r.say()}", bad)
    else:
        _count(None, what, bad)
    return r


def _verdict(bad: list[str], n0: int, what: str) -> tuple[bool, str]:
    n = TALLY["inputs"] - n0
    return not bad, (f"{n} inputs, {len(bad)} not held: " + "; ".join(bad[:4])) if bad else f"{n} inputs held: {what}"


def _packs_without(ctx: Ctx, rule_id: str) -> Path:
    import yaml

    d = packs_copy(ctx, f"without-{rule_id}")
    for p in sorted(d.glob("*.yaml")):
        data = yaml.safe_load(p.read_text())
        kept = [r for r in data["rules"] if r["id"] != rule_id]
        if len(kept) != len(data["rules"]):
            data["rules"] = kept
            p.write_text(yaml.safe_dump(data, sort_keys=False))
    return d


@case("i40-rules-load-whole", "40.3", "h40")
def _(ctx: Ctx) -> tuple[bool, str]:
    import httpx

    from attnplan.policy import RulePackError, default_ruleset, load_rules
    from attnplan.policy.rulepack import RESOLVER_RULES, _named_rules
    from attnplan.rules import BACKENDS_FILE, PACKS_DIR

    bad: list[str] = []
    n0 = TALLY["inputs"]
    rs = default_ruleset()
    needed = sorted(set().union(*RESOLVER_RULES.values()) | {r for e in rs.engines.values()
                                                              for _, r in _named_rules(e.native or {})})
    dirs = {}
    for rid in needed if not ctx.quick else needed[::3]:
        d = dirs[rid] = _packs_without(ctx, rid)
        exc = _in_process(lambda: load_rules(d), f"packs without {rid}", bad, RulePackError)
        if exc is not None and rid not in str(exc):
            _count("wrong", f"without {rid}: error does not name it: {exc}", bad)
    # backends.yaml typos: every fact named in the engine rows misspelt, each row key misspelt
    text = BACKENDS_FILE.read_text()
    start = text.index("    query_dtype:")
    end = text.index("  sglang:", start)
    block = text[start:end]
    muts = []
    for m in re.finditer(r"fact: ([a-z_.]+)", block):
        muts.append(start + m.start(1) + len(m.group(1)))
    for key in ("refused_when:", "runs_flashinfer:", "dtype:", "phases:", "backends:", "reason:"):
        i = block.find(key)
        if i >= 0:
            muts.append(start + i + len(key) - 1)
    muts = sorted(set(muts))
    for pos in (muts if not ctx.quick else muts[::4]):
        bad_file = ctx.tmp / f"backends-{pos}.yaml"
        bad_file.write_text(text[:pos] + "x" + text[pos:])
        exc = _in_process(lambda: load_rules(PACKS_DIR, bad_file), f"backends.yaml typo at {pos}", bad, RulePackError)
        if exc is not None and str(bad_file) not in str(exc):
            _count("wrong", f"typo at {pos}: error does not name the file", bad)
    rid = "sglang.kv-names"
    d = dirs.get(rid) or _packs_without(ctx, rid)
    _cli40(ctx, "rules --rules without kv-names", bad, "rules", "--rules", str(d))
    _cli40(ctx, "plan sglang --rules without kv-names", bad, "plan", "--device", "H100", "--engine", "sglang",
           *LLAMA, "--rules", str(d))
    with Serve(ctx, "--device", "H100", "--rules", str(d)) as srv, httpx.Client(timeout=ctx.http) as c:
        r = _http(c, "serve --rules without kv-names: readyz", bad, "GET", srv.url + "/readyz", want=(503,))
        if r is not None and rid not in r.text:
            _count("wrong", "readyz does not name the rule", bad)
        _http(c, "serve --rules without kv-names: plan", bad, "POST", srv.url + "/v1/plan", want=(503,),
              json={"config": {"head_dim": 128, "num_qo_heads": 32, "num_kv_heads": 8}, "engine": "sglang"})
    return _verdict(bad, n0, "each missing rule and each typo is a load error naming it (exit 2, serve not ready)")


def _hf_world(ctx: Ctx) -> dict[str, Path]:
    llama = json.loads((ROOT / "attnplan" / "presets" / "llama-3.1-8b.json").read_text())
    commit = "0123456789abcdef0123456789abcdef01234567"
    cache = ctx.tmp / "hub"
    repo = cache / "models--acme--tiny"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    (repo / "snapshots" / commit).mkdir(parents=True)
    (repo / "snapshots" / commit / "config.json").write_text(json.dumps(llama))
    secret = ctx.tmp / "secret"
    secret.mkdir()
    (secret / "config.json").write_text(json.dumps({**llama, SECRET: SECRET}))
    (secret / "secret.yaml").write_text(f"{SECRET}: {SECRET}\ntensor-parallel-size: 2\n")
    (secret / "list.yaml").write_text(f"- {SECRET}\n")
    (secret / "notutf8.yaml").write_bytes(b"\xff\xfe" * 8)
    big = secret / "big"
    big.mkdir()
    with open(big / "config.json", "wb") as fh:  # a file far over any bound, named as a revision
        fh.truncate((8 if ctx.quick else 700) << 20)
    os.symlink(secret / "config.json", repo / "refs" / "evil")
    (repo / "snapshots" / "outside").mkdir()
    os.symlink(secret / "config.json", repo / "snapshots" / "outside" / "config.json")
    (repo / "refs" / "binary").write_bytes(b"\xff\xfe\x00")
    with open(repo / "refs" / "huge", "wb") as fh:
        fh.truncate((8 if ctx.quick else 700) << 20)
    return {"cache": cache, "repo": repo, "secret": secret, "commit": Path(commit)}


@case("i40-rest-file-reads", "40.4", "h40")
def _(ctx: Ctx) -> tuple[bool, str]:
    import httpx

    bad: list[str] = []
    n0 = TALLY["inputs"]
    w = _hf_world(ctx)
    s, repo = w["secret"], w["repo"]
    revisions = [str(s), str(s / "config.json"), str(s / "big"), os.path.relpath(s, repo / "snapshots"),
                 os.path.relpath(s / "big", repo / "snapshots"), "../../../secret", "..", ".", "main/../..",
                 "../refs/main", "refs/../../..", "/etc", "/dev/zero", "/proc/self", "~", "~root", "a/b", "main\n",
                 " main", "main ", "", "-", "evil", "outside", "binary", "huge", "nope", "x" * 200, "%2e%2e", "\x00",
                 "$(id)", "`id`", "main;id", "refs/pr/1", "C:\\Windows", "\\\\host\\share", "..\\..", "@{-1}",
                 "HEAD~1", "HEAD^", "main:config.json", "*", "?", "[a]", "\u202e", "main\u0000x"]
    if ctx.quick:
        revisions = revisions[:12] + ["evil", "outside", "binary", "huge"]
    env = {"HF_HUB_CACHE": str(w["cache"])}
    with Serve(ctx, "--device", "H100", env=env) as srv, httpx.Client(timeout=ctx.http) as c:
        _http(c, "revision main", bad, "POST", srv.url + "/v1/plan", want=(200,),
              json={"model": "acme/tiny", "revision": "main"})
        _http(c, "revision <commit>", bad, "POST", srv.url + "/v1/plan", want=(200,),
              json={"model": "acme/tiny", "revision": str(w["commit"])})
        for rev in revisions:
            # the body's strings are stripped (ModelRequest str_strip_whitespace): " main" is main
            ok = (200, 422) if rev.strip() == "main" else (422,)
            _http(c, f"/v1/plan revision {rev[:40]!r}", bad, "POST", srv.url + "/v1/plan", want=ok,
                  json={"model": "acme/tiny", "revision": rev}, leak=(SECRET, str(s)))
            if "\n" in rev or "\x00" in rev or not rev.strip():
                continue  # not one shell word
            line = f"vllm serve acme/tiny --revision {json.dumps(rev)}"
            _http(c, f"serve line --revision {rev[:40]!r}", bad, "POST", srv.url + "/v1/plan/serve",
                  json={"line": line}, leak=(SECRET, str(s)))
        lines = [f"--config {s / 'secret.yaml'}", f"--config={s / 'secret.yaml'}", f"--config {s / 'list.yaml'}",
                 f"--config {s / 'notutf8.yaml'}", "--config /etc/passwd", f"--config {s / 'missing.yaml'}",
                 "--config", f"--config {s / 'secret.yaml'} --config {s / 'secret.yaml'}",
                 f"--hf-overrides @{s / 'config.json'}", f"--hf-overrides=@{s / 'config.json'}",
                 f"@{s / 'secret.yaml'}", f"--speculative-config @{s / 'config.json'}",
                 f"--revision {s}", f"--model {s}", f"--model={s / 'config.json'}",
                 f"--tokenizer {s} --config {s / 'secret.yaml'}"]
        models = [str(s), str(s / "config.json"), f"../{s.name}", "~/.cache", "/etc/passwd", f"file://{s}"]
        for tail in (lines if not ctx.quick else lines[::2]):
            for body in ({"json": {"line": f"vllm serve llama-3.1-8b {tail}"}},
                         {"content": f"vllm serve llama-3.1-8b {tail}", "headers": {"content-type": "text/plain"}}):
                # --model PATH beside a positional model: vLLM serves the positional one, and no file is read
                ok = (200, 422) if tail.startswith("--model") else (422,)
                _http(c, f"serve line {tail[:50]}", bad, "POST", srv.url + "/v1/plan/serve", want=ok,
                      leak=(SECRET, str(s)), **body)
        for m in models:
            _http(c, f"model {m[:40]}", bad, "POST", srv.url + "/v1/plan", json={"model": m}, leak=(SECRET, str(s)))
            _http(c, f"serve model {m[:40]}", bad, "POST", srv.url + "/v1/plan/serve",
                  json={"line": f"vllm serve {m}"}, leak=(SECRET, str(s)))
        if "Traceback" in srv.text():
            _count("crashes", "serve logged a traceback", bad)
    cli_tails = [[f"--config={s / 'secret.yaml'}"], ["--config", str(s / "missing.yaml")],
                 ["--config", str(s / "secret.yaml")], ["--config", str(s / "list.yaml")],
                 ["--config", str(s / "notutf8.yaml")], ["--config", str(s / "config.json")],
                 ["--revision", str(s)], ["--revision", "../../x"]]
    for tail in (cli_tails if not ctx.quick else cli_tails[1::3]):
        _cli40(ctx, f"CLI vllm serve {' '.join(tail)[:60]}", bad, "vllm", "serve", "llama-3.1-8b", *tail,
               "--device", "H100", env=env)
    return _verdict(bad, n0, "422 / exit 2, no file opened for a client, no contents in any error")


@case("i40-rest-contract", "40.5", "h40")
def _(ctx: Ctx) -> tuple[bool, str]:
    import http.client

    import httpx

    from attnplan.policy import simulated_node
    from attnplan.rest.app import create_app
    from attnplan.rest.server import BackgroundServer

    bad: list[str] = []
    n0 = TALLY["inputs"]
    presets = ctx.tmp / "presets"
    presets.mkdir()
    custom = json.loads((ROOT / "attnplan" / "presets" / "llama-3.1-8b.json").read_text())
    (presets / "my-llama.json").write_text(json.dumps({**custom, "num_key_value_heads": 4}))
    cfg = {"head_dim": 128, "num_qo_heads": 32, "num_kv_heads": 8}
    mark = "ECHO-7d3a9b"
    with Serve(ctx, "--device", "H100", env={"ATTNPLAN_EXAMPLES_DIR": str(presets)}) as srv, \
            httpx.Client(timeout=ctx.http) as c:
        u = srv.url
        for v in (True, False, "2", "1", 2.5, 1.0, None, [1], {"n": 1}, -1, 0, 10 ** 30, "", "0x2"):
            for field in ("tp", "page_size") if v is not None else ("tp",):  # page_size: null is "not given"
                _http(c, f"compare {field}={v!r}", bad, "POST", u + "/v1/compare",
                      json={"model": "llama-3.1-8b", "devices": ["H100"], field: v})
            _http(c, f"plan tensor_parallel_size={v!r}", bad, "POST", u + "/v1/plan",
                  json={"model": "llama-3.1-8b", "tensor_parallel_size": v})
            _http(c, f"compare devices={v!r}", bad, "POST", u + "/v1/compare",
                  json={"model": "llama-3.1-8b", "devices": [v]})
        # every string field given a non-string, every integer field a non-integer: 422 on every route
        strs = [("/v1/plan", {"model": "llama-3.1-8b"}, f) for f in ("engine", "dtype", "kv_cache_dtype",
                                                                     "attention_backend", "revision")]
        strs += [("/v1/plan", {"config": cfg}, "engine"), ("/v1/plan/serve", {}, "line"),
                 ("/v1/plan/serve", {"line": "vllm serve llama-3.1-8b"}, "engine"),
                 ("/v1/compare", {"devices": ["H100"]}, "model"),
                 ("/v1/compare", {"model": "llama-3.1-8b", "devices": ["H100"]}, "kv_cache_dtype")]
        ints = [("/v1/plan", {"model": "llama-3.1-8b"}, f) for f in ("tensor_parallel_size", "pipeline_parallel_size",
                                                                     "decode_context_parallel_size", "block_size",
                                                                     "num_speculative_tokens", "max_model_len")]
        for path, base, field in strs:
            for v in (True, 2, 2.5, [], {}, ["x"]) if not ctx.quick else (True, 2.5, []):
                _http(c, f"{path} {field}={v!r}", bad, "POST", u + path, json={**base, field: v})
        for path, base, field in ints:
            for v in (True, "2", 2.5, [], {}) if not ctx.quick else (True, "2"):
                _http(c, f"{path} {field}={v!r}", bad, "POST", u + path, json={**base, field: v})
        dups = [("/v1/plan", '{"config": %s, "engine": "vllm", "engine": "flashinfer"}' % json.dumps(cfg)),
                ("/v1/plan", '{"config": {"head_dim": 64, "head_dim": 128, "num_qo_heads": 32, "num_kv_heads": 8}}'),
                ("/v1/plan", '{"model": "llama-3.1-8b", "model": "gemma-2-9b"}'),
                ("/v1/plan", '{"model": {"num_attention_heads": 8, "num_attention_heads": 16}}'),
                ("/v1/compare", '{"model": "llama-3.1-8b", "devices": ["H100"], "tp": 1, "tp": 2}'),
                ("/v1/compare", '{"config_json": {"a": 1, "a": 2}, "devices": ["H100"]}'),
                ("/v1/plan/serve", '{"line": "vllm serve llama-3.1-8b", "line": "vllm serve x"}'),
                ("/v1/plan", '{"config": {"head_dim": NaN}}'), ("/v1/compare", '{"tp": Infinity}'),
                ("/v1/plan/serve", '{"line": -Infinity}'), ("/v1/plan", '\xff{}'), ("/v1/compare", '[' * 200 + ']' * 200)]
        for path, raw in dups:
            _http(c, f"{path} {raw[:50]}", bad, "POST", u + path, want=(400, 422), content=raw.encode("utf-8", "surrogateescape"),
                  headers={"content-type": "application/json"})
        echoes = [("/v1/plan", {"model": mark}), ("/v1/plan", {"model": f"acme/{mark}"}),
                  ("/v1/plan", {"model": {"model_type": "llama", "num_attention_heads": mark}}),
                  ("/v1/plan", {"config": cfg, "node": {"device": mark}}), ("/v1/plan", {"config": cfg, "engine": mark}),
                  ("/v1/plan", {"config": {**cfg, "kv_cache_dtype": mark}}),
                  ("/v1/plan", {"model": "llama-3.1-8b", "kv_cache_dtype": mark}),
                  ("/v1/plan", {"model": "llama-3.1-8b", "attention_backend": mark}),
                  ("/v1/plan", {"model": "llama-3.1-8b", "dtype": mark}),
                  ("/v1/plan", {"model": "llama-3.1-8b", "hf_overrides": {"num_attention_heads": mark}}),
                  ("/v1/plan", {"model": "llama-3.1-8b", "revision": f"/{mark}"}),
                  ("/v1/plan", {"config": cfg, "node": {"capability": mark}}),
                  ("/v1/plan", {"config": cfg, "node": {"flashinfer_version": mark}}),
                  ("/v1/compare", {"model": mark, "devices": ["H100"]}),
                  ("/v1/compare", {"model": "llama-3.1-8b", "devices": [mark]}),
                  ("/v1/compare", {"model": "llama-3.1-8b", "devices": ["H100"], "kv_cache_dtype": mark}),
                  ("/v1/compare", {"config_json": {"model_type": "llama", "num_attention_heads": mark}, "devices": ["H100"]}),
                  ("/v1/compare", {"config_json": {"architectures": [mark], "num_attention_heads": 0}, "devices": ["H100"]}),
                  ("/v1/plan/serve", {"line": f"vllm serve {mark}"}),
                  ("/v1/plan/serve", {"line": f"vllm serve llama-3.1-8b --kv-cache-dtype {mark}"}),
                  ("/v1/plan/serve", {"line": f"vllm serve llama-3.1-8b --no-such-flag {mark}"}),
                  ("/v1/plan/serve", {"line": f"vllm serve llama-3.1-8b -tp {mark}"}),
                  ("/v1/plan/serve", {"line": f"vllm serve llama-3.1-8b --attention-backend {mark}"}),
                  ("/v1/plan/serve", {"line": f"vllm serve llama-3.1-8b --hf-overrides [\"{mark}\"]"}),
                  ("/v1/plan/serve", {"line": f"vllm serve llama-3.1-8b --speculative-config {mark}"}),
                  ("/v1/plan/serve", {"line": "vllm serve llama-3.1-8b", "node": {"device": mark}}),
                  ("/v1/plan/serve", {"line": "vllm serve llama-3.1-8b", "engine": mark})]
        for path, body in echoes:
            _http(c, f"echo {path} {json.dumps(body)[:60]}", bad, "POST", u + path, json=body, leak=(mark,))
        for name in ("my-llama", "llama-3.1-8b", "gemma-2-9b"):
            _http(c, f"preset {name} /v1/plan", bad, "POST", u + "/v1/plan", json={"model": name}, want=(200,))
            _http(c, f"preset {name} /v1/plan/serve", bad, "POST", u + "/v1/plan/serve",
                  json={"line": f"vllm serve {name} -tp 2"}, want=(200,))
            _http(c, f"preset {name} /v1/compare", bad, "POST", u + "/v1/compare",
                  json={"model": name, "devices": ["H100"]}, want=(200,))
        listed = [p["name"] for p in c.get(u + "/v1/presets").json()["presets"]]
        _count(None if listed == ["my-llama"] else "wrong", f"/v1/presets lists {listed}", bad)
        if "Traceback" in srv.text():
            _count("crashes", "serve logged a traceback", bad)
    app = create_app(node=simulated_node("H100"))

    @app.get("/v1/crash-for-replay")
    def crash() -> None:
        raise RuntimeError("a bug")

    with BackgroundServer(app, log_level="critical") as srv:
        conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=ctx.http)
        for i in range(3):
            conn.request("GET", "/v1/crash-for-replay")
            r = conn.getresponse()
            r.read()
            try:
                conn.request("GET", "/healthz")
                r2 = conn.getresponse()
                r2.read()
                _count(None if r.status == 500 and r2.status == 200 else "wrong",
                       f"500 then keep-alive: {r.status} {r2.status}", bad)
            except (OSError, http.client.HTTPException) as exc:
                _count("crashes", f"keep-alive after a 500: {type(exc).__name__}", bad)
                conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=ctx.http)
        conn.close()
    return _verdict(bad, n0, "strict types, duplicates refused, nothing echoed, one preset registry, "
                             "keep-alive after a 500")


@case("i40-output-files", "40.7", "h40")
def _(ctx: Ctx) -> tuple[bool, str]:
    import socket as _socket
    import stat as _stat

    bad: list[str] = []
    n0 = TALLY["inputs"]
    real = ctx.tmp / "real"
    real.write_text("keep\n")
    targets = {}
    targets["symlink"] = ctx.tmp / "link"
    targets["symlink"].symlink_to(real)
    targets["dangling"] = ctx.tmp / "dangling"
    targets["dangling"].symlink_to(ctx.tmp / "nowhere")
    targets["dir-link"] = ctx.tmp / "dirlink"
    targets["dir-link"].symlink_to(ctx.tmp)
    targets["fifo"] = ctx.tmp / "fifo"
    os.mkfifo(targets["fifo"])
    targets["directory"] = ctx.tmp / "dir"
    targets["directory"].mkdir()
    sock = _socket.socket(_socket.AF_UNIX)
    targets["socket"] = ctx.tmp / "sock"
    sock.bind(str(targets["socket"]))
    try:
        targets["chardev"] = ctx.tmp / "null"
        os.mknod(targets["chardev"], _stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except OSError:
        targets.pop("chardev")
    try:
        for kind, t in targets.items():
            before = os.lstat(t)
            for cmd in (["labels", "--device", "B200", "-o", str(t)], ["labels", "--device", "B200", "--output", str(t)]):
                _cli40(ctx, f"labels -o {kind}", bad, *cmd, leak=())
                after = os.lstat(t)
                if (before.st_mode, before.st_ino) != (after.st_mode, after.st_ino):
                    _count("wrong", f"{kind} was replaced", bad)
        if real.read_text() != "keep\n" or (ctx.tmp / "nowhere").exists():
            _count("wrong", "written through a link", bad)
        _cli40(ctx, "labels -o regular file", bad, "labels", "--device", "B200", "-o", str(real), want=0, leak=())
    finally:
        sock.close()
    return _verdict(bad, n0, "links, devices, FIFOs, sockets, directories refused (exit 2) and untouched")


@case("i40-model-class-defaults", "40.8", "h40")
def _(ctx: Ctx) -> tuple[bool, str]:
    from attnplan.policy import AttnplanError
    from attnplan.model.hfconfig import CLASS_DEFAULTS, model_info

    bad: list[str] = []
    n0 = TALLY["inputs"]
    try:
        import transformers  # noqa: F401
    except ImportError:
        return True, "transformers not installed: nothing to compare against"
    variants = [{}, {"use_sliding_window": True}, {"head_dim": None}, {"sliding_window": None},
                {"num_key_value_heads": None}, {"attn_logit_softcapping": None}, {"use_sliding_window": False}]
    for family in sorted(CLASS_DEFAULTS) + ["gemma3"]:
        for v in (variants if not ctx.quick else variants[:3]):
            data = {"model_type": family, "num_attention_heads": 128, "hidden_size": 8192, **v}
            if family == "gemma3":
                data = {"model_type": "gemma3", "text_config": {"num_attention_heads": 128, "hidden_size": 8192, **v}}
            try:
                forced = model_info(data, use_transformers="always").fields
            except AttnplanError:
                forced = None
            try:
                own = model_info(data, use_transformers=False).fields
            except AttnplanError:
                own = None
            except Exception as exc:  # noqa: BLE001 - counted
                _count("crashes", f"{family} {v}: {type(exc).__name__}", bad)
                continue
            _count(None if own == forced else "wrong", f"{family} {v}: own {own} != transformers {forced}", bad)
    return _verdict(bad, n0, "attnplan's own reader reads every family's class defaults as transformers does")


# -- issue 40, round four (owner i40r4): what issue 36 and 40 added -------------------------------------------
# The verdict, vLLM's and SGLang's own backend names, --require-flashinfer, fixes, model labels, preflight cells,
# cubins and the node's trtllm-gen table, the shipped vLLM flag table, vLLM's --kv-cache-dtype vocabulary,
# `sglang launch_server`, compare, and REST /v1/plan, /v1/plan/serve, /v1/compare: hostile and careless inputs,
# each counted once in R4. A crash is exit 70 / "internal error" / a traceback, an HTTP 500, or an exception
# outside attnplan's error tree; a hang is > 10 s before any output (the CLI in-process: > 10 s in all); a
# blow-up is > 1 GiB of resident memory over what the process held before the input (VmHWM). Inconsistent
# is an answer that contradicts itself or its other surface: an exit code that is not the verdict's (0 iff
# outcome runs, and modelled under --require-flashinfer; 2 only for bad input), the same line with another
# verdict (or a 422 where the CLI plans) on the CLI --json and REST, a model label that is not runs|a rule.
# Most inputs run in this process (main() and a TestClient: ~50 ms each, where a subprocess costs ~0.5 s on a
# loaded 2-core machine); what reads node files (cubins, node) runs in a subprocess watched for time and RSS.
R4 = {"inputs": 0, "crashes": 0, "hangs": 0, "blowups": 0, "inconsistent": 0}
R4_CLASSES: dict[str, list[str]] = {}  # crash class (exception and its last frames) -> reproducers
R4_HANG_S = 10.0
R4_BLOWUP = 1 << 30
R4_DEVICES = ("H100", "B200", "A100", "GB300", "RTX PRO 6000", "L40S", "H200", "B300")
R4_MODELS = ("llama-3.1-8b", "gemma-2-9b", "deepseek-v3", "gpt-oss-120b", "qwen3-32b")
VLLM_NAMES = ("FLASH_ATTN", "TRITON_ATTN", "FLASH_ATTN_MLA", "FLASHMLA", "FLASHMLA_SPARSE", "TRITON_MLA",
              "CUTLASS_MLA", "FLASHINFER", "FLASHINFER_MLA", "FLASHINFER_MLA_SPARSE", "FLEX_ATTENTION", "TREE_ATTN",
              "ROCM_ATTN", "ROCM_AITER_MLA", "ROCM_AITER_FA", "TORCH_SDPA", "CPU_ATTN", "NO_ATTENTION", "XFORMERS",
              "TRTLLM_RAGGED", "IPEX", "PALLAS", "DIFFERENTIAL_FLASH_ATTN", "CUSTOM")
SGLANG_NAMES = ("flashinfer", "fa3", "fa4", "triton", "torch_native", "flex_attention", "flashmla", "cutlass_mla",
                "trtllm_mha", "trtllm_mla", "aiter", "wave", "ascend", "intel_amx", "dual_chunk_flash_attn", "nsa",
                "dsv4", "hpc_ops", "minicpm_flashinfer", "llada2_cfg_flashinfer", "intel_xpu", "cutedsl_mla")
ODD_NAMES = ("fa2", "trtllm-gen", "cudnn", "cutlass", "xqa", "auto", "AUTO", "Auto ", "flash_attn", "Flash_Attn",
             "FLASH-ATTN", "flash-attn", "FLASHINFER ", " fa3", "fa3\n", "flashinfer-mla", "FlashInfer", "FA3",
             "TRITON", "triton_attn", "trtllm", "None", "null", "none", "0", "-1", "--json", "FLASH_ATTN,TRITON_ATTN",
             "../FLASH_ATTN", "fa3;id", "$(id)", "\u00e9", "\U0001f4a5", "\u202eNTTA_HSALF", "x" * 300, "\t", "",
             " ", "FLASH_ATTN\x00", "_Backend.FLASH_ATTN", "AttentionBackendEnum.FLASH_ATTN", "flashinfer_mla")


def _r4_mem() -> tuple[int, int]:
    rss = hwm = 0
    try:
        with open("/proc/self/status") as fh:
            for ln in fh:
                if ln.startswith("VmRSS:"):
                    rss = int(ln.split()[1]) << 10
                elif ln.startswith("VmHWM:"):
                    hwm = int(ln.split()[1]) << 10
    except OSError:
        pass
    return rss, hwm


def _r4_reset_peak() -> None:
    try:  # resets VmHWM to the current RSS (proc(5) clear_refs "5")
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        pass


def _r4_frames(tb: str) -> str:
    """The last three frames of a traceback, as file:line in function (the crash class's identity)."""
    frames = re.findall(r'File "([^"]+)", line (\d+), in (\S+)', tb)
    frames = [(os.path.relpath(f, ROOT) if f.startswith(str(ROOT)) else Path(f).name, n, fn) for f, n, fn in frames]
    last = [ln for ln in tb.strip().splitlines() if ln and not ln.startswith(" ")][-1:] or [""]
    # the class: the exception's type where attnplan raised it (its message varies with the input)
    ours = [fr for fr in frames if fr[0].startswith("attnplan")] or frames
    return " <- ".join(f"{f}:{n} {fn}" for f, n, fn in reversed(ours[-3:])) + f" | {last[0].split(':', 1)[0][:80]}"


def _r4_crash(what: str, tb: str, bad: list[str]) -> None:
    R4["crashes"] += 1
    key = _r4_frames(tb) if "File \"" in tb else tb.strip().splitlines()[-1][:160] if tb.strip() else "?"
    tail = tb.strip().splitlines()[-1][:160] if tb.strip() else ""
    R4_CLASSES.setdefault(key, []).append(f"{what} => {tail}")
    bad.append(f"crash: {what}"[:200])


def _r4_outcome(what: str, bad: list[str], *, rc: Any, out: str, err: str, seconds: float, peak: int,
                codes: tuple[int, ...] = (0, 1, 2), first_output: Optional[float] = None) -> bool:
    """Count one input; True when it held (no crash, hang or blow-up)."""
    R4["inputs"] += 1
    ok = True
    waited = seconds if first_output is None else first_output
    if rc is None or waited > R4_HANG_S:
        R4["hangs"] += 1
        bad.append(f"hang ({waited:.1f}s): {what}"[:200])
        ok = False
    if peak > R4_BLOWUP:
        R4["blowups"] += 1
        bad.append(f"blow-up ({peak >> 20} MiB): {what}"[:200])
        ok = False
    if rc is not None and (rc == 70 or rc not in codes or "internal error" in err or "Traceback" in err):
        _r4_crash(f"{what} -> exit {rc}", err, bad)
        ok = False
    return ok


def _r4_inconsistent(what: str, bad: list[str]) -> None:
    R4["inconsistent"] += 1
    bad.append(f"inconsistent: {what}"[:240])


def _r4_main(argv: list[str], env: Optional[dict[str, str]] = None) -> tuple[Optional[int], str, str, float, int]:
    """``attnplan ARGV`` through main() in this process: (exit code, stdout, stderr, seconds, peak RSS growth).
    ATTNPLAN_DEBUG=1 so that an internal error prints its traceback (the crash class's frames)."""
    import contextlib
    import io
    import traceback

    from attnplan.cli.main import main as cli_main

    env = {"ATTNPLAN_DEBUG": "1", **(env or {})}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    out, err = io.StringIO(), io.StringIO()
    rss0 = _r4_mem()[0]
    _r4_reset_peak()
    t0 = time.monotonic()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc: Optional[int] = cli_main(list(argv))
    except SystemExit as exc:  # argparse's own exit (usage errors, --help)
        rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    except BaseException:  # noqa: BLE001 - something escaped main(): a crash
        rc = 70
        err.write(traceback.format_exc())
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    seconds = time.monotonic() - t0
    return rc, out.getvalue(), err.getvalue(), seconds, max(0, _r4_mem()[1] - rss0)


def _r4_cli(what: str, bad: list[str], argv: list[str], *, env: Optional[dict[str, str]] = None,
            codes: tuple[int, ...] = (0, 1, 2)) -> tuple[Optional[int], Any, str]:
    """One CLI input: (exit code, the --json document or None, stderr)."""
    rc, out, err, secs, peak = _r4_main(argv, env)
    _r4_outcome(what, bad, rc=rc, out=out, err=err, seconds=secs, peak=peak, codes=codes)
    doc = None
    if rc in (0, 1, 3) and out.strip().startswith(("{", "[")):
        try:
            doc = json.loads(out)
        except ValueError:
            _r4_inconsistent(f"{what}: --json output is not JSON", bad)
    if rc == 2 and "attnplan: error:" not in err and "usage:" not in err:
        _r4_inconsistent(f"{what}: exit 2 without one error line ({err.strip()[-80:]!r})", bad)
    return rc, doc, err


def _r4_rest(client: Any, what: str, bad: list[str], path: str, **kw: Any) -> tuple[Optional[int], Any]:
    """One REST input through a TestClient that re-raises the app's exceptions (their frames are the class)."""
    import traceback

    rss0 = _r4_mem()[0]
    _r4_reset_peak()
    t0 = time.monotonic()
    status, text, tb = None, "", ""
    try:
        r = client.post(path, **kw)
        status, text = r.status_code, r.text
    except Exception:  # noqa: BLE001 - the app raised: a 500 to a real client
        tb = traceback.format_exc()
        status = 500
    secs = time.monotonic() - t0
    R4["inputs"] += 1
    if secs > R4_HANG_S:
        R4["hangs"] += 1
        bad.append(f"hang ({secs:.1f}s): {what}"[:200])
    if max(0, _r4_mem()[1] - rss0) > R4_BLOWUP:
        R4["blowups"] += 1
        bad.append(f"blow-up: {what}"[:200])
    if status is not None and status >= 500 and status != 503:
        _r4_crash(f"{what} -> HTTP {status}", tb or text, bad)
        return status, None
    try:
        return status, json.loads(text) if text else None
    except ValueError:
        return status, None


def _r4_verdict(doc: Any) -> Optional[dict]:
    if not isinstance(doc, dict):
        return None
    v = doc.get("verdict")
    if v is None and isinstance(doc.get("per_rank"), dict):
        v = doc["per_rank"].get("verdict")
    return v if isinstance(v, dict) else None


def _r4_core(v: dict) -> tuple:
    sel = v.get("selected") or {}
    return (v.get("engine"), v.get("outcome"), sel.get("prefill"), sel.get("decode"), v.get("modelled"),
            tuple(v.get("rules") or ()))


def _r4_exit_matches(what: str, bad: list[str], rc: Optional[int], doc: Any, require_fi: bool = False) -> Optional[dict]:
    """For an input that planned (exit 0 or 1), the exit code is the verdict's."""
    if rc not in (0, 1):
        return None
    v = _r4_verdict(doc)
    if v is None:
        _r4_inconsistent(f"{what}: exit {rc} but no verdict in --json", bad)
        return None
    want = 0 if v.get("outcome") == "runs" and (v.get("modelled") or not require_fi) else 1
    if rc != want:
        _r4_inconsistent(f"{what}: exit {rc}, verdict {v.get('outcome')} modelled={v.get('modelled')}", bad)
    return v


def _r4_same(what: str, bad: list[str], rc: Optional[int], cli_v: Optional[dict], status: Optional[int], doc: Any) -> None:
    """The same input on the CLI --json and REST: both plan with the same verdict, or both refuse it."""
    if rc is None or status is None or rc == 70 or status >= 500:
        return  # already counted
    if rc == 2 and status == 422:
        return
    if rc in (0, 1) and status == 200:
        rest_v = _r4_verdict(doc)
        if rest_v is None:
            _r4_inconsistent(f"{what}: REST 200 without a verdict", bad)
        elif cli_v is not None and _r4_core(cli_v) != _r4_core(rest_v):
            _r4_inconsistent(f"{what}: CLI {_r4_core(cli_v)} != REST {_r4_core(rest_v)}", bad)
        return
    detail = json.dumps(doc)[:90] if doc is not None else ""
    _r4_inconsistent(f"{what}: CLI exit {rc}, REST HTTP {status} {detail}", bad)


def _r4_fixes(what: str, bad: list[str], argv: list[str], v: Optional[dict], require_fi: bool = False) -> None:
    """Every fix of a verdict is a flag the same command accepts; applied, it gives the outcome it promises
    (issue 36 #4: fixes that work)."""
    import shlex

    if not v:
        return
    for fix in list(v.get("fixes") or ())[:2]:
        args = fix.get("args") if isinstance(fix, dict) else None
        if not isinstance(args, str) or not args.strip():
            _r4_inconsistent(f"{what}: a fix without args: {fix!r}"[:200], bad)
            continue
        w = f"{what} + fix {args!r}"
        rc, doc, err = _r4_cli(w, bad, [*argv, *shlex.split(args)])
        if rc == 2:
            _r4_inconsistent(f"{w}: the fix is refused ({err.strip()[-90:]!r})", bad)
            continue
        v2 = _r4_exit_matches(w, bad, rc, doc, require_fi)
        if v2 is not None and v2.get("outcome") != fix.get("outcome"):
            _r4_inconsistent(f"{w}: promised {fix.get('outcome')}, gives {v2.get('outcome')}", bad)


def _r4_client() -> Any:
    from fastapi.testclient import TestClient

    from attnplan.policy import simulated_node
    from attnplan.rest.app import create_app

    return TestClient(create_app(node=simulated_node("H100")), raise_server_exceptions=True)


R4_DETAILS: list[str] = []  # every input that did not hold, for --details


def _r4_done(bad: list[str], n0: int, what: str) -> tuple[bool, str]:
    R4_DETAILS.extend(bad)
    n = R4["inputs"] - n0
    hard = [b for b in bad if not b.startswith("inconsistent")]
    soft = [b for b in bad if b.startswith("inconsistent")]
    text = f"{n} inputs; {len(hard)} crashes/hangs/blow-ups, {len(soft)} inconsistent"
    if bad:
        text += ": " + "; ".join((hard + soft)[:3])
    else:
        text += f": {what}"
    return not hard, text


def _r4_pick(items: list, quick: bool, stride: int) -> list:
    return items[::stride] if quick else items


@case("i40r4-plan-backend-names", "40.r4", "i40r4")
def _(ctx: Ctx) -> tuple[bool, str]:
    """plan --attention-backend NAME (vLLM's, SGLang's, attnplan's and garbage names) under every engine spelling,
    for presets and flag configs, CLI --json beside REST /v1/plan beside plan_for/plan_model."""
    from attnplan.policy import AttnplanError, plan_for, simulated_node
    from attnplan.model import plan_model

    bad: list[str] = []
    n0 = R4["inputs"]
    engines = [None, "vllm", "vllm==0.33.0", "flashinfer", "sglang", "sglang==0.5.23", "SGLANG", "sglang==0.5.22",
               "vllm==0.1", "trtllm", " vllm", "vllm==", "sglang>=0.5"]
    names = list(dict.fromkeys(VLLM_NAMES + SGLANG_NAMES + ODD_NAMES))
    combos = [(b, e) for b in names for e in engines]
    combos = _r4_pick(combos, ctx.quick, 23)
    client = _r4_client()
    nodes: dict[str, Any] = {}
    for i, (backend, engine) in enumerate(combos):
        device = R4_DEVICES[i % len(R4_DEVICES)]
        model = (R4_MODELS + (None,))[i % (len(R4_MODELS) + 1)]
        require = i % 4 == 3
        what = f"plan {model or 'flags'} --attention-backend {backend!r} --engine {engine!r} --device {device}"
        argv = ["plan", "--device", device, "--attention-backend", backend, "--json"]
        argv += ["--model", model] if model else LLAMA
        argv += ["--engine", engine] if engine is not None else []
        argv += ["--require-flashinfer"] if require else []
        rc, doc, _ = _r4_cli(what, bad, argv)
        cli_v = _r4_exit_matches(what, bad, rc, doc, require)
        if i % 5 == 0:
            _r4_fixes(what, bad, argv, cli_v, require)
        if model:
            body: dict[str, Any] = {"model": model, "attention_backend": backend, "node": {"device": device}}
        else:
            body = {"config": {"head_dim": 128, "num_qo_heads": 32, "num_kv_heads": 8, "attention_backend": backend},
                    "node": {"device": device}}
        if engine is not None:
            body["engine"] = engine
        status, rdoc = _r4_rest(client, f"REST {what}", bad, "/v1/plan", json=body)
        _r4_same(what, bad, rc, cli_v, status, rdoc)
        # the Python API with the same input: an answer with a verdict, or an AttnplanError
        if i % 3 == 0:
            R4["inputs"] += 1
            node = nodes.setdefault(device, simulated_node(device)) if device else None
            try:
                if model:
                    a = plan_model(str(ROOT / "attnplan" / "presets" / f"{model}.json"), node, engine=engine,
                                   overrides={"attention_backend": backend})
                else:
                    a = plan_for({"head_dim": 128, "num_qo_heads": 32, "num_kv_heads": 8, "attention_backend": backend},
                                 node, engine=engine)
                if getattr(a, "verdict", None) is None:
                    _r4_inconsistent(f"API {what}: an answer without a verdict", bad)
            except AttnplanError:
                pass
            except Exception:  # noqa: BLE001 - outside the error tree
                import traceback

                _r4_crash(f"API {what}", traceback.format_exc(), bad)
    return _r4_done(bad, n0, "every name parsed once per engine; exit codes are the verdict's; CLI = REST")


R4_KV = ("auto", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla", "nvfp4", "nvfp4_4over6", "fp4", "bf16",
         "bfloat16", "half", "fp16", "float16", "fp8_e4m3fn", "FP8", "int8", "fp8 ", "Fp8_E4m3", "float8", "fp32",
         "float", "turboquant", "fp8_per_token_head", "e4m3", "x")
# The engines' own --kv-cache-dtype vocabularies, exact (argparse choices are case- and space-sensitive):
# vLLM 0.33 vllm/config/cache.py CacheDType; SGLang 0.5.23 sglang/srt/arg_groups/fields/model.py kv_cache_dtype.
VLLM_KV = ("auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla", "nvfp4_ds_mla",
           "turboquant_k8v4", "turboquant_4bit_nc", "turboquant_k3v4_nc", "turboquant_3bit_nc", "octave_k3v4",
           "octave_k3v3", "octave_k3v3_compact", "ultraquant_4bit", "int4_per_token_head", "int8_per_token_head",
           "fp8_per_token_head", "nvfp4", "nvfp4_4over6")
SGLANG_KV = ("auto", "fp8_e5m2", "fp8_e4m3", "mxfp8", "bf16", "bfloat16", "nvfp4", "fp4_mx_block16")


def _r4_vocabulary(what: str, bad: list[str], tail: str, rc: Optional[int], vocabulary: tuple[str, ...], engine: str) -> None:
    """A --kv-cache-dtype the engine refuses is never planned (issue 36 #5: its vocabulary exactly)."""
    import shlex

    m = re.match(r"--kv-cache-dtype(?:=| )(.*)$", tail)
    if m is None or rc not in (0, 1):
        return
    try:
        words = shlex.split(m.group(1))
    except ValueError:
        return
    if len(words) == 1 and words[0] not in vocabulary:
        _r4_inconsistent(f"{what}: {engine} refuses --kv-cache-dtype {words[0]!r} at startup; attnplan planned it "
                         f"(exit {rc})", bad)


R4_VLLM_TAILS = (
    [f"--kv-cache-dtype {json.dumps(d)}" for d in R4_KV] + ["--kv-cache-dtype=fp8", "--kv-cache-dtype", "--kv-cache-dtype ''"]
    + [f"--attention-backend {json.dumps(b)}" for b in VLLM_NAMES + ("flashinfer", "fa3", "trtllm_mha", "auto", "", "FLASH-ATTN")]
    + ["--attention-config '{\"backend\": \"FLASH_ATTN\"}'", "--attention-config '{\"backend\": \"fa3\"}'",
       "--attention-config '{\"use_trtllm_attention\": false}'", "--attention-config '{\"use_trtllm_attention\": true}'",
       "--attention-config '{\"use_trtllm_attention\": \"no\"}'", "--attention-config '{\"use_trtllm_attention\": null}'",
       "--attention-config '[]'", "--attention-config 1", "--attention-config '{\"backend\": 5}'",
       "--attention-config '{\"backend\": null}'", "--attention-config '{\"backend\": [\"FLASH_ATTN\"]}'",
       "--attention-config '{\"flash_attn_version\": 2}'", "--attention-config '{\"nope\": 1}'", "--attention-config '{'",
       "--attention-config '{\"backend\": \"FLASH_ATTN\", \"backend\": \"TRITON_ATTN\"}'",
       "--attention-config '{\"backend\": \"FLASHINFER\", \"use_trtllm_attention\": false}'",
       "--attention-backend FLASH_ATTN --attention-config '{\"backend\": \"TRITON_ATTN\"}'",
       "--attention-config '{\"use_prefill_decode_attention\": true}'", "--attention-config ''"]
    + ["--port 8000", "--port -1", "--port x", "--host 0.0.0.0", "--gpu-memory-utilization 0.9",
       "--gpu-memory-utilization 2", "--gpu-memory-utilization -1", "--gpu-memory-utilization x",
       "--enable-prefix-caching", "--no-enable-prefix-caching", "--max-num-seqs 0", "--max-num-seqs 256",
       "--max-model-len 1k", "--max-model-len 1K", "--max-model-len -1", "--max-model-len 0",
       "--max-model-len 99999999999999999999999", "--max-model-len auto", "--max-model-len 1e9",
       "--served-model-name a b c", "--api-key s3cr3t", "--disable-log-requests", "--trust-remote-code",
       "--uvicorn-log-level debug", "--enforce-eager", "--swap-space 4", "--quantization fp8", "--load-format dummy",
       "--seed -5", "--dtype float32", "--dtype half", "--dtype bfloat16", "--dtype fp8", "--dtype int4", "--dtype x",
       "-tp 0", "-tp -1", "-tp 2", "-tp 3", "-tp 1e3", "-tp 99999999999", "-tp 8", "-tp x", "-tp 4096", "-tp 4097",
       "-pp 2", "-pp 0", "-dcp 2", "-dcp 3", "-dcp 0", "-tp 8 -dcp 8", "--block-size 0", "--block-size 1",
       "--block-size 16", "--block-size 64", "--block-size 128", "--block-size 7", "--block-size -16",
       "--block-size 1048577", "--speculative-config '{\"method\": \"eagle\", \"num_speculative_tokens\": 3}'",
       "--speculative-config '{\"num_speculative_tokens\": -1}'", "--speculative-config '{\"num_speculative_tokens\": 1e309}'",
       "--speculative-config '{\"num_speculative_tokens\": true}'", "--speculative-config '[1]'", "--speculative-config x",
       "--speculative-config '{}'", "--speculative-config '{\"num_speculative_tokens\": 99999999999}'",
       "--hf-overrides '{\"num_attention_heads\": 0}'", "--hf-overrides '{\"head_dim\": \"x\"}'",
       "--hf-overrides '{\"architectures\": {\"a\": 1}}'", "--hf-overrides '{\"num_key_value_heads\": -1}'",
       "--hf-overrides '{\"sliding_window\": 1e100}'", "--hf-overrides '[]'", "--hf-overrides '{\"text_config\": 5}'",
       "--hf-overrides '{\"attn_logit_softcapping\": null}'", "--hf-overrides '{\"layer_types\": 7}'",
       "--hf-overrides '{\"head_dim\": 1e400}'", "--hf-overrides '{\"num_hidden_layers\": 100000000}'",
       "--revision main", "--revision ''", "--data-parallel-size 2", "--enable-expert-parallel", "--compilation-config '{}'",
       "--", "-", "--help", "--version", "-h", "\u2014tp 2", "--tensor-parallel-size=2", "--no-such-flag",
       "--port=", "--enable-prefix-caching=false", "--kv-cache-dtype fp8 --kv-cache-dtype auto", "-tp 2 -tp 4",
       "--max-num-batched-tokens 8k", "--limit-mm-per-prompt '{\"image\": 0}'", "--generation-config vllm",
       "--tokenizer-mode auto", "--model llama-3.1-8b", "--model-impl transformers", "--cpu-offload-gb 10"]
)
R4_FULL_ONLY = ("-O3", "--tensor_parallel_size 2", "--attention-config.backend FLASH_ATTN", "-ac.backend FLASH_ATTN")


@case("i40r4-vllm-serve-lines", "40.r4", "i40r4")
def _(ctx: Ctx) -> tuple[bool, str]:
    """attnplan vllm serve LINE --json beside POST /v1/plan/serve with the same line: vLLM's kv-cache dtype
    vocabulary, its backend names, --attention-config, production flags, garbage values."""
    import shlex

    bad: list[str] = []
    n0 = R4["inputs"]
    models = list(R4_MODELS) + ["acme/none", "''", "../x", "gemma-2-9b gemma-2-9b", "/etc/passwd", "-tp"]
    tails = list(R4_VLLM_TAILS) + ([] if ctx.quick else list(R4_FULL_ONLY))
    combos = [(m, t) for j, t in enumerate(tails) for m in (models[j % 5], models[(j + 2) % len(models)])]
    combos = _r4_pick(combos, ctx.quick, 13)
    client = _r4_client()
    for i, (model, tail) in enumerate(combos):
        device = R4_DEVICES[i % len(R4_DEVICES)]
        line = f"vllm serve {model} {tail}"
        what = f"{line!r} on {device}"
        try:
            words = shlex.split(line)
        except ValueError:
            words = None
        rc, cli_v = None, None
        if words is not None:
            require = i % 7 == 6
            argv = ["vllm", "serve", *words[2:], "--device", device, "--json"] + (["--require-flashinfer"] if require else [])
            rc, doc, _ = _r4_cli(what, bad, argv)
            cli_v = _r4_exit_matches(what, bad, rc, doc, require)
            if i % 3 == 0:
                _r4_fixes(what, bad, argv, cli_v, require)
            _r4_vocabulary(what, bad, tail, rc, VLLM_KV, "vLLM 0.33")
        status, rdoc = _r4_rest(client, f"REST {what}", bad, "/v1/plan/serve",
                                json={"line": line, "node": {"device": device}})
        if words is not None and "--help" not in words and "-h" not in words and "--version" not in words:
            _r4_same(what, bad, rc, cli_v, status, rdoc)
    return _r4_done(bad, n0, "vLLM's vocabulary; production flags ignored; CLI = REST")


@case("i40r4-shipped-flag-table", "40.r4", "i40r4")
def _(ctx: Ctx) -> tuple[bool, str]:
    """From the wheel (vLLM not importable): every flag of the shipped vLLM 0.33 table alone, with a garbage
    value, with '=', with a huge number, through parse_serve_line and `attnplan vllm serve --json`."""
    import traceback

    from attnplan.policy import AttnplanError
    from attnplan.vllm import args as vargs

    bad: list[str] = []
    n0 = R4["inputs"]
    table = vargs.shipped_table()
    if table is None:
        return False, "no shipped vLLM flag table"
    opts = [o for e in table["actions"] for o in e["options"][:1]]
    garbage = ["\U0001f4a5", "=", "9" * 5000, "-1", "", "{", "[]", "nan", "inf", "1e309", "0x10", "True"]
    inputs = []
    for j, o in enumerate(opts):
        inputs.append([o])
        inputs.append([o, garbage[j % len(garbage)]])
        inputs.append([f"{o}={garbage[(j + 5) % len(garbage)]}"])
    inputs += [["--"], ["-"], ["--="], ["---x"], ["-" * 300], ["--port"] * 200, ["--enable-prefix-caching=1"],
               ["--gpu-mem", "0.9"], ["--tensor", "2"], ["-t", "2"], ["--no-"], ["--disable-"], ["--enable-"],
               ["@x"], ["--help"], ["-h"], ["--version"], ["\u2014port", "1"], ["--PORT", "1"], ["\x00"],
               ["--tensor-parallel-size", "2", "--tensor-parallel-size", "x"], ["x"] * 50]
    inputs = _r4_pick(inputs, ctx.quick, 9)
    saved = vargs.vllm_available
    vargs.vllm_available = lambda: False  # the wheel without vLLM: the shipped table reads the line
    try:
        for i, extra in enumerate(inputs):
            what = f"table: llama-3.1-8b {' '.join(extra)[:80]!r}"
            R4["inputs"] += 1
            t0 = time.monotonic()
            try:
                vargs.parse_serve_line(["llama-3.1-8b", *extra], allow_files=bool(i % 2))
            except AttnplanError:
                pass
            except BaseException:  # noqa: BLE001 - outside the tree (SystemExit included: argparse exiting)
                _r4_crash(what, traceback.format_exc(), bad)
            if time.monotonic() - t0 > R4_HANG_S:
                R4["hangs"] += 1
                bad.append(f"hang: {what}")
            if i % 6 == 0:  # the whole command: exit code and verdict, ignored flags listed
                rc, doc, _ = _r4_cli(f"CLI {what}", bad, ["vllm", "serve", "llama-3.1-8b", *extra, "--device", "H100",
                                                          "--json"])
                _r4_exit_matches(f"CLI {what}", bad, rc, doc)
    finally:
        vargs.vllm_available = saved
    return _r4_done(bad, n0, "each flag accepted (listed as ignored) or exit 2 naming it")


R4_SGLANG_TAILS = (
    [f"--attention-backend {json.dumps(b)}" for b in SGLANG_NAMES + VLLM_NAMES[:10] + ODD_NAMES[:24]]
    + ["--prefill-attention-backend fa3 --decode-attention-backend flashinfer",
       "--prefill-attention-backend trtllm_mha --decode-attention-backend fa3",
       "--prefill-attention-backend x", "--decode-attention-backend FLASHINFER", "--decode-attention-backend ''",
       "--tp 0", "--tp 3", "--tp 8", "--tp -1", "--tp x", "--tp-size 2", "--tensor-parallel-size 4", "--tp 99999999999",
       "--dp 0", "--dp 1", "--dp 2", "--dp 8", "--dp -1", "--dp x", "--enable-dp-attention", "--dp 8 --enable-dp-attention",
       "--tp 8 --dp 8 --enable-dp-attention", "--tp 8 --dp 3 --enable-dp-attention", "--dp-size 2",
       "--data-parallel-size 2 --enable-dp-attention"]
    + [f"--kv-cache-dtype {json.dumps(d)}" for d in ("auto", "fp8_e4m3", "fp8_e5m2", "bf16", "bfloat16", "fp4_e2m1",
                                                     "fp8", "nvfp4", "fp16", "float16", "x", "", "FP8_E4M3",
                                                     "Fp8_E5m2", "BF16", " fp8_e4m3", "mxfp8", "fp4_mx_block16",
                                                     "NVFP4", "Auto")]
    + ["--page-size 0", "--page-size 1", "--page-size 16", "--page-size 64", "--page-size -1", "--page-size x",
       "--speculative-algorithm EAGLE --speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4",
       "--speculative-algorithm EAGLE3", "--speculative-algorithm NEXTN", "--speculative-algorithm x",
       "--speculative-num-draft-tokens -1", "--enable-deterministic-inference", "--port 30000", "--port x",
       "--mem-fraction-static 0.9", "--mem-fraction-static 9", "--trust-remote-code", "--no-such-flag",
       "--dtype half", "--dtype x", "--context-length 1k", "--context-length -1", "--host ::", "--", "-", "--help",
       "--model-path", "--enable-torch-compile", "--cuda-graph-max-bs 8", "--disable-cuda-graph"]
)


@case("i40r4-sglang-launch", "40.r4", "i40r4")
def _(ctx: Ctx) -> tuple[bool, str]:
    """attnplan sglang launch_server --model-path M FLAGS --json (SGLang's own backend names, DP attention,
    its kv-cache dtypes), beside POST /v1/plan with engine sglang (where the flags map onto the body) and
    POST /v1/plan/serve with the SGLang line (issue 36 #5: REST takes SGLang lines)."""
    import shlex

    bad: list[str] = []
    n0 = R4["inputs"]
    models = list(R4_MODELS) + ["acme/none", "''", "/etc/passwd"]
    combos = [(models[j % len(models)], t) for j, t in enumerate(R4_SGLANG_TAILS)]
    combos += [(models[(j + 3) % 5], t) for j, t in enumerate(R4_SGLANG_TAILS)]
    combos = _r4_pick(combos, ctx.quick, 11)
    client = _r4_client()
    for i, (model, tail) in enumerate(combos):
        device = R4_DEVICES[i % len(R4_DEVICES)]
        line = f"--model-path {model} {tail}"
        what = f"sglang launch_server {line!r} on {device}"
        try:
            words = shlex.split(line)
        except ValueError:
            continue
        argv = ["sglang", "launch_server", *words, "--device", device, "--json"]
        rc, doc, _ = _r4_cli(what, bad, argv)
        cli_v = _r4_exit_matches(what, bad, rc, doc)
        if i % 3 == 0:
            _r4_fixes(what, bad, argv, cli_v)
        _r4_vocabulary(what, bad, tail, rc, SGLANG_KV, "SGLang 0.5.23")
        # /v1/plan with engine sglang: only the flags the body has a field for
        m = re.fullmatch(r"--(attention-backend|tp|kv-cache-dtype) (\S+)", tail)
        if m and not model.startswith(("'", "/")):
            key = {"attention-backend": "attention_backend", "tp": "tensor_parallel_size",
                   "kv-cache-dtype": "kv_cache_dtype"}[m.group(1)]
            val: Any = json.loads(m.group(2)) if m.group(2).startswith('"') else m.group(2)
            if key == "tensor_parallel_size":
                try:
                    val = int(val)
                except ValueError:
                    pass
            body = {"model": model, "engine": "sglang", key: val, "node": {"device": device}}
            status, rdoc = _r4_rest(client, f"REST /v1/plan {what}", bad, "/v1/plan", json=body)
            if not (rc == 2 and status == 200):  # the CLI may refuse what the body cannot say (a blank name)
                _r4_same(f"/v1/plan {what}", bad, rc, cli_v, status, rdoc)
        if i % 2 == 0:  # the SGLang line as pasted, to the serve-line route (422 until REST takes SGLang lines)
            _r4_rest(client, f"REST /v1/plan/serve {what}", bad, "/v1/plan/serve",
                     json={"line": f"python -m sglang.launch_server {line}", "node": {"device": device}})
    return _r4_done(bad, n0, "SGLang's names exactly; CLI = REST where the body can say the flags")


@case("i40r4-preflight-simulate", "40.r4", "i40r4")
def _(ctx: Ctx) -> tuple[bool, str]:
    """preflight --simulate SPEC --serve LINE --json with odd lines (vLLM and SGLang) and odd specs: each node's
    cell (outcome, engine_backend) agrees with `attnplan vllm serve LINE --device D --json` on that device."""
    import shlex

    bad: list[str] = []
    n0 = R4["inputs"]
    specs = ["H100=2,B200=1", "A100=1,GB300=1", "H100=0", "H100=-1", "H100=1e9", "H100=99999999", "=,", "H100=2,H100=3",
             "h100=1", "\U0001f4a5=1", "H100", "H100=1,,B200=1", "RTX PRO 6000=1", " B200 = 1 ", "H100=1;B200=1"]
    lines = ["vllm serve " + f"{R4_MODELS[j % 5]} {t}" for j, t in enumerate(R4_VLLM_TAILS[::3])]
    lines += ["python -m sglang.launch_server --model-path deepseek-v3 --tp 8", "sglang.launch_server --model-path x",
              "vllm serve", "", " ", "vllm", "serve gemma-2-9b", "vllm serve gemma-2-9b --config /etc/passwd",
              "vllm serve gemma-2-9b\nvllm serve llama-3.1-8b", "vllm serve 'unterminated"]
    combos = [(specs[j % len(specs)] if j % 4 == 0 else "H100=1,B200=1,A100=1", ln) for j, ln in enumerate(lines)]
    combos = _r4_pick(combos, ctx.quick, 12)
    verdicts: dict[tuple[str, str], Optional[dict]] = {}
    for i, (spec, line) in enumerate(combos):
        what = f"preflight --simulate {spec!r} --serve {line!r}"
        rc, doc, _ = _r4_cli(what, bad, ["preflight", "--simulate", spec, "--serve", line, "--json"], codes=(0, 1, 2, 3))
        if rc not in (0, 1) or not isinstance(doc, dict):
            continue
        if doc.get("summary", {}).get("exit_code") not in (None, rc):
            _r4_inconsistent(f"{what}: exit {rc}, summary.exit_code {doc['summary'].get('exit_code')}", bad)
        try:
            words = shlex.split(line)
        except ValueError:
            continue
        if words[:2] != ["vllm", "serve"]:
            continue
        for node in doc.get("nodes") or []:
            dev = node.get("device")
            cells = node.get("results") or []
            if not dev or not cells:
                continue
            key = (line, dev)
            if key not in verdicts:
                r2, d2, _ = _r4_cli(f"vllm serve {line!r} --device {dev}", bad,
                                    ["vllm", "serve", *words[2:], "--device", dev, "--json"])
                verdicts[key] = _r4_exit_matches(f"vllm serve {line!r} on {dev}", bad, r2, d2)
            v = verdicts[key]
            cell = cells[0]
            if v is None:
                continue
            sel = v.get("selected") or {}
            if (cell.get("outcome"), cell.get("modelled")) != (v.get("outcome"), v.get("modelled")):
                _r4_inconsistent(f"{what}: node {dev} cell {cell.get('outcome')}/{cell.get('modelled')}, vllm serve "
                                 f"{v.get('outcome')}/{v.get('modelled')}", bad)
            elif "engine_backend" in cell and cell["engine_backend"] not in (
                    sel.get("decode"), sel.get("prefill"), f"{sel.get('prefill')}/{sel.get('decode')}"):
                _r4_inconsistent(f"{what}: node {dev} cell engine_backend {cell['engine_backend']}, vllm serve "
                                 f"selects {sel.get('prefill')}/{sel.get('decode')}", bad)
    return _r4_done(bad, n0, "every cell carries the verdict the same line gets from vllm serve")


_K8S = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?")


@case("i40r4-labels", "40.r4", "i40r4")
def _(ctx: Ctx) -> tuple[bool, str]:
    """labels --device D --model M / --serve LINE --json with odd models (names that are not label-safe) and lines:
    model-<name> is runs or a rule (what vllm serve says), -backend the engine's pick, keys and values k8s-valid."""
    import shlex

    from attnplan.policy import default_ruleset

    bad: list[str] = []
    n0 = R4["inputs"]
    rule_ids = {r.id for r in default_ruleset().rules} if hasattr(default_ruleset(), "rules") else set()
    odd = {}
    llama = json.loads((ROOT / "attnplan" / "presets" / "llama-3.1-8b.json").read_text())
    for name in ("My Model!", "a" * 120, "\u00fcn\u00efc\u00f6de", "-dash", "dots..", "x.json", "UPPER_case", "sp ace"):
        d = ctx.tmp / "models" / name
        d.mkdir(parents=True, exist_ok=True)
        (d / "config.json").write_text(json.dumps(llama))
        odd[name] = str(d)
    models = list(R4_MODELS) + list(odd.values()) + ["acme/none", "", "../..", "/dev/null"]
    serve = [f"vllm serve {R4_MODELS[j % 5]} {t}" for j, t in enumerate(R4_VLLM_TAILS[1::7])]
    serve += ["vllm serve deepseek-v3 -tp 8", "vllm serve gemma-2-9b --attention-backend FLASHINFER", ""]
    inputs = [("--model", m) for m in models] + [("--serve", s) for s in serve]
    combos = [(dev, kind, val) for j, (kind, val) in enumerate(inputs) for dev in (R4_DEVICES[j % 8], R4_DEVICES[(j + 3) % 8])]
    if ctx.quick:  # Blackwell labels plan every capability config (~12 s on a loaded 2-core machine): one of them
        blackwell = ("B200", "GB300", "B300")
        combos = [c for c in combos if c[0] not in blackwell][::9] + [c for c in combos if c[0] in blackwell][:1]
    for dev, kind, val in combos:
        what = f"labels --device {dev} {kind} {val[-60:]!r}"
        rc, doc, _ = _r4_cli(what, bad, ["labels", "--device", dev, kind, val, "--json"])
        if rc not in (0, 1) or not isinstance(doc, dict):
            continue
        for k, v in doc.items():
            name = k.split("/", 1)[-1]
            if not (_K8S.fullmatch(name) and len(name) <= 63 and _K8S.fullmatch(str(v)) and len(str(v)) <= 63):
                _r4_inconsistent(f"{what}: label {k[:70]}={str(v)[:40]} is not a valid Kubernetes label", bad)
        models_l = {k: v for k, v in doc.items() if "/model-" in k and not k.endswith("-backend")}
        if not models_l:
            _r4_inconsistent(f"{what}: exit {rc} without a model label", bad)
        for k, v in models_l.items():
            if v != "runs" and rule_ids and v not in rule_ids:
                _r4_inconsistent(f"{what}: {k}={v} is neither runs nor a rule", bad)
            # its backend label: model-<name>-backend, the name shortened so that the suffix fits 63 characters
            stems = [b[: -len("-backend")] for b in doc if "/model-" in b and b.endswith("-backend")]
            if v == "runs" and not any(k.startswith(s) for s in stems):
                _r4_inconsistent(f"{what}: {k}=runs without its -backend label", bad)
        if kind == "--model" and val in R4_MODELS and len(models_l) == 1:
            r2, d2, _ = _r4_cli(f"vllm serve {val} on {dev}", bad, ["vllm", "serve", val, "--device", dev, "--json"])
            v2 = _r4_exit_matches(f"vllm serve {val} on {dev}", bad, r2, d2)
            label = next(iter(models_l.values()))
            if v2 is not None and (label == "runs") != (v2.get("outcome") == "runs"):
                _r4_inconsistent(f"{what}: label {label}, vllm serve says {v2.get('outcome')}", bad)
    return _r4_done(bad, n0, "model labels are runs|rule with the engine's backend; valid Kubernetes labels")


@case("i40r4-compare", "40.r4", "i40r4")
def _(ctx: Ctx) -> tuple[bool, str]:
    """attnplan compare MODEL --device LIST --json beside POST /v1/compare; each row's vLLM cell against
    `vllm serve MODEL --device D`'s verdict (issue 36: both engines judged by the same standard)."""
    bad: list[str] = []
    n0 = R4["inputs"]
    devs = ["H100", "B200", "H100,B200,A100", "GB300,RTX PRO 6000", "", ",", "H100,H100", "X100", "\U0001f4a5",
            "h100", "H100, B200"]
    extras = [[], ["--tp", "2"], ["--tp", "8"], ["--tp", "0"], ["--tp", "x"], ["--kv-cache-dtype", "fp8"],
              ["--kv-cache-dtype", "nvfp4_4over6"], ["--kv-cache-dtype", "x"], ["--page-size", "0"],
              ["--page-size", "64"], ["--page-size", "-1"]]
    models = list(R4_MODELS) + ["acme/none", "", "/etc/passwd"]
    combos = [(m, d, x) for m in models for d in devs for x in extras][::3]
    combos = _r4_pick(combos, ctx.quick, 9)
    client = _r4_client()
    seen: dict[tuple[str, str], Optional[dict]] = {}
    for model, dev, extra in combos:
        what = f"compare {model!r} --device {dev!r} {' '.join(extra)}"
        rc, doc, _ = _r4_cli(what, bad, ["compare", model, "--device", dev, *extra, "--json"])
        body: dict[str, Any] = {"model": model, "devices": [d.strip() for d in dev.split(",")]}
        for k, v in zip(extra[::2], extra[1::2]):
            key = {"--tp": "tp", "--kv-cache-dtype": "kv_cache_dtype", "--page-size": "page_size"}[k]
            body[key] = int(v) if v.lstrip("-").isdigit() else v
        status, rdoc = _r4_rest(client, f"REST {what}", bad, "/v1/compare", json=body)
        if rc in (0, 1) and status not in (200, None) or rc == 2 and status == 200:
            _r4_inconsistent(f"{what}: CLI exit {rc}, REST HTTP {status}", bad)
        if rc in (0, 1) and isinstance(doc, dict) and not extra and model in R4_MODELS:
            for row in doc.get("rows") or []:
                if row.get("engine") != "vllm":
                    continue
                key = (model, row.get("device"))
                if key not in seen:
                    r2, d2, _ = _r4_cli(f"vllm serve {model} on {key[1]}", bad,
                                        ["vllm", "serve", model, "--device", key[1], "--json"])
                    seen[key] = _r4_exit_matches(f"vllm serve {model} on {key[1]}", bad, r2, d2)
                v = seen[key]
                if v is None:
                    continue
                rv = row.get("verdict")
                if isinstance(rv, dict):  # the row's own verdict: the one vllm serve gives (one request, one answer)
                    if _r4_core(rv) != _r4_core(v):
                        _r4_inconsistent(f"compare {model} on {key[1]} group {row.get('group')}: row verdict "
                                         f"{_r4_core(rv)[1:]}, vllm serve {_r4_core(v)[1:]}", bad)
                    continue
                if (row.get("status") in ("ok", "runs")) != (v.get("outcome") == "runs"):
                    _r4_inconsistent(f"compare {model} on {key[1]} group {row.get('group')}: row {row.get('status')}, "
                                     f"vllm serve {v.get('outcome')} ({v.get('selected', {}).get('decode')})", bad)
    return _r4_done(bad, n0, "compare rows agree with vllm serve's verdict; CLI = REST")


def _r4_table_header(rows: list[dict], fields: tuple[str, ...]) -> str:
    def fmt(col: str, v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if v is None:
            return "nullptr"
        if col in ("mDataTypeQ", "mDataTypeKv", "mDataTypeK", "mDataTypeV", "mDataTypeO"):
            return f"DATA_TYPE_{v}"
        if isinstance(v, str):
            return json.dumps(v)
        return str(v)
    struct = "struct TllmGenFmhaKernelMetaInfo {\n" + "".join(f"  int {f};\n" for f in fields) + "};\n"
    body = "".join("  {" + ", ".join(fmt(f, r.get(f, 0)) for f in fields) + "},\n" for r in rows)
    return f"/* license */\n{struct}\nstatic const TllmGenFmhaKernelMetaInfo sTllmGenFmhaKernelMetaInfos[] = {{\n{body}}};\n"


@case("i40r4-trtllm-table", "40.r4", "i40r4")
def _(ctx: Ctx) -> tuple[bool, str]:
    """The node's trtllm-gen kernel table, read as node.load reads it (a Location whose pin hash is not known,
    so that every byte reaches the parsers): truncated, mutated, foreign, binary headers and checksums files;
    mutated shipped tables. Each is a table or a TableError naming the file, never another exception."""
    import gzip
    import hashlib
    import traceback

    from attnplan.kernels.trtllm_gen import node as tgnode
    from attnplan.kernels.trtllm_gen import table as tgt

    bad: list[str] = []
    n0 = R4["inputs"]
    shipped = tgt.shipped()
    fields = tgt.COLUMNS[:-1] + ("mSomethingElse",) + tgt.COLUMNS[-1:]
    header = _r4_table_header([dict(r) for r in shipped.rows[:6]], fields)
    hsha = hashlib.sha256(header.encode()).hexdigest()
    sums = f"{hsha}  include/flashInferMetaInfo.h\n{'0' * 64}  Foo.cubin\n"
    muts: list[tuple[str, bytes, bytes]] = [("good", sums.encode(), header.encode())]
    step = max(1, len(header) // (12 if ctx.quick else 120))
    for cut in range(0, len(header), step):  # truncated headers, hashed so that only the parser judges them
        h = header[:cut].encode()
        muts.append((f"header cut at {cut}", f"{hashlib.sha256(h).hexdigest()}  include/flashInferMetaInfo.h\n".encode(), h))
    swaps = [("DATA_TYPE_BF16", "DATA_TYPE_XX"), ("true", "maybe"), ("kSM_100", "kSM_x"), ('"', ""), ("}", ""),
             ("{", "{{"), (",", ""), ("int mSM;", ""), ("sTllmGenFmhaKernelMetaInfos[]", "other[]"), ("0", "9" * 5000),
             ("0", "-0"), ("1", "nullptr"), ("struct", "class"), ("};", ""), ("\n", "\r\n"), ("int", "\x00"),
             (",", ",,"), ("DATA_TYPE_", ""), ("mFuncName", "mFuncName;\n int mFuncName")]
    for a, b in swaps:
        h = header.replace(a, b, 1 if a in ("}", "{", "};") else -1).encode()
        muts.append((f"header {a!r}->{b!r}", f"{hashlib.sha256(h).hexdigest()}  include/flashInferMetaInfo.h\n".encode(), h))
    for s in (b"", b"\n\n", b"x", b"\xff\xfe" * 40, b"0" * 64, b"0" * 64 + b"  a  b\n", b"Z" * 64 + b"  a\n",
              b"\x00" * 100, ("0" * 64 + "  f\n").encode() * 3000):
        muts.append((f"checksums {s[:20]!r}", s, header.encode()))
    muts.append(("header not utf-8", b"", b"\xff" * 100))
    muts.append(("header binary", b"", bytes(range(256)) * 40))
    muts.append(("header another table", b"", b"struct TllmGenFmhaKernelMetaInfo { int a; };"))
    muts = _r4_pick(muts, ctx.quick, 3)
    root = ctx.tmp / "cubins"
    pin = "ffffffffffffffffffffffffffffffffffffffff"
    for what, s, h in muts:
        loc = tgnode.Location(str(root), "replay", pin, None)
        files = {"checksums.txt": s, "flashInferMetaInfo.h": h}

        def read(p: Path, files: dict = files) -> bytes:
            if p.name == "checksums.txt" and not files["checksums.txt"]:
                raise FileNotFoundError(p)
            return files[p.name]
        R4["inputs"] += 1
        t0 = time.monotonic()
        try:
            tgnode.load(loc, read=read)  # a table (a cut in the trailing text leaves a whole one) or TableError
        except tgt.TableError as exc:
            if "checksums.txt" not in str(exc) and "flashInferMetaInfo.h" not in str(exc):
                _r4_inconsistent(f"table {what}: the error does not name the file: {str(exc)[:80]}", bad)
        except Exception:  # noqa: BLE001 - outside the tree
            _r4_crash(f"node.load: {what}", traceback.format_exc(), bad)
        if time.monotonic() - t0 > R4_HANG_S:
            R4["hangs"] += 1
            bad.append(f"hang: {what}")
    # the shipped table's bytes mutated (load_bytes): a corrupt wheel is a TableError naming the file
    raw = (Path(tgt.__file__).parent / "tables" / f"{tgt.PIN_0_6[:8]}.json.gz").read_bytes()
    doc = json.loads(gzip.decompress(raw))
    docs = [("format", {**doc, "format": "x"}), ("no columns", {k: v for k, v in doc.items() if k != "columns"}),
            ("no count", {k: v for k, v in doc.items() if k != "count"}), ("columns list", {**doc, "columns": []}),
            ("count str", {**doc, "count": "3"}), ("count big", {**doc, "count": 10 ** 9}),
            ("column short", {**doc, "columns": {k: v[:-1] for k, v in doc["columns"].items()}}),
            ("no pin", {k: v for k, v in doc.items() if k != "pin"}), ("list", [doc]), ("null", None),
            ("columns null", {**doc, "columns": {k: None for k in doc["columns"]}})]
    blobs = [(w, gzip.compress(json.dumps(d).encode())) for w, d in docs]
    blobs += [("truncated gz", raw[: len(raw) // 2]), ("not gz", b"{}"), ("empty", b""), ("gz of garbage", gzip.compress(b"\xff"))]
    for what, blob in _r4_pick(blobs, ctx.quick, 3):
        R4["inputs"] += 1
        try:
            tgt.load_bytes(blob, "replay.json.gz")
        except tgt.TableError as exc:
            if "replay.json.gz" not in str(exc):
                _r4_inconsistent(f"shipped {what}: the error does not name the file", bad)
        except Exception:  # noqa: BLE001 - outside the tree
            _r4_crash(f"table.load_bytes: {what}", traceback.format_exc(), bad)
    return _r4_done(bad, n0, "a table or a TableError naming the file")


def _r4_spawn(ctx: Ctx, what: str, bad: list[str], argv: list[str], env: dict[str, str],
              codes: tuple[int, ...] = (0, 1, 2)) -> tuple[Optional[int], str, str]:
    """``attnplan ARGV`` in a subprocess, watched: time to first output (hang > 10 s; killed at 60 s) and
    RSS (killed past 1 GiB)."""
    e = dict(os.environ, PYTHONPATH=str(ROOT), ATTNPLAN_DEBUG="1")
    e.pop("ATTNPLAN_TOKEN", None)
    e.update(env)
    out_p, err_p = ctx.tmp / "out", ctx.tmp / "err"
    with open(out_p, "wb") as o, open(err_p, "wb") as er:
        t0 = time.monotonic()
        p = subprocess.Popen([sys.executable, "-m", "attnplan", *argv], stdout=o, stderr=er, env=e,
                             stdin=subprocess.DEVNULL)
        first, peak, rc, killed = None, 0, None, ""
        while True:
            rc = p.poll()
            now = time.monotonic() - t0
            if first is None and (out_p.stat().st_size or err_p.stat().st_size):
                first = now
            try:
                with open(f"/proc/{p.pid}/status") as fh:
                    for ln in fh:
                        if ln.startswith("VmRSS:"):
                            peak = max(peak, int(ln.split()[1]) << 10)
            except OSError:
                pass
            if rc is not None:
                break
            if peak > R4_BLOWUP or (now > 2 * R4_HANG_S and first is None) or now > 120:
                killed = "memory" if peak > R4_BLOWUP else "time"
                p.kill()
                p.wait()
                rc = None
                break
            time.sleep(0.05)
    out, err = out_p.read_text(errors="replace"), err_p.read_text(errors="replace")
    secs = time.monotonic() - t0
    if first is None:
        first = secs
    if killed == "memory":  # a blow-up, not a hang: counted once, as what it is
        R4["inputs"] += 1
        R4["blowups"] += 1
        bad.append(f"blow-up (> {R4_BLOWUP >> 20} MiB after {secs:.1f}s, killed): {what}"[:200])
        return None, out, err
    _r4_outcome(what, bad, rc=rc, out=out, err=err, seconds=secs, peak=peak, codes=codes, first_output=first)
    return rc, out, err


@case("i40r4-cubins-node-files", "40.r4", "i40r4")
def _(ctx: Ctx) -> tuple[bool, str]:
    """attnplan cubins / node / plan (this node) with FLASHINFER_CUBIN_DIR at a corrupt table: garbage, empty,
    binary, a directory, a FIFO, /dev/zero, a link loop, a huge file, in place of checksums.txt or the header;
    the directory itself a file, a FIFO, /dev/null, missing. Exit 2 naming the file, or the answer without a
    table, in bounded time and memory; and cubins with declared devices and odd models (in this process)."""
    from attnplan.kernels.trtllm_gen import node as tgnode
    from attnplan.node.probe import installed_artifact_pin

    bad: list[str] = []
    n0 = R4["inputs"]
    pin = installed_artifact_pin() or tgnode.KNOWN_PINS["0.7.2.post1"]
    worlds: list[tuple[str, Callable[[Path], Path]]] = []

    def tree(base: Path) -> Path:
        d = base / pin[0] / "fmha" / "trtllm-gen"
        (d / "include").mkdir(parents=True)
        return d

    def with_sums(make: Callable[[Path], None]) -> Callable[[Path], Path]:
        def f(base: Path) -> Path:
            d = tree(base)
            make(d / "checksums.txt")
            return d / "checksums.txt"
        return f

    worlds += [("checksums garbage", with_sums(lambda p: p.write_text("garbage\n"))),
               ("checksums empty", with_sums(lambda p: p.write_bytes(b""))),
               ("checksums binary", with_sums(lambda p: p.write_bytes(bytes(range(256)) * 4))),
               ("checksums valid-looking", with_sums(lambda p: p.write_text("0" * 64 + "  include/flashInferMetaInfo.h\n"))),
               ("checksums a directory", with_sums(lambda p: p.mkdir())),
               ("checksums a FIFO", with_sums(lambda p: os.mkfifo(p))),
               ("checksums -> /dev/zero", with_sums(lambda p: p.symlink_to("/dev/zero"))),
               ("checksums link loop", with_sums(lambda p: p.symlink_to(p))),
               ("checksums dangling link", with_sums(lambda p: p.symlink_to(p.parent / "nowhere"))),
               ("checksums 64 MiB sparse", with_sums(lambda p: open(p, "wb").truncate(64 << 20))),
               ("checksums -> /proc/self/environ", with_sums(lambda p: p.symlink_to("/proc/self/environ")))]
    if not ctx.quick:
        worlds += [("checksums 2 GiB sparse", with_sums(lambda p: open(p, "wb").truncate(2 << 30)))]

    def dir_is(make: Callable[[Path], None]) -> Callable[[Path], Path]:
        def f(base: Path) -> Path:
            make(base)
            return base
        return f

    worlds += [("cubin dir a file", dir_is(lambda p: p.write_text("x"))),
               ("cubin dir a FIFO", dir_is(lambda p: os.mkfifo(p))),
               ("cubin dir -> /dev/null", dir_is(lambda p: p.symlink_to("/dev/null"))),
               ("cubin dir missing", dir_is(lambda p: None)),
               ("cubin dir empty", dir_is(lambda p: p.mkdir())),
               ("pin dir a file", dir_is(lambda p: (p.mkdir(), (p / pin[0]).write_text("x")))),
               ("fmha dir a link loop", dir_is(lambda p: ((p / pin[0]).mkdir(parents=True), (p / pin[0] / "fmha").symlink_to(p / pin[0] / "fmha"))))]
    commands = [["cubins", "--model", "llama-3.1-8b"], ["cubins", "--model", "gemma-2-9b", "--json"],
                ["node", "--json"], ["plan", "--model", "llama-3.1-8b", "--json"]]
    worlds = _r4_pick(worlds, ctx.quick, 3)
    for k, (what, make) in enumerate(worlds):
        base = ctx.tmp / f"world{k}"
        base.mkdir()
        target = make(base / "cubins")
        cmds = commands if not ctx.quick else commands[:1]
        for argv in cmds:
            w = f"FLASHINFER_CUBIN_DIR with {what}: attnplan {' '.join(argv)}"
            rc, out, err = _r4_spawn(ctx, w, bad, argv, {"FLASHINFER_CUBIN_DIR": str(base / "cubins")})
            if argv[0] == "cubins" and rc == 2 and str(base) not in err and "FLASHINFER_CUBIN_DIR" not in err:
                _r4_inconsistent(f"{w}: exit 2 without naming the file", bad)
            if argv[0] == "cubins" and "checksums" in what and rc is not None and rc != 2 \
                    and what not in ("checksums dangling link",):
                _r4_inconsistent(f"{w}: a corrupt table answered exit {rc} (not 2 naming {target.name})", bad)
    # cubins for declared devices (the shipped table), odd models and engines, in this process
    combos = [(d, m, e) for d in R4_DEVICES + ("", "X", "B200 ") for m in R4_MODELS + ("acme/none",)
              for e in (None, "vllm", "sglang", "flashinfer", "x")]
    for j, (d, m, e) in enumerate(_r4_pick(combos, ctx.quick, 17) if ctx.quick else combos[::2]):
        argv = ["cubins", "--device", d, "--model", m, "--json"] + (["--engine", e] if e else [])
        _r4_cli(f"cubins --device {d!r} --model {m} --engine {e}", bad, argv)
    return _r4_done(bad, n0, "corrupt tables are exit 2 naming the file; bounded time and memory")


@case("i40r4-python-api", "40.r4", "i40r4")
def _(ctx: Ctx) -> tuple[bool, str]:
    """plan_for / plan_model / the verdict from Python with careless values: every answer carries a verdict
    whose exit code agrees with its outcome, every refusal is an AttnplanError."""
    import traceback

    from attnplan.policy import AttnplanError, plan_for, simulated_node
    from attnplan.model import plan_model

    bad: list[str] = []
    n0 = R4["inputs"]
    base = {"head_dim": 128, "num_qo_heads": 32, "num_kv_heads": 8}
    values = [None, True, 0, -1, 1.5, "x", "", [], {}, [1], 10 ** 30, float("nan"), "128", b"x", object()]
    fields = ["head_dim", "num_qo_heads", "num_kv_heads", "attention_backend", "kv_cache_dtype", "dtype",
              "page_size", "logits_soft_cap", "sliding_window", "num_speculative_tokens", "kv_lora_rank",
              "use_sinks", "nope_field"]
    inputs: list[tuple[str, Callable[[], Any]]] = []
    nodes = {d: simulated_node(d) for d in ("H100", "B200")}
    for j, (f, v) in enumerate((f, v) for f in fields for v in values):
        node = nodes["H100" if j % 2 else "B200"]
        eng = (None, "sglang", "flashinfer", "vllm==0.33.0")[j % 4]
        inputs.append((f"plan_for({f}={v!r}, engine={eng})", lambda f=f, v=v, node=node, eng=eng:
                       plan_for({**base, f: v}, node, engine=eng)))
    over_fields = ["num_attention_heads", "num_qo_heads", "head_dim", "attention_backend", "kv_cache_dtype",
                   "sliding_window", "logits_soft_cap", "page_size"]
    for j, (f, v) in enumerate((f, v) for f in over_fields for v in values):
        m = R4_MODELS[j % 5]
        eng = (None, "sglang", "flashinfer")[j % 3]
        inputs.append((f"plan_model({m}, overrides={{{f}: {v!r}}}, engine={eng})",
                       lambda f=f, v=v, m=m, eng=eng: plan_model(str(ROOT / "attnplan" / "presets" / f"{m}.json"),
                                                                 nodes["B200"], overrides={f: v}, engine=eng)))
    for tp in (0, -1, 3, 2.5, "2", None, True, 10 ** 12):
        inputs.append((f"plan_model(deepseek-v3, tensor_parallel_size={tp!r})",
                       lambda tp=tp: plan_model(str(ROOT / "attnplan" / "presets" / "deepseek-v3.json"), nodes["H100"],
                                                tensor_parallel_size=tp)))
    for eng in ("sglang", "SGLANG", "vllm==0.33.0", "vllm==9", "", "flashinfer==1", 5, ["vllm"]):
        inputs.append((f"plan_for(engine={eng!r})", lambda eng=eng: plan_for(base, nodes["H100"], engine=eng)))
    inputs = _r4_pick(inputs, ctx.quick, 7)
    for what, fn in inputs:
        R4["inputs"] += 1
        t0 = time.monotonic()
        try:
            a = fn()
            v = getattr(a, "verdict", None)
            if v is None:
                _r4_inconsistent(f"{what}: an answer without a verdict", bad)
            elif v.exit_code() != (0 if v.outcome == "runs" else 1):
                _r4_inconsistent(f"{what}: exit_code {v.exit_code()} for {v.outcome}", bad)
        except AttnplanError:
            pass
        except Exception:  # noqa: BLE001 - outside the tree
            _r4_crash(what, traceback.format_exc(), bad)
        if time.monotonic() - t0 > R4_HANG_S:
            R4["hangs"] += 1
            bad.append(f"hang: {what}")
    return _r4_done(bad, n0, "answers carry a verdict; refusals are AttnplanErrors")


# -- running ------------------------------------------------------------------------------------------------
def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="reduced sizes (for the test suite)")
    ap.add_argument("--skip-owner", default="", help="comma-separated owners whose cases are not run")
    ap.add_argument("--only", default="", help="comma-separated case ids to run")
    ap.add_argument("--details", action="store_true", help="list every round-four input that did not hold")
    args = ap.parse_args(argv)
    skip = {s.strip() for s in args.skip_owner.split(",") if s.strip()}
    only = {s.strip() for s in args.only.split(",") if s.strip()}
    failed = 0
    with tempfile.TemporaryDirectory(prefix="attnplan-replay-") as tmp:
        for cid, item, owner, fn in CASES:
            if owner in skip or (only and cid not in only):
                continue
            ctx = Ctx(Path(tmp) / cid, args.quick)
            ctx.tmp.mkdir()
            t0 = time.monotonic()
            try:
                held, detail = fn(ctx)
            except Exception as exc:  # noqa: BLE001 - a case that crashes the replay did not hold
                held, detail = False, f"replay error: {type(exc).__name__}: {str(exc)[:160]}"
            failed += not held
            print(f"{'held  ' if held else 'failed'}  {cid:<34} {item:<4} [{owner}] {time.monotonic() - t0:5.1f}s  "
                  f"{' '.join(detail.split())[:200]}", flush=True)
    if TALLY["inputs"]:
        print(f"issue 40 replay: {TALLY['inputs']} inputs, {TALLY['crashes']} crashes, {TALLY['hangs']} hangs, "
              f"{TALLY['wrong']} wrong answers", flush=True)
    if R4["inputs"]:
        print(f"issue 40 round four: {R4['inputs']} inputs, {R4['crashes']} crashes, {R4['hangs']} hangs, "
              f"{R4['blowups']} blow-ups, {R4['inconsistent']} inconsistent", flush=True)
        for key, whats in sorted(R4_CLASSES.items(), key=lambda kv: -len(kv[1])):
            print(f"  crash class ({len(whats)}x): {key}\n    e.g. {whats[0][:220]}", flush=True)
        if args.details:
            for d in R4_DETAILS:
                print(f"  not held: {d}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
