"""Reading a ``vllm serve`` command line.

When ``vllm`` is importable, vLLM's own parser reads it (``make_arg_parser`` of
/work/ref/vllm-src/vllm/entrypoints/common/cli_args.py, i.e. FlexibleArgumentParser +
``AsyncEngineArgs.add_cli_args`` + the frontend flags), so every flag vLLM accepts is accepted and
its defaults apply. Building that parser constructs a default ``VllmConfig``, whose
``DeviceConfig.__post_init__`` (config/device.py) needs a platform: on a machine without a GPU we
set ``VLLM_TARGET_DEVICE=cpu`` for this process when it is unset (parsing only; no platform
decision is read from it).

Otherwise (or with ``ATTNPLAN_VLLM_PARSER=subset``) the documented subset below is parsed and any
other flag is named in one error line, never ignored.
"""

from __future__ import annotations

import argparse
import functools
import os
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from attnplan.policy import InvalidInputError

# The fallback subset: flag(s), dest, type, default. Mirrors vLLM 0.33's EngineArgs defaults.
SUBSET: list[tuple[tuple[str, ...], str, Any, Any]] = [
    (("--model",), "model", str, None),
    (("--tensor-parallel-size", "-tp"), "tensor_parallel_size", int, 1),
    (("--pipeline-parallel-size", "-pp"), "pipeline_parallel_size", int, 1),
    (("--decode-context-parallel-size", "-dcp"), "decode_context_parallel_size", int, 1),
    (("--dtype",), "dtype", str, "auto"),
    (("--kv-cache-dtype",), "kv_cache_dtype", str, "auto"),
    (("--block-size",), "block_size", int, None),
    (("--attention-backend",), "attention_backend", str, None),
    (("--speculative-config",), "speculative_config", str, None),
    (("--max-model-len",), "max_model_len", str, None),
    (("--hf-overrides",), "hf_overrides", str, None),
    (("--revision",), "revision", str, None),
]
SUBSET_FLAGS = tuple(f for flags, *_ in SUBSET for f in flags) + ("--trust-remote-code",)


@dataclass(frozen=True)
class ServeLine:
    """What attnplan reads from a ``vllm serve`` line."""

    model: str
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    decode_context_parallel_size: int = 1
    dtype: str = "auto"
    kv_cache_dtype: str = "auto"
    block_size: Optional[int] = None
    attention_backend: Optional[str] = None
    speculative: dict[str, Any] = field(default_factory=dict)
    max_model_len: Optional[int] = None
    hf_overrides: dict[str, Any] = field(default_factory=dict)
    trust_remote_code: bool = False
    revision: Optional[str] = None
    parser: str = "subset"  # "vllm" when vLLM's own parser read it


class _OneLine(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise InvalidInputError("vllm serve", message)


def parse_json_arg(raw: Any, what: str) -> dict[str, Any]:
    """A JSON-object flag value (``--speculative-config``, ``--hf-overrides``); vLLM's parser may
    already have decoded it."""
    if raw is None or raw == "":
        return {}
    if isinstance(raw, dict):
        return dict(raw)
    if not isinstance(raw, str):
        raw = getattr(raw, "__dict__", raw)
        if isinstance(raw, dict):
            return {k: v for k, v in raw.items() if v is not None}
        raise InvalidInputError(what, f"expected a JSON object, got {raw!r}")
    from attnplan.safeio import parse_json

    data = parse_json(raw, what=what, name=f"--{what.replace('_', '-')}")
    if not isinstance(data, dict):
        raise InvalidInputError(what, f"expected a JSON object, got {raw!r}")
    return data


def _int_or_none(raw: Any, what: str) -> Optional[int]:
    if raw is None:
        return None
    if isinstance(raw, int) and not isinstance(raw, bool):
        return raw
    s = str(raw).strip()
    # vLLM's human_readable_int (utils/argparse_utils.py): k/m/g decimal, K/M/G binary.
    mult = {"k": 1000, "m": 1000 ** 2, "g": 1000 ** 3, "K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}.get(s[-1:], 1)
    try:
        return int(float(s[:-1] if mult != 1 else s) * mult)
    except ValueError:
        raise InvalidInputError(what, f"must be an integer, got {raw!r}") from None


def vllm_available() -> bool:
    if os.environ.get("ATTNPLAN_VLLM_PARSER", "").lower() == "subset":
        return False
    try:
        import importlib.util

        return importlib.util.find_spec("vllm") is not None
    except (ImportError, ValueError):
        return False


@functools.lru_cache(maxsize=1)
def _vllm_parser() -> Any:
    if not _has_cuda():
        os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")  # vLLM's INFO lines are not this command's output
    import logging

    # vLLM's import warns about CUDA/Triton/ROCm pieces a CPU machine lacks, through loggers it has
    # not configured yet (so VLLM_LOGGING_LEVEL does not reach them), some at ERROR (fused_moe/config.py:
    # missing triton_kernels): not this command's output.
    logging.disable(logging.ERROR)
    try:
        return _build_vllm_parser()
    finally:
        logging.disable(logging.NOTSET)


def _build_vllm_parser() -> Any:
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    class Parser(FlexibleArgumentParser):
        def error(self, message: str) -> None:  # type: ignore[override]
            raise InvalidInputError("vllm serve", message)

    parser = Parser(prog="vllm serve")
    try:
        from vllm.entrypoints.common.cli_args import make_arg_parser
    except ImportError:  # the frontend's optional dependencies are absent: the engine flags only
        from vllm.engine.arg_utils import EngineArgs

        parser.add_argument("model_tag", nargs="?")
        return EngineArgs.add_cli_args(parser)
    return make_arg_parser(parser)


def _has_cuda() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:
        return False


def _subset_parser() -> argparse.ArgumentParser:
    p = _OneLine(prog="vllm serve", add_help=False, allow_abbrev=False)
    p.add_argument("model_tag", nargs="?")
    for flags, dest, typ, default in SUBSET:
        p.add_argument(*flags, dest=dest, type=typ, default=default)
    p.add_argument("--trust-remote-code", dest="trust_remote_code", action="store_true", default=False)
    return p


def parse_serve_line(argv: Sequence[str]) -> ServeLine:
    """A ``vllm serve`` argument list (after ``serve``) -> ServeLine; bad input is one InvalidInputError."""
    argv = list(argv)
    if vllm_available():
        ns = _vllm_parser().parse_args(argv)
        how = "vllm"
    else:
        p = _subset_parser()
        try:
            ns, extra = p.parse_known_args(argv)
        except InvalidInputError:
            raise
        if extra:
            flags = [a.split("=", 1)[0] for a in extra if a.startswith("-")] or extra
            raise InvalidInputError(
                "vllm serve", f"not in attnplan's vLLM subset (install vllm to accept every flag): {' '.join(flags)}",
                SUBSET_FLAGS)
        how = "subset"
    model = getattr(ns, "model_tag", None) or getattr(ns, "model", None)
    if not model:
        raise InvalidInputError("model", "give the model: attnplan vllm serve MODEL [flags]")
    spec = parse_json_arg(getattr(ns, "speculative_config", None), "speculative_config")
    backend = getattr(ns, "attention_backend", None)
    if backend is None:  # --attention-config '{"backend": ...}' (vLLM's AttentionConfig, config/attention.py)
        ac = getattr(ns, "attention_config", None)
        backend = ac.get("backend") if isinstance(ac, dict) else getattr(ac, "backend", None)
    backend = getattr(backend, "name", backend)
    return ServeLine(
        model=str(model),
        tensor_parallel_size=int(ns.tensor_parallel_size or 1),
        pipeline_parallel_size=int(getattr(ns, "pipeline_parallel_size", 1) or 1),
        decode_context_parallel_size=int(getattr(ns, "decode_context_parallel_size", 1) or 1),
        dtype=str(getattr(ns, "dtype", "auto") or "auto"),
        kv_cache_dtype=str(getattr(ns, "kv_cache_dtype", "auto") or "auto"),
        block_size=_int_or_none(getattr(ns, "block_size", None), "block_size"),
        attention_backend=None if backend is None else str(backend),
        speculative=spec,
        max_model_len=_int_or_none(getattr(ns, "max_model_len", None), "max_model_len"),
        hf_overrides=parse_json_arg(getattr(ns, "hf_overrides", None), "hf_overrides"),
        trust_remote_code=bool(getattr(ns, "trust_remote_code", False)),
        revision=getattr(ns, "revision", None),
        parser=how,
    )


def speculative_tokens(spec: dict[str, Any]) -> int:
    """``num_speculative_tokens`` of a ``--speculative-config`` object (0 when none is given)."""
    if not spec:
        return 0
    n = spec.get("num_speculative_tokens")
    if n is None:
        raise InvalidInputError("speculative_config", "give num_speculative_tokens, e.g. "
                                '{"method": "eagle", "num_speculative_tokens": 3}')
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise InvalidInputError("speculative_config", f"num_speculative_tokens must be a non-negative integer, got {n!r}")
    return n
