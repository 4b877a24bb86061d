// The row-int8 spine (docs/MODEL.md §3.6, docs/INT8.md): which tensors it covers, its on-disk
// layout, and loading it at run time (--spine int8).
//
// On-disk layout, written by `deltafin convert-spine-int8` into <model>/spine-int8/:
//   <tensor name>.i8   int8 [rows, cols] row-major, q[r,c] (no header)
//   <tensor name>.sc   IEEE f16 little-endian [rows], the row scales
//   progress.jsonl     one JSON object per finished tensor, appended as the conversion goes:
//                      {"name", "rows", "cols", "i8_sha256", "sc_sha256"}
//   manifest.json      written last, atomically: {"format": "deltafin-spine-int8",
//                      "format_version": 1, "source": {"config_sha256"}, "tensors": [same objects
//                      as progress.jsonl, in name order]}
// The weights of a tensor are W[r,c] ≈ f32(sc[r]) · i8[r,c].
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "tensor/dtype.h"
#include "weights/weights.h"

namespace deltafin {

inline constexpr char kSpineInt8Dir[] = "spine-int8";
inline constexpr char kSpineInt8Format[] = "deltafin-spine-int8";
inline constexpr int kSpineInt8FormatVersion = 1;

// Spec §3.6 targets: every 2-D BF16 tensor whose name contains none of conv1d, norm, A_log,
// dt_bias, res_proj, e_score_correction_bias, .experts., vision, mm_projector; the embedding
// table excepted (it is a row gather and stays BF16).
bool IsSpineInt8Target(const std::string& name, DType dtype, size_t ndim);
// Targets the engine still reads as BF16 in int8 mode: MLA's kv_b_proj, which is read in absorbed
// form (sub-blocks, one transposed). The converter still writes them (format compatibility).
bool KeptBf16AtRuntime(const std::string& name);

// Resident bytes of a tensor in int8 mode: rows·cols int8 + 4-byte fp32 scales per row for a
// converted target, the stored size otherwise.
uint64_t SpineInt8TensorBytes(const std::string& name, DType dtype,
                              const std::vector<int64_t>& shape);

// Maps <model_dir>/spine-int8/*.i8, widens the .sc scales (owned by `w`) and attaches both to
// every matrix the engine reads whole. Fails with the command to run when the manifest is
// missing, and names the file on any size, shape or identity mismatch.
Status AttachSpineInt8(const std::string& model_dir, ModelWeights* w);

}  // namespace deltafin
