// The device half of a step's metadata in one call from Python (issue 41).
//
// attnplan/adapter/host_metadata.py ``from_host`` sends the step's pinned host layout (host_step.c's) to the
// device in one copy, views its parts on both sides, gathers the new tokens' and the KV pages' block-table
// entries and views the block table per phase: six torch calls from Python, each 5-23 us of host on the H100
// machine (bench/logs/h100-2026-11-27u/call2/prof_from_host_new.log) where the same ATen calls from C++ skip
// Python's argument parsing and tensor wrapping. ``step_views`` makes exactly those calls, in that order, on
// the caller's current stream; host_metadata.py's Python path is its twin and the reference
// tests/test_host_torch.py holds it to. Built with torch.utils.cpp_extension by host_torch.py (g++ and torch's
// headers; no CUDA compiler: every kernel is ATen's own).

#include <torch/extension.h>

#include <tuple>
#include <vector>

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

int64_t ap_abi() { return 1; }

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("step_views", &step_views);
    m.def("abi", &ap_abi);
}
