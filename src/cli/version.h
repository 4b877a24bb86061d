// The text `deltafin --version` prints: version, build type and compiler, the kernels' SIMD
// target on this CPU, and the versions of the libraries linked in.
#pragma once

#include <string>

namespace deltafin::cli {

std::string VersionText();

}  // namespace deltafin::cli
