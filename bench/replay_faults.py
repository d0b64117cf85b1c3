"""Replay every fault of issues 16 and 24 against a fresh ``serve``, the CLI and the preflight.

    python bench/replay_faults.py            # every case, full size (5,000 idle connections)
    python bench/replay_faults.py --quick    # reduced sizes (tests/test_hardening_replay.py)
    python bench/replay_faults.py --skip-owner h1,h3

One line per case: ``held`` or ``failed``, the case id, the issue item, who owns the fix, and
what was seen. Exit 0 only if every case that ran held. Owners: ``h2`` (hardening: preflight,
REST, CLI output), ``h1`` (policy: probe deadlines, artifactory facts, rule-pack limits),
``h3`` (model configs: hfconfig, ``--device ""``), ``integrator`` (one-line changes in files no
helper owns, e.g. ``matrix -o`` in cli/plan.py), ``landed`` (already fixed on main), ``h24``
(issue 24, items ``24.1``-``24.13`` and ``24.also``; ``h27`` owns 24.8, 24.9 and the transformers
warnings). Every CLI case runs in a subprocess with a timeout: a hang is ``failed``, never a stuck
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

    from attnplan.policy import NodeCache, simulated_node
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
    # here (tests/test_hardening_inputs2.py checks all of them in process).
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


# -- running ------------------------------------------------------------------------------------------------
def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="reduced sizes (for the test suite)")
    ap.add_argument("--skip-owner", default="", help="comma-separated owners whose cases are not run")
    ap.add_argument("--only", default="", help="comma-separated case ids to run")
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
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
