"""The configs a preflight asks about: one from flags / --model-config, or a YAML list (--configs).

A ``--configs`` file is a YAML list (or ``{configs: [...]}``); each entry holds the fields of
``AttentionConfig``, or a whole model: ``model_config: PATH`` / ``model: PATH|PRESET|REPO_ID``
(a path relative to the file) with the ``vllm serve`` fields of ``ModelRequest``
(``tensor_parallel_size``, ``kv_cache_dtype``, ``block_size``, ...; other attention fields are
laid over every layer group), or ``serve: "vllm serve MODEL [flags]"``; and an optional ``name``::

    - name: llama-3.1-8b
      model_config: ../examples/llama-3.1-8b.json
    - {name: gpt-oss, model_config: ../examples/gpt-oss-120b.json, kv_cache_dtype: fp8}
    - {name: gemma-tp2, serve: "vllm serve ../tests/models/gemma-3-27b-it.json -tp 2"}
    - {head_dim: 128, num_qo_heads: 32, num_kv_heads: 8, kv_cache_dtype: nvfp4, engine: flashinfer}

A model is read here and sent to each node as its config.json (a node needs no copy); a repo id
not in this machine's HuggingFace cache is sent as the id, for the node's own cache.

An entry's ``engine`` (vllm, vllm==X, flashinfer) wins over ``--engine``, so one file can compare
engine layers. Any invalid entry is one ``InvalidInputError`` naming the entry and the field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from attnplan.policy import AttentionConfig, InvalidInputError, make_config

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
    model_ref = fields.pop("model_config", None)
    if "model" in fields:
        if model_ref is not None:
            raise _entry_error(i, name, InvalidInputError("model", "give model or model_config, not both"))
        model_ref = fields.pop("model")
    serve = fields.pop("serve", None)
    try:
        if serve is not None or model_ref is not None:
            if serve is not None and model_ref is not None:
                raise InvalidInputError("serve", "give serve or model_config, not both")
            req = model_request(model_ref, serve, {**fields, **overrides}, engine, base_dir)
            name = name or model_name(req)
            return NamedConfig(name or f"config-{i + 1}", None, engine if serve is None else req.engine,
                               inline_model(req, base_dir))
        fields.update(overrides)
        cfg = make_config(fields)
    except InvalidInputError as exc:
        raise _entry_error(i, name, exc) from None
    return NamedConfig(name or f"config-{i + 1}", cfg, engine)


def model_request(model: Any, serve: Optional[str], fields: Mapping[str, Any], engine: Optional[str],
                  base_dir: Optional[Path] = None) -> Any:
    """A ``ModelRequest`` from a model reference (or a serve line) and flat fields, parsed as ``attnplan plan
    --model-config`` parses its flags (attnplan/request.py ``request_from_fields``: one parse for every command)."""
    from attnplan.request import request_from_fields

    if serve is not None:
        from attnplan.lines import request_from_line

        if not isinstance(serve, str):
            raise InvalidInputError("serve", f"must be a vllm serve or sglang.launch_server line, got {serve!r}")
        req = request_from_line(serve, engine=engine)
        if fields:
            raise InvalidInputError(sorted(fields)[0], "set it on the serve line itself")
        if isinstance(req.model, str) and base_dir is not None and not Path(req.model).is_absolute() \
                and (base_dir / req.model).exists():
            req = req.model_copy(update={"model": str(base_dir / req.model)})
        return req
    if isinstance(model, str) and base_dir is not None and not Path(model).is_absolute():
        local = base_dir / model
        if local.exists():
            model = str(local)
    return request_from_fields(model, fields, engine=engine)


def inline_model(req: Any, base_dir: Optional[Path] = None) -> Any:
    """The request with its model read here (a path, a preset, a cached repo id) and carried as the
    config.json itself; a repo id this machine does not have stays an id, for each node's cache."""
    from attnplan.policy import ModelConfigError
    from attnplan.request import _REF, read_reference

    if not isinstance(req.model, str):
        return req
    try:
        data = read_reference(req.model, allow_paths=True, revision=req.revision)
    except ModelConfigError:
        if _REF.match(req.model) and "/" in req.model and not Path(req.model).exists():
            return req  # the nodes' caches may have it
        raise
    return req.model_copy(update={"model": data})


def model_name(req: Any, ref: Any = None) -> Optional[str]:
    """The name a report shows for a model: its file's stem, its directory, or its repo id."""
    m = ref if isinstance(ref, str) else req.model
    if not isinstance(m, str):
        return None
    p = Path(m)
    name = p.stem.removesuffix(".json")
    if name == "config" or p.is_dir():
        name = (p.parent.name if name == "config" else p.name) or name
    return name or None


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
        out.append(c if n == 0 else NamedConfig(f"{c.name}#{n + 1}", c.config, c.engine, c.request))
    return out


def describe(cfg: AttentionConfig) -> str:
    """A short one-line description: the fields that differ from the defaults."""
    data = cfg.model_dump(exclude_defaults=True)
    return " ".join(f"{k}={v}" for k, v in data.items())
