#include "net/hf_hub.h"

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace deltafin::net {

namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

std::string ReadTokenFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return "";
  std::string token;
  std::getline(in, token);
  const size_t e = token.find_last_not_of(" \t\r\n");
  return e == std::string::npos ? "" : token.substr(0, e + 1);
}

bool IsHex(const std::string& s, size_t n) {
  if (s.size() != n) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

// Percent-encodes one path segment (RFC 3986 unreserved characters pass through).
std::string EscapeSegment(const std::string& s) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

std::string EscapePath(const std::string& path) {
  std::string out;
  size_t pos = 0;
  while (true) {
    const size_t slash = path.find('/', pos);
    out += EscapeSegment(path.substr(pos, slash - pos));
    if (slash == std::string::npos) break;
    out += '/';
    pos = slash + 1;
  }
  return out;
}

}  // namespace

std::string EndpointFromEnvironment(const std::string& fallback) {
  std::string e = Env("HF_ENDPOINT");
  if (e.empty()) e = fallback;
  while (!e.empty() && e.back() == '/') e.pop_back();
  return e;
}

TokenChoice ResolveToken(const std::string& flag, const std::string& saved_file) {
  if (!flag.empty()) return {flag, "--token"};
  if (std::string t = Env("HF_TOKEN"); !t.empty()) return {t, "HF_TOKEN"};
  std::vector<std::string> files;
  if (!saved_file.empty()) files.push_back(saved_file);
  if (std::string p = Env("HF_TOKEN_PATH"); !p.empty()) files.push_back(p);
  if (std::string h = Env("HF_HOME"); !h.empty()) {
    files.push_back(h + "/token");
  } else if (std::string home = Env("HOME"); !home.empty()) {
    const std::string cache = Env("XDG_CACHE_HOME");
    files.push_back((cache.empty() ? home + "/.cache" : cache) + "/huggingface/token");
  }
  for (const auto& f : files) {
    if (std::string t = ReadTokenFile(f); !t.empty()) return {t, f};
  }
  return {"", ""};
}

Status CheckRepoId(const std::string& repo) {
  const size_t slash = repo.find('/');
  bool ok = slash != std::string::npos && slash > 0 && slash + 1 < repo.size() &&
            repo.find('/', slash + 1) == std::string::npos;
  for (char c : repo) {
    ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' ||
                c == '/');
  }
  if (!ok || repo.find("..") != std::string::npos) {
    return Status::Error("repository '" + repo + "' is not of the form ORG/NAME");
  }
  return Status::Ok();
}

Status CheckRevision(const std::string& revision) {
  bool ok = !revision.empty() && revision.size() < 256 && revision.find("..") == std::string::npos;
  for (char c : revision) {
    ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' ||
                c == '/');
  }
  if (!ok) return Status::Error("revision '" + revision + "' is not a branch, tag or commit name");
  return Status::Ok();
}

Status CheckRepoPath(const std::string& path) {
  auto refuse = [&](const std::string& why) {
    return Status::Error("refusing file name '" + path + "' from the repository listing: " + why);
  };
  if (path.empty()) return refuse("it is empty");
  if (path[0] == '/') return refuse("it is an absolute path");
  for (unsigned char c : path) {
    if (c < 0x20 || c == 0x7f) return refuse("it contains a control character");
    if (c == '\\') return refuse("it contains a backslash");
  }
  size_t pos = 0;
  while (true) {
    const size_t slash = path.find('/', pos);
    const std::string seg = path.substr(pos, slash - pos);
    if (seg.empty()) return refuse("it has an empty path segment");
    if (seg == "." || seg == "..") return refuse("it contains a '" + seg + "' segment");
    if (pos == 0 && seg == ".deltafin") return refuse("it would overwrite deltafin's own state");
    if (seg.size() > 255) return refuse("a path segment is longer than 255 bytes");
    if (slash == std::string::npos) break;
    pos = slash + 1;
  }
  for (const std::string suffix : {".partial", ".partial.etag"}) {
    if (path.size() >= suffix.size() &&
        path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0) {
      return refuse("it ends in " + suffix + ", a suffix of unfinished downloads");
    }
  }
  return Status::Ok();
}

Result<HubRepoInfo> ParseRevisionJson(const std::string& text, const std::string& label) {
  auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Status::Error(label + ": not a JSON object");
  HubRepoInfo info;
  auto sha = j.find("sha");
  if (sha == j.end() || !sha->is_string() || !IsHex(sha->get<std::string>(), 40)) {
    return Status::Error(label + ": missing or malformed commit 'sha'");
  }
  info.commit = sha->get<std::string>();
  auto siblings = j.find("siblings");
  if (siblings == j.end() || !siblings->is_array()) {
    return Status::Error(label + ": missing 'siblings' (the file list)");
  }
  for (const auto& s : *siblings) {
    HubFile f;
    if (!s.is_object() || !s.contains("rfilename") || !s["rfilename"].is_string()) {
      return Status::Error(label + ": a sibling has no 'rfilename'");
    }
    f.path = s["rfilename"].get<std::string>();
    DF_RETURN_IF_ERROR(CheckRepoPath(f.path).WithContext(label));
    if (!s.contains("size") || !s["size"].is_number_unsigned()) {
      return Status::Error(label + ": file '" + f.path +
                           "' has no size (the API must be asked with ?blobs=true)");
    }
    f.size = s["size"].get<uint64_t>();
    if (s.contains("blobId") && s["blobId"].is_string()) f.blob_id = s["blobId"].get<std::string>();
    if (s.contains("lfs") && s["lfs"].is_object()) {
      const auto& lfs = s["lfs"];
      if (!lfs.contains("sha256") || !lfs["sha256"].is_string() ||
          !IsHex(lfs["sha256"].get<std::string>(), 64)) {
        return Status::Error(label + ": file '" + f.path + "' has a malformed lfs.sha256");
      }
      f.sha256 = lfs["sha256"].get<std::string>();
      if (lfs.contains("size") && lfs["size"].is_number_unsigned() &&
          lfs["size"].get<uint64_t>() != f.size) {
        return Status::Error(label + ": file '" + f.path + "' has lfs.size " +
                             std::to_string(lfs["size"].get<uint64_t>()) + " but size " +
                             std::to_string(f.size));
      }
    }
    if (!f.blob_id.empty() && !IsHex(f.blob_id, 40)) f.blob_id.clear();
    for (const auto& other : info.files) {
      if (other.path == f.path)
        return Status::Error(label + ": file '" + f.path + "' is listed twice");
    }
    info.files.push_back(std::move(f));
  }
  if (info.files.empty()) return Status::Error(label + ": the repository lists no files");
  return info;
}

std::string RevisionApiUrl(const std::string& endpoint, const std::string& repo,
                           const std::string& revision) {
  return endpoint + "/api/models/" + repo + "/revision/" + EscapeSegment(revision) + "?blobs=true";
}

std::string ResolveUrl(const std::string& endpoint, const std::string& repo,
                       const std::string& revision, const std::string& path) {
  return endpoint + "/" + repo + "/resolve/" + EscapeSegment(revision) + "/" + EscapePath(path);
}

Result<HubRepoInfo> FetchRepoInfo(HttpClient& client, const std::string& endpoint,
                                  const std::string& repo, const std::string& revision) {
  DF_RETURN_IF_ERROR(CheckRepoId(repo));
  DF_RETURN_IF_ERROR(CheckRevision(revision));
  const std::string url = RevisionApiUrl(endpoint, repo, revision);
  std::string body;
  DF_RETURN_IF_ERROR(client.GetText(url, &body));
  return ParseRevisionJson(body, url);
}

}  // namespace deltafin::net
