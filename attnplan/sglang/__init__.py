"""SGLang 0.5.23 as an engine layer (issue 26): its own backend pick per phase, its silent coercions and
its refusals by phase, over the same FlashInfer kernel rules as vLLM.

``resolve`` mirrors SGLang's resolution pipeline (sglang/srt/arg_groups/pipeline.py) reading its tables
from rules/backends.yaml ``engines.sglang.native``; each step names its rule in rules/packs/sglang.yaml.
``launch`` reads a ``python -m sglang.launch_server`` line; ``oracle`` checks ``resolve`` against
SGLang's own functions where SGLang imports.
"""

SGLANG_VERSION = "0.5.23"

__all__ = ["SGLANG_VERSION", "SglangEngine", "SglangFlags"]


def __getattr__(name: str):
    # flags.py's names on first use (PEP 562): every rule-set load imports sglang/data.py to check SGLang's native
    # tables (policy/rulepack.py check_whole), and a vLLM command needs nothing else of this package (issue 36 item 6)
    if name in ("SglangEngine", "SglangFlags"):
        from . import flags

        value = getattr(flags, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
