"""The full differential oracle run (issue 21): attnplan's --engine vllm answers against vLLM 0.33.0's own
selection code, 600 seeded configurations x 9 capabilities (5,400 cases) by default.

    python bench/oracle_vllm.py                 # table + first disagreements
    python bench/oracle_vllm.py --json > out.json

A thin wrapper over ``python -m attnplan.oracle.vllm`` (same flags); the figures go in bench/RESULTS.md.
Needs vLLM 0.33.0, torch and flashinfer's Python sources installed (the dev venv has them).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from attnplan.oracle.vllm import main  # noqa: E402  (imports vLLM with its platform patched)

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or ["--configs", "600"]))
