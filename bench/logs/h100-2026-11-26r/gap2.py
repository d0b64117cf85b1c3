# Note (found afterwards): spy_module wraps the JIT module's plan once more for every shape, so the *_sched columns
# of every shape after the first count the scheduler several times; the first shape's and the whole-plan columns hold.
# Issue 41, general steps: where plan_step's FlashInfer plans lose their time. Per shape (fa2 executor, the
# bench's GENERAL_SHAPES), timed call by call in turn (medians of 60): metadata alone; plan_step; FlashInfer's
# plan with the recorded arguments alone, right after the metadata (same recorded arguments), right after a
# whole plan_step, and with this step's fresh arguments after its metadata (what plan_step does) - each split
# into the scheduler's C++ call and the Python around it (a timing spy on the JIT module's ``plan``).
import sys, time, json, gc
sys.path.insert(0, "bench"); sys.path.insert(0, "tests/gpu")
import torch
from decode_steps import executor_for, GENERAL_SHAPES, recorded_plan
from attnplan.adapter import StepInput
from attnplan.adapter.metadata import build_step

ex = executor_for("fa2"); page = ex.plan.kv_cache.page_size
clock = time.perf_counter
SCHED = [0.0]


def spy_module(w):
    m = w._cached_module
    inner = m.plan
    def timed(*a, **k):
        t0 = clock(); out = inner(*a, **k); SCHED[0] += clock() - t0; return out
    try:
        setattr(m, "plan", timed)
    except Exception as exc:
        print("no spy:", exc); return False
    return True


def med(xs):
    xs = sorted(xs); return xs[len(xs) // 2] * 1e6


for kind, dec, pre in GENERAL_SHAPES:
    q = [1] * len(dec) + pre; seq = dec + pre
    width = max((s + page - 1) // page for s in seq)
    table = torch.randperm(len(seq) * width, device="cuda", dtype=torch.int32).view(len(seq), width)
    sc = torch.tensor(seq, dtype=torch.int32)
    inp = StepInput(q, sc.cuda(), table, len(dec), seq_lens_cpu=sc)
    for _ in range(10):
        ex.plan_step(inp)
    step = ex.plan_step(inp)
    plans = []
    for phase in ("decode", "prefill"):
        w = ex.backend._wrappers[phase]
        if getattr(step, phase) is not None and w is not None:
            a, k = recorded_plan(w, lambda: ex.backend.plan_wrapper(w, getattr(step, phase), phase))
            plans.append((w, a, k))
            spy_module(w)

    def fi():
        for w, a, k in plans:
            w.plan(*a, **k)

    def meta():
        s = build_step(ex.plan, inp, ex._staging, ex._layouts)
        return s

    res = {n: [] for n in ("meta", "plan_step", "fi_alone", "fi_after_meta_recorded", "fi_after_plan_step",
                           "fi_fresh_after_meta")}
    sch = {n: [] for n in res}
    for it in range(65):
        # metadata alone
        torch.cuda.synchronize(); t0 = clock(); s = meta(); res["meta"].append(clock() - t0); sch["meta"].append(0.0)
        ex._staging.release(s.extra.get("staging_slot", -1))
        # plan_step
        torch.cuda.synchronize(); SCHED[0] = 0; t0 = clock(); ex.plan_step(inp); res["plan_step"].append(clock() - t0)
        sch["plan_step"].append(SCHED[0])
        # FlashInfer alone
        torch.cuda.synchronize(); SCHED[0] = 0; t0 = clock(); fi(); res["fi_alone"].append(clock() - t0)
        sch["fi_alone"].append(SCHED[0])
        # after the metadata, the recorded arguments
        torch.cuda.synchronize(); s = meta(); SCHED[0] = 0; t0 = clock(); fi(); res["fi_after_meta_recorded"].append(clock() - t0)
        sch["fi_after_meta_recorded"].append(SCHED[0]); ex._staging.release(s.extra.get("staging_slot", -1))
        # after a whole plan_step
        torch.cuda.synchronize(); ex.plan_step(inp); SCHED[0] = 0; t0 = clock(); fi(); res["fi_after_plan_step"].append(clock() - t0)
        sch["fi_after_plan_step"].append(SCHED[0])
        # this step's own arguments after its metadata (plan_step's backend part)
        torch.cuda.synchronize(); s = meta(); SCHED[0] = 0; t0 = clock(); ex.backend.plan_step(s)
        res["fi_fresh_after_meta"].append(clock() - t0); sch["fi_fresh_after_meta"].append(SCHED[0])
        ex._staging.release(s.extra.get("staging_slot", -1))
    row = dict(kind=kind, decodes=len(dec), prefills=len(pre), phases=[p for p in ("decode", "prefill") if getattr(step, p) is not None],
               wrappers=len(plans))
    for n in res:
        row[n] = round(med(res[n][5:]), 1)
        row[n + "_sched"] = round(med(sch[n][5:]), 1)
    print(json.dumps(row), flush=True)
