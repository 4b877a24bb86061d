// The spine byte map: one row per spine tensor (every tensor of the roster that is not a routed
// expert) saying which layer and role it has, which file holds it, where, how many bytes and in
// which dtype — the spine's counterpart of the expert table (MoeWeights::expert_offsets).
//
// Binding (weights.cc) writes it from the checkpoint's headers; the row-int8 spine
// (spine_int8.h) re-aims the matrices it replaces at their .i8 files. Everything that needs to
// know where spine bytes are or how many there are reads the map instead of searching the mapped
// shards for a pointer or matching tensor names: the spine ring (spine_ring.h) plans its reads
// from it, and the engine's memory needs and decode workload (model/engine.cc, `deltafin plan`)
// sum it. Before any weight is read — Engine::Plan from config.json alone — SpineTensorTable
// gives the same rows from the config, without files and offsets.
#pragma once

#include <cstdint>
#include <vector>

#include "tensor/dtype.h"
#include "weights/config.h"
#include "weights/tensor_roster.h"

namespace deltafin {

struct SpineTensorEntry {
  int64_t layer = -1;  // decoder layer; -1 for the global tensors (embedding, final norm, lm_head)
  SpineRole role = SpineRole::kNone;
  // Index into ModelWeights::SpineFilePath: the checkpoint's shards, then the row-int8 .i8
  // files. -1 in a table made from the config alone.
  int file = -1;
  uint64_t offset = 0;         // of the tensor's first byte in that file
  uint64_t bytes = 0;          // its bytes in that file: what reading it costs
  DType dtype = DType::kBF16;  // the checkpoint's dtype
  // Stored as the row-int8 copy (--spine int8): `bytes` int8 weights in an .i8 file, with one
  // fp32 scale per row held in RAM beside them.
  bool row_int8 = false;
  int64_t rows = 0;  // shape[0]
  int64_t cols = 0;  // the product of the other dimensions (1 for a vector)
};

// RAM the tensor takes once read: its bytes, and a row-int8 matrix's fp32 row scales.
inline uint64_t ResidentBytes(const SpineTensorEntry& e) {
  return e.bytes + (e.row_int8 ? 4 * static_cast<uint64_t>(e.rows) : 0);
}

// Multiply-adds of one position through the tensor when the forward pass runs it as a matrix
// (the linear roles and kv_b_proj), else 0.
inline uint64_t MatrixMacs(const SpineTensorEntry& e) {
  return IsSpineMatrixRole(e.role) ? static_cast<uint64_t>(e.rows) * static_cast<uint64_t>(e.cols)
                                   : 0;
}

// The map's rows from the config alone, in roster order (global tensors, then layer by layer),
// with file -1. `spine_int8`: the linear roles as their row-int8 copies (IsLinearRole).
std::vector<SpineTensorEntry> SpineTensorTable(const ModelConfig& c, bool spine_int8);

// One row per spec of `specs` with a spine role, in order (file -1, offset 0).
void AppendSpineEntries(const std::vector<TensorSpec>& specs, int64_t layer, bool spine_int8,
                        std::vector<SpineTensorEntry>* out);

}  // namespace deltafin
