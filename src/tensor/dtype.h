// Element types that appear in a K3 checkpoint, and their safetensors spellings.
// BF16 and F32 hold the spine; U8 holds the MXFP4 expert payload (packed nibbles and E8M0 scales).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace deltafin {

enum class DType : uint8_t { kF32, kBF16, kU8 };

inline size_t DTypeSize(DType t) {
  switch (t) {
    case DType::kF32:
      return 4;
    case DType::kBF16:
      return 2;
    case DType::kU8:
      return 1;
  }
  return 0;
}

inline std::string_view DTypeName(DType t) {
  switch (t) {
    case DType::kF32:
      return "F32";
    case DType::kBF16:
      return "BF16";
    case DType::kU8:
      return "U8";
  }
  return "?";
}

// Parses a safetensors dtype string; nullopt for dtypes a K3 checkpoint never uses.
inline std::optional<DType> ParseDType(std::string_view s) {
  if (s == "F32") return DType::kF32;
  if (s == "BF16") return DType::kBF16;
  if (s == "U8") return DType::kU8;
  return std::nullopt;
}

}  // namespace deltafin
