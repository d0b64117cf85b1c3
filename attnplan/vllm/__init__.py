"""attnplan speaks vLLM 0.33: its backend names (backends), its ``vllm serve`` line (args, serve),
its per-rank view of a model and ``config_from_vllm`` (mapping), and a plugin that refuses an
unsupported attention setup in each worker before weights load (plugin). Importing this package
does not import vLLM."""

__all__ = ["backend_choice", "config_from_vllm", "per_rank_heads"]

# The names above are imported on first use (PEP 562): ``attnplan plan --model-config`` reaches vllm/serve.py
# through this package and needs neither module (issue 36 item 6: fewer modules on one command's path).
_LAZY = {"backend_choice": "backends", "config_from_vllm": "mapping", "per_rank_heads": "mapping"}


def __getattr__(name: str):
    where = _LAZY.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if where == "backends":
        from . import backends as module
    else:
        from . import mapping as module  # type: ignore[no-redef]
    value = getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
