// TensorView: a non-owning, typed window onto tensor bytes (usually inside a memory-mapped shard).
// Views never own memory; the MappedFile or AlignedBuffer behind them must outlive them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tensor/dtype.h"

namespace deltafin {

struct TensorView {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;  // row-major, as in the safetensors header
  const uint8_t* data = nullptr;
  size_t bytes = 0;

  int64_t NumElements() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  int64_t Rows() const { return shape.empty() ? 1 : shape[0]; }
  int64_t Cols() const { return shape.empty() ? 1 : NumElements() / shape[0]; }
};

std::string ShapeString(const std::vector<int64_t>& shape);

}  // namespace deltafin
