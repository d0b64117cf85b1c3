// A step's metadata in one call from Python (issue 41): host_step.c's host half compiled in (``step``), then the
// device half (``step_views``, also called alone where the host half is numpy's).
//
// attnplan/adapter/host_metadata.py ``from_host`` sends the step's pinned host layout (host_step.c's) to the
// device in one copy, views its parts on both sides, gathers the new tokens' and the KV pages' block-table
// entries and views the block table per phase: six torch calls from Python, each 5-23 us of host on the H100
// machine (bench/logs/h100-2026-11-27u/call2/prof_from_host_new.log) where the same ATen calls from C++ skip
// Python's argument parsing and tensor wrapping. ``step_views`` makes exactly those calls, in that order, on
// the caller's current stream; host_metadata.py's Python path is its twin and the reference
// tests/test_host_torch.py holds it to; ``step`` saves the ctypes call and its Python besides (10-29 us a step
// on the H100 hosts with -O3, bench/logs/h100-2026-11-27w/README.md). Built with torch.utils.cpp_extension by
// host_torch.py (g++ and torch's headers; no CUDA compiler: every kernel is ATen's own).

#include <torch/extension.h>

#include <tuple>
#include <vector>

// host_step.c's ap_step compiled in (g++ takes it as C++; its symbols renamed so that they never meet those of
// host_native.py's ctypes-loaded build of the same file): ``step`` runs the host half and the device half in one
// call from Python. host_torch.py's digest covers both files.
#define ap_step attnplan_torch_ap_step
#define ap_abi attnplan_torch_ap_abi
#include "host_step.c"
#undef ap_step
#undef ap_abi

namespace {

using Tensors = std::vector<at::Tensor>;

// (host views, device views, the gathered entries or an undefined tensor, the gather's KV parts, the block
// table per phase).
//   host: the staging buffer (int32, pinned on CUDA); its first sum(sizes) entries are the layout.
//   gather: 0 none (the engine's host table: the layout has the slots), else gather the first part's entries
//     from ``table`` and split them by ``entry_split`` (its first size the new tokens', then each phase's KV
//     pages; one size: no KV pages on the host).
//   table_split: the phases' request counts where the step has two phases, else empty (the table itself).
std::tuple<Tensors, Tensors, at::Tensor, Tensors, Tensors> step_views(const at::Tensor &host,
                                                                     const std::vector<int64_t> &sizes,
                                                                     const at::Tensor &table, int64_t gather,
                                                                     const std::vector<int64_t> &entry_split,
                                                                     const std::vector<int64_t> &table_split) {
    int64_t total = 0;
    for (int64_t s : sizes)
        total += s;
    at::Tensor h = host.narrow(0, 0, total);
    const at::Device dev = table.device();
    // the one copy (pinned source on CUDA: asynchronous); on the CPU a copy all the same
    at::Tensor d = dev.is_cpu() ? h.clone() : h.to(dev, /*non_blocking=*/true);
    Tensors hv = h.split_with_sizes(sizes), dv = d.split_with_sizes(sizes);
    at::Tensor entries;
    Tensors kv;
    if (gather) {
        // index_select on the table's flat view where it is contiguous (int32 indices), take where it is not
        entries = table.is_contiguous() ? table.view({-1}).index_select(0, dv[0])
                                        : at::take(table, dv[0].to(at::kLong));
        if (entries.scalar_type() != at::kInt)
            entries = entries.to(at::kInt);
        if (entry_split.size() > 1) {
            kv = entries.split_with_sizes(entry_split);
            entries = kv[0];
            kv.erase(kv.begin());
        }
    }
    Tensors tables = table_split.empty() ? Tensors{table} : table.split_with_sizes(table_split);
    return {std::move(hv), std::move(dv), entries, std::move(kv), std::move(tables)};
}

// host_metadata.py ``from_host`` in one call: host_step.c's ap_step writes the step's layout into ``host`` (its
// inputs and outputs in ``info``, an int64 array of at least 42 at address ``info_addr``: host_metadata.py
// ``_native_step`` packs and reads it), then ``step_views`` as from_host would call it for that layout (the
// gather and its split where there is no host table, the table split per phase). (ap_step's return - the
// layout's int32 count, or its refusal < 0 -, then step_views' five results); where the step is refused or
// needs more than ``host`` holds, nothing but the count (the caller raises, or takes a larger buffer and calls
// again). Addresses as ints: q int64 [b], seq int32 or int64 [b] (info[39]), bt int32 [b, width] or 0.
std::tuple<int64_t, Tensors, Tensors, at::Tensor, Tensors, Tensors> step(int64_t q_addr, int64_t seq_addr,
                                                                         int64_t bt_addr, const at::Tensor &host,
                                                                         int64_t info_addr, const at::Tensor &table) {
    int64_t *info = reinterpret_cast<int64_t *>(info_addr);
    TORCH_CHECK(host.scalar_type() == at::kInt && host.is_contiguous() && host.is_cpu(), "host: contiguous int32");
    info[40] = host.numel();
    int64_t total = attnplan_torch_ap_step(reinterpret_cast<const int64_t *>(q_addr),
                                           reinterpret_cast<const void *>(seq_addr),
                                           reinterpret_cast<const int32_t *>(bt_addr), host.data_ptr<int32_t>(), info);
    if (total < 0 || total > info[40])
        return {total, {}, {}, at::Tensor(), {}, {}};
    const int64_t b = info[32], nd = info[33], t_all = info[0], p_all = info[1], on_host = info[2], p_dec = info[6];
    const bool two = nd > 0 && b > nd;
    std::vector<int64_t> sizes(info + 12, info + 12 + info[11]), entry_split{t_all}, table_split;
    if (on_host) {
        if (two) {
            entry_split.push_back(p_dec);
            entry_split.push_back(p_all - p_dec);
        } else
            entry_split.push_back(p_all);
    }
    if (two)
        table_split = {nd, b - nd};
    auto [hv, dv, entries, kv, tables] = step_views(host, sizes, table, !info[4], entry_split, table_split);
    return {total, std::move(hv), std::move(dv), entries, std::move(kv), std::move(tables)};
}

int64_t ap_abi() { return 2; }

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("step_views", &step_views);
    m.def("step", &step);
    m.def("abi", &ap_abi);
}
