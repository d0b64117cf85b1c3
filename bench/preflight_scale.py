"""Cluster preflight at scale: 1,000 node endpoints on loopback, and Ray on a local cluster.

    .venv/bin/python bench/preflight_scale.py [--nodes 1000] [--servers 4] [--concurrency 64] \
        [--runs 3] [--no-ray] [--model CONFIG_JSON] [--markdown FILE]   # a section of bench/RESULTS.md

``--model tests/models/gemma-3-27b-it.json``: ask for a whole layered model instead of one
attention config (each node plans every layer group; ``--model-config`` on the preflight line),
and also time ``--simulate`` of the same node count with it.

HTTP part: ``--servers`` processes each run the real node service (``api.create_app`` with a
declared device: B200, GB300, H100, A100 in turn) under one uvicorn server that listens on
``nodes / servers`` loopback ports, so 1,000 ports are 1,000 "nodes" answering
``POST /v1/plan``. Then ``attnplan preflight --hosts-file`` runs as a separate process, as a
user runs it, ``--runs`` times: wall time of the whole command (interpreter start, 1,000 plans
over HTTP, validation, grouping, the text report) and its peak RSS (``wait4`` rusage). Target:
<= 10 s at concurrency 64.

Ray part (unless ``--no-ray``; needs ``unshare -n``): the script re-runs itself inside a
private network namespace with only loopback, starts a 3-node ``ray.cluster_utils.Cluster``
(head + two nodes labelled as declared B200 and H100) and times the library call
``ray_preflight`` on a connected driver and the CLI ``attnplan preflight --ray ADDRESS``
(a fresh driver: connect included).

Every socket is on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DEVICES = ("B200", "GB300", "H100", "A100")
CONFIG = ["--head-dim", "128", "--num-heads", "32", "--num-kv-heads", "8"]
LABEL = "attnplan.io/device"


def raise_nofile(want: int) -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = min(hard, max(soft, want)) if hard != resource.RLIM_INFINITY else max(soft, want)
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


# -- one server process: many ports, one app ----------------------------------------------------
def serve_many(device: str, ports: int) -> None:
    import uvicorn

    from attnplan.rest.app import create_app
    from attnplan.rest.server import bind, config
    from attnplan.policy import simulated_node

    raise_nofile(ports * 4 + 256)
    socks = [bind("127.0.0.1", 0) for _ in range(ports)]
    print(json.dumps([s.getsockname()[1] for s in socks]), flush=True)
    # One process stands in for many nodes: its connection cap covers all of their ports.
    server = uvicorn.Server(config(create_app(node=simulated_node(device)), log_level="error", access_log=False,
                                   max_connections=max(1000, ports * 2)))
    server.run(sockets=socks)


def start_servers(nodes: int, servers: int) -> tuple[list[subprocess.Popen], list[int]]:
    procs, ports = [], []
    per = [nodes // servers + (1 if i < nodes % servers else 0) for i in range(servers)]
    for i, n in enumerate(per):
        p = subprocess.Popen([sys.executable, __file__, "--serve", DEVICES[i % len(DEVICES)], "--ports", str(n)],
                             cwd=ROOT, stdout=subprocess.PIPE, text=True)
        procs.append(p)
    for p in procs:
        line = p.stdout.readline()  # type: ignore[union-attr]
        ports += json.loads(line)
    # Ready when every process answers on its first port.
    import httpx

    deadline = time.monotonic() + 60
    firsts = []
    k = 0
    for n in per:
        firsts.append(ports[k])
        k += n
    for port in firsts:
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2, trust_env=False).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("node services did not start")
            time.sleep(0.1)
    return procs, ports


def run_measured(argv: list[str]) -> dict:
    """Run the CLI as its own process (fork + exec); wall time, CPU and peak RSS from wait4."""
    t0 = time.perf_counter()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child becomes the CLI
        devnull = os.open(os.devnull, os.O_WRONLY)
        out_fd = os.open(os.path.join(tempfile.gettempdir(), f"preflight-bench-{os.getpid()}.out"),
                         os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(out_fd, 1)
        os.dup2(devnull, 2)
        os.chdir(ROOT)
        os.environ["NO_COLOR"] = "1"
        os.execv(sys.executable, [sys.executable, "-m", "attnplan", "preflight", *argv])
    _, status, usage = os.wait4(pid, 0)
    wall = time.perf_counter() - t0
    out_path = Path(tempfile.gettempdir()) / f"preflight-bench-{pid}.out"
    out = out_path.read_text()
    out_path.unlink()
    return {"rc": os.waitstatus_to_exitcode(status), "wall_s": wall, "maxrss_mib": usage.ru_maxrss / 1024,
            "user_s": usage.ru_utime, "sys_s": usage.ru_stime, "out": out}


def simulate_bench(args: argparse.Namespace) -> dict:
    """``attnplan preflight --simulate`` of ``--nodes`` nodes (the four devices in equal parts)."""
    per = args.nodes // len(DEVICES)
    spec = ",".join(f"{d}={per + (1 if i < args.nodes - per * len(DEVICES) else 0)}" for i, d in enumerate(DEVICES))
    runs = [run_measured(["--simulate", spec, *CONFIG]) for _ in range(args.runs)]
    return {"spec": spec, "walls": [r["wall_s"] for r in runs], "median_wall_s": statistics.median(r["wall_s"] for r in runs),
            "max_rss_mib": max(r["maxrss_mib"] for r in runs), "rc": runs[-1]["rc"],
            "summary": runs[-1]["out"].strip().splitlines()[-1], "report_head": "\n".join(runs[-1]["out"].strip().splitlines()[:10])}


def http_bench(args: argparse.Namespace) -> dict:
    raise_nofile(args.nodes + 1024)
    t0 = time.perf_counter()
    procs, ports = start_servers(args.nodes, args.servers)
    started = time.perf_counter() - t0
    res: dict = {"nodes": len(ports), "servers": args.servers, "server_start_s": started, "runs": []}
    try:
        hosts = Path(tempfile.mkdtemp()) / "hosts.txt"
        hosts.write_text("".join(f"127.0.0.1:{p}\n" for p in ports))
        res["hosts_file"] = str(hosts)
        for c in args.concurrency_sweep:
            runs = []
            for _ in range(args.runs if c == args.concurrency else 1):
                r = run_measured(["--hosts-file", str(hosts), *CONFIG, "--concurrency", str(c), "--timeout", "30"])
                r["concurrency"] = c
                runs.append(r)
            res["runs"] += runs
        main = [r for r in res["runs"] if r["concurrency"] == args.concurrency]
        res["median_wall_s"] = statistics.median(r["wall_s"] for r in main)
        res["max_rss_mib"] = max(r["maxrss_mib"] for r in main)
        last = main[-1]
        res["rc"] = last["rc"]
        res["summary"] = last["out"].strip().splitlines()[-1]
        res["report_head"] = "\n".join(last["out"].strip().splitlines()[:12])
        # JSON run: the same nodes, machine output (for the record: groups and the schema)
        r = run_measured(["--hosts-file", str(hosts), *CONFIG, "--concurrency", str(args.concurrency), "--json"])
        data = json.loads(r["out"])
        res["json_wall_s"] = r["wall_s"]
        res["json_groups"] = [(g["count"], g["device"], g["status"]) for g in data["groups"]]
        res["json_bytes"] = len(r["out"])
        # The import floor: what the same process costs with nothing to ask.
        t1 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import attnplan.cli.preflight, attnplan.preflight.http, httpx, attnplan.preflight.report"],
                       cwd=ROOT, check=True)
        res["import_floor_s"] = time.perf_counter() - t1
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
    for r in res["runs"]:
        r.pop("out", None)
    return res


# -- Ray, inside `unshare -n` -----------------------------------------------------------------------
def ray_inner(out_path: str) -> None:
    import ray
    from ray.cluster_utils import Cluster

    from attnplan.policy import make_config
    from attnplan.preflight.model import NamedConfig
    from attnplan.preflight.ray_source import ray_preflight

    t0 = time.perf_counter()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    cluster.add_node(num_cpus=1, labels={LABEL: "B200"})
    cluster.add_node(num_cpus=1, labels={LABEL: "H100"})
    cluster.wait_for_nodes()
    up = time.perf_counter() - t0
    ray.init(address=cluster.address, log_to_driver=False, logging_level="ERROR")
    configs = [NamedConfig("llama", make_config({"head_dim": 128, "num_qo_heads": 32, "num_kv_heads": 8}))]
    lib = []
    for _ in range(3):
        t1 = time.perf_counter()
        outs = ray_preflight(configs, timeout=60, declare_label=LABEL)
        lib.append(time.perf_counter() - t1)
    statuses = sorted(o.kind for o in outs)
    ray.shutdown()
    t2 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "attnplan", "preflight", "--ray", cluster.address, "--ray-declare-label",
                        LABEL, *CONFIG], cwd=ROOT, capture_output=True, text=True, timeout=120)
    cli = time.perf_counter() - t2
    cluster.shutdown()
    Path(out_path).write_text(json.dumps({
        "cluster_up_s": up, "library_s": lib, "cli_s": cli, "cli_rc": p.returncode,
        "cli_summary": (p.stdout.strip().splitlines() or ["?"])[-1], "outcomes": statuses}))


def ray_bench() -> dict:
    if not shutil.which("unshare"):
        return {"skipped": "unshare(1) not installed"}
    out = Path(tempfile.mkdtemp()) / "ray.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    t0 = time.perf_counter()
    p = subprocess.run(["unshare", "-n", "sh", "-c",
                        f"ip link set lo up && exec {sys.executable} {__file__} --ray-inner {out}"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    if p.returncode != 0 or not out.exists():
        return {"skipped": f"ray run failed (rc {p.returncode}): {p.stderr.strip().splitlines()[-1:]}"}
    res = json.loads(out.read_text())
    res["total_s"] = time.perf_counter() - t0
    return res


# -- report ------------------------------------------------------------------------------------------
def markdown(args: argparse.Namespace, http: dict, ray: dict | None) -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    main = [r for r in http["runs"] if r["concurrency"] == args.concurrency]
    lines = [
        "## Cluster preflight at scale (`bench/preflight_scale.py`)",
        "",
        f"Machine: {os.cpu_count()} CPUs ({cpu}), Python {platform.python_version()}, CPU only; every socket on 127.0.0.1.",
        "",
        "```bash",
        f".venv/bin/python bench/preflight_scale.py --nodes {args.nodes} --servers {args.servers} "
        f"--concurrency {args.concurrency} --runs {args.runs}" + (" --no-ray" if ray is None else "")
        + f" --markdown {args.markdown}",
        "# what it times, per run (a separate process, as a user runs it):",
        f"attnplan preflight --hosts-file hosts.txt {' '.join(CONFIG)} --concurrency {args.concurrency} --timeout 30",
        "```",
        "",
        f"**HTTP, {http['nodes']} node endpoints** ({http['servers']} uvicorn processes of the real node service, "
        f"{http['nodes'] // http['servers']} loopback ports each, declared {', '.join(DEVICES[:http['servers']])}); "
        f"the whole command, interpreter start to the printed report:",
        "",
        "| concurrency | run | wall (s) | user+sys CPU (s) | peak RSS (MiB) | exit |",
        "|---|---|---|---|---|---|",
    ]
    seen: dict[int, int] = {}
    for r in http["runs"]:
        seen[r["concurrency"]] = i = seen.get(r["concurrency"], 0) + 1
        lines.append(f"| {r['concurrency']} | {i} | {r['wall_s']:.2f} | {r['user_s'] + r['sys_s']:.2f} | "
                     f"{r['maxrss_mib']:.0f} | {r['rc']} |")
    verdict = "meets" if http["median_wall_s"] <= 10 else "MISSES"
    lines += [
        "",
        f"- median wall at concurrency {args.concurrency}: **{http['median_wall_s']:.2f} s** for {http['nodes']} nodes "
        f"({verdict} the 10 s target); peak RSS of the preflight process **{http['max_rss_mib']:.0f} MiB**.",
        f"- of which interpreter + imports: {http['import_floor_s']:.2f} s "
        "(`python -c 'import attnplan.cli.preflight, attnplan.preflight.http, httpx, attnplan.preflight.report'`).",
        f"- `--json` of the same run: {http['json_wall_s']:.2f} s, {http['json_bytes'] / 1024:.0f} KiB of JSON; "
        f"groups: {', '.join(f'{n} x {d} {s}' for n, d, s in http['json_groups'])}.",
        f"- node services start-up (not timed above): {http['server_start_s']:.1f} s.",
        f"- summary line: `{http['summary']}`",
        "",
        "The servers and the client share the same CPUs here, so the wall time includes the 1,000 answers "
        "being computed and served as well as fetched, validated and grouped. The preflight process itself is "
        f"CPU-bound (user+sys ~ wall: ~{1000 * statistics.median(r['user_s'] + r['sys_s'] for r in main) / http['nodes']:.1f} ms "
        "of CPU a node, mostly httpx/asyncio per-request overhead), so concurrency beyond 16 buys little on 2 cores.",
        "Two things keep it there (preflight/http.py): one small httpx client per node sharing one TLS context "
        "(with one shared pool of 1,000 hosts httpcore's pool bookkeeping is quadratic in its connections: the same benchmark took 4.7 s at concurrency 64 and 20 s at 256), "
        "and caching the absence of `sniffio` (httpcore re-imports it on every request; each miss rescans sys.path).",
    ]
    if ray is not None:
        lines += ["", "**Ray, local 3-node cluster** (`ray.cluster_utils.Cluster` inside `unshare -n`: head without a "
                  "GPU, two nodes labelled as declared B200 and H100; each task pinned with "
                  "NodeAffinitySchedulingStrategy, num_cpus=0):", ""]
        if "skipped" in ray:
            lines.append(f"- skipped: {ray['skipped']}")
        else:
            lib = ray["library_s"]
            lines += [
                f"- cluster start: {ray['cluster_up_s']:.1f} s (not part of a preflight)",
                f"- `ray_preflight` on a connected driver: first {lib[0]:.2f} s (workers start), then "
                f"{', '.join(f'{x:.2f}' for x in lib[1:])} s",
                f"- `attnplan preflight --ray ADDRESS --ray-declare-label {LABEL}` (fresh process, connect included): "
                f"{ray['cli_s']:.2f} s, exit {ray['cli_rc']}",
                f"- summary line: `{ray['cli_summary']}`",
            ]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--servers", type=int, default=4, help="server processes (ports are spread over them)")
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--sweep", default="16,64,256", help="also one run at each of these concurrencies")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--no-ray", action="store_true")
    ap.add_argument("--model", metavar="CONFIG_JSON", help="a whole model (every layer group) instead of one config")
    ap.add_argument("--markdown", metavar="FILE", help="write the results section here")
    ap.add_argument("--serve", help=argparse.SUPPRESS)
    ap.add_argument("--ports", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--ray-inner", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        serve_many(args.serve, args.ports)
        return
    if args.ray_inner:
        ray_inner(args.ray_inner)
        return
    if args.model:
        global CONFIG
        CONFIG = ["--model-config", str(Path(args.model).resolve())]
        sim = simulate_bench(args)
        print(json.dumps({k: v for k, v in sim.items() if k != "report_head"}, indent=1))
        print(sim["report_head"])
    sweep = sorted({int(x) for x in args.sweep.split(",") if x.strip()} | {args.concurrency})
    args.concurrency_sweep = sweep
    http = http_bench(args)
    print(json.dumps({k: v for k, v in http.items() if k != "report_head"}, indent=1))
    print(http["report_head"])
    ray = None if args.no_ray else ray_bench()
    if ray is not None:
        print(json.dumps(ray, indent=1))
    if args.markdown:
        Path(args.markdown).write_text(markdown(args, http, ray))
        print(f"wrote {args.markdown}")


if __name__ == "__main__":
    main()
