"""examples/adapter_step.py (the README's adapter example) runs as shipped."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parents[1]

from attnplan.policy import AttentionConfig, require_plan, simulated_node  # noqa: E402


def test_adapter_example_runs():
    p = subprocess.run([sys.executable, str(ROOT / "examples" / "adapter_step.py")], capture_output=True, text=True,
                       cwd=ROOT, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "batch kinds [prefill_only" in p.stdout
    # the backends the plan names (on an H100 under vLLM 0.33: fa3 prefill, XQA decode), which the
    # reference backend executes through the plan's calling convention
    plan = require_plan(AttentionConfig(head_dim=128, num_qo_heads=32, num_kv_heads=8), simulated_node("H100")).plan
    assert (plan.prefill.backend, plan.decode.backend) == ("fa3", "xqa")
    assert f"torch.Size([6, 32, 128]) {plan.prefill.backend} {plan.decode.backend}" in p.stdout
