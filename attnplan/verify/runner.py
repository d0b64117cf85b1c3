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


class ProcessTable:
    """The probe processes alive now, so that a run stopped from outside (SIGTERM at the end of a
    lease) takes them down with it instead of leaving builds running on the machine."""

    def __init__(self) -> None:
        self._live: set[subprocess.Popen] = set()
        self._lock = threading.Lock()
        self.stopping = threading.Event()     # set by kill_all: a process ending now was ended by us

    def add(self, p: subprocess.Popen) -> None:
        with self._lock:
            self._live.add(p)

    def discard(self, p: subprocess.Popen) -> None:
        with self._lock:
            self._live.discard(p)

    def kill_all(self, grace: float = 3.0) -> int:
        """SIGTERM first: ninja, stopped so, removes the half-written outputs of the commands it was
        running (a SIGKILLed link left a truncated .so that the next call loaded: 'symbol lookup
        error', bench/logs/h100-2026-11-24d); then SIGKILL whatever is left."""
        self.stopping.set()
        with self._lock:
            live = list(self._live)
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for p in live:
                try:
                    os.killpg(p.pid, sig)
                except OSError:
                    pass
            if sig == signal.SIGTERM:
                end = time.monotonic() + grace
                while time.monotonic() < end and any(p.poll() is None for p in live):
                    time.sleep(0.1)
        return len(live)


PROCESSES = ProcessTable()


def _cpu(res: dict[str, Any]) -> str:
    return f"; {res['cpu_s']:.0f} CPU-s" if isinstance(res.get("cpu_s"), (int, float)) else ""


def cpu_summary(results: dict[str, dict[str, Any]], cores: Optional[int]) -> Optional[str]:
    """What the run's probe processes cost in CPU (child.cpu_seconds: their JIT builds' ninja and
    nvcc included), and the least wall time that is on ``cores`` cores. A sweep is compile-bound
    (bench/RESULTS.md): this says whether the next one can fit a lease, before it is tried."""
    spent = [r["cpu_s"] for r in results.values() if isinstance(r.get("cpu_s"), (int, float))]
    if not spent:
        return None
    total = sum(spent)
    line = f"probe processes used {total:,.0f} CPU-s ({len(spent)} probe(s), JIT builds included)"
    if cores:
        line += f": at least {total / cores / 60:.1f} min on this machine's {cores} cores"
    return line


def _result(line: str) -> Optional[dict[str, Any]]:
    """A probe's result line (a JSON object with an outcome), or None for any other output."""
    try:
        res = json.loads(line)
    except ValueError:
        return None
    return res if isinstance(res, dict) and "outcome" in res else None


def subprocess_runner(command: Sequence[str] = CHILD, env: Optional[dict[str, str]] = None,
                      table: ProcessTable = PROCESSES) -> Runner:
    """Each probe in a fresh process running ``command`` (spec on stdin, one JSON line out)."""

    def run(probe: Probe, timeout: float) -> dict[str, Any]:
        t0 = time.monotonic()
        p = subprocess.Popen(list(command), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, start_new_session=True, env=env)
        table.add(p)
        try:
            out, err = p.communicate(json.dumps(probe.spec), timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)     # its own session: the child and anything it started
            p.communicate()
            return {"outcome": "hang", "error": f"no answer within {timeout:g}s (killed)", "seconds": time.monotonic() - t0}
        finally:
            table.discard(p)
        for line in reversed(out.strip().splitlines()):
            res = _result(line)
            if res is not None:
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


def _skipped(probes: list[Probe]) -> dict[str, dict[str, Any]]:
    """The results of probes the generator marked unrunnable here, with its reason."""
    return {p.id: {"outcome": "skipped", "error": p.skip, "seconds": 0.0} for p in probes if p.skip}


def _time_spent() -> dict[str, Any]:
    return {"outcome": "skipped", "error": "time budget spent before this probe started", "seconds": 0.0}


def _build_timeout(limit: float) -> dict[str, Any]:
    # A module's first probe compiles it and then runs it under one limit: running out of it there
    # says the build was slow (fa3 modules take minutes), not that the kernel hangs. The probe is
    # untested, never a hang verdict; a later run with a longer --build-timeout (or a warm JIT
    # cache) settles it.
    return {"outcome": "build-timeout", "error": f"no answer within the {limit:g}s build limit (JIT build and run together)"}


def _build_failed(res: dict[str, Any]) -> bool:
    """Whether a module's first probe says the module itself is unusable (its followers inherit it).
    A CUDA error at run time is the probe's own (PyTorch's text for it says "Compile with
    `TORCH_USE_CUDA_DSA`", which is no build failure): the module's other probes still run."""
    err = str(res.get("error") or "").lower().replace("compile with `torch_use_cuda_dsa`", "")
    return res["outcome"] in ("hang", "build-timeout") or (
        res["outcome"] == "error" and any(w in err for w in _BUILD_FAILURE))


def _inherited(first: Probe, res: dict[str, Any]) -> dict[str, Any]:
    return {"outcome": res["outcome"], "seconds": 0.0,
            "error": f"its JIT module's first probe {first.id} ended so: {res.get('error')}"}


class _Names:
    """FlashInfer module names in flight (probe spec ``jit_name``; backends.yaml calls.<c>.jit_name):
    a probe of another module under a name in flight waits, since both would use one build
    directory. Not thread-safe: callers hold their own lock."""

    def __init__(self) -> None:
        self.held: dict[str, list[Any]] = {}     # name -> [module, processes]

    def may_start(self, p: Probe) -> bool:
        held = self.held.get(p.spec.get("jit_name") or "")
        return held is None or held[0] == p.module

    def hold(self, p: Probe) -> None:
        name = p.spec.get("jit_name")
        if name:
            self.held.setdefault(name, [p.module, 0])[1] += 1

    def release(self, p: Probe) -> None:
        name = p.spec.get("jit_name")
        if name:
            self.held[name][1] -= 1
            if not self.held[name][1]:
                del self.held[name]


def _in_threads(worker: Callable[[], None], jobs: int) -> None:
    threads = [threading.Thread(target=worker, daemon=True) for _ in range(max(1, jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


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
    results = _skipped(probes)
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
                 f"{p.backend}/{p.phase} {p.call}" + (f"  ({p.module}{_cpu(res)})" if label == "build" else ""))

    def after_build(p: Probe, res: dict[str, Any]) -> None:
        inherited = _build_failed(res)
        for f in followers.get(p.module, []):
            if inherited:
                finish(f, _inherited(p, res), "same")
            else:
                state["seq"] += 1
                heapq.heappush(heap, (0, state["seq"], "probe", f))

    names = _Names()

    def take() -> Optional[tuple[int, int, str, Probe]]:
        while True:
            if not heap and not state["in_flight"]:
                lock.notify_all()
                return None
            passed = []
            picked = None
            while heap:
                item = heapq.heappop(heap)
                if names.may_start(item[3]):
                    picked = item
                    break
                passed.append(item)
            for item in passed:
                heapq.heappush(heap, item)
            if picked is not None:
                return picked
            lock.wait()

    def worker() -> None:
        while True:
            with lock:
                item = take()
                if item is None:
                    return
                _prio, _seq, label, p = item
                late = deadline is not None and time.monotonic() - start > deadline
                if late:
                    finish(p, _time_spent(), label)
                    if label == "build":
                        for f in followers.get(p.module, []):
                            finish(f, _time_spent(), "probe")
                    continue
                state["in_flight"] += 1
                names.hold(p)
            res = runner(p, build_timeout if label == "build" else probe_timeout)
            if label == "build" and res.get("outcome") == "hang":
                res = {**res, **_build_timeout(build_timeout)}
            with lock:
                state["in_flight"] -= 1
                names.release(p)
                finish(p, res, label)
                if label == "build":
                    after_build(p, res)
                lock.notify_all()

    _in_threads(worker, jobs)
    return results


# -- one process per JIT module ------------------------------------------------------------------
# A probe process spends ~15 s importing torch and FlashInfer and loading its module before a
# kernel runs for a fraction of a second (bench/logs/h100-2026-11-24b: 14-23 s per probe), so a
# sweep of 843 probes spent most of its lease starting processes. A module's probes share one
# process instead; isolation is kept where it matters: a probe that errors, crashes or outlives
# its limit ends that process, and the module's remaining probes go on in a fresh one.
Report = Callable[[Probe, dict[str, Any]], None]
BatchRunner = Callable[[list[Probe], float, float, Report], None]
BATCH_CHILD = (sys.executable, "-m", "attnplan.verify.child", "--batch")




def batch_subprocess_runner(command: Sequence[str] = BATCH_CHILD, env: Optional[dict[str, str]] = None,
                            table: ProcessTable = PROCESSES) -> BatchRunner:
    """A module's probes in one process running ``command`` (JSON-line specs on stdin, one JSON
    line out per probe, in order). The first probe's limit is the build limit (it compiles the
    module), every later one the probe limit, each counted from the previous answer. The child
    stops after a probe that errors (a CUDA error poisons its context); a crash or a probe past its
    limit is that probe's result. Either way the rest go on in a fresh process."""
    import queue
    import tempfile

    def run(probes: list[Probe], build_timeout: float, probe_timeout: float, report: Report) -> None:
        todo = list(probes)
        first = True
        while todo:
            with tempfile.TemporaryFile(mode="w+") as errf:
                p = subprocess.Popen(list(command), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errf,
                                     text=True, start_new_session=True, env=env)
                table.add(p)
                lines: "queue.Queue[Optional[str]]" = queue.Queue()

                # This process's output and queue, bound now: the thread may see the end of the output
                # after the loop moved on to a fresh process (and rebound p and lines).
                threading.Thread(target=_pump, args=(p.stdout, lines), daemon=True).start()
                try:
                    p.stdin.write("".join(json.dumps(q.spec) + "\n" for q in todo))   # type: ignore[union-attr]
                    p.stdin.close()                                                  # type: ignore[union-attr]
                except OSError:
                    pass
                t0 = time.monotonic()
                done = 0
                try:
                    while done < len(todo):
                        probe = todo[done]
                        limit = build_timeout if first else probe_timeout
                        res = _next_result(lines, limit)
                        if (res is None or res == "eof") and table.stopping.is_set():
                            return           # the run is stopping: killed by us, not the probe's result
                        if res is None or res == "eof":
                            if res is None:
                                os.killpg(p.pid, signal.SIGKILL)
                            p.wait()
                            if res is None:
                                res = (_build_timeout(limit) if first
                                       else {"outcome": "hang", "error": f"no answer within {limit:g}s (killed)"})
                            else:
                                errf.seek(0)
                                tail = " ".join(errf.read().strip().splitlines()[-3:])[-600:]
                                res = {"outcome": "error", "error": f"probe process exited {p.returncode}: {tail}"}
                        res["seconds"] = time.monotonic() - t0
                        t0 = time.monotonic()
                        report(probe, res)
                        done += 1
                        was_first, first = first, False
                        if was_first and _build_failed(res):
                            for f in todo[done:]:
                                report(f, _inherited(probe, res))
                            return
                        if res["outcome"] not in ("ok", "wrong"):
                            break                      # the process is gone or stopping: a fresh one for the rest
                finally:
                    if p.poll() is None:
                        try:
                            os.killpg(p.pid, signal.SIGKILL)
                        except OSError:
                            pass
                        p.wait()
                    table.discard(p)
                todo = todo[done:]

    return run


def _pump(out: Any, lines: Any) -> None:
    """One process's output lines into its own queue, then None (its end)."""
    for line in out:
        lines.put(line)
    lines.put(None)


def _next_result(lines: Any, limit: float) -> Any:
    """The next probe result line; None past ``limit``; "eof" when the process ended first."""
    import queue

    end = time.monotonic() + limit
    while True:
        try:
            line = lines.get(timeout=max(0.0, end - time.monotonic()))
        except queue.Empty:
            return None
        if line is None:
            return "eof"
        res = _result(line)
        if res is not None:
            return res


def module_order(probes: list[Probe]) -> list[list[Probe]]:
    """The probes grouped by JIT module, the groups round-robin over (backend, call): every kernel
    gets its first module early (a run cut short still reaches each), and a kind with many slow
    builds is spread over the run instead of holding every process at once."""
    groups: dict[str, list[Probe]] = {}
    for p in probes:
        groups.setdefault(p.module, []).append(p)
    by_call: dict[tuple[str, str], list[list[Probe]]] = {}
    for g in groups.values():
        by_call.setdefault((g[0].backend, g[0].call), []).append(g)
    out: list[list[Probe]] = []
    queues = list(by_call.values())
    while any(queues):
        for q in queues:
            if q:
                out.append(q.pop(0))
    return out


def run_modules(probes: list[Probe], runner: BatchRunner, *, jobs: int = 4, build_timeout: float = 420.0,
                probe_timeout: float = 90.0, deadline: Optional[float] = None,
                progress: Callable[[str], None] = lambda s: None,
                on_result: Callable[[Probe, dict[str, Any]], None] = lambda p, r: None) -> dict[str, dict[str, Any]]:
    """As ``run_probes``, with each JIT module's probes in one process (``batch_subprocess_runner``).
    A module whose first probe fails to build or runs out of the build limit gives that result to
    its other probes without running them. ``deadline``: no module starts after it (its probes are
    recorded as skipped)."""
    start = time.monotonic()
    results = _skipped(probes)
    groups = module_order([p for p in probes if not p.skip])
    total = sum(len(g) for g in groups)
    lock = threading.Lock()
    free = threading.Condition(lock)
    state = {"done": 0}
    pending = list(groups)
    names = _Names()
    started: set[str] = set()
    progress(f"{len(groups)} JIT module(s), {total} probe(s), one process per module; {jobs} at a time; "
             f"limits: build {build_timeout:g}s, probe {probe_timeout:g}s")

    def finish(p: Probe, res: dict[str, Any]) -> None:
        with lock:
            first = p.module not in started
            started.add(p.module)
            results[p.id] = res
            on_result(p, res)
            state["done"] += 1
            progress(f"[{state['done']}/{total}] {'build' if first else 'probe':<5} {res.get('seconds', 0.0):6.1f}s "
                     f"{res['outcome']:<7} {p.id} {p.backend}/{p.phase} {p.call}" + (f"  ({p.module}{_cpu(res)})" if first else ""))

    def take() -> Optional[list[Probe]]:
        """The next module in order whose FlashInfer name no module in flight has: two modules
        FlashInfer names alike (backends.yaml calls.<c>.jit_name) share one build directory, so
        one is built and run only after the other's process has ended."""
        with free:
            while pending:
                for i, g in enumerate(pending):
                    if names.may_start(g[0]):
                        names.hold(g[0])
                        return pending.pop(i)
                free.wait()
            return None

    def worker() -> None:
        while True:
            g = take()
            if g is None:
                return
            try:
                if deadline is not None and time.monotonic() - start > deadline:
                    for p in g:
                        finish(p, _time_spent())
                    continue
                runner(g, build_timeout, probe_timeout, finish)
            finally:
                with free:
                    names.release(g[0])
                    free.notify_all()

    _in_threads(worker, jobs)
    return results
