"""Differential oracle: FlashInfer's own trtllm-gen Python wrappers vs attnplan/kernels/trtllm_gen/wrappers.py.

    python -m attnplan.oracle.trtllm_wrappers --configs 10000 --seed 0
    python -m attnplan.oracle.trtllm_wrappers --flashinfer-path DIR   # another release's unzipped wheel

Calls the REAL installed flashinfer (0.7.2.post1) entry points a plan's trtllm-gen phases name
(kernels/trtllm_gen/phase.py ENTRY_POINTS) on the CPU with small CPU tensors, the way an engine calls
them (backend "trtllm-gen", HND paged cache, nvfp4 output with its scale, NVFP4 cache with its block
scales), over random configurations; each either raises in the wrapper (refused, with its message) or
reaches the kernel. ``wrappers.wrapper_error`` decides the same configurations; the two are compared.

Stubbed (nothing else; the wrappers' own code runs as installed):
  * ``get_trtllm_gen_fmha_module`` in flashinfer.decode, flashinfer.prefill and flashinfer.mla._core: it
    JIT-compiles / loads the CUDA module. Replaced by an object whose every function raises ``Reached``
    ("reached the kernel"), which ends the call there: what runs after is the launcher (the kernel table
    decides it: attnplan/oracle/trtllm_gen.py).
  * ``get_device_sm_count`` in those modules: reads the CUDA device's properties; 148 (a B200).
  * ``get_compute_capability`` in flashinfer.utils and those modules: reads the CUDA device; (10, 0).
  * ``enable_pdl=False`` is passed (``device_support_pdl`` answers False off CUDA anyway).
  * The MLA decode's autotuner (``AutoTuner.choose_one``) is not stubbed: on the CPU it runs the first
    runner, whose forward calls the stubbed module.

The calls are well formed as an engine makes them; what the wrappers check of the caller's tensors (shapes,
strides, a block table at least 128 tokens wide for 0.6.13's MLA decode) is satisfied, so a refusal is about
the configuration. ``--flashinfer-path`` runs another release's wrappers (its unzipped wheel's Python,
imported before the installed one) against the same release family's wrappers.py answer.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import sys
from dataclasses import dataclass
from typing import Any, Iterator, Optional

from ..errors import SetupError
from ..kernels.trtllm_gen.phase import CONTEXT, DECODE, DTYPE, MLA_DECODE, RAGGED
from ..kernels.trtllm_gen.wrappers import wrapper_error

CODE = "0.7.2.post1"   # the flashinfer under test's release family (select.py CODES): set from its version
Q_DTYPES = ("bf16", "fp16", "fp8_e4m3", "fp8_e5m2")
KV_DTYPES = ("bf16", "fp16", "fp8_e4m3", "fp8_e5m2", "nvfp4")
O_DTYPES = ("bf16", "fp16", "fp8_e4m3", "fp8_e5m2", "nvfp4")
HEAD_DIMS = ((64, 64), (128, 128), (256, 256), (512, 512), (192, 128), (96, 96), (80, 80), (128, 64))
MLA_DIMS = ((512, 64), (256, 64), (512, 0), (512, 128), (128, 64), (256, 0))
PAGES = (16, 32, 64, 128)


class Reached(Exception):
    """The wrapper called the launcher: the call reached the kernel."""


@dataclass(frozen=True)
class Config:
    entry: str
    q: str                 # config dtype names (phase.DTYPE keys)
    kv: str
    o: str
    head_dim_qk: int
    head_dim_v: int
    num_qo_heads: int
    num_kv_heads: int
    page: int
    q_len: int             # decode: tokens per request
    window_left: int
    sinks: bool


def random_config(rng: random.Random) -> Config:
    entry = rng.choice((CONTEXT, DECODE, MLA_DECODE, RAGGED))
    q = rng.choice(Q_DTYPES)
    o = rng.choice(O_DTYPES + (q, q))
    kv = rng.choice(KV_DTYPES + (q,))
    if entry == MLA_DECODE:
        rank, rope = rng.choice(MLA_DIMS)
        return Config(entry, q, q if rng.random() < .7 else kv, o, rank + rope, rank, rng.choice((16, 32, 64, 128)), 1,
                      rng.choice((32, 64) + PAGES), rng.choice((1, 1, 2, 4)), -1, False)
    hqk, hv = rng.choice(HEAD_DIMS)
    kvh = rng.choice((1, 2, 4, 8))
    return Config(entry, q, q if entry == RAGGED else kv, o, hqk, hv, kvh * rng.choice((1, 2, 4, 8)), kvh,
                  rng.choice(PAGES), rng.choice((1, 1, 2, 4)), rng.choice((-1, -1, 127, 1023)), rng.random() < .3)


def _torch_dtype(torch: Any, name: str) -> Any:
    return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp8_e4m3": torch.float8_e4m3fn,
            "fp8_e5m2": torch.float8_e5m2, "nvfp4": torch.uint8}[name]


@contextlib.contextmanager
def stubbed() -> Iterator[Any]:
    """The stubs of the module docstring, for the duration; yields the flashinfer package."""
    import flashinfer
    import flashinfer.decode as fdec
    import flashinfer.mla._core as fmla
    import flashinfer.prefill as fpre
    import flashinfer.utils as futil

    class _Module:
        def __getattr__(self, name: str) -> Any:
            def kernel(*a: Any, **k: Any) -> None:
                raise Reached(name)
            return kernel

    saved = []
    for mod, name, value in ((fdec, "get_trtllm_gen_fmha_module", lambda: _Module()),
                              (fpre, "get_trtllm_gen_fmha_module", lambda: _Module()),
                              (fmla, "get_trtllm_gen_fmha_module", lambda: _Module()),
                              (fdec, "get_device_sm_count", lambda d: 148),
                              (fpre, "get_device_sm_count", lambda d: 148),
                              (fmla, "get_device_sm_count", lambda d: 148),
                              (futil, "get_compute_capability", lambda d: (10, 0)),
                              (fdec, "get_compute_capability", lambda d: (10, 0)),
                              (fpre, "get_compute_capability", lambda d: (10, 0)),
                              (fmla, "get_compute_capability", lambda d: (10, 0))):
        if hasattr(mod, name):
            saved.append((mod, name, getattr(mod, name)))
            setattr(mod, name, value)
    try:
        yield flashinfer
    finally:
        for mod, name, value in saved:
            setattr(mod, name, value)


def flashinfer_answer(c: Config) -> Optional[str]:
    """None: the real wrapper reached the kernel; else its exception, "Type: message"."""
    import torch

    import flashinfer.decode as fdec
    import flashinfer.mla._core as fmla
    import flashinfer.prefill as fpre

    tq, tkv = _torch_dtype(torch, c.q), _torch_dtype(torch, c.kv)
    # a block table as wide as 128 tokens at least: FlashInfer 0.6.13's _check_trtllm_gen_mla_shape asks
    # block_num % (128 / block_size) == 0 of the caller's table (a tensor shape, not a configuration property)
    batch, pages_per_seq = 2, max(2, 128 // c.page)
    kv_len = 2 * c.page
    ws = torch.zeros(1 << 16, dtype=torch.uint8)
    sinks = [torch.zeros(c.num_qo_heads, dtype=torch.float32)] if c.sinks else None
    out_kw: dict[str, Any]
    if c.o == "nvfp4":
        out_kw = dict(out_dtype="nvfp4", o_sf_scale=1.0, o_sf_vec_size=16)
    else:
        out_kw = dict(out_dtype=_torch_dtype(torch, c.o))

    def paged_kv(head_dim: int) -> tuple[Any, Any]:
        n = batch * pages_per_seq
        if c.kv == "nvfp4":   # two e2m1 per byte, fp8 block scales per 16 elements (decode.py kv_cache_sf)
            k = torch.zeros(n, c.num_kv_heads, c.page, head_dim // 2, dtype=torch.uint8)
            sf = torch.zeros(n, c.num_kv_heads, c.page, head_dim // 16, dtype=torch.float8_e4m3fn)
            return (k, k.clone()), (sf, sf.clone())
        k = torch.zeros(n, c.num_kv_heads, c.page, head_dim, dtype=tkv)
        return (k, k.clone()), None

    block_tables = torch.arange(batch * pages_per_seq, dtype=torch.int32).reshape(batch, pages_per_seq)
    seq_lens = torch.full((batch,), kv_len, dtype=torch.int32)
    try:
        if c.entry == DECODE:
            if c.head_dim_qk != c.head_dim_v:
                return "config: the paged decode takes one head dim"
            kv, sf = paged_kv(c.head_dim_qk)
            q = torch.zeros(batch * c.q_len, c.num_qo_heads, c.head_dim_qk, dtype=tq)
            fdec.trtllm_batch_decode_with_kv_cache(
                q, kv, ws, block_tables, seq_lens, kv_len, window_left=c.window_left, sinks=sinks,
                kv_layout="HND", enable_pdl=False, backend="trtllm-gen", q_len_per_req=c.q_len, kv_cache_sf=sf,
                **out_kw)
        elif c.entry == CONTEXT:
            if c.head_dim_qk != c.head_dim_v:
                return "config: the paged context takes one head dim"
            kv, sf = paged_kv(c.head_dim_qk)
            q_len = 3
            q = torch.zeros(batch * q_len, c.num_qo_heads, c.head_dim_qk, dtype=tq)
            cq = torch.arange(0, batch * q_len + 1, q_len, dtype=torch.int32)
            ckv = torch.arange(0, batch * kv_len + 1, kv_len, dtype=torch.int32)
            fpre.trtllm_batch_context_with_kv_cache(
                q, kv, ws, block_tables, seq_lens, q_len, kv_len, 1.0, 1.0, batch, cq, ckv,
                window_left=c.window_left, kv_layout="HND", enable_pdl=False, sinks=sinks, kv_cache_sf=sf,
                **out_kw)
        elif c.entry == RAGGED:
            q_len = 3
            q = torch.zeros(batch * q_len, c.num_qo_heads, c.head_dim_qk, dtype=tq)
            k = torch.zeros(batch * q_len, c.num_kv_heads, c.head_dim_qk, dtype=tq)
            v = torch.zeros(batch * q_len, c.num_kv_heads, c.head_dim_v, dtype=tq)
            cq = torch.arange(0, batch * q_len + 1, q_len, dtype=torch.int32)
            out = None
            if c.o != "nvfp4":   # the ragged wrapper takes an ``out`` tensor, no out_dtype
                out = torch.zeros(batch * q_len, c.num_qo_heads, c.head_dim_v, dtype=_torch_dtype(torch, c.o))
            else:
                return "config: the ragged wrapper has no nvfp4 output"
            fpre.trtllm_ragged_attention_deepseek(
                q, k, v, ws, torch.full((batch,), q_len, dtype=torch.int32), q_len, q_len, 1.0, 1.0, 1.0, batch,
                c.window_left, cq, cq, False, True, False,
                attention_sinks=sinks[0] if sinks else None, out=out)
        else:   # MLA decode: query [batch, q_len, heads, rank + rope] over one latent head
            rank, rope = c.head_dim_v, c.head_dim_qk - c.head_dim_v
            q = torch.zeros(batch, c.q_len, c.num_qo_heads, rank + rope, dtype=tq)
            cache = torch.zeros(batch * pages_per_seq, c.page, rank + rope, dtype=tkv)
            out = None
            if c.o not in ("nvfp4",):
                out = torch.zeros(batch, c.q_len, c.num_qo_heads, rank, dtype=_torch_dtype(torch, c.o))
            else:
                return "config: the MLA decode wrapper has no nvfp4 output"
            fmla.trtllm_batch_decode_with_kv_cache_mla(
                q, cache, ws, 128, rank, rope, block_tables, seq_lens, kv_len, out=out, sinks=sinks,
                enable_pdl=False, backend="trtllm-gen")
    except Reached:
        return None
    except Exception as e:   # noqa: BLE001 - every refusal of the wrapper, with its type
        return f"{type(e).__name__}: {e}"
    return "returned without reaching the kernel"


def attnplan_answer(c: Config) -> Optional[str]:
    return wrapper_error(c.entry, DTYPE[c.q], DTYPE[c.o], c.head_dim_qk, c.head_dim_v, dtype_kv=DTYPE[c.kv],
                         page_size=c.page, num_heads_q=c.num_qo_heads, code=CODE)


def compare(configs: int, seed: int, verbose: int = 5) -> tuple[int, int, list[tuple[Config, Optional[str], Optional[str]]]]:
    """(agreeing, compared, disagreements) over ``configs`` random configurations."""
    rng = random.Random(seed)
    agree = total = 0
    bad = []
    with stubbed():
        for _ in range(configs):
            c = random_config(rng)
            fi = flashinfer_answer(c)
            if fi is not None and fi.startswith("config: "):
                continue   # not a call the entry point takes (its parameters cannot say it)
            ours = attnplan_answer(c)
            total += 1
            if (fi is None) == (ours is None):
                agree += 1
            else:
                bad.append((c, fi, ours))
    return agree, total, bad


def use_flashinfer(path: Optional[str] = None) -> str:
    """Import flashinfer (from ``path``, a directory holding another release's unzipped ``flashinfer``
    package, when given) and set ``CODE`` to its release family; returns its version."""
    global CODE
    if path:
        sys.path.insert(0, path)
    import flashinfer

    from ..kernels.trtllm_gen.select import code_of

    code = code_of(flashinfer.__version__)
    if code is None:
        raise SetupError(f"flashinfer {flashinfer.__version__}: no known release family (kernels/trtllm_gen/select.py "
                         "RELEASES); pass --flashinfer-path to an unpacked release the port knows")
    CODE = code
    return flashinfer.__version__


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--configs", type=int, default=10000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--show", type=int, default=10, help="disagreements to print")
    ap.add_argument("--flashinfer-path", help="a directory with another release's unzipped flashinfer package "
                                              "(e.g. pip download --no-deps flashinfer-python==0.6.13; unzip)")
    args = ap.parse_args(argv)
    use_flashinfer(args.flashinfer_path)
    import flashinfer

    agree, total, bad = compare(args.configs, args.seed)
    print(f"flashinfer {flashinfer.__version__} wrappers vs attnplan wrappers.py (code {CODE}): {agree}/{total} agree "
          f"({args.configs} drawn, seed {args.seed})")
    for c, fi, ours in bad[: args.show]:
        print(f"  DIFF {c}\n    flashinfer: {fi or 'reaches the kernel'}\n    attnplan:   {ours or 'reaches the kernel'}")
    return 0 if agree == total else 1


if __name__ == "__main__":
    sys.exit(main())
