// The subset of the Hugging Face hub protocol an install needs (docs/SETUP.md §Hub protocol).
//
//   GET {endpoint}/api/models/{repo}/revision/{revision}?blobs=true
//     -> {"sha": "<commit>", "siblings": [{"rfilename": "config.json", "size": 7006,
//          "blobId": "<git sha1>", "lfs": {"sha256": "<hex>", "size": N}?}, ...]}
//   GET {endpoint}/{repo}/resolve/{commit}/{path}   (may redirect to a CDN; Range supported)
//
// Every file name from the API is checked before it becomes a local path: relative, no "." or
// ".." segments, no empty segments, no backslashes or control characters, not under .deltafin/.
// Tokens come from --token, HF_TOKEN, $HF_TOKEN_PATH, $HF_HOME/token or
// ~/.cache/huggingface/token, in that order.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "net/http_client.h"

namespace deltafin::net {

inline constexpr char kDefaultEndpoint[] = "https://huggingface.co";
inline constexpr char kDefaultRepo[] = "moonshotai/Kimi-K3";
inline constexpr char kDefaultRevision[] = "main";

struct HubFile {
  std::string path;     // relative path inside the repository ("rfilename")
  uint64_t size = 0;    // bytes
  std::string sha256;   // LFS files: lower-case hex of the whole file; empty otherwise
  std::string blob_id;  // git blob sha1 (hex) for non-LFS files; may be empty
};

struct HubRepoInfo {
  std::string commit;  // the resolved revision ("sha")
  std::vector<HubFile> files;
};

// HF_ENDPOINT, else `fallback` (an install's recorded endpoint, or the public hub), without a
// trailing slash.
std::string EndpointFromEnvironment(const std::string& fallback = kDefaultEndpoint);

struct TokenChoice {
  std::string token;
  std::string source;  // "--token", "HF_TOKEN", a file path, or "" when none was found
};
// The first of: `flag`, $HF_TOKEN, `saved_file` (a token an install kept, when given),
// $HF_TOKEN_PATH, $HF_HOME/token, ~/.cache/huggingface/token.
TokenChoice ResolveToken(const std::string& flag, const std::string& saved_file = "");

// "org/name" with [A-Za-z0-9._-] segments.
Status CheckRepoId(const std::string& repo);
// A revision name or commit sha: no "/"-escapes, spaces or control characters.
Status CheckRevision(const std::string& revision);
// See the file comment; the error names the offending file.
Status CheckRepoPath(const std::string& path);

// Parses the revision API's JSON (exposed for tests); `label` prefixes errors.
Result<HubRepoInfo> ParseRevisionJson(const std::string& text, const std::string& label);

std::string RevisionApiUrl(const std::string& endpoint, const std::string& repo,
                           const std::string& revision);
std::string ResolveUrl(const std::string& endpoint, const std::string& repo,
                       const std::string& revision, const std::string& path);

// GETs and parses the revision API; every path is checked.
Result<HubRepoInfo> FetchRepoInfo(HttpClient& client, const std::string& endpoint,
                                  const std::string& repo, const std::string& revision);

}  // namespace deltafin::net
