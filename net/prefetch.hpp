#pragma once
// Starting loads early: a batch of streams touches each stream's objects once per engine step,
// long after they left the processor's caches, so the front asks for the next streams'
// memory while it writes the current one's (prefetches never fault, whatever the address).
#include <cstddef>

namespace kiln::net {

/// Starts loading the cache lines of [p, p + bytes).
inline void prefetch_bytes(const void* p, std::size_t bytes) {
  const auto* c = static_cast<const char*>(p);
  for (std::size_t off = 0; off < bytes; off += 64) __builtin_prefetch(c + off);
  if (bytes > 0) __builtin_prefetch(c + bytes - 1);
}

template <class T>
void prefetch_object(const T* p) {
  prefetch_bytes(p, sizeof(T));
}

}  // namespace kiln::net
