"""Every module the issue-41 GPU tests and bench load, in one ninja."""
import sys, time
sys.path[:0] = ["tests/gpu", "bench"]
from prebuild_all import modules
from attnplan.adapter.warmup import plan_modules, prebuild
import decode_steps as d
from gpu_common import plan_or_raise, answer
mods = modules(["graphs"])
for name in ("xqa", "fa2", "mla-fa3", "mla-fa2"):
    a = plan_or_raise(*d.PLANS[name])
    mods.update({m.name: m for m in plan_modules(a.plan) if name == "fa2" or m.phase == "decode"})
import test_steady_step_gpu as t
for make in (*t.PLANS.values(), lambda: answer(**t.MLA)):
    mods.update({m.name: m for m in plan_modules(make().plan) if m.phase == "decode"})
t0 = time.perf_counter()
prebuild(list(mods.values()))
print(f"prebuilt {len(mods)} modules in {time.perf_counter() - t0:.0f}s: {sorted(mods)}", flush=True)
