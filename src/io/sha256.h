// SHA-256 of a byte range and lower-case hex of a digest (OpenSSL libcrypto EVP). The one hex
// encoder of digests: setup's streaming hashers and the int8 spine's identity use it.
#pragma once

#include <cstddef>
#include <string>

namespace deltafin {

// Lower-case hex of `size` bytes.
std::string HexLower(const unsigned char* bytes, size_t size);

// SHA-256 of [data, data + size), lower-case hex.
std::string Sha256Hex(const void* data, size_t size);

}  // namespace deltafin
