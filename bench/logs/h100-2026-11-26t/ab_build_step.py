"""Issue 41, development machine: build_step of a base commit against this tree's, in one process, interleaved
(30 rounds of 40 calls each per shape; the base's host_metadata / host_native / metadata modules loaded beside
this tree's, its host_step.c built from its own source), fa2 plan on a simulated H100, bench/general_step_host.py's
shapes on the CPU.

    git worktree add /tmp/base 25be913
    .venv/bin/python bench/logs/h100-2026-11-26t/ab_build_step.py /tmp/base [--ht]
"""
import sys, time, statistics, importlib.util
BASE = sys.argv[1]
sys.path.insert(0, "bench"); sys.path.insert(0, ".")
import general_step_host as g
import torch
import attnplan.adapter.metadata as new_md
from attnplan.adapter.host_metadata import HostStaging
from attnplan.policy import AttentionConfig, plan_for, simulated_node
def load(name, path):
    spec = importlib.util.spec_from_file_location(f"attnplan.adapter.{name}", path)
    m = importlib.util.module_from_spec(spec); sys.modules[spec.name] = m; spec.loader.exec_module(m); return m
ohn = load("host_native_old", f"{BASE}/attnplan/adapter/host_native.py")
ohm = load("host_metadata_old", f"{BASE}/attnplan/adapter/host_metadata.py"); ohm.host_native = ohn
omd = load("metadata_old", f"{BASE}/attnplan/adapter/metadata.py"); omd.from_host = ohm.from_host
print("base host_step.c:", ohn.status()["compiled"])
torch.set_num_threads(1)
ans = plan_for(AttentionConfig(head_dim=128, num_qo_heads=32, num_kv_heads=8, attention_backend="fa2"), simulated_node("H100"), engine="flashinfer")
plan = ans.plan; page = plan.kv_cache.page_size
ht = "--ht" in sys.argv
print("| step | base build_step us | this tree | ratio |\n|---|---|---|---|")
for what, d, p in g.SHAPES:
    inp = g.make_input(d, p, page, host_table=ht)
    res = {"old": [], "new": []}
    fns = {"old": (omd.build_step, ohm.HostStaging("cpu")), "new": (new_md.build_step, HostStaging("cpu"))}
    for r in range(30):
        for k, (fn, st) in fns.items():
            t0 = time.perf_counter()
            for _ in range(40): fn(plan, inp, st)
            res[k].append((time.perf_counter() - t0) / 40 * 1e6)
    o, n = statistics.median(res["old"]), statistics.median(res["new"])
    print(f"| {what} | {o:.1f} | {n:.1f} | {n / o:.2f} |")
