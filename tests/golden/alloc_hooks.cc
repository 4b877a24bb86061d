// Replaces the global operator new/delete of this test binary with counting versions, so a test
// can prove that Session::Decode, Verify/Commit and Prefill do not allocate (ds4's decode
// allocation guard). The aligned overloads count too: AlignedBuffer (activations, scratch, cache
// slots) allocates through ::operator new(n, std::align_val_t{64}).
#include <atomic>
#include <cstdlib>
#include <new>

namespace deltafin::testing {
std::atomic<uint64_t> g_allocations{0};
}

void* operator new(std::size_t size) {
  deltafin::testing::g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t size) { return operator new(size); }
void* operator new(std::size_t size, std::align_val_t align) {
  deltafin::testing::g_allocations.fetch_add(1, std::memory_order_relaxed);
  const auto a = static_cast<std::size_t>(align);
  if (void* p = std::aligned_alloc(a, (size + a - 1) / a * a)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t size, std::align_val_t align) { return operator new(size, align); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
