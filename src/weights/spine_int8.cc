#include "weights/spine_int8.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <unordered_map>
#include <utility>
#include <vector>

#include "io/mapped_file.h"
#include "io/sha256.h"
#include "quant/row_int8.h"
#include "weights/tensor_roster.h"

namespace deltafin {

bool IsSpineInt8Target(const std::string& name, DType dtype, size_t ndim) {
  if (dtype != DType::kBF16 || ndim != 2) return false;
  for (const char* skip : {"conv1d", "norm", "A_log", "dt_bias", "res_proj",
                           "e_score_correction_bias", ".experts.", "vision", "mm_projector"}) {
    if (name.find(skip) != std::string::npos) return false;
  }
  return name.find("embed_tokens") == std::string::npos;
}

bool KeptBf16AtRuntime(const std::string& name) {
  return name.find("kv_b_proj") != std::string::npos;
}

uint64_t SpineInt8TensorBytes(const std::string& name, DType dtype,
                              const std::vector<int64_t>& shape) {
  uint64_t elements = 1;
  for (int64_t d : shape) elements *= static_cast<uint64_t>(d);
  if (IsSpineInt8Target(name, dtype, shape.size()) && !KeptBf16AtRuntime(name)) {
    return elements + 4 * static_cast<uint64_t>(shape[0]);
  }
  return elements * DTypeSize(dtype);
}

namespace {

// Every matrix the forward pass reads whole (model/linear.h): the byte map's rows of a linear
// role, with the tensor's name and the matrix it feeds. The map is in roster order, so the
// roster's names line up with its rows.
struct WholeMatrix {
  std::string name;
  SpineMatrix* matrix;
  SpineTensorEntry* entry;
};

std::vector<WholeMatrix> WholeMatrices(ModelWeights* w) {
  std::vector<TensorSpec> specs = GlobalTensorSpecs(w->config);
  for (int64_t l = 0; l < w->config.num_hidden_layers; ++l) {
    for (TensorSpec& s : LayerTensorSpecs(w->config, l)) specs.push_back(std::move(s));
  }
  std::vector<WholeMatrix> out;
  size_t row = 0;
  for (const TensorSpec& spec : specs) {
    if (spec.role == SpineRole::kNone) continue;
    SpineTensorEntry& e = w->spine_map[row++];
    if (!IsLinearRole(e.role)) continue;  // kv_b_proj: kept BF16 (KeptBf16AtRuntime)
    SpineMatrix* m =
        e.layer < 0 ? &w->lm_head : LayerMatrix(&w->layers[static_cast<size_t>(e.layer)], e.role);
    out.push_back({spec.name, m, &e});
  }
  return out;
}

}  // namespace

Status AttachSpineInt8(const std::string& model_dir, ModelWeights* w) {
  const std::string dir = (std::filesystem::path(model_dir) / kSpineInt8Dir).string();
  const std::string manifest_path = dir + "/manifest.json";
  const std::string convert = "run `deltafin convert-spine-int8 --model " + model_dir + "` first";
  std::error_code ec;
  if (!std::filesystem::exists(manifest_path, ec)) {
    return Status::Error("--spine int8: " + manifest_path + " not found (no finished row-int8 " +
                         "conversion of this model); " + convert);
  }
  DF_ASSIGN_OR_RETURN(std::string text, ReadFileToString(manifest_path));
  nlohmann::json manifest = nlohmann::json::parse(text, nullptr, false);
  if (manifest.is_discarded() || !manifest.is_object() || !manifest.contains("tensors") ||
      !manifest["tensors"].is_array()) {
    return Status::Error(manifest_path + ": not a spine-int8 manifest; " + convert);
  }
  if (manifest.value("format", "") != kSpineInt8Format ||
      manifest.value("format_version", 0) != kSpineInt8FormatVersion) {
    return Status::Error(manifest_path + ": unsupported format (expected " + kSpineInt8Format +
                         " version " + std::to_string(kSpineInt8FormatVersion) + "); " + convert);
  }
  DF_ASSIGN_OR_RETURN(std::string config, ReadFileToString(model_dir + "/config.json"));
  const std::string config_sha = Sha256Hex(config.data(), config.size());
  if (manifest["source"].value("config_sha256", "") != config_sha) {
    return Status::Error(manifest_path + " was converted from a different config.json than " +
                         model_dir + "/config.json; delete " + dir + " and " + convert);
  }
  std::unordered_map<std::string, const nlohmann::json*> entries;
  for (const auto& t : manifest["tensors"]) {
    if (t.is_object() && t.contains("name")) entries[t.value("name", "")] = &t;
  }

  const auto matrices = WholeMatrices(w);
  w->int8_files.reserve(matrices.size());
  w->int8_scales.reserve(matrices.size());
  for (const auto& [name, m, entry] : matrices) {
    auto it = entries.find(name);
    if (it == entries.end()) {
      return Status::Error(manifest_path + " lacks tensor " + name + "; " + convert);
    }
    const nlohmann::json& e = *it->second;
    if (e.value("rows", int64_t{-1}) != m->rows || e.value("cols", int64_t{-1}) != m->cols) {
      return Status::Error(manifest_path + ": tensor " + name + " has shape [" +
                           std::to_string(e.value("rows", int64_t{-1})) + ", " +
                           std::to_string(e.value("cols", int64_t{-1})) +
                           "], the checkpoint has [" + std::to_string(m->rows) + ", " +
                           std::to_string(m->cols) + "]; delete " + dir + " and " + convert);
    }
    const std::string base = dir + "/" + name;
    DF_ASSIGN_OR_RETURN(MappedFile q, MappedFile::Open(base + ".i8"));
    const auto want_q = static_cast<uint64_t>(m->rows) * static_cast<uint64_t>(m->cols);
    if (q.size() != want_q) {
      return Status::Error(base + ".i8: " + std::to_string(q.size()) + " bytes, expected " +
                           std::to_string(want_q) + " (rows x cols); rerun `deltafin " +
                           "convert-spine-int8 --model " + model_dir + "` to repair it");
    }
    DF_ASSIGN_OR_RETURN(std::string sc, ReadFileToString(base + ".sc"));
    if (sc.size() != static_cast<size_t>(m->rows) * 2) {
      return Status::Error(base + ".sc: " + std::to_string(sc.size()) + " bytes, expected " +
                           std::to_string(m->rows * 2) + " (2 per row); rerun `deltafin " +
                           "convert-spine-int8 --model " + model_dir + "` to repair it");
    }
    AlignedBuffer<float> scales(static_cast<size_t>(m->rows));
    for (int64_t r = 0; r < m->rows; ++r) {
      const auto lo = static_cast<uint8_t>(sc[static_cast<size_t>(2 * r)]);
      const auto hi = static_cast<uint8_t>(sc[static_cast<size_t>(2 * r + 1)]);
      const float s = F16ToF32(static_cast<uint16_t>(lo | (hi << 8)));
      if (!std::isfinite(s)) {
        return Status::Error(base + ".sc: row " + std::to_string(r) + " has a non-finite scale");
      }
      scales[static_cast<size_t>(r)] = s;
    }
    m->q = reinterpret_cast<const int8_t*>(q.data());
    m->q_scales = scales.data();
    // The byte map now names the .i8 file (indexed past the shards, ModelWeights::SpineFilePath).
    entry->file = static_cast<int>(w->num_spine_files());
    entry->offset = 0;
    entry->bytes = want_q;
    entry->row_int8 = true;
    w->int8_files.push_back(std::move(q));
    w->int8_scales.push_back(std::move(scales));
  }
  return Status::Ok();
}

}  // namespace deltafin
