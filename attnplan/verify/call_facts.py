"""What verify knows about each kernel call besides how to invoke it (``calls.CALLS``): a row of
data per call, keyed by the call names rules/backends.yaml declares, read wherever verify's
behaviour depends on the call - never a test on the call's name.

Verify runs FlashInfer directly and must not depend on the adapter it checks (the adapter keeps
its own per-call strategies, attnplan/adapter/calls/), so the facts it needs live here. A test
holds this table to the calls the shipped catalog declares.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

from attnplan.errors import RulePackError

# FlashInfer's JIT module families (flashinfer/jit/attention/modules.py get_batch_prefill_uri,
# get_batch_decode_uri, get_batch_mla_uri; flashinfer/jit/xqa.py gen_xqa_module; the sink
# wrapper's customised prefill module, flashinfer/attention/_core.py).
JitFamily = Literal["prefill", "decode", "mla", "xqa", "sink"]
Inputs = Literal["paged", "ragged", "latent"]


@dataclass(frozen=True)
class CallFacts:
    # The JIT module a probe of this call builds, so probes that share one build it once
    # (generate.jit_identity). TRTLLM-gen calls load cubins; the generator groups them by the
    # prefill module's parameters (dtypes, head dims), which is what their cubins are chosen by too.
    jit: JitFamily
    inputs: Inputs = "paged"            # what a probe reads: a paged cache, ragged K/V, or latent pages
    # use_tensor_cores runs another kernel: FlashInfer's prefill module (decode.py
    # BatchDecodeWithPagedKVCacheWrapper), calibrated under its own tolerance key (":tc").
    tensor_core_kernel: bool = False
    # Converts the query to e4m3 before its first MMA over an fp8 cache (csrc/xqa/mha.cu and
    # mha_sm90.cu ``needInputCvt``): the reference quantizes it the same way (tolerance.py).
    query_to_fp8_over_fp8_kv: bool = False


FACTS: dict[str, CallFacts] = {
    "paged_prefill": CallFacts("prefill"),
    "paged_decode": CallFacts("decode", tensor_core_kernel=True),
    "sink": CallFacts("sink"),
    "xqa_decode": CallFacts("xqa", query_to_fp8_over_fp8_kv=True),
    "mla_paged_decode": CallFacts("mla", inputs="latent"),
    "ragged_prefill": CallFacts("prefill", inputs="ragged"),
    "trtllm_context": CallFacts("prefill"),
    "trtllm_decode": CallFacts("prefill"),
    "trtllm_mla_decode": CallFacts("prefill", inputs="latent"),
    "trtllm_ragged": CallFacts("prefill", inputs="ragged"),
}


def facts(call: str) -> CallFacts:
    found: Optional[CallFacts] = FACTS.get(call)
    if found is None:
        raise RulePackError("attnplan/verify/call_facts.py", f"verify has no facts for the kernel call {call!r} (known: {sorted(FACTS)}): add its row "
                         "to attnplan/verify/call_facts.py")
    return found
