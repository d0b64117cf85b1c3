"""``attnplan verify``: every kernel rule held against the GPU it runs on (issue 13).

generate.py makes probes on both sides of each rule's boundary from the rule data; runner.py
runs each in its own process (calls.py: directly through FlashInfer, against a float32
reference); report.py turns the results into verdicts (consistent, stale, dangerous), the
report, and each rule's provenance record for the packs' ``verified:`` field.
"""

from .generate import Generated, Probe, generate
from .report import build_report, exit_code, markdown, provenance, write_report
from .runner import run_probes, subprocess_runner
from .select import is_kernel_rule, kernel_rules

__all__ = ["generate", "Generated", "Probe", "run_probes", "subprocess_runner", "build_report", "exit_code",
           "markdown", "provenance", "write_report", "is_kernel_rule", "kernel_rules"]
