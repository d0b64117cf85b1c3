"""SGLang 0.5.23 as an engine layer (issue 26): its own backend pick per phase, its silent coercions and
its refusals by phase, over the same FlashInfer kernel rules as vLLM.

``resolve`` mirrors SGLang's resolution pipeline (sglang/srt/arg_groups/pipeline.py) reading its tables
from rules/backends.yaml ``engines.sglang.native``; each step names its rule in rules/packs/sglang.yaml.
``launch`` reads a ``python -m sglang.launch_server`` line; ``oracle`` checks ``resolve`` against
SGLang's own functions where SGLang imports.
"""

from .flags import SglangEngine, SglangFlags

SGLANG_VERSION = "0.5.23"

__all__ = ["SGLANG_VERSION", "SglangEngine", "SglangFlags"]
