"""What the issue-22 sweep costs to build, and whether it can fit one device lease.

The sweep (`attnplan verify --sweep`) is compile-bound: 212 FlashInfer JIT modules for 839
probes on the H100, and a probe runs in a second once its module is built. Wall times of past
runs mix every build with whatever was building beside it, so they cannot say what one module
costs. This measures it: a sample of the sweep's own modules (the first probe of each, as the
sweep runs it: run_modules, one process per module) from an empty JIT cache, each probe's
``cpu_s`` being its process's CPU with its ninja and nvcc (attnplan/verify/child.py
cpu_seconds). ``estimate`` scales the sample's CPU per module family to every module the sweep
builds and divides by the cores: the least wall time any schedule of those builds can take.

    # on the GPU machine (empty FLASHINFER_WORKSPACE_BASE), a few minutes:
    python bench/sweep_cost.py measure --out cost.jsonl [--per-family 2] [--jobs 4] [--build-jobs 4]
    # anywhere, no GPU:
    python bench/sweep_cost.py estimate cost.jsonl [--cores 16] [--lease-min 30]

The sweep is generated for a declared H100 (`--device H100`: the same probes as the report's
offline rebuild, docs/verified/H100-flashinfer-0.7.2.post1-sweep.md).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import defaultdict
from typing import Any


def sweep_modules(device: str, seed: int = 0) -> dict[str, Any]:
    """The sweep's JIT modules, each with the probe that builds it (its first)."""
    from attnplan.policy import default_ruleset, simulated_node
    from attnplan.verify.sweep import sweep

    sw = sweep(default_ruleset(), simulated_node(device), seed=seed)
    out: dict[str, Any] = {}
    for p in sw.probes:
        if not p.skip:
            out.setdefault(p.module, p)
    return out


def family(probe: Any) -> str:
    """Modules of one FlashInfer generator and backend cost alike (head size and dtypes vary it)."""
    return f"{probe.backend}/{probe.module.split(':')[0]}"


def sample(modules: dict[str, Any], per_family: int) -> list[Any]:
    """``per_family`` modules of each family, spread evenly over its sorted module keys."""
    fams: dict[str, list[str]] = defaultdict(list)
    for m, p in modules.items():
        fams[family(p)].append(m)
    picked = []
    for _f, ms in sorted(fams.items()):
        ms.sort()
        k = min(per_family, len(ms))
        picked += [modules[ms[int((i + 0.5) * len(ms) / k)]] for i in range(k)]
    return picked


def measure(args: argparse.Namespace) -> int:
    from attnplan.verify.runner import batch_subprocess_runner, run_modules

    probes = sample(sweep_modules(args.device), args.per_family)
    env = dict(os.environ, MAX_JOBS=str(args.build_jobs))
    t0 = time.monotonic()
    log = lambda s: print(f"cost {time.monotonic() - t0:7.1f}s {s}", file=sys.stderr, flush=True)  # noqa: E731
    log(f"{len(probes)} modules, {args.jobs} at a time, MAX_JOBS={args.build_jobs}; "
        f"JIT cache {os.environ.get('FLASHINFER_WORKSPACE_BASE', '~')}")
    with open(args.out, "a") as f:
        def record(p: Any, res: dict[str, Any]) -> None:
            f.write(json.dumps({"module": p.module, "family": family(p), "id": p.id, "outcome": res["outcome"],
                                "seconds": res.get("seconds"), "cpu_s": res.get("cpu_s"),
                                "error": res.get("error")}) + "\n")
            f.flush()

        run_modules(probes, batch_subprocess_runner(env=env), jobs=args.jobs, build_timeout=args.build_timeout,
                    probe_timeout=args.build_timeout, progress=log, on_result=record)
    log(f"done: {args.out}")
    return 0


def estimate(args: argparse.Namespace) -> int:
    rows = [json.loads(ln) for ln in open(args.file) if ln.strip()]
    measured: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        if r.get("outcome") == "ok" and isinstance(r.get("cpu_s"), (int, float)):
            measured[r["family"]].append(r["cpu_s"])
    counts: dict[str, int] = defaultdict(int)
    for p in sweep_modules(args.device).values():
        counts[family(p)] += 1
    missing = sorted(set(counts) - set(measured))
    if missing:
        print(f"sweep_cost: no measured module for {', '.join(missing)}: measure again", file=sys.stderr)
        return 2
    total = 0.0
    table = ["| family | modules in the sweep | measured | CPU-s per module (min-max) | estimated CPU-s |",
             "|---|---|---|---|---|"]
    for f in sorted(counts, key=lambda f: -counts[f] * sum(measured[f]) / len(measured[f])):
        per = sum(measured[f]) / len(measured[f])
        total += per * counts[f]
        table.append(f"| {f} | {counts[f]} | {len(measured[f])} | {per:,.0f} ({min(measured[f]):,.0f}-"
                     f"{max(measured[f]):,.0f}) | {per * counts[f]:,.0f} |")
    floor = total / args.cores / 60
    print("\n".join(table))
    print(f"\n{sum(counts.values())} modules: about {total:,.0f} CPU-s of JIT builds; on {args.cores} cores at least "
          f"{floor:.0f} min before any probe runs ({'fits' if floor <= args.lease_min else 'does not fit'} "
          f"a {args.lease_min:g}-minute lease); {total / args.lease_min / 60:.0f} cores would build it in one.")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure", help="build a sample of the sweep's modules on this GPU, recording their CPU")
    m.add_argument("--out", required=True, help="JSON lines, appended as each module finishes")
    m.add_argument("--per-family", type=int, default=2)
    m.add_argument("--jobs", type=int, default=4, help="modules at a time")
    m.add_argument("--build-jobs", type=int, default=4, help="MAX_JOBS for each module's ninja")
    m.add_argument("--build-timeout", type=float, default=1500.0)
    e = sub.add_parser("estimate", help="scale the measured sample to the whole sweep (no GPU)")
    e.add_argument("file")
    e.add_argument("--cores", type=int, default=16, help="the build machine's cores (the H100 machine: 16)")
    e.add_argument("--lease-min", type=float, default=30.0)
    for p in (m, e):
        p.add_argument("--device", default="H100", help="the catalog device the sweep is generated for")
    args = ap.parse_args(argv)
    return measure(args) if args.cmd == "measure" else estimate(args)


if __name__ == "__main__":
    sys.exit(main())
