"""Reading a ``vllm serve`` command line.

When ``vllm`` is importable, vLLM's own parser reads it (``make_arg_parser`` of
/work/ref/vllm-src/vllm/entrypoints/common/cli_args.py, i.e. FlexibleArgumentParser +
``AsyncEngineArgs.add_cli_args`` + the frontend flags), so every flag vLLM accepts is accepted and
its defaults apply. Building that parser constructs a default ``VllmConfig``, whose
``DeviceConfig.__post_init__`` (config/device.py) needs a platform: on a machine without a GPU we
set ``VLLM_TARGET_DEVICE=cpu`` for this process when it is unset (parsing only; no platform
decision is read from it).

Building vLLM's parser imports vLLM (torch with it): 10-20 s. So the parser's flag table (each
flag's option strings, arity, choices, value kind) is extracted once per installed vLLM version
and kept in the user's cache directory (``flag_table``: ``$ATTNPLAN_CACHE_DIR``, else
``$XDG_CACHE_HOME/attnplan``, else ``~/.cache/attnplan``), keyed by the vLLM and attnplan
versions; a missing, stale or unreadable table sends the line to vLLM's real parser, which
rebuilds it. The table parser accepts exactly the flags vLLM's parser accepts and checks
integers, numbers and choices as vLLM's does; other flag values stay strings (attnplan reads only
the flags ``ServeLine`` holds). Lines using FlexibleArgumentParser's rewriting features
(``--config FILE``, ``-O3``, dotted ``--x.y`` arguments) go to the real parser.

A line from a REST client (``allow_files=False``) never makes this machine open a file: ``--config``
and ``@FILE`` values are refused by name before any parser sees the line (issue 40 #4). On the CLI
``--config FILE`` is the user's own file: checked first (exists, regular, bounded, UTF-8, .yaml), so
a bad one is exit 2, and vLLM's parser errors over it are shown without the file's contents.

Otherwise (or with ``ATTNPLAN_VLLM_PARSER=subset``) the documented subset below is parsed and any
other flag is named in one error line, never ignored.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
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
    (("--max-model-len",), "max_model_len", "human_readable_int_or_auto", None),
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
    # --attention-config as an object (JSON or vLLM's AttentionConfig): serve.py attention_config_fields reads
    # the keys attnplan models (use_trtllm_attention, disable_flashinfer_q_quantization)
    attention_config: dict[str, Any] = field(default_factory=dict)
    speculative: dict[str, Any] = field(default_factory=dict)
    max_model_len: Optional[int] = None
    hf_overrides: dict[str, Any] = field(default_factory=dict)
    trust_remote_code: bool = False
    revision: Optional[str] = None
    parser: str = "subset"  # "vllm" when vLLM's own parser read it, "table" for the shipped flag table
    # flags of the line that do not change attention (--port, --gpu-memory-utilization, ...): accepted, listed
    ignored: tuple[str, ...] = ()


_FLAG_WORD = re.compile(r"^--?[A-Za-z][A-Za-z0-9_.-]{0,63}$")


def parser_message(message: str) -> str:
    """argparse's error, without the values it would repeat: ``unrecognized arguments: --x SECRET``
    names the flags only (a serve line may come from a REST client, whose input is never echoed)."""
    head = "unrecognized arguments: "
    if message.startswith(head):
        words = message[len(head):].split()
        flags = [w.split("=", 1)[0] for w in words if _FLAG_WORD.match(w.split("=", 1)[0])]
        if flags:
            return head + " ".join(flags[:20]) + (" (with values not shown)" if len(flags) < len(words) else "")
        return f"{len(words)} unrecognized argument(s) (not shown)"
    return message


class _OneLine(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise InvalidInputError("vllm serve", parser_message(message))


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
        raise InvalidInputError(what, f"expected a JSON object, got {type(raw).__name__}")
    from attnplan.safeio import parse_json

    data = parse_json(raw, what=what, name=f"--{what.replace('_', '-')}")
    if not isinstance(data, dict):  # the value is the client's: named by its JSON type, never echoed
        raise InvalidInputError(what, f"expected a JSON object, got a JSON {type(data).__name__}")
    return data


def human_readable_int(value: str) -> int:
    """vLLM's ``human_readable_int`` (vllm/utils/argparse_utils.py): ``25.6k`` = 25600 (k/m/g/t
    decimal), ``1K`` = 1024 (K/M/G/T binary, no decimals), else a plain integer."""
    value = str(value).strip()
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgGtT])", value)
    if m:
        number, suffix = m.groups()
        if suffix in "kmgt":
            return int(float(number) * 10 ** (3 * ("kmgt".index(suffix) + 1)))
        try:
            return int(number) * 2 ** (10 * ("KMGT".index(suffix) + 1))
        except ValueError:
            raise argparse.ArgumentTypeError(f"Decimals are not allowed with binary suffixes like {suffix}. "
                                             f"Did you mean to use {number}{suffix.lower()} instead?") from None
    return int(value)  # "inf", "1e400", "nan": ValueError, as in vLLM


def human_readable_int_or_auto(value: str) -> int:
    """vLLM's ``human_readable_int_or_auto``: ``-1`` or ``auto`` is -1 (the model's own length)."""
    value = str(value).strip()
    if value == "-1" or value.lower() == "auto":
        return -1
    return human_readable_int(value)


_TYPES: dict[str, Any] = {"int": int, "float": float, "human_readable_int": human_readable_int,
                          "human_readable_int_or_auto": human_readable_int_or_auto}


def _int_or_none(raw: Any, what: str) -> Optional[int]:
    if raw is None:
        return None
    if isinstance(raw, int) and not isinstance(raw, bool):
        return raw
    try:
        return human_readable_int(str(raw))
    except (ValueError, argparse.ArgumentTypeError):
        raise InvalidInputError(what, f"must be an integer (vLLM's k/m/g/K/M/G suffixes allowed), got {raw!r}") from None


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
            raise InvalidInputError("vllm serve", parser_message(message))

    parser = Parser(prog="vllm serve")
    try:
        from vllm.entrypoints.common.cli_args import make_arg_parser
    except ImportError:
        try:   # vLLM 0.31 / 0.32 keep it in entrypoints/launchers/cli_args.py
            from vllm.entrypoints.launchers.cli_args import make_arg_parser  # type: ignore[no-redef]
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
        p.add_argument(*flags, dest=dest, type=_TYPES.get(typ, typ) if isinstance(typ, str) else typ, default=default)
    p.add_argument("--trust-remote-code", dest="trust_remote_code", action="store_true", default=False)
    return p


# Flags whose value makes a parser open a file (issue 40 #4): vLLM's FlexibleArgumentParser reads
# ``--config FILE`` (a YAML of more flags) while parsing (vllm/utils/argparse_utils.py
# _pull_args_from_config, load_config_file); ``--hf-overrides @FILE`` is argparse's from-file
# spelling (vLLM 0.33 does not enable it; refused all the same). A serve line from a REST client
# never makes the node open a file: these are refused by name before any parser sees the line.
FILE_FLAGS = ("--config",)
FROM_FILE_PREFIX = "@"
MAX_CONFIG_FILE_BYTES = 1 << 20  # a --config YAML read on the CLI (the user's own file)


def _flag_name(word: str) -> str:
    return word.split("=", 1)[0]


def refuse_file_reads(argv: Sequence[str]) -> None:
    """``InvalidInputError`` naming the first flag of ``argv`` that would make this machine read a
    file (``--config FILE``, a value ``@FILE``). Never the value: it is a path on this machine."""
    for i, word in enumerate(argv):
        name = _flag_name(word)
        if name in FILE_FLAGS:
            raise InvalidInputError("vllm serve", f"{name} reads a file on this node: not accepted from a client; "
                                                  "give the flags themselves on the line")
        if word.startswith(FROM_FILE_PREFIX):
            raise InvalidInputError("vllm serve", f"an argument names a file ('{FROM_FILE_PREFIX}FILE'): not "
                                                  "accepted from a client")
        if name == "--hf-overrides":
            value = word.split("=", 1)[1] if "=" in word else (argv[i + 1] if i + 1 < len(argv) else "")
            if value.startswith(FROM_FILE_PREFIX):
                raise InvalidInputError("vllm serve", f"--hf-overrides names a file ('{FROM_FILE_PREFIX}FILE'): not "
                                                      "accepted from a client; give the JSON object itself")


def _config_file(argv: Sequence[str]) -> Optional[str]:
    """The ``--config FILE`` of a CLI line, checked before vLLM's parser opens it: a missing,
    unreadable, oversized or non-YAML file is exit 2 naming the path (the user's own), never a
    crash (vLLM raises FileNotFoundError / AssertionError / ValueError) and never its contents."""
    from attnplan.safeio import read_bounded

    names = [i for i, w in enumerate(argv) if _flag_name(w) == "--config"]
    if not names:
        return None
    if len(names) > 1:
        raise InvalidInputError("config", "give --config at most once")
    i = names[0]
    word = argv[i]
    if "=" in word:
        raise InvalidInputError("config", "write --config FILE (vLLM reads the file only in that spelling)")
    if i + 1 >= len(argv) or argv[i + 1].startswith("-"):
        raise InvalidInputError("config", "--config needs a YAML file")
    path = argv[i + 1]
    if path.rsplit(".", 1)[-1] not in ("yaml", "yml"):
        raise InvalidInputError("config", "--config takes a .yaml or .yml file (vLLM's load_config_file)")
    read_bounded(path, what="config", max_bytes=MAX_CONFIG_FILE_BYTES)  # exists, regular, bounded, UTF-8
    return path


def parse_serve_line(argv: Sequence[str], *, allow_files: bool = True, release: Optional[str] = None) -> ServeLine:
    """A ``vllm serve`` argument list (after ``serve``) -> ServeLine; bad input is one InvalidInputError.

    ``allow_files``: whether the line may make this machine read a file (``--config FILE``): the CLI,
    where the file is the user's own, yes; a line from a REST client, no (``refuse_file_reads``).
    ``release``: the vLLM release the line is for (issue 42); where the installed vLLM is another (or none is),
    that release's shipped flag table reads it - the flags, choices and defaults of that release."""
    argv = list(argv)
    if not allow_files:
        refuse_file_reads(argv)
    if release is not None and release != _installed_vllm():
        table = shipped_table(release)
        if table is None:
            raise InvalidInputError("engine", f"no flag table for vLLM {release} is shipped",
                                    sorted(p.name[5:-11] for p in SHIPPED_TABLES.glob("vllm-*-flags.json")))
        if _needs_real_parser(argv):
            used = sorted({_flag_name(a) for a in argv if _REWRITTEN.match(a) or (a.startswith("--") and "_" in _flag_name(a))})
            raise InvalidInputError("vllm serve", f"{' '.join(used)}: vLLM's own parser rewrites these (a config file, "
                                                  f"-O levels, dotted or underscored flags); install vllm=={release} to read them")
        ns = _table_parser(table).parse_args(argv)
        return replace(line_from_namespace(ns, "table"), ignored=ignored_flags(argv, release))
    if vllm_available():
        ns = None
        config = _config_file(argv) if allow_files else None
        if not _needs_real_parser(argv):
            table = flag_table()
            if table is not None:
                ns = _table_parser(table).parse_args(argv)
        if ns is None:
            ns = _real_parse(argv, config)
            _save_flag_table(_vllm_parser())
        how = "vllm"
    elif not _forced_subset() and shipped_table() is not None:
        # vLLM is not installed: its flag table, shipped, reads the line (every flag vLLM 0.33 takes)
        if _needs_real_parser(argv):
            used = sorted({_flag_name(a) for a in argv if _REWRITTEN.match(a) or (a.startswith("--") and "_" in _flag_name(a))})
            raise InvalidInputError("vllm serve", f"{' '.join(used)}: vLLM's own parser rewrites these (a config file, "
                                                  "-O levels, dotted or underscored flags); install vllm to read them")
        ns = _table_parser(shipped_table()).parse_args(argv)
        how = "table"
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
    return replace(line_from_namespace(ns, how), ignored=ignored_flags(argv))


# What attnplan reads off a line (line_from_namespace): every other flag does not change attention.
ATTENTION_DESTS = frozenset({
    "model", "model_tag", "tensor_parallel_size", "pipeline_parallel_size", "decode_context_parallel_size", "dtype",
    "kv_cache_dtype", "block_size", "attention_backend", "attention_config", "speculative_config", "max_model_len",
    "hf_overrides", "trust_remote_code", "revision"})


def _installed_vllm() -> Optional[str]:
    import importlib.metadata as md

    try:
        return md.version("vllm")
    except md.PackageNotFoundError:
        return None


def ignored_flags(argv: Sequence[str], release: Optional[str] = None) -> tuple[str, ...]:
    """The line's flags that do not change attention, as typed (each once, in order): the shipped table maps
    each spelling to its destination; a flag it does not know is left to the parser that read the line."""
    table = shipped_table(release or SHIPPED_VERSION)
    if table is None:
        return ()
    dest = {o: e["dest"] for e in table["actions"] for o in e["options"]}
    seen = [_flag_name(a) for a in argv if a.startswith("-") and _flag_name(a) in dest]
    return tuple(dict.fromkeys(f for f in seen if dest[f] not in ATTENTION_DESTS))


def _forced_subset() -> bool:
    return os.environ.get("ATTNPLAN_VLLM_PARSER", "").lower() == "subset"


def _real_parse(argv: list[str], config: Optional[str]) -> argparse.Namespace:
    """vLLM's own parser over the line. Whatever it raises on the line is bad input (vLLM asserts on
    a second --config, a YAML that is not a mapping raises AttributeError): one InvalidInputError.
    With ``--config FILE`` its messages may quote the file's keys and values, so they are not shown."""
    parser = _vllm_parser()
    try:
        return parser.parse_args(argv)
    except InvalidInputError as exc:
        if config is None:
            raise
        raise InvalidInputError("vllm serve", "vLLM's parser refused the flags read from --config FILE (its "
                                              "message is not shown: it may quote the file); run vllm serve "
                                              "--config FILE to see it") from None
    except SystemExit:  # --help / --version and the like: not a plannable line
        raise InvalidInputError("vllm serve", "not a line to plan (a help or version flag)") from None
    except Exception as exc:  # noqa: BLE001 - vLLM's parser failing on the line is bad input, not a crash
        what = "the --config FILE" if config is not None else "the line"
        raise InvalidInputError("vllm serve", f"vLLM's parser could not read {what} ({type(exc).__name__})") from None


def line_from_namespace(ns: argparse.Namespace, how: str) -> ServeLine:
    """What attnplan reads from a parsed ``vllm serve`` line (any of the three parsers)."""
    model = getattr(ns, "model_tag", None) or getattr(ns, "model", None)
    if not model:
        raise InvalidInputError("model", "give the model: attnplan vllm serve MODEL [flags]")
    spec = parse_json_arg(getattr(ns, "speculative_config", None), "speculative_config")
    backend = getattr(ns, "attention_backend", None)
    ac = getattr(ns, "attention_config", None)
    if isinstance(ac, str):  # the flag table keeps JSON values as given
        ac = parse_json_arg(ac, "attention_config")
    if ac is not None and not isinstance(ac, dict):  # vLLM's own parser: an AttentionConfig (config/attention.py)
        ac = {k: getattr(ac, k) for k in ("backend", "use_trtllm_attention", "disable_flashinfer_q_quantization")
              if hasattr(ac, k)}
    ac = dict(ac or {})
    if backend is None:  # --attention-config '{"backend": ...}'
        backend = ac.get("backend")
    backend = getattr(backend, "name", backend)
    sizes = {}
    for dest in ("tensor_parallel_size", "pipeline_parallel_size", "decode_context_parallel_size"):
        v = getattr(ns, dest, None)
        # 0 is a value, not "unset": vLLM refuses it, and so does attnplan (serve.py names the flag).
        sizes[dest] = 1 if v is None else _int_or_none(v, dest)
    max_len = _int_or_none(getattr(ns, "max_model_len", None), "max_model_len")
    return ServeLine(
        model=str(model),
        **sizes,
        dtype=str(getattr(ns, "dtype", "auto") or "auto"),
        # exactly as given (vLLM's CacheDType is an exact Literal: '' or 'FP8' is not 'auto' or 'fp8')
        kv_cache_dtype="auto" if getattr(ns, "kv_cache_dtype", None) is None else str(ns.kv_cache_dtype),
        block_size=_int_or_none(getattr(ns, "block_size", None), "block_size"),
        attention_backend=None if backend is None else str(backend),
        # vLLM's defaults (AttentionConfig: use_trtllm_attention None, disable_flashinfer_q_quantization False) left
        # out: the same line reads the same whichever parser read it
        attention_config={k: v for k, v in ac.items() if k != "backend" and not (
            (k == "use_trtllm_attention" and v is None) or (k == "disable_flashinfer_q_quantization" and v is False))},
        speculative=spec,
        max_model_len=None if max_len == -1 else max_len,  # -1: vLLM's "auto", the model's own length
        hf_overrides=parse_json_arg(getattr(ns, "hf_overrides", None), "hf_overrides"),
        trust_remote_code=bool(getattr(ns, "trust_remote_code", False)),
        revision=_revision(getattr(ns, "revision", None)),
        parser=how,
    )


def _revision(raw: Any) -> Optional[str]:
    """``--revision``: a git ref or commit hash of the cached repo, never a path (issue 40 #4)."""
    from attnplan.model.hfconfig import check_revision

    return check_revision(raw)


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


# -- vLLM's flag table, cached ------------------------------------------------------------------
TABLE_FORMAT = 1
# The flag tables attnplan ships (scripts/vllm_flag_table.py), one per modelled vLLM release: where vLLM is not
# installed, a line is read with the table of the release it is planned for - every flag vLLM takes is accepted.
SHIPPED_TABLES = Path(__file__).parent / "tables"
SHIPPED_VERSION = "0.33.0"


@functools.lru_cache(maxsize=4)
def shipped_table(version: str = SHIPPED_VERSION) -> Optional[dict[str, Any]]:
    """vLLM ``version``'s flag table as shipped in the wheel, or None."""
    try:
        data = json.loads((SHIPPED_TABLES / f"vllm-{version}-flags.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("format") != TABLE_FORMAT or not isinstance(data.get("actions"), list):
        return None
    return data


def cache_dir() -> Path:
    """Where attnplan keeps what it derives once per installed version (vLLM's flag table)."""
    if os.environ.get("ATTNPLAN_CACHE_DIR"):
        return Path(os.environ["ATTNPLAN_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "attnplan"


def _versions() -> Optional[tuple[str, str]]:
    import importlib.metadata as md

    from attnplan._version import __version__

    try:
        return md.version("vllm"), __version__
    except md.PackageNotFoundError:
        return None


def table_path() -> Optional[Path]:
    v = _versions()
    if v is None:
        return None
    safe = re.sub(r"[^A-Za-z0-9._+-]", "_", f"vllm-{v[0]}-attnplan-{v[1]}")
    return cache_dir() / f"{safe}-flags.json"


def flag_table() -> Optional[dict[str, Any]]:
    """The cached flag table of the installed vLLM, or None (missing, stale, unreadable)."""
    p, v = table_path(), _versions()
    if p is None or v is None:
        return None
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("format") != TABLE_FORMAT or [data.get("vllm"), data.get("attnplan")] != list(v):
        return None
    return data if isinstance(data.get("actions"), list) else None


def _jsonable(v: Any) -> Any:
    try:
        json.dumps(v)
        return v
    except (TypeError, ValueError):
        return None


def extract_flag_table(parser: argparse.ArgumentParser) -> dict[str, Any]:
    """The flags of vLLM's parser as data: option strings, dest, kind, arity, choices, value type."""
    actions = []
    for a in parser._actions:
        kind = {argparse._StoreAction: "store", argparse._StoreTrueAction: "store_true",
                argparse._StoreFalseAction: "store_false", argparse._StoreConstAction: "store_const",
                argparse._AppendAction: "append", argparse._CountAction: "count",
                argparse._HelpAction: "help"}.get(type(a))
        # Every spelling the parser answers to, hidden ones too (EnableDisableAction keeps
        # --no-enable-x registered but out of option_strings).
        opts = [o for o, act in parser._option_string_actions.items() if act is a] if a.option_strings else []
        entry: dict[str, Any] = {"options": opts, "dest": a.dest,
                                 "nargs": a.nargs if isinstance(a.nargs, (int, str)) or a.nargs is None else None,
                                 "default": _jsonable(a.default), "const": _jsonable(a.const)}
        if isinstance(a, argparse.BooleanOptionalAction):
            # vLLM's EnableDisableAction pairs --enable-x with --disable-x (negative_option_strings).
            neg = getattr(a, "negative_option_strings", None)
            neg = set(neg) if neg is not None else {o for o in a.option_strings if o.startswith("--no-")}
            kind, entry["negative"] = "bool", sorted(neg)
        if kind is None:
            kind = "store"  # vLLM's own actions (LoRA modules, a deprecated log flag) take values
        entry["kind"] = kind
        tname = getattr(a.type, "__name__", None)
        entry["type"] = tname if tname in _TYPES else None
        if a.choices is not None and all(isinstance(c, str) for c in a.choices):
            entry["choices"] = list(a.choices)
        actions.append(entry)
    v = _versions() or ("?", "?")
    return {"format": TABLE_FORMAT, "vllm": v[0], "attnplan": v[1], "allow_abbrev": bool(parser.allow_abbrev),
            "actions": actions}


def _save_flag_table(parser: argparse.ArgumentParser) -> None:
    p = table_path()
    if p is None:
        return
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(extract_flag_table(parser)), encoding="utf-8")
        os.replace(tmp, p)
    except OSError:
        pass  # a read-only home: the real parser every time, slower but right


class _BoolAction(argparse.Action):
    def __init__(self, option_strings: list[str], dest: str, negative: tuple[str, ...] = (), **kw: Any):
        super().__init__(option_strings, dest, nargs=0, **kw)
        self.negative = set(negative)

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: Optional[str] = None) -> None:
        setattr(namespace, self.dest, option_string not in self.negative)


def _table_parser(table: dict[str, Any]) -> argparse.ArgumentParser:
    p = _OneLine(prog="vllm serve", add_help=False, allow_abbrev=bool(table.get("allow_abbrev", True)))
    for e in table["actions"]:
        kind, opts = e["kind"], e["options"]
        if kind == "help":
            continue
        kw: dict[str, Any] = {"dest": e["dest"], "default": e.get("default")}
        if kind == "bool":
            p.add_argument(*opts, action=_BoolAction, negative=tuple(e.get("negative", ())), **kw)
            continue
        if kind in ("store_true", "store_false", "store_const", "count"):
            if kind == "store_const":
                kw["const"] = e.get("const")
            p.add_argument(*opts, action=kind, **kw)
            continue
        if e.get("nargs") is not None:
            kw["nargs"] = e["nargs"]
        if e.get("type"):
            kw["type"] = _TYPES[e["type"]]
        if e.get("choices") is not None:
            kw["choices"] = e["choices"]
        if not opts:  # the positional model tag
            kw.pop("dest")
            p.add_argument(e["dest"], action=kind, **kw)
        else:
            p.add_argument(*opts, action=kind, **kw)
    return p


_REWRITTEN = re.compile(r"^(--config(=|$)|-O|--[^=]*\.)")


def _needs_real_parser(argv: Sequence[str]) -> bool:
    """Lines using FlexibleArgumentParser's own rewriting (a config file, -O3, dotted JSON keys,
    underscores in flag names) are left to it."""
    return any(_REWRITTEN.match(a) or (a.startswith("--") and "_" in a.split("=", 1)[0]) for a in argv)
