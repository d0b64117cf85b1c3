"""The one parse of a backend name for the engine it is typed under (issue 40 class 1).

``--attention-backend NAME`` (CLI ``plan``/``explain``, a REST ``attention_backend``) names a backend in the
vocabulary of the engine the answer speaks for:

- ``vllm`` (and ``flashinfer``): vLLM's enum names or attnplan's FlashInfer backends; the attention config
  reads them (policy/backend_names.py: FlashInfer names map onto its backends, vLLM's own backends are kept
  by name and judged by vLLM's own validation in the verdict).
- ``sglang``: SGLang's own names (``arg_groups/choices.py ATTENTION_BACKEND_CHOICES``), which go to SGLang's
  resolver as its ``--attention-backend`` flag, never into the FlashInfer config (SGLang's ``fa3`` is not
  FlashInfer's). A name SGLang does not take is bad input naming the ones it does; the vLLM / attnplan
  spellings of SGLang's ``flashinfer`` (``FLASHINFER``, ``FLASHINFER_MLA``, ``flashinfer-mla``) are that
  backend, said once.
"""

from __future__ import annotations

from typing import Optional

from attnplan.policy import EngineSpec, InvalidInputError



def _flashinfer_spellings() -> set[str]:
    """vLLM's and attnplan's names for FlashInfer with the engine's own choice of its kernels (backends.yaml
    engines.vllm.auto_names and the vLLM enum names that map onto them): what SGLang calls ``flashinfer``, for
    MLA models too (attention_registry.py create_flashinfer_backend builds FlashInferMLAAttnBackend)."""
    from attnplan.policy import default_ruleset
    from attnplan.policy.backend_names import VLLM_TO_ATTNPLAN

    auto = set(default_ruleset().engines["vllm"].auto_names)
    return {n.lower() for n in auto} | {k.lower() for k, v in VLLM_TO_ATTNPLAN.items() if v in auto}


def sglang_backend(raw: str) -> str:
    """SGLang's backend for ``raw`` (its own names, exactly; FlashInfer's spellings of ``flashinfer``)."""
    from attnplan.sglang.launch import ATTENTION_BACKEND_CHOICES

    name = str(raw).strip()
    if name in ATTENTION_BACKEND_CHOICES:
        return name
    if name.lower() in _flashinfer_spellings():
        return next(b for b in ATTENTION_BACKEND_CHOICES if b in _flashinfer_spellings())
    raise InvalidInputError("attention_backend", f"SGLang 0.5.23 has no --attention-backend {name!r} (under "
                            "--engine sglang the backend is SGLang's own name)", ATTENTION_BACKEND_CHOICES)


def with_backend(spec: EngineSpec, backend: Optional[str], architecture: Optional[str] = None) -> tuple[EngineSpec, Optional[str]]:
    """``(engine, backend for the attention config)``: under SGLang the backend (and the model's architecture,
    which SGLang's model overrides key on) ride in SGLang's own request, and the config keeps ``auto``."""
    if spec.name != "sglang" or (backend is None and architecture is None):
        return spec, backend
    from attnplan.sglang.flags import SglangEngine, SglangFlags

    base = getattr(spec.request, "flags", None) or SglangFlags()
    changes = {}
    if backend is not None and str(backend).strip().lower() != "auto":
        changes["attention_backend"] = sglang_backend(backend)
    if architecture is not None and base.architecture is None:
        changes["architecture"] = architecture
    request = SglangEngine(flags=base.with_(**changes), **({"version": spec.version} if spec.version else {}))
    return EngineSpec(spec.name, spec.version, request), None
