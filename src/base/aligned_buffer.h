// AlignedBuffer: an owning, 64-byte aligned, zero-initialised array of trivially copyable T.
// Used for activations and scratch so SIMD loads never straddle cache lines, and so that the decode
// loop can reuse memory reserved up front instead of allocating per token. The memory comes from
// the aligned global operator new (and goes back through the matching delete), not from
// std::aligned_alloc: the no-allocation tests count operator new, and every activation, scratch
// buffer and cache slot is an AlignedBuffer, so a per-step Resize must show up there.
#pragma once

#include <cstddef>
#include <cstring>
#include <new>
#include <span>
#include <type_traits>
#include <utility>

namespace deltafin {

template <typename T>
class AlignedBuffer {
  static_assert(std::is_trivially_copyable_v<T>);

 public:
  static constexpr size_t kAlignment = 64;

  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t count) { Resize(count); }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  AlignedBuffer(AlignedBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}
  AlignedBuffer& operator=(AlignedBuffer&& other) noexcept {
    if (this != &other) {
      Free(data_);
      data_ = std::exchange(other.data_, nullptr);
      size_ = std::exchange(other.size_, 0);
    }
    return *this;
  }
  ~AlignedBuffer() { Free(data_); }

  // Discards the contents; the new elements are zero.
  void Resize(size_t count) {
    Free(data_);
    data_ = nullptr;
    size_ = count;
    if (count == 0) return;
    size_t bytes = (count * sizeof(T) + kAlignment - 1) / kAlignment * kAlignment;
    data_ = static_cast<T*>(::operator new (bytes, std::align_val_t{kAlignment}));  // throws
    std::memset(static_cast<void*>(data_), 0, bytes);
  }
  void Zero() {
    if (data_) std::memset(static_cast<void*>(data_), 0, size_ * sizeof(T));
  }

  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return size_; }
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }
  std::span<T> span() { return {data_, size_}; }
  std::span<const T> span() const { return {data_, size_}; }

 private:
  static void Free(T* p) {
    if (p != nullptr) ::operator delete (static_cast<void*>(p), std::align_val_t{kAlignment});
  }

  T* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace deltafin
