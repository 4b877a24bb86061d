#include "weights/placement.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "format/safetensors.h"
#include "io/durable_file.h"
#include "io/sha256.h"

namespace deltafin {

namespace fs = std::filesystem;

namespace {

constexpr const char* kMagic = "deltafin-placement/1 sha256=";

Result<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::Error("cannot read " + path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return Status::Error("cannot read " + path);
  return text;
}

constexpr uint64_t kSampleBytes = 64 << 10;

// The first kSampleBytes of the largest tensor of the shard that is not a routed expert (empty when
// every tensor is one).
Result<std::string> SpineSample(const std::string& path, uint64_t file_size) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::Error("cannot read " + path);
  uint8_t first8[8] = {};
  in.read(reinterpret_cast<char*>(first8), 8);
  DF_ASSIGN_OR_RETURN(const uint64_t n, SafetensorsHeaderLength(first8, file_size, path));
  std::vector<uint8_t> header(8 + n);
  std::copy(first8, first8 + 8, header.begin());
  in.read(reinterpret_cast<char*>(header.data() + 8), static_cast<std::streamsize>(n));
  if (!in) return Status::Error("cannot read the header of " + path);
  DF_ASSIGN_OR_RETURN(SafetensorsHeader h,
                      ParseSafetensorsHeader(header.data(), header.size(), file_size, path));
  const SafetensorsEntry* best = nullptr;
  for (const auto& t : h.tensors) {
    if (t.name.find(".block_sparse_moe.experts.") != std::string::npos) continue;
    if (best == nullptr || t.end - t.begin > best->end - best->begin) best = &t;
  }
  if (best == nullptr) return std::string();
  std::string sample(static_cast<size_t>(std::min(kSampleBytes, best->end - best->begin)), '\0');
  in.seekg(static_cast<std::streamoff>(h.data_offset + best->begin));
  in.read(sample.data(), static_cast<std::streamsize>(sample.size()));
  if (!in) return Status::Error("cannot read " + path);
  return sample;
}

}  // namespace

std::string PlacementPath(const std::string& model_dir) {
  return (fs::path(model_dir) / ".deltafin" / "placement.json").string();
}

Result<PlacementModel> DescribePlacementModel(const std::string& model_dir) {
  PlacementModel m;
  DF_ASSIGN_OR_RETURN(std::string config, ReadWholeFile((fs::path(model_dir) / "config.json")));
  m.config_sha256 = Sha256Hex(config.data(), config.size());
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(model_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_regular_file() || !name.ends_with(".safetensors")) continue;
    m.shards.push_back({name, static_cast<uint64_t>(entry.file_size())});
  }
  if (ec) return Status::Error("cannot list " + model_dir + ": " + ec.message());
  std::sort(m.shards.begin(), m.shards.end(),
            [](const auto& a, const auto& b) { return a.name < b.name; });
  std::string samples;
  for (const auto& s : m.shards) {
    DF_ASSIGN_OR_RETURN(std::string sample,
                        SpineSample((fs::path(model_dir) / s.name).string(), s.size));
    samples += s.name + ":" + Sha256Hex(sample.data(), sample.size()) + "\n";
  }
  m.weights_sample_sha256 = Sha256Hex(samples.data(), samples.size());
  return m;
}

Result<std::optional<Placement>> LoadPlacement(const std::string& model_dir,
                                               const PlacementModel& model) {
  const std::string path = PlacementPath(model_dir);
  std::error_code ec;
  if (!fs::exists(path, ec)) return std::optional<Placement>();
  DF_ASSIGN_OR_RETURN(std::string text, ReadWholeFile(path));
  const std::string magic = kMagic;
  const size_t eol = text.find('\n');
  if (text.rfind(magic, 0) != 0 || eol == std::string::npos || eol != magic.size() + 64) {
    return Status::Error("placement " + path +
                         " is not a deltafin-placement/1 file (another version, or torn); "
                         "run `deltafin spread` again or remove it");
  }
  const std::string want = text.substr(magic.size(), 64);
  const std::string got = Sha256Hex(text.data() + eol + 1, text.size() - eol - 1);
  if (want != got) {
    return Status::Error("placement " + path + " fails its checksum (body sha256 " + got +
                         ", recorded " + want +
                         "): the file is corrupt; remove it and run "
                         "`deltafin spread` again");
  }
  auto j = nlohmann::json::parse(text.begin() + static_cast<std::ptrdiff_t>(eol + 1), text.end(),
                                 nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return Status::Error("placement " + path + ": body is not a JSON object");
  }
  Placement p;
  try {
    p.model.config_sha256 = j.at("model").at("config_sha256").get<std::string>();
    p.model.weights_sample_sha256 = j.at("model").at("weights_sample_sha256").get<std::string>();
    for (const auto& s : j.at("model").at("shards")) {
      p.model.shards.push_back({s.at("name").get<std::string>(), s.at("size").get<uint64_t>()});
    }
    p.drives = j.at("drives").get<std::vector<std::string>>();
    p.num_layers = j.at("layers").get<int64_t>();
    p.num_experts = j.at("experts").get<int64_t>();
    p.copies = j.at("copies").get<std::vector<uint32_t>>();
    p.sha256 = j.at("sha256").get<std::vector<std::string>>();
  } catch (const nlohmann::json::exception& e) {
    return Status::Error("placement " + path + ": " + e.what());
  }
  const auto n = static_cast<size_t>(p.num_layers * p.num_experts);
  if (p.num_layers < 0 || p.num_experts < 0 || p.copies.size() != n || p.sha256.size() != n ||
      static_cast<int>(p.drives.size()) > Placement::kMaxDrives) {
    return Status::Error("placement " + path + ": inconsistent sizes");
  }
  const uint32_t valid = (2u << p.drives.size()) - 1;  // bits 0..drives
  for (const uint32_t c : p.copies) {
    if ((c & ~valid) != 0) return Status::Error("placement " + path + ": copy of an unknown drive");
  }
  if (p.model.config_sha256 != model.config_sha256) {
    return Status::Error("placement " + path +
                         " was made for another model: its config.json sha256 is " +
                         p.model.config_sha256 + ", this model's is " + model.config_sha256 +
                         " (remove it and run `deltafin spread` for this model)");
  }
  if (p.model.weights_sample_sha256 != model.weights_sample_sha256) {
    return Status::Error("placement " + path +
                         " was made for another model: its weights differ from this model's (a "
                         "sample of the spine hashes to " +
                         model.weights_sample_sha256 + ", the placement recorded " +
                         p.model.weights_sample_sha256 +
                         "; remove it and run `deltafin spread` for this model)");
  }
  if (p.model.shards != model.shards) {
    return Status::Error("placement " + path +
                         " was made for another revision of this model: its shard files (names "
                         "or sizes) differ from the model folder's (remove it and run "
                         "`deltafin spread` again)");
  }
  return std::optional<Placement>(std::move(p));
}

Status SavePlacement(const std::string& model_dir, const Placement& p) {
  nlohmann::json shards = nlohmann::json::array();
  for (const auto& s : p.model.shards) shards.push_back({{"name", s.name}, {"size", s.size}});
  const nlohmann::json j = {{"model",
                             {{"config_sha256", p.model.config_sha256},
                              {"weights_sample_sha256", p.model.weights_sample_sha256},
                              {"shards", shards}}},
                            {"drives", p.drives},
                            {"layers", p.num_layers},
                            {"experts", p.num_experts},
                            {"copies", p.copies},
                            {"sha256", p.sha256}};
  const std::string body = j.dump() + "\n";
  const std::string text = kMagic + Sha256Hex(body.data(), body.size()) + "\n" + body;
  std::error_code ec;
  fs::create_directories(fs::path(PlacementPath(model_dir)).parent_path(), ec);
  if (ec) return Status::Error("cannot create " + model_dir + "/.deltafin: " + ec.message());
  return WriteFileDurably(PlacementPath(model_dir), text);
}

}  // namespace deltafin
