"""The execution adapter at engine init: plan -> executor -> warm-up -> steps.

Runs anywhere on the pure-torch reference backend; on a GPU node set DEVICE, BACKEND = "cuda",
"flashinfer" and plan with require_plan(cfg) (the probed node). `python examples/adapter_step.py`.
"""
import torch
from attnplan import AttentionConfig, require_plan, simulated_node
from attnplan.adapter import AttentionExecutor, StepInput

DEVICE, BACKEND = "cpu", "reference"      # on a GPU: "cuda", "flashinfer" (the default)
cfg = AttentionConfig(head_dim=128, num_qo_heads=32, num_kv_heads=8)
answer = require_plan(cfg, simulated_node("H100"))         # on the GPU node: require_plan(cfg)
ex = AttentionExecutor(answer, device=DEVICE, backend=BACKEND)
report = ex.warmup()                                       # every kernel of the plan, 3 batch kinds
print(report.summary())

cache = ex.allocate_kv_cache(num_pages=64)                  # layout, page size, view dtype: the plan's
seq = torch.tensor([17, 5], dtype=torch.int32)              # request 0 decodes (16 cached + 1), request 1 prefills 5
inp = StepInput(query_lens=[1, 5], seq_lens=seq.to(DEVICE), num_decodes=1, seq_lens_cpu=seq,
                block_table=torch.arange(8, dtype=torch.int32, device=DEVICE).view(2, 4))
step = ex.plan_step(inp)                                    # once per step
k, v, q = (torch.randn(6, h, 128, dtype=torch.bfloat16, device=DEVICE) for h in (8, 8, 32))
ex.append_kv(step, cache, k, v)                             # once per layer
out = ex.forward(step, q, cache)
print(out.shape, ex.plan.prefill.backend, ex.plan.decode.backend)
