"""Host cost of the general step's metadata (issue 41): prefill-only and mixed steps on the CPU.

    .venv/bin/python bench/general_step_host.py [--reps 400] [--json OUT.json] [--host-table]

For issue 41's six general shapes (bench/decode_steps.py GENERAL_SHAPES, fa2 plan on a simulated
H100, page 16): the host median of ``build_step`` (time.perf_counter, ``--reps`` calls after warm-up)
and the torch ops one step dispatches, counted with ``TorchDispatchMode`` - on the GPU each op on a
device tensor is a kernel launch (~5 us of host on the H100 machine), so the count is what carries
over; the CPU medians show the numpy/Python part. ``launches``: the ops that compute (on the GPU each
is at least one kernel launch; ``clone`` stands for the one H2D copy, CPU being the "device" here;
``repeat_interleave`` is several kernels on CUDA); ``ops``: every aten op, views and host ones too.
``plan_step - build_step``: the executor's ``plan_step`` (FlashInfer backend) over the same step
with FlashInfer's wrapper classes swapped for ones whose ``plan`` does nothing (as
tests/test_adapter_strategies_bind.py does): the host cost of what lies between the metadata and
FlashInfer's own ``plan`` (argument building, the decode switch, the staging release).
``--host-table``: the step also carries the engine's host copy of the block table
(``StepInput.block_table_cpu``, as vLLM keeps one): the host gathers the slots and page indices too.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from attnplan.adapter import StepInput, build_step  # noqa: E402
from attnplan.adapter.host_metadata import HostStaging  # noqa: E402
from attnplan.policy import AttentionConfig, plan_for, simulated_node  # noqa: E402

# bench/decode_steps.py GENERAL_SHAPES: (kind, decode contexts, prefill lengths)
SHAPES = [("prefill: 1 x 1024", [], [1024]), ("prefill: 1 x 4096", [], [4096]),
          ("prefill: 8 x 2048", [], [2048] * 8), ("mixed: 16 decodes + 2 x 512", [1024] * 16, [512] * 2),
          ("mixed: 64 decodes + 2 x 512", [4096] * 64, [512] * 2),
          ("mixed: 64 decodes + 4 x 1024", [4096] * 64, [1024] * 4)]


VIEWS_AND_HOST = {"empty", "detach", "slice", "split_with_sizes", "view", "split", "alias", "as_strided"}


class OpCount(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[str(func.overloadpacket.__name__)] += 1
        return func(*args, **(kwargs or {}))


def make_input(dec, pre, page, seed=0, host_table=False):
    g = torch.Generator().manual_seed(seed)
    q = [1] * len(dec) + pre
    seq = dec + pre
    width = max((s + page - 1) // page for s in seq)
    table = torch.randperm(len(seq) * width, generator=g, dtype=torch.int32).view(len(seq), width)
    seq_cpu = torch.tensor(seq, dtype=torch.int32)
    return StepInput(q, seq_cpu.clone(), table, len(dec), seq_lens_cpu=seq_cpu,
                     block_table_cpu=table.clone() if host_table else None)


class _NoPlan:
    """A FlashInfer wrapper class whose methods do nothing (no GPU here)."""

    def __init__(self, *a, **k):
        pass

    def plan(self, *a, **k):
        pass

    def run(self, *a, **k):
        pass


def median_us(fn, reps):
    for _ in range(20):
        fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e6


def executor_without_flashinfer_plans(answer):
    from attnplan.adapter import AttentionExecutor, calls

    for st in calls.STRATEGIES.values():
        st._resolved = _NoPlan if isinstance(st.entry(), type) else (lambda *a, **k: None)
    return AttentionExecutor(answer, device="cpu", backend="flashinfer", check=False)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=400)
    ap.add_argument("--json", default=None)
    ap.add_argument("--host-table", action="store_true", help="steps carry the engine's host block table too")
    a = ap.parse_args()
    torch.set_num_threads(1)
    answer = plan_for(AttentionConfig(head_dim=128, num_qo_heads=32, num_kv_heads=8, attention_backend="fa2"),
                      simulated_node("H100"), engine="flashinfer")
    assert answer.ok, answer.violations
    plan = answer.plan
    page = plan.kv_cache.page_size
    staging = HostStaging("cpu")
    ex = executor_without_flashinfer_plans(answer)
    rows = []
    print("| step | build_step median us (CPU) | plan_step - build_step us | launches | torch ops | ops |\n"
          "|---|---|---|---|---|---|")
    for what, dec, pre in SHAPES:
        inp = make_input(dec, pre, page, host_table=a.host_table)
        meta = median_us(lambda: build_step(plan, inp, staging), a.reps)
        whole = median_us(lambda: ex.plan_step(inp), a.reps)
        with OpCount() as oc:
            build_step(plan, inp, staging)
        launches = sum(v for k, v in oc.ops.items() if k not in VIEWS_AND_HOST)
        row = dict(step=what, build_step_us=meta, plan_step_minus_build_step_us=whole - meta, launches=launches,
                   torch_ops=sum(oc.ops.values()), ops=dict(sorted(oc.ops.items())))
        rows.append(row)
        print(f"| {what} | {meta:.1f} | {whole - meta:.1f} | {launches} | {row['torch_ops']} | "
              f"{', '.join(f'{k} {v}' for k, v in row['ops'].items())} |", flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
