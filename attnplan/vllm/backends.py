"""vLLM's ``--attention-backend`` names: the table lives with the policy
(``attnplan/policy/backend_names.py``) so that every input path (CLI, REST, preflight configs,
the plugin) reads a backend name the same way."""

from attnplan.policy.backend_names import VLLM_OTHER_BACKENDS, VLLM_TO_ATTNPLAN, backend_choice

__all__ = ["VLLM_OTHER_BACKENDS", "VLLM_TO_ATTNPLAN", "backend_choice"]
