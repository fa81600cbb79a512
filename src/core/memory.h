#pragma once
// What the process holds in memory, as the operating system and as the C allocator see it, and
// a way to give the allocator's free pages back. The two views differ: RSS counts every touched
// page (mapped weights, the KV cache, free heap pages the allocator kept), the heap figures only
// malloc's. Growth in heap_in_use is ours; growth in RSS alone is pages kept or first touched.

#include <cstdint>

namespace tf {

struct MemoryStats {
  int64_t rss = 0;           // resident set, bytes (/proc/self/statm)
  int64_t heap_in_use = 0;   // bytes handed out by malloc and not freed (all arenas + mmapped)
  int64_t heap_free = 0;     // bytes malloc holds free in its arenas (resident or not)
  int64_t heap_mmapped = 0;  // of heap_in_use, the large blocks malloc mapped on their own
  int64_t arena = 0;         // bytes of the arenas' address space (sbrk and thread heaps)
};

MemoryStats memory_stats();

// Returns the free pages of every malloc arena to the system (malloc_trim(0)); called when a
// model version has been released, whose engine, threads and buffers free tens of MB at once.
void release_free_memory();

}  // namespace tf
