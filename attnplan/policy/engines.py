"""Engine layers (SPEC §10): which engine and version an answer speaks for, and which rules apply.

``vllm`` (the default) is FlashInfer's kernel rules plus vLLM's own gates, read for the versions
``rules/backends.yaml`` models; ``flashinfer`` is the kernel rules alone. A version the data does
not model is an error naming the modelled ones, never a guess.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Optional

from .answer import Coercion, EngineBackend, EngineRef, Violation
from .config import AttentionConfig
from .errors import InvalidInputError
from .facts import NodeFacts
from .rulepack import Check, RuleSet


def engine_names(rs: RuleSet) -> list[str]:
    """What ``--engine`` accepts: each engine, and ``vllm==X`` for every modelled release."""
    out = []
    for name, spec in rs.engines.items():
        out.append(name)
        out += [f"{name}=={v}" for v in spec.versions]
    return out


def _covered(rs: RuleSet, name: str, version: str) -> bool:
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion, Version

    spec = rs.engines[name]
    try:
        v = Version(version)
    except InvalidVersion:
        return False
    if spec.covers is not None and SpecifierSet(spec.covers).contains(v, prereleases=True):
        return True
    return any(Version(m) == v for m in spec.versions)


def resolve_engine(engine: Optional[str], node: NodeFacts, rs: RuleSet) -> EngineRef:
    """``None``/``"vllm"``: the vllm installed on the node (``node.vllm_version``), else the newest
    modelled; ``"vllm==X"``: that release; ``"flashinfer"``: kernel truth alone.
    Raises InvalidInputError naming the covered engines for anything else."""
    raw = (str(engine) if engine else rs.default_engine).strip().lower()  # an engine request object names itself
    name, sep, version = raw.partition("==")
    name, version = name.strip(), version.strip()
    allowed = engine_names(rs)
    if sep and not version:  # "vllm==" names no release: never read it as "the default vllm"
        raise InvalidInputError("engine", f"{engine!r} names no version after '==' (e.g. vllm==0.33.0, or just vllm)",
                                allowed)
    if name not in rs.engines:
        raise InvalidInputError("engine", f"unknown engine {engine!r}", allowed)
    spec = rs.engines[name]
    if name == "flashinfer":
        if version:
            raise InvalidInputError("engine", "the flashinfer layer is the node's flashinfer (give --flashinfer-version)", allowed)
        fi = node.flashinfer_version.value
        return EngineRef(name="flashinfer", version=str(fi) if fi is not None else None)
    if not version:
        installed = node.vllm_version.value if name == "vllm" else None  # the one engine the probe reads
        version = str(installed) if installed else (spec.versions[-1] if spec.versions else "")
        if installed and not _covered(rs, name, version):
            raise InvalidInputError("engine", f"vllm {installed} is installed on this node, but the rules model "
                                    f"{spec.covers or ', '.join(spec.versions)} only; pass --engine with a covered one", allowed)
    version = version.strip()
    if not _covered(rs, name, version):
        raise InvalidInputError("engine", f"{name} {version} is not modelled (covered: {spec.covers or ', '.join(spec.versions)})",
                                allowed)
    return EngineRef(name=name, version=version)  # type: ignore[arg-type]


def active_checks(rs: RuleSet, engine: EngineRef, flashinfer_version: object) -> tuple[Check, ...]:
    """The checks of every rule that speaks for this engine and these versions."""
    spec = rs.engines[engine.name]
    versioned = bool(spec.covers or spec.versions)  # flashinfer's layer version is the kernel's, not an engine's
    return _active(rs, engine.name, engine.version if versioned else None,
                   str(flashinfer_version) if flashinfer_version is not None else None)


@functools.lru_cache(maxsize=64)
def _active(rs: RuleSet, name: str, version: Optional[str], fi: Optional[str]) -> tuple[Check, ...]:
    return tuple(c for r in rs.rules if r.applies(name, version, fi) for c in r.checks)


def selection_for(rs: RuleSet, engine: EngineRef) -> dict:
    return rs.engines[engine.name].selection


@dataclass(frozen=True)
class EngineResolution:
    """What an engine with its own backends (SGLang) decided before FlashInfer runs: the config it
    runs (page size coerced), the FlashInfer candidates per phase, its own pick and its refusals."""

    config: AttentionConfig
    selection: dict
    engine_backend: EngineBackend
    engine_phases: dict
    coercions: tuple[Coercion, ...] = ()
    violations: tuple[Violation, ...] = ()
    notes: tuple[str, ...] = ()

    def answer_fields(self) -> dict:
        return {"engine_backend": self.engine_backend, "engine_phases": self.engine_phases, "coercions": self.coercions}


def engine_resolution(rs: RuleSet, ref: EngineRef, config: AttentionConfig, node: NodeFacts,
                      request: object = None) -> Optional[EngineResolution]:
    """The engine's own resolution when backends.yaml names a resolver for it (None otherwise).
    ``request``: what the caller passed as ``engine`` (an engine request object may carry flags)."""
    spec = rs.engines[ref.name]
    if spec.resolver is None:
        return None
    import importlib

    module, _, fn = spec.resolver.partition(":")
    return getattr(importlib.import_module(module), fn)(rs, ref, config, node, request)
