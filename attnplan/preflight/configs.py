"""The configs a preflight asks about: one from flags / --model-config, or a YAML list (--configs).

A ``--configs`` file is a YAML list (or ``{configs: [...]}``); each entry holds the fields of
``AttentionConfig`` or ``model_config: PATH`` (relative to the file) plus overrides, and an
optional ``name``::

    - name: llama-3.1-8b
      model_config: ../examples/llama-3.1-8b.json
    - {name: gpt-oss, model_config: ../examples/gpt-oss-120b.json, kv_cache_dtype: fp8}
    - {head_dim: 128, num_qo_heads: 32, num_kv_heads: 8, kv_cache_dtype: nvfp4, engine: flashinfer}

An entry's ``engine`` (vllm, vllm==X, flashinfer) wins over ``--engine``, so one file can compare
engine layers. Any invalid entry is one ``InvalidInputError`` naming the entry and the field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from attnplan.policy import AttentionConfig, InvalidInputError, config_from_hf, make_config

from attnplan.safeio import parse_yaml, read_bounded

from .model import NamedConfig

MAX_CONFIGS = 256
MAX_FILE_BYTES = 1 << 20


def _entry_error(i: int, name: Optional[str], exc: InvalidInputError) -> InvalidInputError:
    label = f"entry {i + 1}" + (f" ({name})" if name else "")
    return InvalidInputError(f"configs: {label}: {exc.field}", str(exc).split(": ", 1)[-1])


def config_entry(entry: Any, i: int, base_dir: Path, overrides: Mapping[str, Any],
                 default_engine: Optional[str] = None) -> NamedConfig:
    if not isinstance(entry, dict):
        raise InvalidInputError(f"configs: entry {i + 1}", f"must be a mapping of config fields, got {type(entry).__name__}")
    fields = dict(entry)
    name = fields.pop("name", None)
    if name is not None and not isinstance(name, (str, int, float)):
        raise InvalidInputError(f"configs: entry {i + 1}: name", f"must be a string, got {name!r}")
    name = str(name) if name is not None else None
    engine = fields.pop("engine", None)
    if engine is not None and (not isinstance(engine, str) or not engine.strip() or len(engine) > 64):
        raise _entry_error(i, name, InvalidInputError("engine", f"must be an engine name such as vllm, "
                                                      f"vllm==0.33.0 or flashinfer, got {engine!r}"))
    engine = engine.strip() if engine is not None else default_engine
    model_config = fields.pop("model_config", None)
    fields.update(overrides)
    try:
        if model_config is not None:
            if not isinstance(model_config, str) or not model_config:
                raise InvalidInputError("model_config", f"must be a path, got {model_config!r}")
            path = Path(model_config)
            if not path.is_absolute():
                path = base_dir / path
            cfg = config_from_hf(path, **fields)
            name = name or Path(model_config).stem.removesuffix(".json")
            if name == "config":  # a directory's config.json: name it after the directory
                name = path.parent.name or name
        else:
            cfg = make_config(fields)
    except InvalidInputError as exc:
        raise _entry_error(i, name, exc) from None
    return NamedConfig(name or f"config-{i + 1}", cfg, engine)


def load_configs(path: str | Path, overrides: Mapping[str, Any] | None = None, *,
                 engine: Optional[str] = None) -> list[NamedConfig]:
    # Bounded read of a regular file (a FIFO is bad input, not a hang), nesting and aliases
    # checked before parsing, duplicate keys refused (two head_dim keys: which one is meant?).
    p = Path(path)
    text = read_bounded(p, what="configs", max_bytes=MAX_FILE_BYTES)
    data = parse_yaml(text, what="configs", name=str(p))
    if isinstance(data, dict) and set(data) == {"configs"}:
        data = data["configs"]
    if not isinstance(data, list) or not data:
        raise InvalidInputError("configs", f"{p}: must hold a non-empty YAML list of configs")
    if len(data) > MAX_CONFIGS:
        raise InvalidInputError("configs", f"{p}: {len(data)} entries; at most {MAX_CONFIGS}")
    out = [config_entry(e, i, p.parent, overrides or {}, engine) for i, e in enumerate(data)]
    return unique_names(out)


def unique_names(configs: Sequence[NamedConfig]) -> list[NamedConfig]:
    seen: dict[str, int] = {}
    out = []
    for c in configs:
        n = seen.get(c.name, 0)
        seen[c.name] = n + 1
        out.append(c if n == 0 else NamedConfig(f"{c.name}#{n + 1}", c.config, c.engine))
    return out


def describe(cfg: AttentionConfig) -> str:
    """A short one-line description: the fields that differ from the defaults."""
    data = cfg.model_dump(exclude_defaults=True)
    return " ".join(f"{k}={v}" for k, v in data.items())
