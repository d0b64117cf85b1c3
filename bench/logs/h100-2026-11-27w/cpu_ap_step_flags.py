"""host_step.c's ap_step built -O2 and -O3 (gcc on the development machine), timed in turn call by call over the six
general shapes (bench/general_step_host.py), 20,000 calls each, the host table off, page 16: why host_native.FLAGS and
host_torch.CFLAGS say -O3. ``python cpu_ap_step_flags.py`` (builds both into a temporary directory)."""
import ctypes
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]
from general_step_host import SHAPES  # noqa: E402

tmp = Path(tempfile.mkdtemp())
libs = {}
for o in ("O2", "O3"):
    so = tmp / f"hs_{o}.so"
    subprocess.run(["gcc", f"-{o}", "-shared", "-fPIC", "-o", str(so), str(ROOT / "attnplan/adapter/host_step.c")],
                   check=True)
    libs[o] = lib = ctypes.CDLL(str(so))
    lib.ap_step.argtypes, lib.ap_step.restype = [ctypes.c_void_p] * 5, ctypes.c_int64
h = np.zeros(1 << 20, dtype=np.int32)
print("| shape | -O2 µs | -O3 µs |\n|---|---|---|")
for what, dec, pre in SHAPES:
    q, s = np.array([1] * len(dec) + pre, dtype=np.int64), np.array(dec + pre, dtype=np.int64)
    info = np.zeros(42, dtype=np.int64)
    info[32:42] = [len(q), len(dec), 1, 16, max((x + 15) // 16 for x in s), 1, 1 << 16, 1, h.size, 0]
    args = (q.ctypes.data, s.ctypes.data, None, h.ctypes.data, info.ctypes.data)
    ts = {o: [] for o in libs}
    for _ in range(20000):
        for o, lib in libs.items():
            t = time.perf_counter_ns()
            lib.ap_step(*args)
            ts[o].append(time.perf_counter_ns() - t)
    print(f"| {what} | {statistics.median(ts['O2']) / 1000:.1f} | {statistics.median(ts['O3']) / 1000:.1f} |", flush=True)
