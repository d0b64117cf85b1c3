"""``--ray [ADDRESS]``: one task pinned to each alive node of a Ray cluster, probing and planning there.

Each task is pinned with ``NodeAffinitySchedulingStrategy(node_id, soft=False)`` and asks for
``num_cpus=0, num_gpus=0`` so that a busy node still runs it (a hard affinity to a node without
free resources would wait forever); every wait is bounded by the deadline. With ``num_gpus=0``
Ray sets ``CUDA_VISIBLE_DEVICES=''``, so the task probes with NVML (``node.probe_node``),
which sees every GPU regardless. A node without a GPU is reported as such. A node that dies
mid-task, a task that raises, a task that never starts: each becomes that node's row.

Declared facts instead of probing (dry runs, tests): with ``declare_label="attnplan.io/device"``
a node started with ``ray start --labels='{"attnplan.io/device": "B200"}'`` is planned as a
declared B200 (``policy.simulated_node``); nodes without the label are probed. The label is read
inside the task from the node it actually runs on, so the pinning itself is exercised.
"""

from __future__ import annotations

import logging
import socket
import time
from typing import Any, Callable, MutableMapping, Optional, Sequence

from attnplan.errors import RayConnectError
from attnplan.policy import EngineSpec, NodeFacts

from .model import NamedConfig, Outcome

FactsFn = Callable[[dict[str, str]], NodeFacts]


def declared_or_probed(labels: dict[str, str], declare_label: Optional[str]) -> NodeFacts:
    """The facts a preflight task plans with on its node: declared from ``declare_label`` when the
    node carries it, else probed (NVML, package metadata, environment)."""
    from attnplan.policy import simulated_node
    from attnplan.node import probe_node

    device = labels.get(declare_label) if declare_label else None
    if device:
        return simulated_node(device, hostname=socket.gethostname())
    return probe_node()


def plan_item(item: dict[str, Any], node: NodeFacts, engine: Optional[EngineSpec]) -> dict[str, Any]:
    """One config's answer JSON on this node: ``{"config": ...}`` planned as ``plan_for``, or
    ``{"request": ...}`` (a whole model, ``ModelRequest``) as the REST service answers it."""
    from attnplan.embedded import plan_for   # finished, as the REST service's answer
    from attnplan.policy import default_ruleset

    if "request" in item:
        from attnplan.request import ModelRequest, answer_json, plan_request

        req = ModelRequest.model_validate(item["request"])
        rs = default_ruleset()
        return answer_json(plan_request(req, node, rs, allow_paths=False), req, node, trace=False,
                           rules_revision=rs.revision)
    from attnplan.render import plan_json

    return plan_json(plan_for(item["config"], node, engine=engine), trace=False)


def node_task(target: str, configs: list[dict[str, Any]], declare_label: Optional[str],
              facts_fn: Optional[FactsFn], engines: Optional[list[Optional[EngineSpec]]] = None) -> dict[str, Any]:
    """Runs on the pinned node: its facts, then one plan per config (JSON, no trace). Each of
    ``configs`` is an attention config's fields, or ``{"request": ModelRequest JSON}``."""
    import ray

    t0 = time.perf_counter()
    ctx = ray.get_runtime_context()
    labels = dict(ctx.get_node_labels() or {})
    node = facts_fn(labels) if facts_fn is not None else declared_or_probed(labels, declare_label)
    engines = engines if engines is not None else [None] * len(configs)
    answers = [plan_item(c if "request" in c else {"config": c}, node, e) for c, e in zip(configs, engines)]
    return {"node_id": ctx.get_node_id(), "hostname": socket.gethostname(), "answers": answers,
            "declared": node.capability.source.value == "declared",
            "task_ms": (time.perf_counter() - t0) * 1000}


def _name_nodes(nodes: list[dict[str, Any]]) -> dict[str, str]:
    hosts = [n.get("NodeManagerHostname") or n.get("NodeManagerAddress") or "node" for n in nodes]
    unique = len(set(hosts)) == len(hosts)
    return {n["NodeID"]: (h if unique else f"{h}/{n['NodeID'][:8]}") for n, h in zip(nodes, hosts)}


def _failure(exc: BaseException) -> tuple[str, str]:
    import ray.exceptions as rex

    text = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
    if isinstance(exc, getattr(rex, "NodeDiedError", ())):
        return "unreachable", "node died during the preflight task"
    if isinstance(exc, getattr(rex, "TaskUnschedulableError", ())):
        return "unreachable", "task could not be scheduled on the node (node gone or infeasible)"
    if isinstance(exc, (rex.WorkerCrashedError, getattr(rex, "LocalRayletDiedError", rex.WorkerCrashedError))):
        return "unreachable", "the worker running the preflight task died"
    if isinstance(exc, rex.ObjectLostError):
        return "unreachable", "the task's result was lost (node died?)"
    if isinstance(exc, rex.TaskCancelledError):
        return "unreachable", "task cancelled"
    if isinstance(exc, rex.RayTaskError):
        cause = getattr(exc, "cause", None)
        if cause is not None:
            return "error", f"task failed on the node: {type(cause).__name__}: {str(cause)[:160]}"
        return "error", f"task failed on the node: {text}"
    return "error", f"{type(exc).__name__}: {text}"


def _outcome(result: Any, node_id: str, name: str, address: str, configs: Sequence[NamedConfig],
             elapsed_ms: float, extra: dict[str, Any]) -> Outcome:
    base = dict(name=name, address=address, elapsed_ms=elapsed_ms, extra=extra)
    if not isinstance(result, dict) or not isinstance(result.get("answers"), list):
        return Outcome(kind="error", reason="schema-invalid task result", **base)  # type: ignore[arg-type]
    if result.get("node_id") != node_id:
        return Outcome(kind="error", reason=f"task ran on node {str(result.get('node_id'))[:12]}, not the pinned one",
                       **base)  # type: ignore[arg-type]
    if len(result["answers"]) != len(configs):
        return Outcome(kind="error", reason="schema-invalid task result: wrong number of answers", **base)  # type: ignore[arg-type]
    from .answers import BadAnswer, validate_data

    answers = []
    for nc, data in zip(configs, result["answers"]):
        try:
            if nc.request is not None:
                from .model_answers import model_answer

                answers.append(model_answer(data, nc))
            else:
                answers.append(validate_data(data, nc))
        except BadAnswer as exc:
            return Outcome(kind="error", reason=str(exc), **base)  # type: ignore[arg-type]
    extra.update(hostname=result.get("hostname"), declared=result.get("declared"))
    return Outcome(answers=answers, **base)  # type: ignore[arg-type]


def ray_preflight(configs: Sequence[NamedConfig], *, address: str = "auto", timeout: float = 60.0,
                  declare_label: Optional[str] = None, facts_fn: Optional[FactsFn] = None,
                  sink: Optional[MutableMapping[int, Outcome]] = None,
                  names: Optional[list[str]] = None, poll_s: float = 0.25) -> list[Outcome]:
    """Outcomes of every alive node, in ``ray.nodes()`` order. ``sink`` (index -> Outcome) fills
    as nodes finish; ``names`` receives the node names up front (for an interrupted run)."""
    import ray
    import ray.exceptions as rex
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    sink = sink if sink is not None else {}
    own = not ray.is_initialized()
    if own:
        try:
            # Never address=None: that would start a new local cluster instead of joining one.
            ray.init(address=address or "auto", logging_level=logging.ERROR, log_to_driver=False,
                     namespace="attnplan-preflight")
        except Exception as exc:  # noqa: BLE001 - ConnectionError, RuntimeError, ValueError...
            raise RayConnectError(f"cannot connect to the Ray cluster at {address!r}: {str(exc).splitlines()[0][:200]}") from None
    try:
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        named = _name_nodes(nodes)
        if names is not None:
            names[:] = [named[n["NodeID"]] for n in nodes]
        cfgs = [{"request": c.request.wire()} if c.request is not None else c.config.model_dump(mode="json")  # type: ignore[union-attr]
                for c in configs]
        engines = [c.engine for c in configs]
        task = ray.remote(num_cpus=0, num_gpus=0, max_retries=0)(node_task)
        t0 = time.perf_counter()
        refs: dict[Any, int] = {}
        meta: list[tuple[str, str, str, dict[str, Any]]] = []
        for i, n in enumerate(nodes):
            nid = n["NodeID"]
            extra = {"node_id": nid, "head": "node:__internal_head__" in (n.get("Resources") or {})}
            meta.append((nid, named[nid], f"{n.get('NodeManagerAddress')} (ray node {nid[:12]})", extra))
            ref = task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(nid, soft=False),
                               name="attnplan-preflight").remote(nid, cfgs, declare_label, facts_fn, engines)
            refs[ref] = i
        pending = list(refs)
        deadline = t0 + timeout
        while pending:
            left = deadline - time.perf_counter()
            if left <= 0:
                break
            ready, pending = ray.wait(pending, num_returns=len(pending), timeout=min(poll_s, left))
            for ref in ready:
                i = refs[ref]
                nid, name, addr, extra = meta[i]
                ms = (time.perf_counter() - t0) * 1000
                try:
                    result = ray.get(ref, timeout=max(1.0, deadline - time.perf_counter()))
                except rex.GetTimeoutError:
                    pending.append(ref)
                    continue
                except Exception as exc:  # noqa: BLE001 - every failure is this node's row
                    kind, reason = _failure(exc)
                    sink[i] = Outcome(name=name, address=addr, kind=kind, reason=reason, elapsed_ms=ms, extra=extra)  # type: ignore[arg-type]
                    continue
                sink[i] = _outcome(result, nid, name, addr, configs, ms, extra)
        for ref in pending:
            i = refs[ref]
            nid, name, addr, extra = meta[i]
            try:
                ray.cancel(ref, force=True)
            except Exception:  # noqa: BLE001 - best effort
                pass
            sink[i] = Outcome(name=name, address=addr, kind="unreachable", extra=extra,
                              reason=f"no answer within {timeout:g}s (task not started or hung)",
                              elapsed_ms=timeout * 1000)
        return [sink[i] for i in range(len(nodes))]
    finally:
        if own:
            ray.shutdown()
