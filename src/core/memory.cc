#include "core/memory.h"

#include <malloc.h>
#include <unistd.h>

#include <cstdio>

namespace tf {

MemoryStats memory_stats() {
  MemoryStats m;
  long pages_total = 0, pages_resident = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld %ld", &pages_total, &pages_resident) != 2) pages_resident = 0;
    std::fclose(f);
  }
  m.rss = static_cast<int64_t>(pages_resident) * sysconf(_SC_PAGESIZE);
  const struct mallinfo2 mi = mallinfo2();
  m.heap_in_use = static_cast<int64_t>(mi.uordblks + mi.hblkhd);
  m.heap_free = static_cast<int64_t>(mi.fordblks);
  m.heap_mmapped = static_cast<int64_t>(mi.hblkhd);
  m.arena = static_cast<int64_t>(mi.arena);
  return m;
}

void release_free_memory() {
  malloc_trim(0);
}

}  // namespace tf
