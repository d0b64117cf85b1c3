"""REST load: plans/s, latency and server memory of one `attnplan serve` under concurrent clients.

    .venv/bin/python bench/rest_load.py [--seconds 30] [--clients 16] [--write FILE]   # a section of bench/RESULTS.md

The server runs as a subprocess (one uvicorn worker, 127.0.0.1, a free port); the load
generator is this process: N keep-alive HTTP/1.1 connections on raw asyncio sockets, each
sending the next request as soon as its previous answer is read in full (closed loop). The
requests mix standard, GQA, MLA and rejected configs on declared nodes and on this node (a CPU
machine: every plan for it is a rejection). Every response is checked: HTTP 200 and the
expected answer status, else it counts as an error. With two or more CPUs the server and the
generator are pinned to different cores so neither steals the other's.

Targets (issue #3): >= 1,000 plans/s on a 2-core machine with the generator on it; p99 <= 25 ms;
0 errors; server RSS growth <= 10 MB over the run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shlex
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

STANDARD = {"head_dim": 128, "num_qo_heads": 32, "num_kv_heads": 8}
REQUESTS: list[tuple[str, dict]] = [
    ("ok", {"config": STANDARD, "node": {"device": "B200"}}),
    ("ok", {"config": STANDARD, "node": {"device": "H100"}}),
    ("ok", {"config": {**STANDARD, "kv_cache_dtype": "fp8"}, "node": {"device": "GB300", "flashinfer_version": "0.7.2.post1"}}),
    ("ok", {"config": {"num_qo_heads": 128, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
                       "v_head_dim": 128}, "node": {"device": "B200"}}),
    ("ok", {"config": {"head_dim": 256, "num_qo_heads": 16, "num_kv_heads": 8, "sliding_window": 4096,
                       "logits_soft_cap": 50.0}, "node": {"device": "H100"}}),
    ("rejected", {"config": {**STANDARD, "kv_cache_dtype": "nvfp4"}, "node": {"device": "RTX PRO 6000"}}),
    ("rejected", {"config": {**STANDARD, "attention_backend": "trtllm-gen"}, "node": {"device": "H100"}}),
    ("rejected", {"config": {**STANDARD, "sinks": True}, "node": {"device": "B200", "cubins": "missing"}}),
    ("rejected", {"config": STANDARD}),  # this node: no GPU here
]


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def wire(port: int, body: dict, trace: bool) -> bytes:
    data = json.dumps(body).encode()
    path = "/v1/plan" + ("" if trace else "?trace=false")
    return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n\r\n").encode() + data


class Stats:
    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.errors: dict[str, int] = {}
        self.bytes = 0
        self.recording = False

    def error(self, what: str) -> None:
        if self.recording:
            self.errors[what] = self.errors.get(what, 0) + 1


async def client(port: int, payloads: list[tuple[str, bytes]], offset: int, stats: Stats, stop: asyncio.Event) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    i = offset
    try:
        while not stop.is_set():
            expected, req = payloads[i % len(payloads)]
            i += 1
            t0 = time.perf_counter()
            writer.write(req)
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head[9:12])
            length = 0
            for line in head.split(b"\r\n")[1:]:
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            body = await reader.readexactly(length)
            dt = time.perf_counter() - t0
            if not stats.recording:
                continue
            stats.latencies.append(dt)
            stats.bytes += len(head) + length
            if status != 200:
                stats.error(f"HTTP {status}")
            elif not body.startswith(b'{"status":"' + expected.encode() + b'"'):
                stats.error(f"answer not {expected}")
    except (ConnectionError, asyncio.IncompleteReadError) as exc:
        stats.error(type(exc).__name__)
    finally:
        writer.close()


async def load(port: int, clients: int, seconds: float, warmup: float, trace: bool, on_warm) -> tuple[Stats, float]:  # type: ignore[no-untyped-def]
    payloads = [(expected, wire(port, body, trace)) for expected, body in REQUESTS]
    stats, stop = Stats(), asyncio.Event()
    tasks = [asyncio.create_task(client(port, payloads, k, stats, stop)) for k in range(clients)]
    await asyncio.sleep(warmup)
    on_warm()
    stats.recording = True
    t0 = time.perf_counter()
    await asyncio.sleep(seconds)
    stats.recording = False
    elapsed = time.perf_counter() - t0
    stop.set()
    await asyncio.gather(*tasks)
    return stats, elapsed


def wait_ready(url: str, proc: subprocess.Popen, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url + "/readyz", timeout=1) as r:  # noqa: S310 - loopback
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise SystemExit("server not ready in time")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=30.0, help="measured duration (default 30)")
    ap.add_argument("--warmup", type=float, default=3.0, help="unmeasured warm-up first (default 3)")
    ap.add_argument("--clients", type=int, default=16, help="concurrent keep-alive connections (default 16)")
    ap.add_argument("--trace", action="store_true", help="ask for the per-rule trace too (bigger answers)")
    ap.add_argument("--access-log", action="store_true", help="leave uvicorn's access log on (to /dev/null)")
    ap.add_argument("--no-pin", action="store_true", help="do not pin server and generator to separate cores")
    ap.add_argument("--write", metavar="FILE", help="write the results as a markdown section to FILE")
    args = ap.parse_args()

    port = free_port()
    cmd = [sys.executable, "-m", "attnplan", "serve", "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"]
    if not args.access_log:
        cmd.append("--no-access-log")
    cpus = sorted(os.sched_getaffinity(0))
    pin = not args.no_pin and len(cpus) >= 2
    server_cpus, gen_cpus = ({cpus[0]}, set(cpus[1:])) if pin else (set(cpus), set(cpus))
    env = {k: v for k, v in os.environ.items() if k != "ATTNPLAN_TOKEN"}
    env["ATTNPLAN_ARTIFACTORY_CHECK"] = "never"  # the benchmark talks to 127.0.0.1 only
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            preexec_fn=(lambda: os.sched_setaffinity(0, server_cpus)) if pin else None)
    try:
        if pin:
            os.sched_setaffinity(0, gen_cpus)
        url = f"http://127.0.0.1:{port}"
        wait_ready(url, proc)
        rss = {"ready": rss_kib(proc.pid)}
        stats, elapsed = asyncio.run(load(port, args.clients, args.seconds, args.warmup, args.trace,
                                          lambda: rss.__setitem__("warm", rss_kib(proc.pid))))
        rss["end"] = rss_kib(proc.pid)
        with urllib.request.urlopen(url + "/metrics", timeout=5) as r:  # noqa: S310 - loopback
            served = sum(float(line.rsplit(" ", 1)[1]) for line in r.read().decode().splitlines()
                         if line.startswith("attnplan_plans_total{"))
    finally:
        proc.terminate()
        try:
            _, err = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
    if err and b"Traceback" in err:
        print(err.decode(errors="replace"), file=sys.stderr)

    lat = stats.latencies
    n = len(lat)
    errors = sum(stats.errors.values())
    result = {
        "plans_per_s": n / elapsed, "requests": n, "seconds": elapsed, "clients": args.clients,
        "p50_ms": pct(lat, 50) * 1e3, "p99_ms": pct(lat, 99) * 1e3, "max_ms": max(lat) * 1e3,
        "errors": errors, "error_kinds": stats.errors, "rss_ready_mib": rss["ready"] / 1024,
        "rss_warm_mib": rss["warm"] / 1024, "rss_end_mib": rss["end"] / 1024,
        "server_plans_counted": served, "mean_response_bytes": stats.bytes / max(n, 1),
        "server_cpus": sorted(server_cpus), "generator_cpus": sorted(gen_cpus),
    }
    print(json.dumps(result, indent=2))
    argv = " ".join(shlex.quote(a) for a in sys.argv[1:])
    md = render(result, args, f".venv/bin/python bench/rest_load.py {argv}".strip(), pin, cpus)
    if args.write:
        Path(args.write).write_text(md, encoding="utf-8")
    print(md)
    ok = (result["plans_per_s"] >= 1000 and result["p99_ms"] <= 25 and errors == 0
          and result["rss_end_mib"] - result["rss_warm_mib"] <= 10)
    sys.exit(0 if ok else 1)


def stack() -> str:
    import importlib.util

    fast = [m for m in ("httptools", "uvloop") if importlib.util.find_spec(m)]
    if fast:
        return f"uvicorn picks up {' and '.join(fast)} here."
    return "uvicorn runs on its pure-Python stack here (h11 and asyncio: neither httptools nor uvloop is installed)."


def render(r: dict, args: argparse.Namespace, command: str, pin: bool, cpus: list[int]) -> str:
    def ok(cond: bool) -> str:
        return "met" if cond else "**missed**"

    growth_warm = r["rss_end_mib"] - r["rss_warm_mib"]
    growth_ready = r["rss_end_mib"] - r["rss_ready_mib"]
    cores = (f"server pinned to CPU {r['server_cpus']}, load generator to CPU {r['generator_cpus']} (one core each)"
             if pin else f"server and load generator share CPUs {cpus}")
    lines = [
        "## REST service load (bench/rest_load.py)",
        "",
        f"Command: `{command}`",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; {cores}. "
        f"One uvicorn worker on 127.0.0.1 (`attnplan serve`, access log {'on' if args.access_log else 'off'}); "
        f"{r['clients']} keep-alive clients on raw asyncio sockets in a closed loop for {r['seconds']:.1f} s after a "
        f"{args.warmup:.0f} s warm-up, cycling {len(REQUESTS)} request bodies (ok and rejected answers, declared "
        f"nodes and this node){'' if args.trace else ', `?trace=false`'}; mean response {r['mean_response_bytes']:.0f} bytes.",
        "",
        "| metric | result | target | |",
        "|---|---|---|---|",
        f"| plans/s | {r['plans_per_s']:,.0f} ({r['requests']:,} in {r['seconds']:.1f} s) | >= 1,000 | {ok(r['plans_per_s'] >= 1000)} |",
        f"| p50 latency | {r['p50_ms']:.2f} ms | | |",
        f"| p99 latency | {r['p99_ms']:.2f} ms | <= 25 ms | {ok(r['p99_ms'] <= 25)} |",
        f"| max latency | {r['max_ms']:.2f} ms | | |",
        f"| errors | {r['errors']}{' ' + json.dumps(r['error_kinds']) if r['errors'] else ''} | 0 | {ok(r['errors'] == 0)} |",
        f"| server RSS | {r['rss_ready_mib']:.1f} MiB ready, {r['rss_warm_mib']:.1f} MiB after warm-up, "
        f"{r['rss_end_mib']:.1f} MiB at end | growth <= 10 MB | {ok(growth_warm <= 10)} "
        f"(+{growth_warm:.1f} MiB over the run, +{growth_ready:.1f} MiB since ready) |",
        "",
        "Latency is measured by the client (request written to answer read in full), so it includes",
        "queueing behind the other clients' requests on the one server core. " + stack(),
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
