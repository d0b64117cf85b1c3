"""attnplan speaks vLLM 0.33: its backend names (backends), its ``vllm serve`` line (args, serve),
its per-rank view of a model and ``config_from_vllm`` (mapping), and a plugin that refuses an
unsupported attention setup in each worker before weights load (plugin). Importing this package
does not import vLLM."""

from .backends import backend_choice
from .mapping import config_from_vllm, per_rank_heads

__all__ = ["backend_choice", "config_from_vllm", "per_rank_heads"]
