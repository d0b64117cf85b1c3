"""Run probes in processes of their own, JIT modules first, every one under a time limit.

The first probe of each JIT module (``Probe.module``) runs under the long build limit -
FlashInfer compiles the module inside that probe's process (its file lock keeps two builds of
one module apart) and the probe's result counts - and the modules are built ``jobs`` at a time
(each build's ninja takes MAX_JOBS). As soon as a module is built, its other probes run first,
under the short probe limit. A probe that
outlives its limit is killed with its process group and recorded as ``hang``; the run goes on.
A ``deadline`` (seconds from the start) stops new probes from starting: they are recorded as
skipped, so a lease that ends still leaves a report.

The runner is injected: tests pass a function that stands in for FlashInfer.
"""

from __future__ import annotations

import heapq
import json
import os
import signal
import subprocess
import sys
import threading
import time
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


def build_order(probes: list[Probe]) -> list[Probe]:
    """One probe per JIT module, breadth-first over the rules (each rule's first boundary, then
    each rule's second...), so that a run cut short by its deadline still covers every rule."""
    queues: dict[str, list[Probe]] = {}
    for p in probes:
        for b in p.boundaries:
            queues.setdefault(b.rule, []).append(p)
    order: list[Probe] = []
    seen: set[str] = set()
    while any(queues.values()):
        for rule in list(queues):
            while queues[rule]:
                p = queues[rule].pop(0)
                if p.module not in seen:
                    seen.add(p.module)
                    order.append(p)
                    break
    return order


_BUILD_FAILURE = ("ninja", "nvcc", "compil", "build failed", "static_assert")


def run_probes(probes: list[Probe], runner: Runner, *, jobs: int = 4, build_timeout: float = 420.0,
               probe_timeout: float = 90.0, deadline: Optional[float] = None,
               progress: Callable[[str], None] = lambda s: None,
               on_result: Callable[[Probe, dict[str, Any]], None] = lambda p, r: None) -> dict[str, dict[str, Any]]:
    """Results by probe id (skipped probes included, with their reason).

    The first probe of each JIT module runs under ``build_timeout``; as soon as it finishes, the
    module's other probes go to the front of the queue under ``probe_timeout``. If the first
    probe hung, or failed compiling the module, the others are not run (they would only build it
    again): they carry that result, naming the probe it came from."""
    start = time.monotonic()
    results: dict[str, dict[str, Any]] = {}
    for p in probes:
        if p.skip:
            results[p.id] = {"outcome": "skipped", "error": p.skip, "seconds": 0.0}
    todo = [p for p in probes if not p.skip]
    builds = build_order(todo)
    builds += [p for p in todo if p.module not in {b.module for b in builds}]
    first = {p.module: p for p in builds}
    followers: dict[str, list[Probe]] = {}
    for p in todo:
        if first[p.module] is not p:
            followers.setdefault(p.module, []).append(p)
    heap: list[tuple[int, int, str, Probe]] = [(1, i, "build", p) for i, p in enumerate(builds)]
    heapq.heapify(heap)
    lock = threading.Condition()
    state = {"in_flight": 0, "seq": len(builds), "done": 0}
    total = len(todo)
    progress(f"{len(builds)} JIT module(s) to build, {total} probe(s); {jobs} process(es) at a time; "
             f"limits: build {build_timeout:g}s, probe {probe_timeout:g}s")

    def finish(p: Probe, res: dict[str, Any], label: str) -> None:
        results[p.id] = res
        on_result(p, res)                  # e.g. appended to a file, so a run cut short can resume
        state["done"] += 1
        progress(f"[{state['done']}/{total}] {label:<5} {res.get('seconds', 0.0):6.1f}s {res['outcome']:<7} {p.id} "
                 f"{p.backend}/{p.phase} {p.call}" + (f"  ({p.module})" if label == "build" else ""))

    def after_build(p: Probe, res: dict[str, Any]) -> None:
        err = str(res.get("error") or "").lower()
        inherited = res["outcome"] in ("hang", "build-timeout") or (
            res["outcome"] == "error" and any(w in err for w in _BUILD_FAILURE))
        for f in followers.get(p.module, []):
            if inherited:
                finish(f, {"outcome": res["outcome"], "seconds": 0.0,
                           "error": f"its JIT module's first probe {p.id} ended so: {res.get('error')}"}, "same")
            else:
                state["seq"] += 1
                heapq.heappush(heap, (0, state["seq"], "probe", f))

    def worker() -> None:
        while True:
            with lock:
                while not heap and state["in_flight"]:
                    lock.wait()
                if not heap:
                    lock.notify_all()
                    return
                _prio, _seq, label, p = heapq.heappop(heap)
                late = deadline is not None and time.monotonic() - start > deadline
                if late:
                    finish(p, {"outcome": "skipped", "error": "time budget spent before this probe started",
                               "seconds": 0.0}, label)
                    if label == "build":
                        for f in followers.get(p.module, []):
                            finish(f, {"outcome": "skipped", "error": "time budget spent before this probe started",
                                       "seconds": 0.0}, "probe")
                    continue
                state["in_flight"] += 1
            res = runner(p, build_timeout if label == "build" else probe_timeout)
            if label == "build" and res.get("outcome") == "hang":
                # The module's first probe compiles it and then runs it under one limit: running out
                # of it there says the build was slow (fa3 modules take minutes), not that the kernel
                # hangs. The probe is untested, never a hang verdict; a later run with a longer
                # --build-timeout (or a warm JIT cache) settles it.
                res = {**res, "outcome": "build-timeout",
                       "error": f"no answer within the {build_timeout:g}s build limit (JIT build and run together)"}
            with lock:
                state["in_flight"] -= 1
                finish(p, res, label)
                if label == "build":
                    after_build(p, res)
                lock.notify_all()

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(max(1, jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results
