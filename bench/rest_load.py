"""REST load: plans/s, latency and server memory of one `attnplan serve` under concurrent clients.

    .venv/bin/python bench/rest_load.py [--seconds 30] [--clients 16] [--write FILE]   # a section of bench/RESULTS.md
    .venv/bin/python bench/rest_load.py --mix distinct      # every request a config the server has not cached

The server runs as a subprocess (one uvicorn worker, 127.0.0.1, a free port); the load
generator is this process: N keep-alive HTTP/1.1 connections on raw asyncio sockets, each
sending the next request as soon as its previous answer is read in full (closed loop). The
requests mix standard, GQA, MLA and rejected configs on declared nodes and on this node (a CPU
machine: every plan for it is a rejection). Every response is checked against what the rules
say: the expected status, plan, violations and engine are computed here with ``plan_for`` (for
"this node", on the facts the server reports at ``/v1/node``), never written down by hand, and
any difference is an error. With two or more CPUs the server and the generator are pinned to
different cores so neither steals the other's.

Mixes: ``light`` (default) cycles the nine bodies above: after the first round every answer
is in the server's cache. ``distinct`` cycles ``--distinct N`` (default 2,000) different
configs over declared nodes, more than the server's answer cache (256) holds, so every request
is planned afresh in a worker thread: the realistic case of many models and nodes.

Targets (issue 24): light mix >= 2,000 plans/s on a 2-core machine with the generator on it,
p99 <= 25 ms; 0 errors in either mix; server RSS growth <= 10 MB over the run.
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
# What each answers is plan_for's to say (expected_answers), not written here.
REQUESTS: list[dict] = [
    {"config": STANDARD, "node": {"device": "B200"}},
    {"config": STANDARD, "node": {"device": "H100"}},
    {"config": {**STANDARD, "kv_cache_dtype": "fp8"}, "node": {"device": "GB300", "flashinfer_version": "0.7.2.post1"}},
    {"config": {"num_qo_heads": 128, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
                "v_head_dim": 128}, "node": {"device": "B200"}},
    {"config": {"head_dim": 256, "num_qo_heads": 16, "num_kv_heads": 8, "sliding_window": 4096,
                "logits_soft_cap": 50.0}, "node": {"device": "H100"}},
    {"config": {**STANDARD, "kv_cache_dtype": "nvfp4"}, "node": {"device": "RTX PRO 6000"}},
    {"config": {**STANDARD, "attention_backend": "trtllm-gen"}, "node": {"device": "H100"}},
    {"config": {**STANDARD, "sinks": True}, "node": {"device": "B200", "cubins": "missing"}},
    {"config": STANDARD},  # this node: no GPU here
]


DEVICES = ["B200", "H100", "H200", "GB300", "A100", "L40S", "RTX PRO 6000"]


def distinct_requests(n: int) -> list[dict]:
    """``n`` different request bodies (config x node), deterministic, ok and rejected both."""
    out: list[dict] = []
    heads = [(32, 8), (32, 32), (64, 8), (16, 4), (128, 8), (40, 8), (28, 4), (8, 1)]
    dims = [64, 128, 256, 96, 80]
    pages = [None, 16, 32, 64, 1, 128]
    windows = [None, 4096, 1024, 128]
    kv = ["auto", "fp8"]
    i = 0
    while len(out) < n:
        qo, kvh = heads[i % len(heads)]
        cfg: dict = {"head_dim": dims[(i // 8) % len(dims)], "num_qo_heads": qo, "num_kv_heads": kvh}
        if (p := pages[(i // 40) % len(pages)]) is not None:
            cfg["page_size"] = p
        if (w := windows[(i // 240) % len(windows)]) is not None:
            cfg["sliding_window"] = w
        if (k := kv[(i // 960) % len(kv)]) != "auto":
            cfg["kv_cache_dtype"] = k
        if i // 1920:
            cfg["num_speculative_tokens"] = 1 + (i // 1920) % 7
        out.append({"config": cfg, "node": {"device": DEVICES[(i * 3) % len(DEVICES)]}})
        i += 1
    return out


def expected_answers(bodies: list[dict], server_node: dict, trace: bool) -> list[dict]:
    """What the rules say each request's answer is: ``plan_for`` in this process."""
    from attnplan.policy import NodeFacts, make_config, plan_for, simulated_node

    mine = NodeFacts.model_validate(server_node)
    out = []
    for b in bodies:
        spec = b.get("node")
        node = mine if spec is None else simulated_node(spec["device"], flashinfer_version=spec.get("flashinfer_version"),
                                                        cubins=spec.get("cubins"))
        out.append(comparable(plan_for(make_config(b["config"]), node).to_json(trace=trace)))
    return out


def comparable(answer: dict) -> dict:
    """The parts of an answer the rules decide (the node echo and notes aside)."""
    return {k: answer.get(k) for k in ("status", "plan", "violations", "engine", "rules_revision")}


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


def cpu_seconds(pid: int) -> float:
    """The process's user + system CPU time: what the server spent, whatever else the machine ran."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


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


async def client(port: int, payloads: list[tuple[dict, bytes]], offset: int, stats: Stats, stop: asyncio.Event) -> None:
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
            else:
                got = comparable(json.loads(body))
                if got != expected:
                    diff = next(k for k in expected if expected[k] != got.get(k))
                    stats.error(f"{diff} differs from plan_for ({expected['status']} expected)")
    except (ConnectionError, asyncio.IncompleteReadError) as exc:
        stats.error(type(exc).__name__)
    finally:
        writer.close()


async def load(port: int, clients: int, seconds: float, warmup: float, trace: bool, on_warm,  # type: ignore[no-untyped-def]
               bodies: list[dict], expected: list[dict]) -> tuple[Stats, float]:
    payloads = [(exp, wire(port, body, trace)) for exp, body in zip(expected, bodies)]
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
    ap.add_argument("--mix", choices=["light", "distinct"], default="light",
                    help="light: nine cached bodies; distinct: --distinct different, uncached configs")
    ap.add_argument("--distinct", type=int, default=2000, metavar="N", help="bodies in the distinct mix (default 2000)")
    ap.add_argument("--loop", choices=["auto", "asyncio", "uvloop"], default="auto",
                    help="the server's event loop (ATTNPLAN_LOOP; auto: uvloop when installed)")
    args = ap.parse_args()
    bodies = list(REQUESTS) if args.mix == "light" else distinct_requests(args.distinct)

    port = free_port()
    cmd = [sys.executable, "-m", "attnplan", "serve", "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"]
    if not args.access_log:
        cmd.append("--no-access-log")
    cpus = sorted(os.sched_getaffinity(0))
    pin = not args.no_pin and len(cpus) >= 2
    server_cpus, gen_cpus = ({cpus[0]}, set(cpus[1:])) if pin else (set(cpus), set(cpus))
    env = {k: v for k, v in os.environ.items() if k != "ATTNPLAN_TOKEN"}
    env["ATTNPLAN_ARTIFACTORY_CHECK"] = "never"  # the benchmark talks to 127.0.0.1 only
    env["ATTNPLAN_LOOP"] = args.loop
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            preexec_fn=(lambda: os.sched_setaffinity(0, server_cpus)) if pin else None)
    try:
        if pin:
            os.sched_setaffinity(0, gen_cpus)
        url = f"http://127.0.0.1:{port}"
        wait_ready(url, proc)
        rss = {"ready": rss_kib(proc.pid)}
        with urllib.request.urlopen(url + "/v1/node", timeout=30) as r:  # noqa: S310 - loopback
            server_node = json.loads(r.read())["node"]
        t0 = time.perf_counter()
        expected = expected_answers(bodies, server_node, args.trace)
        derive_s = time.perf_counter() - t0
        cpu: dict[str, float] = {}

        def warm() -> None:
            rss["warm"] = rss_kib(proc.pid)
            cpu["warm"] = cpu_seconds(proc.pid)

        stats, elapsed = asyncio.run(load(port, args.clients, args.seconds, args.warmup, args.trace, warm,
                                          bodies, expected))
        cpu["end"] = cpu_seconds(proc.pid)  # (includes the ~ms of finishing the last requests)
        rss["end"] = rss_kib(proc.pid)
        load1 = os.getloadavg()[0]
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
        "server_cpu_s": cpu["end"] - cpu["warm"],
        "server_cpu_ms_per_plan": (cpu["end"] - cpu["warm"]) * 1e3 / max(n, 1),
        "plans_per_server_cpu_s": n / max(cpu["end"] - cpu["warm"], 1e-9),
        "load1_at_end": load1,
        "mix": args.mix, "bodies": len(bodies), "loop": args.loop, "expectations_derived_s": derive_s,
        "statuses": {s: sum(1 for e in expected if e["status"] == s) for s in ("ok", "rejected")},
    }
    print(json.dumps(result, indent=2))
    argv = " ".join(shlex.quote(a) for a in sys.argv[1:])
    md = render(result, args, f".venv/bin/python bench/rest_load.py {argv}".strip(), pin, cpus)
    if args.write:
        Path(args.write).write_text(md, encoding="utf-8")
    print(md)
    light = args.mix == "light"
    ok = (errors == 0 and result["rss_end_mib"] - result["rss_warm_mib"] <= 10
          and (not light or (result["plans_per_s"] >= 2000 and result["p99_ms"] <= 25)))
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

    target_rate = ">= 2,000" if r["mix"] == "light" else "(none: reported)"
    growth_warm = r["rss_end_mib"] - r["rss_warm_mib"]
    growth_ready = r["rss_end_mib"] - r["rss_ready_mib"]
    cores = (f"server pinned to CPU {r['server_cpus']}, load generator to CPU {r['generator_cpus']} (one core each)"
             if pin else f"server and load generator share CPUs {cpus}")
    lines = [
        f"## REST service load (bench/rest_load.py), {r['mix']} mix",
        "",
        f"Command: `{command}`",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; {cores}. "
        f"One uvicorn worker on 127.0.0.1 (`attnplan serve`, access log {'on' if args.access_log else 'off'}); "
        f"{r['clients']} keep-alive clients on raw asyncio sockets in a closed loop for {r['seconds']:.1f} s after a "
        f"{args.warmup:.0f} s warm-up, cycling {r['bodies']:,} request bodies ({r['statuses']['ok']} ok and "
        f"{r['statuses']['rejected']} rejected by plan_for; "
        + ("declared nodes and this node, cached after the first round" if r["mix"] == "light" else
           "declared nodes, more than the answer cache holds: every request planned afresh")
        + f"){'' if args.trace else ', `?trace=false`'}; mean response {r['mean_response_bytes']:.0f} bytes; "
        f"event loop: {r['loop']}. Every answer compared with plan_for's.",
        "",
        "| metric | result | target | |",
        "|---|---|---|---|",
        f"| plans/s | {r['plans_per_s']:,.0f} ({r['requests']:,} in {r['seconds']:.1f} s) | {target_rate} | "
        f"{ok(r['plans_per_s'] >= 2000) if r['mix'] == 'light' else ''} |",
        f"| p50 latency | {r['p50_ms']:.2f} ms | | |",
        f"| p99 latency | {r['p99_ms']:.2f} ms | {'<= 25 ms' if r['mix'] == 'light' else ''} | "
        f"{ok(r['p99_ms'] <= 25) if r['mix'] == 'light' else ''} |",
        f"| max latency | {r['max_ms']:.2f} ms | | |",
        f"| server CPU per plan | {r['server_cpu_ms_per_plan']:.3f} ms ({r['plans_per_server_cpu_s']:,.0f} plans per "
        f"server CPU-second; {r['server_cpu_s']:.1f} s of CPU in {r['seconds']:.1f} s) | | |",
        f"| errors | {r['errors']}{' ' + json.dumps(r['error_kinds']) if r['errors'] else ''} | 0 | {ok(r['errors'] == 0)} |",
        f"| server RSS | {r['rss_ready_mib']:.1f} MiB ready, {r['rss_warm_mib']:.1f} MiB after warm-up, "
        f"{r['rss_end_mib']:.1f} MiB at end | growth <= 10 MB | {ok(growth_warm <= 10)} "
        f"(+{growth_warm:.1f} MiB over the run, +{growth_ready:.1f} MiB since ready) |",
        "",
        "Latency is measured by the client (request written to answer read in full), so it includes",
        "queueing behind the other clients' requests on the one server core. " + stack(),
        f"Load average (1 min) at the end: {r['load1_at_end']:.2f} on {os.cpu_count()} CPUs: plans/s and latency",
        "depend on what else runs; CPU per plan is the server's own cost.",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
