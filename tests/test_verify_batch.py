"""One process per JIT module (runner.run_modules + batch_subprocess_runner), against a stand-in
child that behaves as the real one does: one JSON line per probe, stop after an error; and the
real child's --batch loop on the CPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time

from attnplan.verify.generate import Probe
from attnplan.verify.runner import ProcessTable, batch_subprocess_runner, module_order, run_modules

# Stands in for `python -m attnplan.verify.child --batch`: each spec says how its probe behaves.
FAKE = textwrap.dedent("""\
    import json, os, sys, time
    for line in sys.stdin.read().splitlines():
        spec = json.loads(line)
        how = spec["how"]
        if how == "crash":
            os._exit(3)
        if how == "hang":
            time.sleep(60)
        if how == "slow-ok":
            time.sleep(1.0)
            how = "ok"
        if how == "build-error":
            print(json.dumps({"outcome": "error", "error": "RuntimeError: Ninja build failed: nvcc"}), flush=True)
            break
        if how == "error":
            print(json.dumps({"outcome": "error", "error": "RuntimeError: CUDA error: illegal memory access"}), flush=True)
            break
        print("a line that is not a result", flush=True)
        print(json.dumps({"outcome": how, "pid": os.getpid()}), flush=True)
    """)


def _probe(i: int, module: str, how: str, backend: str = "fa2", call: str = "paged_decode") -> Probe:
    return Probe(id=f"p{i:02d}", backend=backend, phase="decode", call=call, config={}, refused_by=(),
                 spec={"how": how}, module=module)


def _run(tmp_path, probes, **kw):
    script = tmp_path / "fake_child.py"
    script.write_text(FAKE)
    table = ProcessTable()
    runner = batch_subprocess_runner((sys.executable, str(script)), table=table)
    seen: list[str] = []
    lock = threading.Lock()

    def on_result(p, r):
        with lock:
            seen.append(p.id)

    res = run_modules(probes, runner, jobs=kw.pop("jobs", 2), on_result=on_result, **kw)
    return res, seen, table


def test_a_modules_probes_share_one_process(tmp_path):
    probes = [_probe(i, "m1", "ok") for i in range(4)] + [_probe(10 + i, "m2", "wrong") for i in range(3)]
    res, seen, table = _run(tmp_path, probes)
    assert sorted(seen) == sorted(p.id for p in probes)
    assert len({res[p.id]["pid"] for p in probes[:4]}) == 1
    assert len({res[p.id]["pid"] for p in probes[4:]}) == 1
    assert res["p10"]["outcome"] == "wrong"
    assert table.kill_all() == 0                    # nothing left running


def test_a_crash_or_an_error_is_that_probes_result_and_the_rest_run_in_a_fresh_process(tmp_path):
    probes = [_probe(0, "m", "ok"), _probe(1, "m", "crash"), _probe(2, "m", "ok"), _probe(3, "m", "error"),
              _probe(4, "m", "ok")]
    res, _, _ = _run(tmp_path, probes)
    assert res["p01"]["outcome"] == "error" and "exited 3" in res["p01"]["error"]
    assert res["p03"]["outcome"] == "error" and "illegal memory access" in res["p03"]["error"]
    assert res["p00"]["outcome"] == res["p02"]["outcome"] == res["p04"]["outcome"] == "ok"
    assert len({res["p00"]["pid"], res["p02"]["pid"], res["p04"]["pid"]}) == 3


def test_a_hang_is_killed_at_its_limit_and_a_failed_build_is_inherited_unrun(tmp_path):
    probes = [_probe(0, "a", "ok"), _probe(1, "a", "hang"), _probe(2, "a", "ok"),
              _probe(3, "b", "build-error"), _probe(4, "b", "ok"), _probe(5, "b", "ok"),
              _probe(6, "c", "hang"), _probe(7, "c", "ok")]
    res, _, _ = _run(tmp_path, probes, build_timeout=5.0, probe_timeout=1.5)
    assert res["p01"]["outcome"] == "hang" and res["p02"]["outcome"] == "ok"
    assert res["p03"]["outcome"] == "error"
    for pid in ("p04", "p05"):
        assert res[pid]["outcome"] == "error" and "p03" in res[pid]["error"] and "pid" not in res[pid]
    assert res["p06"]["outcome"] == "build-timeout"                 # first probe of c: the build limit
    assert res["p07"]["outcome"] == "build-timeout" and "p06" in res["p07"]["error"]


def test_a_killed_process_s_end_of_output_never_reaches_the_next_process(tmp_path, monkeypatch):
    # Each process's output is read by a thread of its own. Under load that thread sees the killed
    # process's end of output late - after the runner started the next process for the rest of the
    # module; it must end its own queue, not the new one (a late binding did: the next probe, still
    # running, was recorded as "probe process exited 0" - seen with two suites on 2 cores). The end of
    # every process's output is held back 0.3 s here, and the next probe answers after 1 s.
    class SlowEnd:
        def __init__(self, f):
            self._f = f

        def __iter__(self):
            yield from self._f
            time.sleep(0.3)

    class Popen(subprocess.Popen):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            self.stdout = SlowEnd(self.stdout)

    import attnplan.verify.runner as runner

    monkeypatch.setattr(runner.subprocess, "Popen", Popen)
    probes = [_probe(0, "a", "ok"), _probe(1, "a", "hang"), _probe(2, "a", "slow-ok"), _probe(3, "a", "ok")]
    res, _, _ = _run(tmp_path, probes, build_timeout=5.0, probe_timeout=2.0)
    assert [res[p.id]["outcome"] for p in probes] == ["ok", "hang", "ok", "ok"], res
    assert res["p02"]["pid"] == res["p03"]["pid"] != res["p00"]["pid"]


def test_past_the_deadline_no_module_starts(tmp_path):
    probes = [_probe(0, "a", "ok"), _probe(1, "b", "ok")]
    res, _, _ = _run(tmp_path, probes, deadline=-1.0)
    assert {r["outcome"] for r in res.values()} == {"skipped"}


def test_modules_are_ordered_round_robin_over_backend_and_call():
    probes = ([_probe(i, f"x{i}", "ok", "xqa", "xqa_decode") for i in range(3)]
              + [_probe(10 + i, f"f{i}", "ok", "fa3", "paged_prefill") for i in range(2)])
    order = [g[0].backend for g in module_order(probes)]
    assert order == ["xqa", "fa3", "xqa", "fa3", "xqa"]


def test_the_real_child_batch_answers_each_line_and_stops_after_an_error():
    # The CPU path of calls.py: a spec the child cannot build inputs for is an error (and ends the batch).
    specs = [{"call": "no-such-call", "seed": 0, "tolerance": 0.1}] * 2
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    out = subprocess.run([sys.executable, "-m", "attnplan.verify.child", "--batch"],
                         input="".join(json.dumps(s) + "\n" for s in specs), capture_output=True, text=True,
                         timeout=120, env=env)
    lines = [json.loads(x) for x in out.stdout.splitlines() if x.startswith("{")]
    assert len(lines) == 1 and lines[0]["outcome"] == "error"


def test_a_probe_killed_because_the_run_stops_gets_no_result(tmp_path):
    script = tmp_path / "fake_child.py"
    script.write_text(FAKE)
    table = ProcessTable()
    runner = batch_subprocess_runner((sys.executable, str(script)), table=table)
    got = []
    t = threading.Thread(target=runner, args=([_probe(0, "m", "ok"), _probe(1, "m", "hang")], 30.0, 30.0,
                                              lambda p, r: got.append((p.id, r["outcome"]))))
    t.start()
    import time
    end = time.monotonic() + 20
    while not got and time.monotonic() < end:
        time.sleep(0.05)
    assert table.kill_all(grace=0.5) == 1
    t.join(10)
    assert got == [("p00", "ok")]                 # p01 was running when the run stopped: not an error


def test_a_stop_also_ends_the_per_probe_runners_processes(tmp_path):
    # --isolate runs subprocess_runner: its processes are in the same table, so SIGTERM ends them too.
    import time

    from attnplan.verify.runner import subprocess_runner

    script = tmp_path / "sleeper.py"
    script.write_text("import time\ntime.sleep(60)\n")
    table = ProcessTable()
    run = subprocess_runner((sys.executable, str(script)), table=table)
    got = []
    t = threading.Thread(target=lambda: got.append(run(_probe(0, "m", "ok"), 60.0)))
    t.start()
    end = time.monotonic() + 20
    while table.kill_all(grace=0.5) == 0 and time.monotonic() < end:
        table.stopping.clear()
        time.sleep(0.05)
    t.join(10)
    assert not t.is_alive() and got and got[0]["outcome"] == "error"


def test_modules_flashinfer_names_alike_never_run_at_once_the_others_do(tmp_path):
    """The 2026-11-25 H100 sweep built fa3 sink modules of head 64, 128 and 256 at once; FlashInfer
    names them alike (backends.yaml calls.sink.jit_name), so they raced in one build directory and
    the sweep read the races as kernel failures. The runner holds a name while its module runs."""
    live: dict[str, int] = {}
    most: dict[str, int] = {}
    lock = threading.Lock()
    order: list[str] = []

    def runner(group, build_timeout, probe_timeout, report):
        name = group[0].spec.get("jit_name") or group[0].module
        with lock:
            live[name] = live.get(name, 0) + 1
            live["*"] = live.get("*", 0) + 1
            for k in (name, "*"):
                most[k] = max(most.get(k, 0), live[k])
            order.append(group[0].module)
        time.sleep(0.2)
        with lock:
            live[name] -= 1
            live["*"] -= 1
        for p in group:
            report(p, {"outcome": "ok"})

    def probe(i, module, name):
        return Probe(id=f"p{i:02d}", backend="fa3", phase="prefill", call="sink", config={}, refused_by=(),
                     spec={"jit_name": name}, module=module)

    same = [probe(i, f"sink:hd{64 * (i + 1)}", "attention_sink:fa3:dtype_q=bfloat16:sliding_window=True") for i in range(3)]
    apart = [probe(10 + i, f"prefill:{i}", None) for i in range(3)]
    res = run_modules(same + apart, runner, jobs=4)
    assert all(r["outcome"] == "ok" for r in res.values()) and len(res) == 6
    assert most["attention_sink:fa3:dtype_q=bfloat16:sliding_window=True"] == 1   # one at a time
    assert most["*"] >= 3                                                       # the rest alongside
    assert sorted(order) == sorted(p.module for p in same + apart)
