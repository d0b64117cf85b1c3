# Issue 41, general steps: where plan_step's host time goes on this host, FlashInfer's real wrappers with the
# scheduler replay learned (bench/decode_steps.py's fa2 executor and shapes): cProfile of 50 x 6 steps by own
# time, then the steps' host medians (host_step.c's path, device block table).
import cProfile, io, pstats, sys, time
sys.path.insert(0, "bench")
import torch
from decode_steps import GENERAL_SHAPES, executor_for
from attnplan.adapter import StepInput

ex = executor_for("fa2")
page = ex.plan.kv_cache.page_size
ins = []
for kind, dec, pre in GENERAL_SHAPES:
    q = [1] * len(dec) + pre; seq = dec + pre
    width = max((x + page - 1) // page for x in seq)
    table = torch.randperm(len(seq) * width, device="cuda", dtype=torch.int32).view(len(seq), width)
    sc = torch.tensor(seq, dtype=torch.int32)
    ins.append((f"{kind} {len(dec)}+{len(pre)}", StepInput(q, sc.cuda(), table, len(dec), seq_lens_cpu=sc)))
for _ in range(3):
    for _, inp in ins:
        ex.plan_step(inp)
torch.cuda.synchronize()
print("| step | plan_step median us (200 calls) |\n|---|---|")
for name, inp in ins:
    ts = []
    for _ in range(200):
        torch.cuda.synchronize(); t0 = time.perf_counter(); ex.plan_step(inp); ts.append(time.perf_counter() - t0)
    print(f"| {name} | {sorted(ts)[100] * 1e6:.0f} |", flush=True)
pr = cProfile.Profile()
pr.enable()
for _ in range(50):
    for _, inp in ins:
        ex.plan_step(inp)
pr.disable()
s = io.StringIO()
pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(30)
print("=== cProfile, plan_step, 50 x 6 shapes ===\n" + s.getvalue())
