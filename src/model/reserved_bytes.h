// Bytes a set of AlignedBuffers holds: how the model's state and scratch structs report what they
// reserved (Session::ReservedBytes, which a test holds against the memory plan's session_bytes).
#pragma once

#include <cstdint>

#include "base/aligned_buffer.h"

namespace deltafin {

template <typename... T>
uint64_t BufferBytes(const AlignedBuffer<T>&... buffers) {
  return ((static_cast<uint64_t>(buffers.size()) * sizeof(T)) + ... + 0);
}

}  // namespace deltafin
