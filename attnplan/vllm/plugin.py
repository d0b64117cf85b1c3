"""The vLLM plugin: refuse an unsupported attention setup in each worker, before weights load.

Install: ``pip install attnplan[vllm]`` registers ``attnplan = attnplan.vllm.plugin:register`` in
the ``vllm.general_plugins`` entry-point group. vLLM calls every general plugin in every process
(vllm/plugins/__init__.py ``load_general_plugins``: from ``EngineArgs``, ``EngineCore.__init__``
and, in each worker, ``WorkerWrapperBase.init_worker`` in vllm/v1/worker/worker_base.py, right
before it builds the worker object).

Hook: ``register`` wraps ``vllm.v1.worker.gpu_worker.Worker.load_model`` (the method that loads
the weights, vllm/v1/worker/gpu_worker.py). Why there and not ``VllmConfig.__post_init__``
(config/vllm.py): the worker is the process that owns the GPU the kernels will run on (the
front end may run elsewhere or see no GPU), it holds the finished per-rank ``VllmConfig``
(platform defaults applied: block size, cache dtype, backend), and ``load_model`` runs before
any weight is read or CUDA graph captured, so a refusal costs seconds, not a model load. Each
rank checks its own shape (``get_num_attention_heads(parallel_config)`` is per rank).

At that point ``check_vllm_config`` maps the config with :func:`config_from_vllm` and plans it on
this machine's probed facts (or ``ATTNPLAN_VLLM_DEVICE``, a catalog device, to check against a
declared one). The plugin judges only what vLLM selects (the answer's verdict, policy/verdict.py):
where vLLM runs FLASHINFER / FLASHINFER_MLA, every outcome but ``runs`` (a crash at graph capture or
the first request, wrong output) raises ``UnsupportedConfigurationError`` listing every violated rule
and the verified fixes, and vLLM's startup stops with it; where vLLM runs one of its own backends
(FLASH_ATTN, FLASH_ATTN_MLA, TRITON_ATTN, ...) the plugin logs one line naming vLLM's pick and vLLM
goes on - a refusal there is vLLM's own, in its own words, never attnplan's.
``ATTNPLAN_VLLM_PLUGIN=off`` disables the check; ``ATTNPLAN_RULES=DIR`` uses your rule packs.
"""

from __future__ import annotations

import functools

from attnplan.render.verdict import verdict_message
import logging
import os
from typing import Any, Callable, Optional

from attnplan.policy import PlanAnswer
from attnplan.policy import InvalidInputError, UnsupportedConfigurationError

from .mapping import config_from_vllm

log = logging.getLogger("attnplan.vllm")
_MARK = "_attnplan_checked"


def _node() -> Any:
    from attnplan.policy import simulated_node
    from attnplan.node import local_node

    device = os.environ.get("ATTNPLAN_VLLM_DEVICE", "").strip()
    return simulated_node(device) if device else local_node()


def check_vllm_config(vllm_config: Any, node: Any = None) -> Optional[PlanAnswer]:
    """This rank's answer (its verdict says what vLLM does), ``UnsupportedConfigurationError`` where vLLM would run
    FlashInfer and not ``run``, or None for a config attnplan cannot express (logged; vLLM goes on)."""
    from .serve import plan_with_engine

    from attnplan.policy import load_rules

    try:
        config = config_from_vllm(vllm_config)
    except InvalidInputError as exc:
        # A config attnplan cannot express (a cache layout it does not model, ...): vLLM judges it itself.
        # Never stop a deployment attnplan cannot speak for.
        log.warning("attnplan: not checked (attnplan does not model this configuration: %s); vLLM goes on", exc)
        return None
    rules = os.environ.get("ATTNPLAN_RULES", "").strip()  # the same override as the CLI's --rules
    answer = plan_with_engine(config, node if node is not None else _node(), load_rules(rules) if rules else None)
    v = answer.verdict
    if v is not None and not v.modelled:
        # Not FlashInfer: vLLM validates its own pick (and refuses it itself, in its own words).
        log.info("attnplan: vLLM selects %s here (not FlashInfer); attnplan does not model its kernels: %s",
                 v.selected.decode, verdict_message(v))
        return answer
    if (v is not None and not v.runs) or (v is None and answer.status != "ok"):
        raise UnsupportedConfigurationError(answer, verdict_message(v) if v is not None else None)
    log.info("attnplan: attention plan ok: prefill %s, decode %s", *answer.backends())
    return answer


def wrap_load_model(worker_cls: type) -> bool:
    """Make ``worker_cls.load_model`` check the worker's ``vllm_config`` first. Idempotent; False
    when the class has no ``load_model``."""
    orig: Optional[Callable[..., Any]] = getattr(worker_cls, "load_model", None)
    if orig is None:
        return False
    if getattr(orig, _MARK, False):
        return True

    @functools.wraps(orig)
    def load_model(self: Any, *args: Any, **kwargs: Any) -> Any:
        check_vllm_config(self.vllm_config)
        return orig(self, *args, **kwargs)

    setattr(load_model, _MARK, True)
    worker_cls.load_model = load_model  # type: ignore[attr-defined]
    return True


def register() -> None:
    """The ``vllm.general_plugins`` entry point (called in every vLLM process, possibly many times)."""
    if os.environ.get("ATTNPLAN_VLLM_PLUGIN", "").strip().lower() in ("0", "off", "false", "no"):
        return
    try:
        from vllm.v1.worker.gpu_worker import Worker
    except Exception as exc:  # not a CUDA build / platform: there is no FlashInfer worker to check
        log.debug("attnplan: vLLM GPU worker not importable here (%s); no check installed", exc)
        return
    wrap_load_model(Worker)
