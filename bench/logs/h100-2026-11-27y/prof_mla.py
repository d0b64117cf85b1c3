"""Where an MLA prefill step's host time goes (issue 41): for bench/mla_prefill_host.py's shapes (DeepSeek-style
attention, 16 heads, the prefill backend forced), timed in turn call by call (synchronized before each, 300
rounds, medians in us): plan_step whole; build_step alone (the metadata); host_torch.cpp's step alone (both halves
of the metadata in one call); the ragged parts' plans over a built step (executor._plan_mla_prefill: the learned
replays); each part's replay alone (StepReplay._replay); each part's scheduler call alone with the replay's bound
arguments; FlashInfer's whole ragged plans with the arguments the executor gives them. Then cProfile of 2,000
plan_steps of the step without context, by own time. ``python prof_mla.py [--backends fa2,fa3] [--reps N]
[--profile]``"""
import argparse
import cProfile
import pstats
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT), str(ROOT / "bench"), str(ROOT / "tests" / "gpu")]
import torch  # noqa: E402

from decode_steps import recorded_plan, swapped  # noqa: E402
from gpu_common import answer  # noqa: E402
from mla_prefill_host import MLA, SHAPES  # noqa: E402
from xqa_vs_fa2 import host_only_each  # noqa: E402
from attnplan.adapter import AttentionExecutor, StepInput, host_metadata as hm, host_torch  # noqa: E402
from attnplan.adapter.general_plans import _values, replay_of  # noqa: E402
from attnplan.adapter.metadata import build_step  # noqa: E402
from attnplan.adapter.warmup import plan_modules, prebuild  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--backends", default="fa2,fa3")
ap.add_argument("--reps", type=int, default=300)
ap.add_argument("--profile", action="store_true")
args = ap.parse_args()
print(f"host_torch {host_torch.status()['compiled']}, torch {torch.__version__}", flush=True)
cols = ["plan_step", "build_step", "module step", "ragged plans (replays)", "replays alone", "schedulers alone",
        "FI plans"]
print("| backend | shape | " + " | ".join(cols) + " | parts |\n|" + "---|" * (len(cols) + 3), flush=True)
for backend in args.backends.split(","):
    ans = answer(**MLA, attention_backend=backend)
    prebuild([m for m in plan_modules(ans.plan) if m.phase == "prefill"])
    ex = AttentionExecutor(ans, device="cuda")
    page, g, st = ex.plan.kv_cache.page_size, ex.backend.general, ex._staging
    inputs = []
    for what, reqs in SHAPES:
        seq = [n + c for n, c in reqs]
        width = max((s + page - 1) // page for s in seq)
        table = torch.randperm(len(seq) * width, device="cuda", dtype=torch.int32).view(len(seq), width)
        seq_cpu = torch.tensor(seq, dtype=torch.int32)
        inputs.append((what, StepInput([n for n, _ in reqs], seq_cpu.cuda(), table, 0, seq_lens_cpu=seq_cpu)))
    for _ in range(3):
        for _, inp in inputs:
            ex.plan_step(inp)
    profiled = []
    for what, inp in inputs:
        step = ex.plan_step(inp)
        parts = []
        inner = ex.backend.plan_ragged

        def spy(part, parts=parts, inner=inner):
            parts.append(part)
            inner(part)
        ex.backend.plan_ragged = spy
        ex._plan_mla_prefill(step)
        del ex.backend.plan_ragged
        plans, reps = [], []
        for part in parts:
            w = ex.backend.parts[part.key]
            r = replay_of(ex.backend, w)
            if r is not None and r.ready:
                a_ops, k_ops = r._program()[:2]
                v = _values(part)

                def val(k, x, r=r, v=v):
                    return x if k == 0 else v[x] if k == 1 else r._pick(x, v)
                reps.append((r, part, [val(k, x) for k, x in a_ops], {n: val(k, x) for n, (k, x) in k_ops}))
            try:
                plans.append((w,) + recorded_plan(w, swapped(g, "enabled", False, lambda: ex._plan_mla_prefill(step))))
            except KeyError:
                pass

        def fi(plans=plans):
            for w, a, k in plans:
                w.plan(*a, **k)

        def replays(reps=reps):
            for r, part, _, _ in reps:
                r._replay(part)

        def scheds(reps=reps):
            for r, _, sa, sk in reps:
                r.guard.before()
                r.binding["fn"](*sa, **sk)
                r.guard.after()

        def meta(inp=inp):
            s = build_step(ex.plan, inp, st, ex._layouts)
            st.release(s.extra["staging_slot"])

        def module(inp=inp):
            st.give_back(hm._native_step(st.views, inp.query_lens, inp.seq_lens_cpu, 0, 1, page,
                                         inp.block_table.shape[1], True, None, st, True, inp.block_table)[1])
        fns = [lambda inp=inp: ex.plan_step(inp), meta, module if st.views is not None else (lambda: None),
               lambda step=step: ex._plan_mla_prefill(step), replays, scheds, fi]
        got = host_only_each(fns, args.reps)
        print(f"| {backend} | {what} | " + " | ".join(f"{x:.1f}" for x in got) + f" | {len(parts)} ({len(reps)} replaying) |",
              flush=True)
        profiled.append((what, inp))
    if args.profile:
        what, inp = profiled[0]
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
        print(f"\n### cProfile, 2,000 plan_steps: {backend}, {what}")
        pstats.Stats(pr, stream=sys.stdout).sort_stats("tottime").print_stats(30)
