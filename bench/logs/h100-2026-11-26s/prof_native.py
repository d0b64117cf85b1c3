# Issue 41, general steps: the step metadata's host time on this host with host_step.c (host_native.py) and
# with the numpy path, timed in turn call by call (build_step median of 300 each, after warm-up), device
# tensors on the GPU, with and without the engine's host block table; then cProfile of the native path.
import cProfile, dataclasses, io, pstats, sys, time
sys.path.insert(0, "bench")
import torch
from decode_steps import GENERAL_SHAPES
from attnplan.adapter import StepInput, build_step, host_native
from attnplan.adapter.host_metadata import HostStaging
from attnplan.policy import AttentionConfig, plan_for, simulated_node

print("host_step.c:", host_native.status(), flush=True)
lib = host_native.library()
plan = plan_for(AttentionConfig(head_dim=128, num_qo_heads=32, num_kv_heads=8, attention_backend="fa2"),
                simulated_node("H100"), engine="flashinfer").plan
page = plan.kv_cache.page_size
staging = HostStaging("cuda")


def step(inp, native=True):
    host_native._state["lib"] = lib if native else None
    s = build_step(plan, inp, staging)
    staging.release(s.extra.get("staging_slot", -1))
    host_native._state["lib"] = lib
    return s


ins = []
for kind, dec, pre in GENERAL_SHAPES:
    q = [1] * len(dec) + pre; seq = dec + pre
    width = max((x + page - 1) // page for x in seq)
    table = torch.randperm(len(seq) * width, device="cuda", dtype=torch.int32).view(len(seq), width)
    sc = torch.tensor(seq, dtype=torch.int32)
    inp = StepInput(q, sc.cuda(), table, len(dec), seq_lens_cpu=sc)
    ins.append((f"{kind} {len(dec)}+{len(pre)}", inp, dataclasses.replace(inp, block_table_cpu=table.cpu())))
print("| step | native | numpy | native, host table | numpy, host table |\n|---|---|---|---|---|")
for name, a, b in ins:
    fns = [lambda: step(a), lambda: step(a, False), lambda: step(b), lambda: step(b, False)]
    for _ in range(20):
        for f in fns:
            f()
    ts = [[] for _ in fns]
    for _ in range(300):
        for k, f in enumerate(fns):
            torch.cuda.synchronize(); t0 = time.perf_counter(); f(); ts[k].append(time.perf_counter() - t0)
    med = [sorted(v)[150] * 1e6 for v in ts]
    print(f"| {name} | " + " | ".join(f"{m:.0f}" for m in med) + " |", flush=True)
pr = cProfile.Profile()
pr.enable()
for _ in range(50):
    for t in ins:
        step(t[1])
pr.disable()
s = io.StringIO()
pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(22)
print("=== cProfile, native, device table, 50 x 6 shapes ===\n" + s.getvalue())
