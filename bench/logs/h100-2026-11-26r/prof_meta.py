# Issue 41, general steps: where the step metadata's host time goes on the H100 machine's host (no FlashInfer
# module needed): build_step's median per shape, with and without the host block table, then cProfile of
# 300 calls each (tottime, the top 22), device tensors on the GPU.
import cProfile, pstats, io, sys, time, dataclasses
sys.path.insert(0, "bench")
import torch
from decode_steps import GENERAL_SHAPES
from attnplan.adapter import StepInput, build_step
from attnplan.adapter.host_metadata import HostStaging
from attnplan.policy import AttentionConfig, plan_for, simulated_node

plan = plan_for(AttentionConfig(head_dim=128, num_qo_heads=32, num_kv_heads=8, attention_backend="fa2"),
                simulated_node("H100"), engine="flashinfer").plan
page = plan.kv_cache.page_size
staging = HostStaging("cuda")
def step(inp):
    s = build_step(plan, inp, staging); staging.release(s.extra.get("staging_slot", -1)); return s
ins = []
for kind, dec, pre in GENERAL_SHAPES:
    q = [1] * len(dec) + pre; seq = dec + pre
    width = max((x + page - 1) // page for x in seq)
    table = torch.randperm(len(seq) * width, device="cuda", dtype=torch.int32).view(len(seq), width)
    sc = torch.tensor(seq, dtype=torch.int32)
    inp = StepInput(q, sc.cuda(), table, len(dec), seq_lens_cpu=sc)
    ins.append((f"{kind} {len(dec)}+{len(pre)}", inp, dataclasses.replace(inp, block_table_cpu=table.cpu())))
for name, a, b in ins:
    for _ in range(20):
        step(a); step(b)
    ts = {0: [], 1: []}
    for _ in range(200):
        for k, inp in ((0, a), (1, b)):
            torch.cuda.synchronize(); t0 = time.perf_counter(); step(inp); ts[k].append(time.perf_counter() - t0)
    med = {k: sorted(v)[100] * 1e6 for k, v in ts.items()}
    print(f"{name}: build_step {med[0]:.0f} us, with the host table {med[1]:.0f} us", flush=True)
for label, k in (("device table", 1), ("host table", 2)):
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(50):
        for t in ins:
            step(t[k])
    pr.disable()
    out = io.StringIO(); pstats.Stats(pr, stream=out).sort_stats("tottime").print_stats(22)
    print(f"=== cProfile, {label}, 50 x 6 shapes ===\n" + "\n".join(out.getvalue().splitlines()[:50]), flush=True)
