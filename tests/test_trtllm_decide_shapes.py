"""phase.decide computes each distinct selection once (pages the selection cannot tell apart, the
occupancies of one shape, the shape-independent context calls: phase._selection_page,
_shape_independent_context, select.KernelFamily.run_occupancies). Held here to the plain definition: the
launcher's answer at every serving shape, page and occupancy, one select.launch each."""

from __future__ import annotations

import random

from attnplan.kernels.trtllm_gen import phase as tg
from attnplan.kernels.trtllm_gen import select as sel
from attnplan.kernels.trtllm_gen.table import shipped

T = shipped()


def every_shape(call: tg.PhaseCall, cap: int, page: int, version: str) -> tg.Decision:
    code, label, _ = tg.code_for(version)
    werr = tg.wrapper_error(call.entry, call.dtype_q, call.dtype_o, call.head_dim_qk, call.head_dim_v,
                            dtype_kv=call.dtype_kv, page_size=page, num_heads_q=call.num_heads_q, code=code)
    if werr is not None:
        return tg.Decision(None, None, (), f"the wrapper refuses the call: {werr}", tg._table_label(T), label)
    funcs, sha, misses, assumed = {}, {}, {}, set()
    foreign = sel.resolve(code).v7
    for sms, b, q, kv, occ in tg._shapes(call, cap):
        s = sel.launch(T, code, mode=call.mode, sm=cap, dtype_q=call.dtype_q, dtype_kv=call.dtype_kv,
                       dtype_o=call.dtype_o, head_dim_qk=call.head_dim_qk, head_dim_v=call.head_dim_v,
                       page_size=page, num_heads_q=call.num_heads_q, num_heads_kv=call.num_heads_kv, batch=b,
                       max_q_len=max(1, q), max_kv_len=kv, sm_count=sms, window_left=call.window_left,
                       max_active_clusters=occ, bf16q_mode=tg._bf16q_mode(call))
        if s.ok:
            funcs[s.function] = funcs.get(s.function, 0) + 1
            sha[s.function] = s.sha256
        elif foreign and (why := tg.added_in_0_7(s.detail)) is not None:
            assumed.add(why)
        else:
            shape = f"batch {b}, q_len {max(1, q)}, kv_len {kv}, {sms} SMs" + ("" if occ else ", CGA occupancy fallback")
            misses.setdefault(tg.compact_info(s.detail) if s.kind == "MISS" or "not found: " in s.detail
                              else s.detail, []).append(shape)
    missing = None
    if misses:
        detail, shapes = max(misses.items(), key=lambda kv_: len(kv_[1]))
        where = ("every serving shape" if not funcs and not assumed
                 else f"{sum(map(len, misses.values()))} serving shapes (e.g. {shapes[0]})")
        missing = (f"no kernel for Q {call.dtype_q} / KV {call.dtype_kv} / O {call.dtype_o}, head {call.head_dim_qk}/"
                   f"{call.head_dim_v}, page {page}, {call.num_heads_q}/{call.num_heads_kv} heads on SM {cap} "
                   f"at {where}: {detail}")
    top = max(funcs, key=funcs.get) if funcs else None
    return tg.Decision(top, sha.get(top) if top else None, tuple(sorted(funcs)), missing, tg._table_label(T), label,
                       tuple(sorted(assumed)), tuple(sha[f] for f in sorted(funcs)))


def random_call(rng: random.Random) -> tg.PhaseCall:
    entry = rng.choice(tg.ENTRY_POINTS)
    kvd = rng.choice(["bf16", "fp16", "fp8_e4m3", "fp8_e5m2", "nvfp4"])
    qd = rng.choice(["bf16", "fp16", "fp8_e4m3"])
    od = rng.choice(["bf16", "fp16", "fp8_e4m3", "nvfp4", qd, qd])
    spec = rng.choice([0, 0, 1, 3])
    if rng.random() < .5:   # half the sample: dtypes whose kernels the table has, so selections are compared too
        qd = kvd = od = rng.choice(["bf16", "fp16"])
    if entry == tg.MLA_DECODE:
        return tg.phase_call(entry, query_dtype=qd, kv_dtype=kvd, out_dtype=od, head_dim_qk=0, head_dim_vo=0,
                             num_qo_heads=rng.choice([8, 16, 32, 64, 128, 20]), num_kv_heads=1,
                             num_speculative_tokens=spec, kv_lora_rank=rng.choice([512, 256]),
                             qk_rope_head_dim=rng.choice([64, 64, 0]))
    hd = rng.choice([64, 128, 128, 256, 512, 192, 576, 320])
    hv = hd if rng.random() < .8 else rng.choice([128, 512, 256])
    kvh = rng.choice([1, 2, 4, 8])
    return tg.phase_call(entry, query_dtype=qd, kv_dtype=kvd, out_dtype=od, head_dim_qk=hd, head_dim_vo=hv,
                         num_qo_heads=kvh * rng.choice([1, 2, 4, 5, 8, 16]), num_kv_heads=kvh,
                         num_speculative_tokens=spec, sliding_window=rng.choice([None, None, 1024, 128]))


def test_collapsed_decisions_equal_the_launcher_at_every_shape():
    rng = random.Random(20261126)
    seen = 0
    for _ in range(300):
        call = random_call(rng)
        cap = rng.choice([100, 103, 107])
        page = rng.choice([16, 32, 64, 128, 256, 1024])
        version = rng.choice(["0.6.13", "0.6.18", "0.7.0", "0.7.1", "0.7.2.post1"])
        got = tg.decide(call, cap, page, version)
        assert got == every_shape(call, cap, page, version), (call, cap, page, version)
        seen += got.ok
    assert seen > 25   # the sample reaches kernels, not only refusals


def test_pages_from_128_share_one_selection_but_keep_their_own_message():
    call = tg.phase_call(tg.DECODE, query_dtype="bf16", kv_dtype="fp8_e4m3", out_dtype="fp16", head_dim_qk=128,
                         head_dim_vo=128, num_qo_heads=32, num_kv_heads=8)
    assert tg._selection_page(call, 256, True) == tg._selection_page(call, 1024, True) == 128
    assert tg._selection_page(call, 64, True) == 64
    for page in (128, 512):
        d = tg.decide(call, 100, page, "0.7.2.post1")
        assert d == every_shape(call, 100, page, "0.7.2.post1")
