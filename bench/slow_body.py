"""Slow-body flood: does ``/healthz`` still answer while 1,100 clients drip request bodies?

    .venv/bin/python bench/slow_body.py [--connections 1100] [--seconds 30] [--token] [--write FILE]

Issue 24 #1: clients send complete ``POST /v1/plan`` headers with ``Content-Length: 60000``,
then one body byte every 2 s. Before the body deadline and the eviction of dripping
connections, 1,000 of them held every connection slot and ``/healthz`` answered 0 of 29 probes
in 30 s. Here an ``attnplan serve`` subprocess (127.0.0.1, a free port, default limits: 1,000
connections, 10 s body deadline) is flooded by ``--connections`` such clients from this
process; each one that the server closes (408, eviction, 401 with ``--token``) reconnects at
once and starts again, as an attacker would. Meanwhile a separate thread probes ``/healthz``
every 0.1 s on a fresh connection (as an orchestrator does) with a 5 s timeout, and records
each answer's latency. Loopback only; bounded in count (<= 5,000) and time (<= 120 s).

Target: every probe answered, p99 < 1 s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import resource
import shlex
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "slow-body-bench-token-0123456789"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))] if xs else float("nan")


class Flood:
    def __init__(self, port: int, interval: float):
        self.port, self.interval = port, interval
        self.head = (f"POST /v1/plan HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
                     f"Content-Length: 60000\r\n\r\n").encode()
        self.open = 0
        self.connects = 0
        self.closed_by_server = 0
        self.answers: dict[str, int] = {}
        self.connect_errors = 0

    async def one(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
            except OSError:
                self.connect_errors += 1
                await asyncio.sleep(0.5)
                continue
            self.connects += 1
            self.open += 1
            try:
                writer.write(self.head)
                while not stop.is_set():
                    try:
                        data = await asyncio.wait_for(reader.read(4096), self.interval)
                    except asyncio.TimeoutError:
                        writer.write(b" ")  # one more body byte
                        continue
                    if data.startswith(b"HTTP/1.1 "):
                        code = data[9:12].decode(errors="replace")
                        self.answers[code] = self.answers.get(code, 0) + 1
                    self.closed_by_server += 1
                    break
            except OSError:
                self.closed_by_server += 1
            finally:
                self.open -= 1
                writer.close()

    async def run(self, n: int, seconds: float, ready: threading.Event, done: threading.Event) -> None:
        stop = asyncio.Event()
        tasks = []
        for _ in range(n):  # ramp up without a connect storm
            tasks.append(asyncio.create_task(self.one(stop)))
            await asyncio.sleep(0.002)
        await asyncio.sleep(3)  # every flooder has sent its headers
        ready.set()
        while not done.is_set():
            await asyncio.sleep(0.2)
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)


def probe(port: int, seconds: float, out: list[tuple[float, str]]) -> None:
    req = f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n".encode()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t0 = time.perf_counter()
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                s.sendall(req)
                data = b""
                while b"\r\n\r\n" not in data:
                    chunk = s.recv(4096)
                    if not chunk:
                        break
                    data += chunk
            status = data[9:12].decode(errors="replace") or "closed"
        except OSError as exc:
            status = type(exc).__name__
        out.append((time.perf_counter() - t0, status))
        time.sleep(0.1)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--connections", type=int, default=1100, help="dripping clients (default 1100, at most 5000)")
    ap.add_argument("--seconds", type=float, default=30.0, help="probing time (default 30, at most 120)")
    ap.add_argument("--interval", type=float, default=2.0, help="seconds between body bytes (default 2)")
    ap.add_argument("--token", action="store_true", help="serve with a token: the flood is unauthenticated")
    ap.add_argument("--no-pin", action="store_true", help="do not pin server and flood to separate cores")
    ap.add_argument("--write", metavar="FILE", help="write the results as a markdown section to FILE")
    args = ap.parse_args()
    n = max(1, min(args.connections, 5000))
    seconds = max(1.0, min(args.seconds, 120.0))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = n + 256
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, want), hard))

    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "ATTNPLAN_TOKEN"}
    env["ATTNPLAN_ARTIFACTORY_CHECK"] = "never"
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    if args.token:
        env["ATTNPLAN_TOKEN"] = TOKEN
    cpus = sorted(os.sched_getaffinity(0))
    pin = not args.no_pin and len(cpus) >= 2
    server_cpus, gen_cpus = ({cpus[0]}, set(cpus[1:])) if pin else (set(cpus), set(cpus))
    cmd = [sys.executable, "-m", "attnplan", "serve", "--port", str(port), "--device", "B200", "--no-access-log",
           "--log-level", "warning"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            preexec_fn=(lambda: os.sched_setaffinity(0, server_cpus)) if pin else None)
    results: list[tuple[float, str]] = []
    flood = Flood(port, args.interval)
    try:
        if pin:
            os.sched_setaffinity(0, gen_cpus)
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2):  # noqa: S310 - loopback
                    break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise SystemExit("server did not start")
                time.sleep(0.2)
        ready, done = threading.Event(), threading.Event()
        loop_thread = threading.Thread(target=lambda: asyncio.run(flood.run(n, seconds, ready, done)), daemon=True)
        loop_thread.start()
        ready.wait(120)
        open_at_start = flood.open
        probe(port, seconds, results)
        open_at_end = flood.open
        done.set()
        loop_thread.join(60)
    finally:
        proc.terminate()
        try:
            proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
    lat = [t for t, s in results if s == "200"]
    failed = [s for _, s in results if s != "200"]
    r = {"connections": n, "seconds": seconds, "interval_s": args.interval, "token": args.token,
         "flood_open_at_start": open_at_start, "flood_open_at_end": open_at_end, "flood_connects": flood.connects,
         "closed_by_server": flood.closed_by_server, "server_answers": flood.answers,
         "connect_errors": flood.connect_errors, "probes": len(results), "probes_ok": len(lat),
         "probe_failures": failed[:10], "p50_ms": pct(lat, 50) * 1e3, "p99_ms": pct(lat, 99) * 1e3,
         "max_ms": max(lat) * 1e3 if lat else float("nan"), "pinned": pin}
    print(json.dumps(r, indent=2))
    command = "python bench/slow_body.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    md = "\n".join([
        f"## Slow-body flood (bench/slow_body.py){' with a token, flood unauthenticated' if args.token else ''}",
        "",
        f"Command: `{command.strip()}`",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs; {'server and flood on separate cores' if pin else 'shared cores'}. "
        f"{n} clients each send `POST /v1/plan` headers with `Content-Length: 60000` then a byte every "
        f"{args.interval:g} s, reconnecting when closed; `/healthz` probed every 0.1 s for {seconds:g} s.",
        "",
        "| metric | result | target |",
        "|---|---|---|",
        f"| /healthz answered | {len(lat)} of {len(results)} | all |",
        f"| /healthz p50 / p99 / max | {r['p50_ms']:.1f} / {r['p99_ms']:.1f} / {r['max_ms']:.1f} ms | p99 < 1,000 ms |",
        f"| flood connections open (start / end of probing) | {open_at_start} / {open_at_end} | |",
        f"| flood connections closed by the server | {flood.closed_by_server} (answers: {json.dumps(flood.answers)}) | |",
        "",
    ])
    print(md)
    if args.write:
        Path(args.write).write_text(md, encoding="utf-8")
    return 0 if lat and not failed and r["p99_ms"] < 1000 else 1


if __name__ == "__main__":
    sys.exit(main())
