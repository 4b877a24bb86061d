// `deltafin --version`: what a bug report needs to know about this binary. Library versions are
// the ones running where the library is shared and queryable (PCRE2, OpenSSL, libcurl), else the
// headers it was built with.
#include "cli/version.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <curl/curl.h>
#include <httplib.h>
#include <openssl/crypto.h>
#include <pcre2.h>

#include <CLI/Version.hpp>
#include <nlohmann/json.hpp>

#include "deltafin/engine.h"

namespace deltafin::cli {

std::string VersionText() {
  char pcre2[64] = "?";
  pcre2_config(PCRE2_CONFIG_VERSION, pcre2);
  const KernelBuildInfo kernels = GetKernelBuildInfo();
  std::string text = "deltafin " DF_VERSION "\n";
  text += "build: " DF_BUILD_TYPE;
  if (!std::string(DF_SANITIZE).empty()) text += ", sanitizers " DF_SANITIZE;
#if defined(__clang__)
  text += ", clang " __clang_version__;
#elif defined(__GNUC__)
  text += ", GCC " __VERSION__;
#endif
  text += ", C++" + std::to_string(__cplusplus / 100 % 100) + "\n";
  text += "kernels: SIMD target " + kernels.simd_target +
          " on this CPU (compiled: " + kernels.compiled_targets +
          "; this CPU supports: " + kernels.usable_targets + ")\n";
  text += "libraries: Highway " + kernels.highway_version + ", PCRE2 " + std::string(pcre2) + ", " +
          OpenSSL_version(OPENSSL_VERSION) + ", libcurl " +
          curl_version_info(CURLVERSION_NOW)->version + ", cpp-httplib " CPPHTTPLIB_VERSION +
          ", nlohmann/json " + std::to_string(NLOHMANN_JSON_VERSION_MAJOR) + "." +
          std::to_string(NLOHMANN_JSON_VERSION_MINOR) + "." +
          std::to_string(NLOHMANN_JSON_VERSION_PATCH) + ", CLI11 " CLI11_VERSION;
  return text;
}

}  // namespace deltafin::cli
