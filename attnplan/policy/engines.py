"""Engine layers (docs/contract.md, Engines and versions): which engine and version an answer speaks for, and which rules apply.

``vllm`` (the default) is FlashInfer's kernel rules plus vLLM's own gates, read for the versions
``rules/backends.yaml`` models; ``flashinfer`` is the kernel rules alone. A version the data does
not model is an error naming the modelled ones, never a guess.

An engine as a caller names it (``--engine vllm==0.33.0``, a REST ``engine`` field, an ``SglangEngine``)
is parsed once, where it enters (``parse_engine``), into an ``EngineSpec`` value that the policy
functions carry: an engine the rules do not model fails there, as ``packaging`` fails on an invalid
specifier when it is parsed. Only what depends on a node (the vllm installed on it) waits for
``resolve_engine``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Optional, Union

from .answer import Coercion, EngineBackend, EngineName, EngineRef, Note, Violation
from .config import AttentionConfig
from attnplan.errors import InvalidInputError
from .facts import NodeFacts
from .rulepack import Check, RuleSet, release_for


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


@dataclass(frozen=True)
class EngineSpec:
    """An engine layer as asked for, parsed and checked against the rules (``parse_engine``).

    ``version`` None: the node's own - for vllm the release installed on the node, else the newest
    modelled; for flashinfer always the node's flashinfer. ``request``: an engine's own request
    object (``SglangEngine``: SGLang's flags), handed to the engine's resolver. Hashable: answers
    are memoised per spec."""

    name: str
    version: Optional[str] = None
    request: Any = None

    def __str__(self) -> str:
        return self.name if self.version is None else f"{self.name}=={self.version}"

    def matches(self, ref: EngineRef) -> bool:
        """An answer made for ``ref`` answers this spec: the same engine, and the same release when
        one was asked for (unversioned asks for the node's own, whichever it is)."""
        return ref.name == self.name and (self.version is None or ref.version == self.version)

    @classmethod
    def of(cls, ref: EngineRef, rs: Optional[RuleSet] = None) -> "EngineSpec":
        """The layer an answer was made for (``answer.engine``), to evaluate the same layer again under
        ``rs`` (default: the shipped rules): an adapter layer's version (``engines.<name>.adapter``: the
        flashinfer layer) is the node's FlashInfer, so it is not pinned."""
        if rs is None:
            from .shipped import default_ruleset

            rs = default_ruleset()
        layer = rs.engines.get(ref.name)
        return cls(ref.name, None if layer is not None and layer.adapter else ref.version)


# What the policy functions take as ``engine``: a parsed spec, or what parse_engine parses (text, None,
# or an engine request object such as ``SglangEngine``, which names itself).
EngineLike = Union[EngineSpec, str, None, Any]


def parse_engine(engine: EngineLike, rs: RuleSet) -> EngineSpec:
    """``None``/``"vllm"``: vllm at the node's release; ``"vllm==X"``: that release; ``"flashinfer"``:
    kernel truth alone; an engine request object (``SglangEngine``) names itself (``str``) and rides
    along as ``request``. An ``EngineSpec`` is returned as it is (parsed once, where it entered).
    Raises InvalidInputError naming the covered engines for anything the rules do not model."""
    if isinstance(engine, EngineSpec):
        return engine
    request = None if engine is None or isinstance(engine, str) else engine
    raw = (str(engine) if engine else rs.default_engine).strip().lower()
    name, sep, version = raw.partition("==")
    name, version = name.strip(), version.strip()
    allowed = engine_names(rs)
    if sep and not version:  # "vllm==" names no release: never read it as "the default vllm"
        raise InvalidInputError("engine", f"{engine!r} names no version after '==' (e.g. vllm==0.33.0, or just vllm)",
                                allowed)
    if name not in rs.engines:
        raise InvalidInputError("engine", f"unknown engine {engine!r}", allowed)
    if rs.engines[name].adapter and version:
        raise InvalidInputError("engine", f"the {name} layer is the node's flashinfer (give --flashinfer-version)",
                                allowed)
    if version and not _covered(rs, name, version):
        raise InvalidInputError("engine", f"{name} {version} is not modelled (covered: {_coverage(rs, name)})", allowed)
    return EngineSpec(name, version or None, request)


def _coverage(rs: RuleSet, name: str) -> str:
    spec = rs.engines[name]
    return spec.covers or ", ".join(spec.versions)


def resolve_engine(engine: EngineLike, node: Optional[NodeFacts], rs: RuleSet) -> EngineRef:
    """The engine layer and release an answer speaks for: ``engine`` (an ``EngineSpec``; anything else
    is parsed first) on ``node``. With no node, nothing is installed: vllm alone is the newest modelled
    release. Raises InvalidInputError when the vllm installed on the node is not modelled."""
    spec = parse_engine(engine, rs)
    name = spec.name
    if rs.engines[name].adapter:   # attnplan's own FlashInfer layer: the node's FlashInfer is its release
        fi = node.flashinfer_version.value if node is not None else None
        return EngineRef(name=name, version=str(fi) if fi is not None else None)
    version = spec.version
    if version is None:
        layer = rs.engines[name]
        # the release installed on the node (the probe reads vllm's and sglang's package metadata), else the newest
        fact = getattr(node, f"{name}_version", None) if node is not None else None
        installed = fact.value if fact is not None else None
        version = str(installed).strip() if installed else (layer.versions[-1].strip() if layer.versions else "")
        if installed and not _covered(rs, name, version):
            raise InvalidInputError("engine", f"{name} {installed} is installed on this node, but the rules model "
                                    f"{_coverage(rs, name)} only; pass --engine with a covered one", engine_names(rs))
        if not _covered(rs, name, version):
            raise InvalidInputError("engine", f"{name} {version} is not modelled (covered: {_coverage(rs, name)})",
                                    engine_names(rs))
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


def flashinfer_pin(rs: RuleSet, engine: EngineRef) -> Optional[str]:
    """The flashinfer-python the engine release pins (backends.yaml engines.<name>.releases), if data says."""
    if engine.name not in rs.engines or engine.version is None:
        return None
    spec = rs.engines[engine.name]
    pin = spec.releases.get(release_for(spec, engine.version))
    return pin.flashinfer if pin is not None else None


def release_node(rs: RuleSet, engine: EngineRef, node: NodeFacts) -> tuple[NodeFacts, list[Note]]:
    """The node as the engine release sees it, and what to tell about its FlashInfer (issue 42), as data
    (a ``release-pin`` note: render/notes.py words it).

    A FlashInfer version the node was only *assumed* to have (a declared device) is the one the release pins:
    `pip install vllm==0.32.0` brings flashinfer-python 0.7.0.post1, so its kernel rules are 0.7.0's (and an
    assumed cubin wheel follows it). A probed or declared one that differs from the pin stays (the kernel rules
    answer for what is installed) and is told."""
    pin = flashinfer_pin(rs, engine)
    fi = node.flashinfer_version
    if pin is None or fi.value is None or str(fi.value) == pin:
        return node, []
    who = f"{engine.name} {engine.version}"
    if fi.source.value == "assumed":
        update = {"flashinfer_version": fi.model_copy(update={"value": pin, "detail": f"the flashinfer-python {who} pins"})}
        cubin = node.flashinfer_cubin_version
        if cubin.source.value == "assumed" and cubin.value is not None:
            update["flashinfer_cubin_version"] = cubin.model_copy(update={"value": pin})
        return node.with_fact(**update), []
    spec = rs.engines[engine.name]
    src = spec.releases[release_for(spec, engine.version)].source
    return node, [Note(kind="release-pin", engine=EngineName(name=engine.name, display=spec.display, version=engine.version,
                                                            adapter=bool(spec.adapter)),
                       pin=pin, installed=str(fi.value), source=src)]


def selection_for(rs: RuleSet, engine: EngineRef) -> dict:
    return rs.layer(engine.name, engine.version).selection


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
    ``request``: the engine's own request object (``EngineSpec.request``: SGLang's flags), or None."""
    spec = rs.engines[ref.name]
    if spec.resolver is None:
        return None
    import importlib

    module, _, fn = spec.resolver.partition(":")
    return getattr(importlib.import_module(module), fn)(rs, ref, config, node, request)


def engine_request_for_model(rs: RuleSet, spec: EngineSpec, data: Any, where: str = "config.json") -> EngineSpec:
    """An engine whose resolver keys decisions on the model (SGLang: ``hf_config.architectures[0]``) gets the
    model with its request - the resolver module's ``request_for_model`` - so every entry point that plans a
    model (CLI, REST, preflight, labels, launch_server, compare) resolves it one way (issue 39). Other
    engines: the spec as it is."""
    layer = rs.engines[spec.name]
    if layer.resolver is None:
        return spec
    import importlib

    hook = getattr(importlib.import_module(layer.resolver.partition(":")[0]), "request_for_model", None)
    return spec if hook is None else EngineSpec(spec.name, spec.version, hook(spec.request, data, where))


def engine_alternatives(rs: RuleSet, spec: EngineSpec, is_mla: bool, selected: Any) -> list[tuple[str, str, EngineSpec]]:
    """The engine's other backends as fix candidates (``(flag, change, engine spec)``), from its resolver
    module's ``backend_alternatives`` (SGLang: its own --attention-backend names); [] for an engine without."""
    layer = rs.engines.get(spec.name)
    if layer is None or layer.resolver is None:
        return []
    import importlib

    hook = getattr(importlib.import_module(layer.resolver.partition(":")[0]), "backend_alternatives", None)
    return [] if hook is None else list(hook(rs, spec, is_mla, selected))
