"""Every FlashInfer module issue 41's GPU tests and bench load, in one ninja (run41.sh; run from the
repository root). FlashInfer's page module (the bench's "FlashInfer + its own append") is built
beside it by run41.sh."""
import sys
import time

sys.path[:0] = ["tests/gpu", "bench"]
from prebuild_all import modules  # noqa: E402
from attnplan.adapter.warmup import plan_modules, prebuild  # noqa: E402
import decode_steps as d  # noqa: E402
from gpu_common import plan_or_raise, answer  # noqa: E402

mods = modules(["graphs"])
for name in ("xqa", "fa2", "mla-fa3", "mla-fa2"):
    a = plan_or_raise(*d.PLANS[name])
    mods.update({m.name: m for m in plan_modules(a.plan) if name == "fa2" or m.phase == "decode"})
import test_steady_step_gpu as t  # noqa: E402

for make in (*t.PLANS.values(), lambda: answer(**t.MLA)):
    mods.update({m.name: m for m in plan_modules(make().plan) if m.phase == "decode"})
t0 = time.perf_counter()
prebuild(list(mods.values()))
print(f"prebuilt {len(mods)} modules in {time.perf_counter() - t0:.0f}s: {sorted(mods)}", flush=True)
