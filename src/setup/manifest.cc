#include "setup/manifest.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "io/durable_file.h"
#include "io/mapped_file.h"
#include "setup/crash_point.h"

namespace deltafin::setup {

namespace fs = std::filesystem;

std::string StateDir(const std::string& model_dir) {
  return (fs::path(model_dir) / ".deltafin").string();
}

std::string ManifestPath(const std::string& model_dir) {
  return (fs::path(StateDir(model_dir)) / "manifest.json").string();
}

Status WriteFileDurably(const std::string& path, const void* data, size_t size, int mode) {
  DurableWriteOptions options;
  options.mode = mode;
  options.before_rename = [](const std::string& p) { CrashPoint("durable-before-rename", p); };
  return deltafin::WriteFileDurably(path, data, size, options);
}

Result<std::optional<Manifest>> Manifest::Load(const std::string& model_dir) {
  const std::string path = ManifestPath(model_dir);
  if (!fs::exists(path)) return std::optional<Manifest>();
  DF_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  auto bad = [&](const std::string& why) {
    return Status::Error(path + ": " + why + " (delete " + StateDir(model_dir) +
                         " and run setup again)");
  };
  if (j.is_discarded() || !j.is_object()) return bad("not well-formed JSON");
  if (j.value("format", "") != "deltafin-install/1") return bad("unknown format");
  Manifest m;
  try {
    m.mode = j.at("mode").get<std::string>();
    m.complete = j.at("complete").get<bool>();
    m.endpoint = j.at("endpoint").get<std::string>();
    m.repo = j.at("repo").get<std::string>();
    m.revision = j.at("revision").get<std::string>();
    m.commit = j.at("commit").get<std::string>();
    for (const auto& f : j.at("files")) {
      ManifestFile mf;
      mf.path = f.at("path").get<std::string>();
      mf.size = f.at("size").get<uint64_t>();
      mf.sha256 = f.value("sha256", "");
      mf.blob_id = f.value("blob_id", "");
      mf.state = f.at("state").get<std::string>();
      m.files.push_back(std::move(mf));
    }
    if (j.contains("drives")) {
      m.drives = j.at("drives").get<std::vector<std::string>>();
      m.copies = j.at("copies").get<int>();
    }
  } catch (const nlohmann::json::exception& e) {
    return bad(std::string("missing or mistyped field: ") + e.what());
  }
  if (m.mode != "full" && m.mode != "stream") return bad("mode is neither full nor stream");
  return std::optional<Manifest>(std::move(m));
}

Status Manifest::Save(const std::string& model_dir) const {
  nlohmann::json jfiles = nlohmann::json::array();
  for (const auto& f : this->files) {
    nlohmann::json jf = {{"path", f.path}, {"size", f.size}, {"state", f.state}};
    if (!f.sha256.empty()) jf["sha256"] = f.sha256;
    if (!f.blob_id.empty()) jf["blob_id"] = f.blob_id;
    jfiles.push_back(std::move(jf));
  }
  nlohmann::json j = {{"format", "deltafin-install/1"},
                      {"mode", mode},
                      {"complete", complete},
                      {"endpoint", endpoint},
                      {"repo", repo},
                      {"revision", revision},
                      {"commit", commit},
                      {"files", jfiles}};
  if (!drives.empty()) {
    j["drives"] = drives;
    j["copies"] = copies;
  }
  std::error_code ec;
  fs::create_directories(StateDir(model_dir), ec);
  return WriteFileDurably(ManifestPath(model_dir), j.dump(1) + "\n");
}

ManifestFile* Manifest::Find(const std::string& path) {
  for (auto& f : files) {
    if (f.path == path) return &f;
  }
  return nullptr;
}

const ManifestFile* Manifest::Find(const std::string& path) const {
  for (const auto& f : files) {
    if (f.path == path) return &f;
  }
  return nullptr;
}

}  // namespace deltafin::setup
