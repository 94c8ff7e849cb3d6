// The pages of the LD_PRELOAD library's zeroed globals that a short process's start wrote
// (Note [Large zeroed tables last], allocator/support/config.h). Run with the library
// preloaded, at most LIMIT_KIB: this program makes a handful of requests before main (the
// boot heap serves them), as a shell script's commands do. The zeroed globals are the
// part of the library's writable PT_LOAD past its file bytes (.bss, then .lbss: the
// private jemalloc's and the front cache's large tables); the pages wholly past the file's
// bytes are counted where /proc/self/pagemap says present. Exit 0 within the limit, 1 over
// it or on an error, 77 (skipped) where a transparent huge page backs them.
// Usage: start_pages LIBRARY_NAME LIMIT_KIB
#define _GNU_SOURCE
#include <fcntl.h>
#include <link.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct zeroed {
  const char* name;
  uintptr_t low, high;  // page-aligned; low == high: none found
};

static int find(struct dl_phdr_info* info, size_t size, void* arg) {
  (void)size;
  struct zeroed* z = arg;
  if (info->dlpi_name == NULL || strstr(info->dlpi_name, z->name) == NULL) return 0;
  const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)* ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_W) || ph->p_memsz <= ph->p_filesz) continue;
    const uintptr_t start = info->dlpi_addr + ph->p_vaddr;
    z->low = (start + ph->p_filesz + page - 1) & ~(page - 1);  // the page with the file's last bytes aside
    z->high = (start + ph->p_memsz + page - 1) & ~(page - 1);
  }
  return 1;
}

// The AnonHugePages of the mapping that holds `addr`, in KiB (0 where none or unknown).
static long huge_kib(uintptr_t addr) {
  FILE* f = fopen("/proc/self/smaps", "r");
  if (f == NULL) return 0;
  char line[512];
  int inside = 0;
  long kib = 0;
  while (fgets(line, sizeof line, f) != NULL) {
    unsigned long lo, hi;
    if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, ':') != NULL && line[0] != ' ') {
      inside = addr >= lo && addr < hi;
    } else if (inside && strncmp(line, "AnonHugePages:", 14) == 0) {
      kib = strtol(line + 14, NULL, 10);
    }
  }
  fclose(f);
  return kib;
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: start_pages LIBRARY_NAME LIMIT_KIB\n");
    return 1;
  }
  struct zeroed z = {argv[1], 0, 0};
  const long limit_kib = atol(argv[2]);
  dl_iterate_phdr(find, &z);
  if (z.low >= z.high) {
    fprintf(stderr, "FAIL: no zeroed globals of a loaded library named '%s' (is it preloaded?)\n", z.name);
    return 1;
  }
  const int fd = open("/proc/self/pagemap", O_RDONLY);
  if (fd < 0) {
    perror("FAIL: /proc/self/pagemap");
    return 1;
  }
  const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
  long present = 0;
  for (uintptr_t a = z.low; a < z.high; a += page) {
    uint64_t entry = 0;
    if (pread(fd, &entry, sizeof entry, (off_t)(a / page * sizeof entry)) != (ssize_t)sizeof entry) {
      perror("FAIL: reading /proc/self/pagemap");
      return 1;
    }
    if (entry >> 63) ++present;
  }
  close(fd);
  const long kib = present * (long)(page / 1024);
  const long huge = huge_kib(z.low);
  if (huge > 0) {
    printf("SKIP: a transparent huge page backs the library's zeroed globals (%ld KiB)\n", huge);
    return 77;
  }
  printf("%s: %ld KiB of its %lu KiB of zeroed globals written by this process's start (at most %ld)\n", z.name,
         kib, (unsigned long)((z.high - z.low) / 1024), limit_kib);
  if (kib > limit_kib) {
    printf("FAIL: a table of 1 KiB or more that a process's start does not write belongs in REPLAYALLOC_LARGE_ZEROED\n");
    return 1;
  }
  return 0;
}
