// Differential-oracle harness: FlashInfer's own trtllm-gen host selection code, compiled with g++.
//
// Built by attnplan/oracle/trtllm_gen.py against a shadow include tree holding FlashInfer's
// fmhaKernels.cuh, fmhaRunner.cuh, fmhaRunnerParams.h, common.h and exception.h verbatim (from the
// flashinfer-python wheel under test), a flashInferMetaInfo.h generated from the kernel table under
// test, and stubs for what needs a GPU (listed, with why, in trtllm_gen.py STUBS).
//
// It answers one query per stdin line and prints one line per query:
//   OK <function launched by TllmGenFmhaKernel::run> (its cubin: <function>.cubin)
//   MISS <the launcher's "Missing TRTLLM-GEN kernel" info>   (isSupportedWithInfo said no)
//   ERR <message of the exception FlashInfer's code threw>    (a FLASHINFER_CHECK in run(), ...)
// Query fields (space separated, integers):
//   mode(0 paged context, 1 paged decode, 2 ragged) sm dtypeQ dtypeKv dtypeO headDimQk headDimV
//   pageSize numHeadsQ numHeadsKv batch maxSeqLenQ maxSeqLenKv smCount windowLeft sparseTopK
//   skipsSoftmax isCausal maxActiveClusters bf16qFp8KvTransformMode
// (the last is FlashInfer 0.7's Bf16QFp8KvTransformMode; codes without it, ORACLE_HAS_BF16Q undefined,
// ignore it)
// dtype* are FlashInfer's Data_type values (common.h). The runner params are set the way
// csrc/trtllm_fmha_kernel_launcher.cu sets them (trtllm_paged_attention_launcher for modes 0/1,
// trtllm_ragged_attention_launcher for mode 2); only the fields selection reads are set, the others
// stay zero as TllmGenFmhaRunnerParams' constructor leaves them (memset).
#include <climits>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <tuple>

#include "oracle_stub_state.h"

#define private public  // reach TllmGenFmhaRunner::mKernel without changing FlashInfer's text
#include <flashinfer/trtllm/fmha/fmhaRunner.cuh>
#undef private

namespace flashinfer::trtllm_cubin_loader {
// The cubin loader downloads/reads the cubin by path and sha256 (csrc/cubin_loader / jit): recorded,
// and a non-empty placeholder returned so run() proceeds as after a successful load.
std::string getCubin(const std::string& kernelName, const std::string& sha256) {
  oracle_stub::g_cubin = kernelName;
  return "cubin";
}
}  // namespace flashinfer::trtllm_cubin_loader

int main() {
  std::ios::sync_with_stdio(false);
  std::map<std::tuple<int, int, int, int>, std::unique_ptr<TllmGenFmhaRunner>> runners;
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.empty()) continue;
    std::istringstream in(line);
    long mode, sm, dq, dkv, dout, hqk, hv, page, hq, hkv, batch, maxq, maxkv, smCount, windowLeft,
        topK, skips, causal, clusters, bf16q;
    in >> mode >> sm >> dq >> dkv >> dout >> hqk >> hv >> page >> hq >> hkv >> batch >> maxq >>
        maxkv >> smCount >> windowLeft >> topK >> skips >> causal >> clusters >> bf16q;
    oracle_stub::g_sm = static_cast<int>(sm);
    oracle_stub::g_max_active_clusters = static_cast<int>(clusters);
    oracle_stub::g_launched.clear();
    oracle_stub::g_cubin.clear();
    try {
      auto key = std::make_tuple((int)sm, (int)dq, (int)dkv, (int)dout);
      auto it = runners.find(key);
      if (it == runners.end()) {
        // TllmGenFmhaRunnerCache::get: K and V share the KV dtype for paged and ragged calls here.
        it = runners
                 .emplace(key, std::make_unique<TllmGenFmhaRunner>((Data_type)dq, (Data_type)dkv,
                                                                   (Data_type)dkv, (Data_type)dout))
                 .first;
      }
      TllmGenFmhaRunner& runner = *it->second;
      if (hq % hkv != 0) {
        throw std::runtime_error("num_qo_heads must be a multiple of num_kv_heads");
      }
      TllmGenFmhaRunnerParams p;
      p.mHeadDimQk = hqk;
      p.mHeadDimV = hv;
      p.mNumHeadsQ = hq;
      p.mNumHeadsKv = hkv;
      p.mNumHeadsQPerKv = hq / hkv;
      p.mBatchSize = batch;
      p.mMaxSeqLenKv = maxkv;
      p.mMultiProcessorCount = smCount;
      p.mChunkedAttentionSize = INT_MAX;
      p.mAttentionWindowSize = windowLeft == -1 ? INT_MAX : windowLeft + 1;
      p.mMaxSeqLenQ = maxq;
      p.mSumOfSeqLensQ = batch * maxq;
      p.mSkipsSoftmaxWhenPossible = skips != 0;
#ifdef ORACLE_HAS_BF16Q
      // trtllm_paged_attention_launcher (0.7): a transform mode other than Full only for BF16 query,
      // E4M3 KV, BF16 output decode (TVM_FFI_ICHECK); the ragged launcher passes 0.
      if (bf16q != 0 && !(mode == 1 && dq == DATA_TYPE_BF16 && dkv == DATA_TYPE_E4M3 &&
                          dout == DATA_TYPE_BF16)) {
        throw std::runtime_error("bf16q_fp8kv_transform_mode is only supported for BF16 query, FP8 E4M3 KV, BF16 output decode");
      }
      if (mode != 2) p.mBf16QFp8KvTransformMode = static_cast<Bf16QFp8KvTransformMode>(bf16q);
#endif
      if (mode == 2) {
        p.mQkvLayout = QkvLayout::SeparateQkv;
        p.mKernelType = FmhaKernelType::Context;
        p.mTileScheduler = TileScheduler::Persistent;
        p.mMaskType = causal ? TrtllmGenAttentionMaskType::Causal : TrtllmGenAttentionMaskType::Dense;
      } else {
        p.mNumTokensPerPage = page;
        p.mQkvLayout = QkvLayout::PagedKv;
        p.mSparseMlaType = topK <= 0 ? TrtllmGenSparseMlaType::None
                                     : TrtllmGenSparseMlaType::StaticTokenSparse;
        p.mSparseMlaTopK = topK;
        bool const isMlaDecode = (hqk == 576 && hv == 512) || (hqk == 320 && hv == 256) ||
                                 (topK > 0 && hqk == 512 && hv == 512);
        if (!(isMlaDecode || topK <= 0)) throw std::runtime_error("Only decode MLA supports sparse MLA");
        if (mode == 0) {
          p.mMaskType = causal ? TrtllmGenAttentionMaskType::Causal : TrtllmGenAttentionMaskType::Dense;
          p.mKernelType = FmhaKernelType::Context;
          p.mTileScheduler = TileScheduler::Persistent;
          p.mMultiCtasKvMode = false;
        } else {
          p.mMaskType = isMlaDecode ? TrtllmGenAttentionMaskType::Dense
                                    : TrtllmGenAttentionMaskType::Causal;
          p.mKernelType = FmhaKernelType::Generation;
          p.mTileScheduler = TileScheduler::Static;
          p.mMultiCtasKvMode = true;
        }
      }
      auto [found, info] = runner.isSupportedWithInfo(p);
      if (!found) {
        std::cout << "MISS " << info << "\n";
        continue;
      }
      runner.run(p);
      std::cout << "OK " << oracle_stub::g_launched << "\n";
    } catch (std::exception const& e) {
      std::string msg = e.what();
      for (char& c : msg)
        if (c == '\n') c = ' ';
      std::cout << "ERR " << msg << "\n";
    }
  }
  return 0;
}
