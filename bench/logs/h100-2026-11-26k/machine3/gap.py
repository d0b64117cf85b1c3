# Issue 41: is the general step's plan_step - (metadata + FlashInfer plans) gap the stream? plan_step's parts timed
# with and without a synchronize between build_step and the backend's plan (helper's hypothesis).
import sys, time, json
sys.path.insert(0, "bench"); sys.path.insert(0, "tests/gpu")
import torch
from decode_steps import executor_for, GENERAL_SHAPES, host_median
from attnplan.adapter import StepInput
from attnplan.adapter.metadata import build_step
ex = executor_for("fa2"); page = ex.plan.kv_cache.page_size
for kind, dec, pre in GENERAL_SHAPES:
    q = [1] * len(dec) + pre; seq = dec + pre
    width = max((s + page - 1) // page for s in seq)
    table = torch.randperm(len(seq) * width, device="cuda", dtype=torch.int32).view(len(seq), width)
    sc = torch.tensor(seq, dtype=torch.int32)
    inp = StepInput(q, sc.cuda(), table, len(dec), seq_lens_cpu=sc)
    def meta():
        s = build_step(ex.plan, inp, ex._staging, ex._layouts); ex._staging.release(s.extra.get("staging_slot", -1)); return s
    def both(sync):
        def f():
            s = build_step(ex.plan, inp, ex._staging, ex._layouts)
            if sync: torch.cuda.synchronize()
            t0 = time.perf_counter(); ex.backend.plan_step(s); dt = time.perf_counter() - t0
            ex._staging.release(s.extra.get("staging_slot", -1)); return dt
        return f
    for _ in range(20): ex.plan_step(inp)
    r = dict(kind=kind, decodes=len(dec), prefills=len(pre), metadata=host_median(meta), plan_step=host_median(lambda: ex.plan_step(inp)))
    for sync in (False, True):
        f = both(sync); ts = []
        for _ in range(60):
            torch.cuda.synchronize(); ts.append(f())
        ts.sort(); r[f"backend_plan_after_meta{'_synced' if sync else ''}"] = ts[30] * 1e6
    print(json.dumps({k: round(v, 1) if isinstance(v, float) else v for k, v in r.items()}), flush=True)
