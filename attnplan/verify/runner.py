"""Run probes in processes of their own, JIT modules first, every one under a time limit.

Pass 1 (build): one probe per JIT module (``Probe.module``), ``jobs`` at a time, under the long
build limit - FlashInfer compiles the module inside that probe's process (its own file lock
keeps two builds of one module apart), and the probe's result counts. Pass 2: every other probe,
``jobs`` at a time, under the short probe limit; their modules are on disk by then. A probe that
outlives its limit is killed with its process group and recorded as ``hang``; the run goes on.
A ``deadline`` (seconds from the start) stops new probes from starting: they are recorded as
skipped, so a lease that ends still leaves a report.

The runner is injected: tests pass a function that stands in for FlashInfer.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Optional, Sequence

from .generate import Probe

Runner = Callable[[Probe, float], dict[str, Any]]
CHILD = (sys.executable, "-m", "attnplan.verify.child")


def subprocess_runner(command: Sequence[str] = CHILD, env: Optional[dict[str, str]] = None) -> Runner:
    """Each probe in a fresh process running ``command`` (spec on stdin, one JSON line out)."""

    def run(probe: Probe, timeout: float) -> dict[str, Any]:
        t0 = time.monotonic()
        p = subprocess.Popen(list(command), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, start_new_session=True, env=env)
        try:
            out, err = p.communicate(json.dumps(probe.spec), timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)     # its own session: the child and anything it started
            p.communicate()
            return {"outcome": "hang", "error": f"no answer within {timeout:g}s (killed)", "seconds": time.monotonic() - t0}
        for line in reversed(out.strip().splitlines()):
            try:
                res = json.loads(line)
            except ValueError:
                continue
            if isinstance(res, dict) and "outcome" in res:
                res["seconds"] = time.monotonic() - t0
                return res
        tail = " ".join((err or "").strip().splitlines()[-3:])[-600:]
        return {"outcome": "error", "error": f"probe process exited {p.returncode}: {tail}",
                "seconds": time.monotonic() - t0}

    return run


def run_probes(probes: list[Probe], runner: Runner, *, jobs: int = 4, build_timeout: float = 420.0,
               probe_timeout: float = 90.0, deadline: Optional[float] = None,
               progress: Callable[[str], None] = lambda s: None) -> dict[str, dict[str, Any]]:
    """Results by probe id (skipped probes included, with their reason)."""
    start = time.monotonic()
    results: dict[str, dict[str, Any]] = {}
    for p in probes:
        if p.skip:
            results[p.id] = {"outcome": "skipped", "error": p.skip, "seconds": 0.0}
    todo = [p for p in probes if not p.skip]
    first: dict[str, Probe] = {}
    for p in todo:
        first.setdefault(p.module, p)
    builds = list(first.values())
    rest = [p for p in todo if first[p.module] is not p]

    def one(p: Probe, limit: float, label: str, n: int, total: int) -> None:
        if deadline is not None and time.monotonic() - start > deadline:
            results[p.id] = {"outcome": "skipped", "error": "time budget spent before this probe started", "seconds": 0.0}
            return
        res = runner(p, limit)
        results[p.id] = res
        progress(f"[{label} {n}/{total}] {res.get('seconds', 0.0):6.1f}s {res['outcome']:<7} {p.id} {p.backend}/{p.phase} "
                 f"{p.call}" + (f"  module {p.module}" if label == "build" else ""))

    for label, batch, limit in (("build", builds, build_timeout), ("probe", rest, probe_timeout)):
        if not batch:
            continue
        progress(f"{label}: {len(batch)} probe(s), {jobs} at a time, limit {limit:g}s each")
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            list(pool.map(lambda a: one(a[1], limit, label, a[0] + 1, len(batch)), enumerate(batch)))
    return results
