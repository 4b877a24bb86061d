#include "weights/spine_map.h"

namespace deltafin {

void AppendSpineEntries(const std::vector<TensorSpec>& specs, int64_t layer, bool spine_int8,
                        std::vector<SpineTensorEntry>* out) {
  for (const TensorSpec& spec : specs) {
    if (spec.role == SpineRole::kNone) continue;
    SpineTensorEntry e;
    e.layer = layer;
    e.role = spec.role;
    e.dtype = spec.dtype;
    e.rows = spec.shape.empty() ? 1 : spec.shape[0];
    e.cols = 1;
    for (size_t d = 1; d < spec.shape.size(); ++d) e.cols *= spec.shape[d];
    e.row_int8 = spine_int8 && IsLinearRole(spec.role);
    const auto elements = static_cast<uint64_t>(e.rows) * static_cast<uint64_t>(e.cols);
    e.bytes = e.row_int8 ? elements : elements * DTypeSize(spec.dtype);
    out->push_back(e);
  }
}

std::vector<SpineTensorEntry> SpineTensorTable(const ModelConfig& c, bool spine_int8) {
  std::vector<SpineTensorEntry> out;
  AppendSpineEntries(GlobalTensorSpecs(c), -1, spine_int8, &out);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    AppendSpineEntries(LayerTensorSpecs(c, l), l, spine_int8, &out);
  }
  return out;
}

}  // namespace deltafin
