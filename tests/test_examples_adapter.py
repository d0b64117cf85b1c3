"""examples/adapter_step.py (the README's adapter example) runs as shipped."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parents[1]


def test_adapter_example_runs():
    p = subprocess.run([sys.executable, str(ROOT / "examples" / "adapter_step.py")], capture_output=True, text=True,
                       cwd=ROOT, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "batch kinds [prefill_only" in p.stdout
    assert "torch.Size([6, 32, 128]) fa3 fa2" in p.stdout
