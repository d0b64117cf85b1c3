"""Per shape, over a call's rounds of bench/adapter_ab.py (its --json): plan_step − FlashInfer's plans for this tree
and the base (median and range), this tree's plan_step ÷ the base's (geometric mean over the rounds, whose order
alternates), and the host time saved (mean). ``python3 summarize_ab.py call4/adapter-ab.json``"""
import json
import math
import statistics as st
import sys

rows = json.load(open(sys.argv[1]))
by: dict = {}
for r in rows:
    by.setdefault((r["plan"], r["step"]), []).append(r)
print("| plan | step | this tree: plan_step − plans, median [range] | base | this / base plan_step | saved µs |\n"
      "|---|---|---|---|---|---|")
for (plan, step), rs in by.items():
    new = [r["plan_step_us"] - r["fi_plans_us"] for r in rs]
    old = [r["base_plan_step_us"] - r["fi_plans_us"] for r in rs]
    ratio = math.exp(st.mean(math.log(r["plan_step_us"] / r["base_plan_step_us"]) for r in rs))
    saved = st.mean(r["base_plan_step_us"] - r["plan_step_us"] for r in rs)
    print(f"| {plan} | {step} | {st.median(new):.0f} [{min(new):.0f}-{max(new):.0f}] | {st.median(old):.0f} "
          f"[{min(old):.0f}-{max(old):.0f}] | {ratio:.3f} | {saved:.0f} |")
