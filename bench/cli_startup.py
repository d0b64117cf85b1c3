"""Whole-process time of the CLI commands a user types, where vLLM and transformers are installed
(issue 27 targets: ``--version`` <= 0.1 s, ``plan --model-config X`` <= 1 s, ``vllm serve ...``
<= 2 s warm, i.e. with vLLM's flag table cached).

Each command is started ``--runs`` times (default 7) after one warm-up run; the median, min and
max wall seconds are printed. The vLLM flag table is built by the warm-up run into a fresh cache
directory (``ATTNPLAN_CACHE_DIR``); ``--cold`` times the first (table-building) run separately.

    PYTHONPATH=$PWD /work/main/.venv/bin/python bench/cli_startup.py [--runs 7] [--cold]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PRESET = str(ROOT / "attnplan" / "presets" / "llama-3.1-8b.json")
SERVE_TABLE = "vllm serve (vLLM's flag table)"
COMMANDS = {
    "version": ["--version"],
    "plan --model-config": ["plan", "--device", "H100", "--model-config", PRESET],
    "plan --model (preset name)": ["plan", "--device", "B200", "--model", "llama-3.1-8b", "--json"],
    SERVE_TABLE: ["vllm", "serve", "llama-3.1-8b", "-tp", "4", "--kv-cache-dtype", "fp8", "--device", "B200"],
    "vllm serve (subset parser)": ["vllm", "serve", "llama-3.1-8b", "-tp", "4", "--kv-cache-dtype", "fp8",
                                   "--device", "B200"],
    "rules": ["rules"],
}


def once(argv: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "attnplan", *argv], env=env, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    dt = time.perf_counter() - t0
    if p.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(argv)}: exit {p.returncode}: {p.stderr.strip()[-500:]}")
    return dt


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--cold", action="store_true", help="also time the run that builds vLLM's flag table")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
                   ATTNPLAN_CACHE_DIR=cache)
        env.pop("ATTNPLAN_VLLM_PARSER", None)
        if a.cold:
            print(f"{'vllm serve, cold (builds the flag table)':40s} {once(COMMANDS[SERVE_TABLE], env):7.3f} s")
        print(f"{'command':40s} {'median':>7s} {'min':>7s} {'max':>7s}  (s, {a.runs} runs)")
        for name, argv in COMMANDS.items():
            e = dict(env, ATTNPLAN_VLLM_PARSER="subset") if "subset" in name else env
            once(argv, e)  # warm-up (and the flag table)
            t = [once(argv, e) for _ in range(a.runs)]
            print(f"{name:40s} {statistics.median(t):7.3f} {min(t):7.3f} {max(t):7.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
