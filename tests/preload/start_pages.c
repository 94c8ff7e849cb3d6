// The pages of the LD_PRELOAD library's zeroed globals that a short process's start wrote
// (Note [Large zeroed tables last], allocator/support/config.h). Run with the library
// preloaded, at most LIMIT_KIB: this program makes a handful of requests before main (the
// boot heap serves them), as a shell script's commands do. The zeroed globals are the
// part of the library's writable PT_LOAD past its file bytes (.bss, then .lbss: the
// private jemalloc's and the front cache's large tables); the pages wholly past the file's
// bytes are counted where /proc/self/pagemap says present. Exit 0 within the limit, 1 over
// it or on an error, 77 (skipped) where a transparent huge page backs them.
// With --code: the faults this process's start took in the library's code, at most LIMIT,
// in one run of present pages (Note [The start's code together], hooks/CMakeLists.txt: the
// kernel maps up to 64 KiB of cached pages around a fault in code, so each run of present
// pages took one fault a 64 KiB); counted before main makes a request or calls stdio, and
// skipped where a huge page maps the code.
// Usage: start_pages LIBRARY_NAME LIMIT_KIB | start_pages --code LIBRARY_NAME LIMIT
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
  uintptr_t code_low, code_high;  // the executable PT_LOAD, page-aligned
  uintptr_t code_offset;          // code_low less the library's base
};

static int find(struct dl_phdr_info* info, size_t size, void* arg) {
  (void)size;
  struct zeroed* z = arg;
  if (info->dlpi_name == NULL || strstr(info->dlpi_name, z->name) == NULL) return 0;
  const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)* ph = &info->dlpi_phdr[i];
    if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X)) {
      z->code_low = (info->dlpi_addr + ph->p_vaddr) & ~(page - 1);
      z->code_offset = z->code_low - info->dlpi_addr;
      z->code_high = (info->dlpi_addr + ph->p_vaddr + ph->p_memsz + page - 1) & ~(page - 1);
    }
    if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_W) || ph->p_memsz <= ph->p_filesz) continue;
    const uintptr_t start = info->dlpi_addr + ph->p_vaddr;
    z->low = (start + ph->p_filesz + page - 1) & ~(page - 1);  // the page with the file's last bytes aside
    z->high = (start + ph->p_memsz + page - 1) & ~(page - 1);
  }
  return 1;
}

// Whether /proc/self/pagemap says the page at `addr` is present: 1, 0, or -1 on an error.
static int present(int fd, uintptr_t addr, uintptr_t page) {
  uint64_t entry = 0;
  if (pread(fd, &entry, sizeof entry, (off_t)(addr / page * sizeof entry)) != (ssize_t)sizeof entry) return -1;
  return (int)(entry >> 63);
}

// The AnonHugePages (or, with `file`, FilePmdMapped) of the mapping that holds `addr`, in
// KiB (0 where none or unknown).
static long huge_kib(uintptr_t addr, int file) {
  const char* key = file ? "FilePmdMapped:" : "AnonHugePages:";
  FILE* f = fopen("/proc/self/smaps", "r");
  if (f == NULL) return 0;
  char line[512];
  int inside = 0;
  long kib = 0;
  while (fgets(line, sizeof line, f) != NULL) {
    unsigned long lo, hi;
    if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, ':') != NULL && line[0] != ' ') {
      inside = addr >= lo && addr < hi;
    } else if (inside && strncmp(line, key, strlen(key)) == 0) {
      kib = strtol(line + strlen(key), NULL, 10);
    }
  }
  fclose(f);
  return kib;
}

// The runs of present pages in the library's code, and the faults they take at most
// 64 KiB a fault (the kernel maps up to 16 cached pages around a fault, within the
// mapping: one fault's pages may straddle two aligned windows), listed; exit as main's.
static int code_faults(const char* name, long limit) {
  struct zeroed z = {name, 0, 0, 0, 0, 0};
  dl_iterate_phdr(find, &z);
  const int fd = open("/proc/self/pagemap", O_RDONLY);
  const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), window = 64 * 1024;
  uintptr_t shown[32][2], run_start = 0;  // the first 32 runs, [start, end)
  long runs = 0, faults = 0;
  int in_run = 0;
  for (uintptr_t a = z.code_low; fd >= 0 && a <= z.code_high; a += page) {
    const int p = a < z.code_high ? present(fd, a, page) : 0;  // a page past the end closes a run
    if (p < 0) {
      perror("FAIL: reading /proc/self/pagemap");
      return 1;
    }
    if (p == 1 && !in_run) {
      run_start = a;
      in_run = 1;
    } else if (p == 0 && in_run) {
      in_run = 0;
      faults += (long)((a - run_start + window - 1) / window);
      if (runs < 32) {
        shown[runs][0] = run_start;
        shown[runs][1] = a;
      }
      ++runs;
    }
  }
  if (fd < 0 || z.code_low >= z.code_high) {
    fprintf(stderr, "FAIL: %s\n", fd < 0 ? "cannot open /proc/self/pagemap" : "no code of a loaded library so named (is it preloaded?)");
    return 1;
  }
  close(fd);
  const long huge = huge_kib(z.code_low, 1);
  if (huge > 0) {
    printf("SKIP: a huge page maps the library's code (%ld KiB)\n", huge);
    return 77;
  }
  const uintptr_t base = z.code_low - z.code_offset;
  printf("%s: this process's start mapped %ld runs of its code, %ld faults' worth at 64 KiB a fault (at most %ld):",
         name, runs, faults, limit);
  for (long i = 0; i < runs && i < 32; ++i) {
    printf(" 0x%lx-0x%lx", (unsigned long)(shown[i][0] - base), (unsigned long)(shown[i][1] - base));
  }
  printf("\n");
  // One run: every function the start runs lies among those gathered (a second run is a
  // function elsewhere, a fault of its own, whatever the page cache maps around it).
  if (faults > limit || runs > 1) {
    printf("FAIL: a function the start runs lies outside those hooks/start_code.ld gathers: run scripts/start_order.py\n");
    return 1;
  }
  return 0;
}

int main(int argc, char** argv) {
  if (argc == 4 && strcmp(argv[1], "--code") == 0) return code_faults(argv[2], atol(argv[3]));
  if (argc != 3) {
    fprintf(stderr, "usage: start_pages LIBRARY_NAME LIMIT_KIB | start_pages --code LIBRARY_NAME LIMIT\n");
    return 1;
  }
  struct zeroed z = {argv[1], 0, 0, 0, 0, 0};
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
  long resident = 0;
  for (uintptr_t a = z.low; a < z.high; a += page) {
    const int p = present(fd, a, page);
    if (p < 0) {
      perror("FAIL: reading /proc/self/pagemap");
      return 1;
    }
    resident += p;
  }
  close(fd);
  const long kib = resident * (long)(page / 1024);
  const long huge = huge_kib(z.low, 0);
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
