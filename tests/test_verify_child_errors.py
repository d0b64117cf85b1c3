"""A failed JIT build's result keeps the compiler's diagnostics, not only the nvcc command line
that FlashInfer's "Ninja build failed" message starts with (attnplan/verify/child.py error_text)."""

from attnplan.verify.child import error_text

NINJA = """Ninja build failed. Ninja output: ninja: Entering directory `/tmp/fi/.cache/flashinfer/0.7.2.post1/90a/cached_ops/xqa_x'
[1/6] /usr/local/cuda/bin/nvcc --generate-dependencies-with-compile -MF /tmp/fi/x.o.d -ccbin /opt/gcc/bin/gcc """ + "-DFLAG=1 " * 120 + """
FAILED: [code=2] /tmp/fi/.cache/flashinfer/xqa_x/mha.cuda.o
/usr/local/cuda/bin/nvcc --generate-dependencies-with-compile """ + "-DFLAG=1 " * 60 + """
/tmp/site/flashinfer/data/csrc/xqa/mha.cu(422): error: static assertion failed with "smemSize < kMAX_SMEM_SIZE"
/tmp/site/flashinfer/data/csrc/xqa/mha.cu(422): error: static assertion failed with "smemSize < kMAX_SMEM_SIZE"
1 error detected in the compilation of "/tmp/site/flashinfer/data/csrc/xqa/mha.cu".
ninja: build stopped: subcommand failed.
"""


def test_build_failure_keeps_the_compilers_error_once():
    msg = error_text(RuntimeError(NINJA))
    assert msg.startswith("RuntimeError: Ninja build failed.")
    assert msg.count('mha.cu(422): error: static assertion failed with "smemSize < kMAX_SMEM_SIZE"') == 1
    assert "1 error detected" in msg
    assert "FAILED:" in msg
    assert "--generate-dependencies-with-compile" in msg.split(" ... ")[0]      # the head keeps its start
    assert "--generate-dependencies-with-compile" not in msg.split(" ... ")[1]  # command lines are not diagnostics
    assert len(msg) <= 1500


def test_short_errors_are_kept_whole_and_flat():
    assert error_text(ValueError("head_dim 144\n  is not supported")) == "ValueError: head_dim 144 is not supported"
