"""sink.jit-name's premise, in one process (bench/logs/h100-2026-11-25c): FlashInfer names the
attention-sink module batch_prefill_attention_sink_{q dtype}_swa_{window?}_{backend}
(flashinfer/attention/_core.py BatchAttentionWithAttentionSinkWrapper.__init__) and compiles the
head size into it without naming it. Two layer groups that differ only in head size, each planned
by the rules (fa2 forced: its modules build in about a minute), run in one process one after the
other, as one engine process would serve them: the first group runs; the second gets a module
built under the first one's name. The rule rejects a model that needs both; if FlashInfer ever
serves the second correctly, this test fails and the rule is stale for one process.

The two groups run in a fresh process of their own: in the GPU suite's process another test
(gpt-oss's head-64 sink group, test_layer_groups_gpu.py) may already have loaded a module of
this very name, and then even the first group runs the wrong kernel (bench/logs/h100-2026-11-25d,
gpu-files.log: the rule's premise again, but not this test's question). Built on purpose one
module after the other (a parallel build of two same-named modules is the cross-process race the
sweep measured, not this case).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

from gpu_common import TOL, Batch, executor_for, real_plan, rel_err  # noqa: E402

from attnplan.policy import default_ruleset  # noqa: E402
from attnplan.policy.jit_names import clashes  # noqa: E402

pytestmark = pytest.mark.gpu
CFG = dict(num_qo_heads=8, num_kv_heads=1, dtype="bf16", sinks=True, attention_backend="fa2")


def sink_plan(head: int):
    return real_plan(dict(CFG, head_dim=head), "flashinfer",
                     lambda a: a.plan.prefill.call == "sink" and a.plan.decode.call == "sink",
                     f"the fa2 sink wrapper at head {head}")


def run(a) -> dict:
    b = Batch(executor_for(a), [1, 1, 37, 200], [300, 2050, 37, 900], 2)
    try:
        return {"rel_err": rel_err(b.run(), b.reference())}
    except (AssertionError, RuntimeError) as exc:       # NaN rows (rel_err's assert) or a CUDA/JIT error
        return {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}


def one_process() -> dict:
    """Head 128, then head 64, in this process (the child's side)."""
    first = run(sink_plan(128))
    return {"first": first, "second": run(sink_plan(64))}


def test_a_second_head_size_under_one_sink_module_name_does_not_run_correctly():
    first, second = sink_plan(128), sink_plan(64)
    pairs = [(0, first.plan.prefill), (0, first.plan.decode), (1, second.plan.prefill), (1, second.plan.decode)]
    v = clashes(default_ruleset(), pairs)
    assert v and v[0].rule == "sink.jit-name"          # what the rule says of these very plans
    child = subprocess.run([sys.executable, __file__], capture_output=True, text=True, timeout=900,
                           env=dict(os.environ, PYTHONUNBUFFERED="1"))
    assert child.returncode == 0, child.stderr[-2000:]
    got = json.loads(child.stdout.strip().splitlines()[-1])
    print(f"fresh process: head 128 first {got['first']}; head 64 second, same module name: {got['second']}")
    assert got["first"].get("rel_err", 1.0) <= TOL, got["first"]
    err2 = got["second"].get("rel_err")
    assert err2 is None or err2 > TOL, (
        f"FlashInfer served head 64 correctly after head 128 in one process (rel err {err2:.2e}): "
        "sink.jit-name is stale for one process (backends.yaml calls.sink.jit_name)")


if __name__ == "__main__":
    print(json.dumps(one_process()), flush=True)
