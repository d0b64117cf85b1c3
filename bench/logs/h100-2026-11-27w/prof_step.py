"""Where a prefill / mixed plan_step's host time goes on this machine (issue 41): for the six general shapes
(bench/general_step_host.py SHAPES, fa2 plan, page 16, block table on the device), timed in turn call by call
(synchronized before each, 300 rounds): plan_step whole, build_step alone, host_step.c's call through ctypes,
host_torch.cpp's step_views, its step (host_step.c compiled in: both halves in one call) where it has one, the
backend's plan_step over a built step (the learned replay), the scheduler call alone with the replay's bound
arguments, and FlashInfer's whole plans with the same arguments; then cProfile of 2,000
plan_steps of two shapes, by own time. ``python prof_step.py [--reps N] [--profile]``"""
import argparse
import cProfile
import pstats
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]
import torch  # noqa: E402

from decode_steps import executor_for, recorded_plan  # noqa: E402
from general_step_host import SHAPES  # noqa: E402
from xqa_vs_fa2 import host_only_each  # noqa: E402
from attnplan.adapter import StepInput, host_metadata as hm, host_native, host_torch  # noqa: E402
from attnplan.adapter.general_plans import _values, replay_of  # noqa: E402
from attnplan.adapter.metadata import build_step  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--reps", type=int, default=300)
ap.add_argument("--profile", action="store_true")
args = ap.parse_args()
ex = executor_for("fa2")
print(f"host_torch {host_torch.status()['compiled']}, host_step.c {host_native.status()['compiled']}, "
      f"torch {torch.__version__}", flush=True)
page = ex.plan.kv_cache.page_size
inputs = []
for kind, dec, pre in SHAPES:
    q = [1] * len(dec) + pre
    seq = dec + pre
    width = max((s + page - 1) // page for s in seq)
    table = torch.randperm(len(seq) * width, device="cuda", dtype=torch.int32).view(len(seq), width)
    seq_cpu = torch.tensor(seq, dtype=torch.int32)
    inputs.append(StepInput(q, seq_cpu.cuda(), table, len(dec), seq_lens_cpu=seq_cpu))
for _ in range(2):
    for inp in inputs:
        ex.plan_step(inp)
st, lib, views = ex._staging, host_native.library(), ex._staging.views
cols = ["plan_step", "build_step", "ap_step by ctypes", "step_views", "module step (both halves)", "backend.plan_step",
        "scheduler alone", "the replays' fills alone", "FI plans"]
print("| shape | " + " | ".join(cols) + " | replays |\n|" + "---|" * (len(cols) + 2))
for (what, dec, pre), inp in zip(SHAPES, inputs):
    step = ex.plan_step(inp)
    plans, scheds = [], []
    for phase, w in (("decode", ex.backend._decode), ("prefill", ex.backend._prefill)):
        if getattr(step, phase) is not None and w is not None:
            plans.append(recorded_plan(w, lambda: ex.backend.plan_wrapper(w, getattr(step, phase), phase)) + (w,))
            r = replay_of(ex.backend, w)
            if r is not None and r.ready:
                a_ops, k_ops = r._program()[:2]
                b = getattr(step, phase)
                v = _values(b)

                def val(k, x, r=r, v=v):
                    return x if k == 0 else v[x] if k == 1 else r._pick(x, v)
                sa = [val(k, x) for k, x in a_ops]
                sk = {n: val(k, x) for n, (k, x) in k_ops}
                scheds.append((r, sa, sk))
    host, slot, total, info = hm._native_step(lib, inp.query_lens, inp.seq_lens_cpu, len(dec), 1, page,
                                              inp.block_table.shape[1], True, None, st)[:4]
    sizes, t_all, p_all, m = info[12:12 + info[11]], info[0], info[1], (len(dec) > 0) + 1
    vargs = (host, sizes, inp.block_table, True, [t_all, info[6], p_all - info[6]] if dec else [t_all, p_all],
             [len(dec), len(pre)] if dec else [])

    def fi():
        for a, k, w in plans:
            w.plan(*a, **k)

    fills = []
    for r, _, _ in scheds:
        for k, n in r.binding["fills"].items():
            b = getattr(step, r.phase)
            fills.append((getattr(r.wrapper, k), getattr(b, n)))

    def fill():
        for buf, t in fills:
            buf[: t.numel()].copy_(t, non_blocking=True)

    def sched():
        for r, sa, sk in scheds:
            r.guard.before()
            r.binding["fn"](*sa, **sk)
            r.guard.after()

    def meta():
        s = build_step(ex.plan, inp, st, ex._layouts)
        st.release(s.extra["staging_slot"])

    def native():
        st.give_back(hm._native_step(lib, inp.query_lens, inp.seq_lens_cpu, len(dec), 1, page, inp.block_table.shape[1],
                                     True, None, st)[1])
    def fused():
        st.give_back(hm._native_step(views, inp.query_lens, inp.seq_lens_cpu, len(dec), 1, page, inp.block_table.shape[1],
                                     True, None, st, False, inp.block_table)[1])
    none = lambda: None  # noqa: E731
    fns = [lambda: ex.plan_step(inp), meta, native, (lambda: views.step_views(*vargs)) if views else none,
           fused if views is not None and hasattr(views, "step") else none, lambda: ex.backend.plan_step(step), sched, fill, fi]
    got = host_only_each(fns, args.reps)
    st.give_back(slot)
    print(f"| {what} | " + " | ".join(f"{x:.1f}" for x in got) + f" | {len(scheds)} |", flush=True)
if args.profile:
    for i in (0, 2, 3):
        inp = inputs[i]
        for _ in range(100):
            ex.plan_step(inp)
        torch.cuda.synchronize()
        pr = cProfile.Profile()
        pr.enable()
        for k in range(2000):
            ex.plan_step(inp)
            if k % 50 == 0:
                torch.cuda.synchronize()
        pr.disable()
        print(f"\n### cProfile, 2,000 plan_steps: {SHAPES[i][0]}")
        pstats.Stats(pr, stream=sys.stdout).sort_stats("tottime").print_stats(30)
