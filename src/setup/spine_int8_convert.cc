#include "setup/spine_int8_convert.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "format/checkpoint.h"
#include "io/durable_file.h"
#include "io/mapped_file.h"
#include "io/sha256.h"
#include "quant/row_int8.h"
#include "setup/hash.h"
#include "setup/manifest.h"
#include "weights/spine_int8.h"

namespace deltafin::setup {

namespace {

namespace fs = std::filesystem;

// One finished tensor, as recorded in progress.jsonl and manifest.json.
struct Entry {
  std::string name;
  int64_t rows = 0, cols = 0;
  std::string i8_sha256, sc_sha256;
  nlohmann::json ToJson() const {
    return {{"name", name},
            {"rows", rows},
            {"cols", cols},
            {"i8_sha256", i8_sha256},
            {"sc_sha256", sc_sha256}};
  }
};

std::string Errno() { return std::strerror(errno); }

uint64_t FileSize(const std::string& path) {
  std::error_code ec;
  const uint64_t size = fs::file_size(path, ec);
  return ec ? UINT64_MAX : size;
}

// What was converted before: the manifest's tensors, then progress.jsonl's lines (later lines win:
// a re-converted tensor is appended again). Both must come from this model's config.json.
Result<std::map<std::string, Entry>> LoadDone(const std::string& out_dir,
                                              const std::string& config_sha) {
  std::map<std::string, Entry> done;
  auto take = [&](const nlohmann::json& j) {
    if (!j.is_object() || !j.contains("name") || !j.contains("rows") || !j.contains("cols")) return;
    Entry e;
    e.name = j.value("name", "");
    e.rows = j.value("rows", int64_t{0});
    e.cols = j.value("cols", int64_t{0});
    e.i8_sha256 = j.value("i8_sha256", "");
    e.sc_sha256 = j.value("sc_sha256", "");
    done[e.name] = e;
  };
  const std::string other =
      out_dir + " holds a conversion of a different config.json; delete " + out_dir + " and rerun";
  const std::string manifest_path = out_dir + "/manifest.json";
  if (fs::exists(manifest_path)) {
    DF_ASSIGN_OR_RETURN(std::string text, ReadFileToString(manifest_path));
    const auto m = nlohmann::json::parse(text, nullptr, false);
    if (!m.is_discarded() && m.is_object() && m.contains("source")) {
      if (m["source"].value("config_sha256", "") != config_sha) return Status::Error(other);
      if (m.contains("tensors") && m["tensors"].is_array()) {
        for (const auto& t : m["tensors"]) take(t);
      }
    }
  }
  std::ifstream in(out_dir + "/progress.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded()) continue;  // a torn last line of an interrupted run
    if (j.contains("source")) {
      if (j["source"].value("config_sha256", "") != config_sha) return Status::Error(other);
      continue;
    }
    take(j);
  }
  return done;
}

// Empty when the tensor's recorded files are in place, else why it must be (re)converted.
std::string CheckDone(const std::string& base, const Entry* e, int64_t rows, int64_t cols,
                      bool verify) {
  if (e == nullptr) return "";
  if (e->rows != rows || e->cols != cols) return "recorded shape differs from the checkpoint";
  const uint64_t want_i8 = static_cast<uint64_t>(rows) * static_cast<uint64_t>(cols);
  const uint64_t want_sc = static_cast<uint64_t>(rows) * 2;
  for (const auto& [path, want] : {std::pair{base + ".i8", want_i8}, {base + ".sc", want_sc}}) {
    const uint64_t have = FileSize(path);
    if (have == UINT64_MAX) return path + " is missing";
    if (have != want) {
      return path + " has " + std::to_string(have) + " bytes, expected " + std::to_string(want);
    }
  }
  if (verify) {
    for (const auto& [path, want] :
         {std::pair{base + ".i8", e->i8_sha256}, {base + ".sc", e->sc_sha256}}) {
      auto got = Sha256File(path);
      if (!got.ok()) return got.status().message();
      if (*got != want) return path + " sha256 " + *got + " does not match the manifest's " + want;
    }
  }
  return "ok";
}

Result<Entry> ConvertTensor(const std::string& out_dir, const std::string& name,
                            const TensorView& view) {
  const int64_t rows = view.Rows(), cols = view.Cols();
  std::vector<int8_t> q(static_cast<size_t>(rows * cols));
  std::vector<uint8_t> sc(static_cast<size_t>(rows) * 2);
  const auto* src = reinterpret_cast<const uint16_t*>(view.data);
  for (int64_t r = 0; r < rows; ++r) {
    uint16_t s16 = 0;
    if (!QuantizeRowInt8(src + r * cols, cols, q.data() + r * cols, &s16)) {
      return Status::Error("tensor " + name + ": row " + std::to_string(r) +
                           " has a non-finite value or a scale beyond f16; it cannot be converted");
    }
    sc[static_cast<size_t>(2 * r)] = static_cast<uint8_t>(s16 & 0xff);
    sc[static_cast<size_t>(2 * r + 1)] = static_cast<uint8_t>(s16 >> 8);
  }
  const std::string base = out_dir + "/" + name;
  DF_RETURN_IF_ERROR(WriteFileDurably(base + ".i8", q.data(), q.size()));
  DF_RETURN_IF_ERROR(WriteFileDurably(base + ".sc", sc.data(), sc.size()));
  return Entry{name, rows, cols, Sha256Hex(q.data(), q.size()), Sha256Hex(sc.data(), sc.size())};
}

}  // namespace

Status ConvertSpineInt8(const std::string& model_dir, bool verify, bool* mismatched) {
  DF_ASSIGN_OR_RETURN(Checkpoint ckpt, Checkpoint::Open(model_dir));
  DF_ASSIGN_OR_RETURN(std::string config, ReadFileToString(model_dir + "/config.json"));
  const std::string config_sha = Sha256Hex(config.data(), config.size());
  std::vector<std::string> names = ckpt.Names();
  std::sort(names.begin(), names.end());
  std::vector<std::string> targets;
  for (const auto& n : names) {
    const TensorRecord* rec = ckpt.Find(n);
    if (IsSpineInt8Target(n, rec->entry.dtype, rec->entry.shape.size())) targets.push_back(n);
  }
  if (targets.empty()) return Status::Error(model_dir + ": no spine-int8 target tensors found");

  const std::string out_dir = (fs::path(model_dir) / kSpineInt8Dir).string();
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) return Status::Error(out_dir + ": cannot create: " + ec.message());
  DF_ASSIGN_OR_RETURN(auto done, LoadDone(out_dir, config_sha));
  const std::string progress = out_dir + "/progress.jsonl";
  if (!fs::exists(progress)) {
    nlohmann::json header = {{"format", kSpineInt8Format},
                             {"format_version", kSpineInt8FormatVersion},
                             {"source", {{"config_sha256", config_sha}}}};
    DF_RETURN_IF_ERROR(AppendFileDurably(progress, header.dump() + "\n"));
  }

  // Decide what to (re)convert before writing anything.
  std::vector<std::string> todo;
  for (const auto& name : targets) {
    const TensorRecord* rec = ckpt.Find(name);
    auto it = done.find(name);
    const std::string why =
        CheckDone(out_dir + "/" + name, it == done.end() ? nullptr : &it->second,
                  rec->entry.shape[0], rec->entry.shape[1], verify);
    if (why == "ok") continue;
    if (!why.empty()) {
      *mismatched = true;
      std::printf("mismatch: %s: %s; re-converting it\n", name.c_str(), why.c_str());
    }
    todo.push_back(name);
  }
  const std::string manifest_path = out_dir + "/manifest.json";
  if (!todo.empty() && fs::exists(manifest_path)) {
    if (std::remove(manifest_path.c_str()) != 0) {
      return Status::Error(manifest_path + ": cannot remove: " + Errno());
    }
    SyncDirectory(out_dir);
  }
  uint64_t bytes_done = 0;
  for (size_t i = 0; i < todo.size(); ++i) {
    const std::string& name = todo[i];
    const TensorView view = ckpt.View(*ckpt.Find(name));
    DF_ASSIGN_OR_RETURN(Entry e, ConvertTensor(out_dir, name, view));
    DF_RETURN_IF_ERROR(AppendFileDurably(progress, e.ToJson().dump() + "\n"));
    done[name] = e;
    bytes_done += view.bytes;
    std::printf("[%zu/%zu] %s [%lld x %lld]\n", i + 1, todo.size(), name.c_str(),
                static_cast<long long>(e.rows), static_cast<long long>(e.cols));
    std::fflush(stdout);
  }

  nlohmann::json tensors = nlohmann::json::array();
  uint64_t int8_bytes = 0;
  for (const auto& name : targets) {
    const Entry& e = done.at(name);
    tensors.push_back(e.ToJson());
    int8_bytes += static_cast<uint64_t>(e.rows) * static_cast<uint64_t>(e.cols + 2);
  }
  nlohmann::json manifest = {{"format", kSpineInt8Format},
                             {"format_version", kSpineInt8FormatVersion},
                             {"source", {{"config_sha256", config_sha}}},
                             {"quantization",
                              "row-int8: q = clamp(rne(w / (max|w|/127)), -127, "
                              "127), f16 row scale (spec 3.6)"},
                             {"tensors", tensors}};
  if (!todo.empty() || !fs::exists(manifest_path)) {
    const std::string text = manifest.dump(1) + "\n";
    DF_RETURN_IF_ERROR(WriteFileDurably(manifest_path, text));
  }
  if (todo.empty()) {
    std::printf("nothing to convert: all %zu tensors are already converted (%s)\n", targets.size(),
                verify ? "sizes and sha256s checked" : "sizes checked; --verify re-hashes");
  } else {
    std::printf("converted %zu tensors (%.2f GB of BF16), %zu were already done\n", todo.size(),
                static_cast<double>(bytes_done) / 1e9, targets.size() - todo.size());
  }
  std::printf("spine-int8: %zu tensors, %.2f GB (int8 + f16 scales), manifest %s\n", targets.size(),
              static_cast<double>(int8_bytes) / 1e9, manifest_path.c_str());
  return Status::Ok();
}

}  // namespace deltafin::setup
