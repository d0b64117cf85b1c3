"""Differential oracles: attnplan's engine layers held against the engines' own code (issue 21).

Dev and test tooling only. Nothing in the core imports this package: it needs vLLM, torch and
FlashInfer's Python sources installed (``pip install -e .[vllm]``), and it patches vLLM's platform
in-process, so run it as its own process: ``python -m attnplan.oracle.vllm``.
"""
