"""The device gather of a step's block-table entries (host_metadata.from_host: the new tokens' and the KV pages'
entries at once), each way torch offers it, timed on this host: median host µs of 2,000 calls (synchronized
every 100), for the index counts of bench/decode_steps.py's general shapes. Which call from_host should make."""
import statistics
import sys
import time

import torch
import torch.nn.functional as F

dev = sys.argv[1] if len(sys.argv) > 1 else "cuda"


def med(fn, reps=2000):
    for _ in range(50):
        fn()
    ts = []
    for i in range(reps):
        if i % 100 == 0 and dev == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter_ns()
        fn()
        ts.append(time.perf_counter_ns() - t0)
    if dev == "cuda":
        torch.cuda.synchronize()
    return statistics.median(ts) / 1000


print(f"torch {torch.__version__} on {dev}")
print("| entries gathered | " + " | ".join(["index_select int32", "index_select(out=)", "take int64", "gather int64",
                                          "flat[idx32]", "embedding", "index_select int64", "reference: empty int32",
                                          "reference: add"]) + " |")
print("|---" * 10 + "|")
for n in (1024 + 64, 4096 + 256, 1024 + 64 * 256 + 128):
    table = torch.randperm(1 << 20, device=dev, dtype=torch.int32)
    flat = table.view(-1)
    i32 = torch.randint(0, 1 << 20, (n,), device=dev, dtype=torch.int32)
    i64 = i32.long()
    out = torch.empty(n, dtype=torch.int32, device=dev)
    col = flat.view(-1, 1)
    got = [med(f) for f in (
        lambda: flat.index_select(0, i32), lambda: torch.index_select(flat, 0, i32, out=out),
        lambda: flat.take(i64), lambda: flat.gather(0, i64), lambda: flat[i32], lambda: F.embedding(i32, col),
        lambda: flat.index_select(0, i64), lambda: torch.empty(n, dtype=torch.int32, device=dev),
        lambda: torch.add(i32, i32, alpha=16, out=out))]
    assert torch.equal(flat.index_select(0, i32), flat.take(i64)) and torch.equal(F.embedding(i32, col).view(-1), out.copy_(flat[i32]))
    print(f"| {n} | " + " | ".join(f"{x:.1f}" for x in got) + " |", flush=True)
