// The malloc contract under the LD_PRELOAD library, checked against glibc itself.
//
// A program that knows nothing of replayalloc calls the whole allocation interface on
// its edge cases (size 0, SIZE_MAX, calloc and reallocarray overflow, alignments that
// are not powers of two or too large, realloc to 0 and from NULL, free(NULL),
// malloc_usable_size of every kind of block, operator new failing) and checks each
// result and errno against what glibc documents. run_contract.sh runs it twice:
// without the library (so glibc proves the expectations right) and with it; both must
// pass and print the same lines.
//
// Preloaded, it runs every case three times: outside an iteration, inside one being
// recorded, and inside one being replayed with slab blocks live (and those slab
// blocks as the subjects of the realloc and usable-size cases). Unpreloaded the three
// runs are the same. Prints one line per case and place; exits 0 when all pass.
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <vector>

namespace {

using begin_fn = int (*)(const char*);
using end_fn = int (*)();
using recording_fn = int (*)();
using stats_fn = size_t (*)(char*, size_t);
begin_fn g_begin;
end_fn g_end;
recording_fn g_recording;
stats_fn g_stats;

int g_failures = 0;
std::string g_place;

// Sizes through a volatile, so the compiler cannot reason about the calls.
volatile std::size_t g_size_max = SIZE_MAX;
std::size_t opaque(std::size_t n) {
  volatile std::size_t v = n;
  return v;
}

std::size_t page() { return static_cast<std::size_t>(sysconf(_SC_PAGESIZE)); }

bool aligned(const void* p, std::size_t a) { return reinterpret_cast<std::uintptr_t>(p) % a == 0; }

// One case's verdict: "ok", or what was wrong (the first thing).
struct verdict {
  std::string what;
  void fail(const std::string& why) {
    if (what.empty()) what = why;
  }
  void expect(bool ok, const std::string& why) {
    if (!ok) fail(why);
  }
};

void report(const char* name, const verdict& v) {
  if (v.what.empty()) {
    std::printf("%-28s %-10s ok\n", name, g_place.c_str());
  } else {
    std::printf("%-28s %-10s FAIL: %s\n", name, g_place.c_str(), v.what.c_str());
    ++g_failures;
  }
}

std::string str(std::size_t n) { return std::to_string(n); }

// Every usable byte is the caller's: write them all.
void scribble(void* p, unsigned char c) { std::memset(p, c, malloc_usable_size(p)); }

// ---- The cases --------------------------------------------------------------------------

verdict size_zero() {
  verdict v;
  errno = 0;
  void* a = std::malloc(opaque(0));
  void* b = std::malloc(opaque(0));
  void* c = std::calloc(opaque(0), 5);
  void* d = std::calloc(5, opaque(0));
  void* e = std::realloc(nullptr, opaque(0));
  void* f = reallocarray(nullptr, opaque(0), 8);
  v.expect(errno == 0, "errno set by a successful call");
  for (void* p : {a, b, c, d, e, f}) {
    v.expect(p != nullptr, "a size-0 request returned NULL");
    v.expect(aligned(p, 16), "a size-0 block is not 16-byte aligned");
  }
  v.expect(a != b, "two malloc(0) returned the same block");
  for (void* p : {a, b, c, d, e, f}) std::free(p);
  return v;
}

verdict small_alignment() {
  verdict v;
  std::vector<void*> ps;
  for (std::size_t n = 1; n <= 300; n += (n < 40 ? 1 : 13)) {
    void* p = std::malloc(opaque(n));
    v.expect(p != nullptr && aligned(p, 16), "malloc(" + str(n) + ") not 16-byte aligned");
    v.expect(p != nullptr && malloc_usable_size(p) >= n, "malloc_usable_size < " + str(n));
    if (p != nullptr) scribble(p, static_cast<unsigned char>(n));
    ps.push_back(p);
  }
  for (void* p : ps) std::free(p);
  return v;
}

verdict impossible_sizes() {
  verdict v;
  const std::size_t huge[] = {g_size_max, g_size_max - 4095, g_size_max / 2, opaque(PTRDIFF_MAX) + 1};
  for (std::size_t n : huge) {
    errno = 0;
    v.expect(std::malloc(n) == nullptr && errno == ENOMEM, "malloc(" + str(n) + ")");
    errno = 0;
    v.expect(std::calloc(1, n) == nullptr && errno == ENOMEM, "calloc(1, " + str(n) + ")");
    errno = 0;
    v.expect(std::realloc(nullptr, n) == nullptr && errno == ENOMEM, "realloc(NULL, " + str(n) + ")");
    errno = 0;
    v.expect(aligned_alloc(64, n) == nullptr && errno == ENOMEM, "aligned_alloc(64, " + str(n) + ")");
    errno = 0;
    v.expect(memalign(64, n) == nullptr && errno == ENOMEM, "memalign(64, " + str(n) + ")");
    errno = 0;
    v.expect(valloc(n) == nullptr && errno == ENOMEM, "valloc(" + str(n) + ")");
    errno = 0;
    v.expect(pvalloc(n) == nullptr && errno == ENOMEM, "pvalloc(" + str(n) + ")");
    void* out = &out;
    v.expect(posix_memalign(&out, 64, n) == ENOMEM && out == &out, "posix_memalign(64, " + str(n) + ")");
  }
  return v;
}

verdict calloc_overflow() {
  verdict v;
  const std::pair<std::size_t, std::size_t> cases[] = {
      {g_size_max, 2}, {2, g_size_max}, {opaque(1) << 32, opaque(1) << 32}, {g_size_max, g_size_max}};
  for (auto [count, size] : cases) {
    errno = 0;
    v.expect(std::calloc(count, size) == nullptr && errno == ENOMEM,
             "calloc(" + str(count) + ", " + str(size) + ")");
  }
  // calloc zeroes, also memory that held something a moment ago.
  for (int i = 0; i < 4; ++i) {
    void* dirty = std::malloc(opaque(8192));
    std::memset(dirty, 0xa5, 8192);
    std::free(dirty);
    auto* z = static_cast<unsigned char*>(std::calloc(opaque(1024), 8));
    bool zero = z != nullptr;
    for (std::size_t k = 0; zero && k < 8192; ++k) zero = z[k] == 0;
    v.expect(zero, "calloc(1024, 8) is not all zeros");
    std::free(z);
  }
  return v;
}

verdict reallocarray_overflow() {
  verdict v;
  errno = 0;
  v.expect(reallocarray(nullptr, g_size_max, 2) == nullptr && errno == ENOMEM, "reallocarray(NULL, SIZE_MAX, 2)");
  auto* p = static_cast<unsigned char*>(std::malloc(opaque(100)));
  std::memset(p, 7, 100);
  errno = 0;
  v.expect(reallocarray(p, g_size_max, 3) == nullptr && errno == ENOMEM, "reallocarray(p, SIZE_MAX, 3)");
  v.expect(p[0] == 7 && p[99] == 7, "a failed reallocarray changed the block");
  auto* q = static_cast<unsigned char*>(reallocarray(p, opaque(10), 1000));
  v.expect(q != nullptr && q[0] == 7 && q[99] == 7 && malloc_usable_size(q) >= 10000, "reallocarray(p, 10, 1000)");
  std::free(q);
  return v;
}

// aligned_alloc and memalign with powers of two, from 1 to 8 MiB.
verdict good_alignments() {
  verdict v;
  std::vector<void*> ps;
  for (std::size_t a = 1; a <= (opaque(8) << 20); a *= 2) {
    const std::size_t n = 100 + a % 1000;
    void* p = aligned_alloc(a, n);
    v.expect(p != nullptr && aligned(p, a < 16 ? 16 : a), "aligned_alloc(" + str(a) + ")");
    void* q = memalign(a, n);
    v.expect(q != nullptr && aligned(q, a < 16 ? 16 : a), "memalign(" + str(a) + ")");
    void* r = nullptr;
    if (a >= sizeof(void*)) {
      v.expect(posix_memalign(&r, a, n) == 0 && aligned(r, a), "posix_memalign(" + str(a) + ")");
    }
    for (void* x : {p, q, r}) {
      if (x == nullptr) continue;
      v.expect(malloc_usable_size(x) >= n, "usable size of an aligned block");
      scribble(x, 0x3c);
      ps.push_back(x);
    }
  }
  for (void* p : ps) std::free(p);
  return v;
}

verdict bad_alignments() {
  verdict v;
  // posix_memalign: EINVAL for an alignment that is not a power of two or not a
  // multiple of sizeof(void *); returned, not set in errno; *memptr untouched.
  for (std::size_t a : {opaque(0), opaque(1), opaque(2), opaque(4), opaque(3), opaque(24), g_size_max}) {
    void* out = &out;
    errno = 0;
    const int rc = posix_memalign(&out, a, 64);
    v.expect(rc == EINVAL && errno == 0 && out == &out, "posix_memalign(" + str(a) + ", 64)");
  }
  // aligned_alloc: C17 and glibc >= 2.38 fail with EINVAL; glibc < 2.38 rounds the
  // alignment up to a power of two. Either, and nothing else.
  for (std::size_t a : {opaque(0), opaque(3), opaque(24), opaque(48), opaque(4097)}) {
    errno = 0;
    void* p = aligned_alloc(a, 64);
    std::size_t want = 16;
    while (want < a) want *= 2;
    v.expect(p == nullptr ? errno == EINVAL : aligned(p, want), "aligned_alloc(" + str(a) + ", 64)");
    std::free(p);
  }
  // memalign: glibc rounds an alignment that is not a power of two up to one (0 and
  // anything below 16: a malloc), and refuses one above SIZE_MAX / 2 + 1 with EINVAL.
  for (std::size_t a : {opaque(0), opaque(3), opaque(24), opaque(48), opaque(4097)}) {
    errno = 0;
    void* p = memalign(a, 64);
    std::size_t want = 16;
    while (want < a) want *= 2;
    v.expect(p != nullptr && aligned(p, want) && malloc_usable_size(p) >= 64, "memalign(" + str(a) + ", 64)");
    std::free(p);
  }
  errno = 0;
  v.expect(memalign(g_size_max, 64) == nullptr && errno == EINVAL, "memalign(SIZE_MAX, 64)");
  errno = 0;
  v.expect(memalign(g_size_max / 2 + 2, 64) == nullptr && errno == EINVAL, "memalign(SIZE_MAX / 2 + 2, 64)");
  // A power of two too large for any block: ENOMEM.
  errno = 0;
  v.expect(aligned_alloc(g_size_max / 2 + 1, 64) == nullptr && errno == ENOMEM, "aligned_alloc(2^63, 64)");
  errno = 0;
  v.expect(memalign(g_size_max / 2 + 1, 64) == nullptr && errno == ENOMEM, "memalign(2^63, 64)");
  return v;
}

verdict page_aligned() {
  verdict v;
  const std::size_t pg = page();
  for (std::size_t n : {opaque(0), opaque(1), opaque(100), pg, pg + 1, opaque(100000)}) {
    void* p = valloc(n);
    v.expect(p != nullptr && aligned(p, pg) && malloc_usable_size(p) >= n, "valloc(" + str(n) + ")");
    void* q = pvalloc(n);
    // pvalloc rounds the size up to a whole page.
    const std::size_t whole = (n + pg - 1) / pg * pg;
    v.expect(q != nullptr && aligned(q, pg) && malloc_usable_size(q) >= whole, "pvalloc(" + str(n) + ")");
    if (p) scribble(p, 1);
    if (q) scribble(q, 2);
    std::free(p);
    std::free(q);
  }
  return v;
}

// realloc on `p` (size n, filled with 0x5a): up, down, the same, SIZE_MAX, then 0.
verdict realloc_on(void* p, std::size_t n) {
  verdict v;
  std::memset(p, 0x5a, n);
  auto same = [](const void* x, std::size_t k) {
    for (std::size_t i = 0; i < k; ++i) {
      if (static_cast<const unsigned char*>(x)[i] != 0x5a) return false;
    }
    return true;
  };
  errno = 0;
  v.expect(std::realloc(p, g_size_max) == nullptr && errno == ENOMEM, "realloc(p, SIZE_MAX)");
  v.expect(same(p, n), "a failed realloc changed the block");
  void* q = std::realloc(p, opaque(n * 3));
  v.expect(q != nullptr && aligned(q, 16) && same(q, n), "realloc up lost bytes");
  if (q == nullptr) return v;
  v.expect(malloc_usable_size(q) >= n * 3, "usable size after realloc up");
  void* r = std::realloc(q, opaque(n / 2));
  v.expect(r != nullptr && same(r, n / 2), "realloc down lost bytes");
  if (r == nullptr) return v;
  void* s = std::realloc(r, opaque(n / 2));
  v.expect(s != nullptr && same(s, n / 2), "realloc to the same size lost bytes");
  if (s == nullptr) return v;
  errno = 0;
  v.expect(std::realloc(s, opaque(0)) == nullptr, "realloc(p, 0) did not return NULL (glibc frees)");
  return v;
}

verdict free_null() {
  verdict v;
  errno = 0;
  std::free(nullptr);
  v.expect(errno == 0, "free(NULL) set errno");
  v.expect(malloc_usable_size(nullptr) == 0, "malloc_usable_size(NULL) != 0");
  void* p = std::realloc(nullptr, opaque(100));  // realloc(NULL, n) is malloc(n)
  v.expect(p != nullptr && malloc_usable_size(p) >= 100, "realloc(NULL, 100)");
  std::free(p);
  return v;
}

verdict operator_new() {
  verdict v;
  char* z = new char[opaque(0)];
  v.expect(z != nullptr, "new char[0] returned null");
  delete[] z;
  bool threw = false;
  try {
    void* p = ::operator new(g_size_max / 2);
    ::operator delete(p);
  } catch (const std::bad_alloc&) {
    threw = true;
  }
  v.expect(threw, "operator new(SIZE_MAX / 2) did not throw bad_alloc");
  v.expect(::operator new(g_size_max / 2, std::nothrow) == nullptr, "nothrow new of SIZE_MAX / 2");
  v.expect(::operator new[](g_size_max - 64, std::nothrow) == nullptr, "nothrow new[] of SIZE_MAX - 64");
  threw = false;
  try {
    void* p = ::operator new(g_size_max / 2, std::align_val_t{64});
    ::operator delete(p, std::align_val_t{64});
  } catch (const std::bad_alloc&) {
    threw = true;
  }
  v.expect(threw, "aligned operator new(SIZE_MAX / 2) did not throw bad_alloc");
  v.expect(::operator new(g_size_max / 2, std::align_val_t{64}, std::nothrow) == nullptr,
           "aligned nothrow new of SIZE_MAX / 2");
  // The new_handler is called until it gives up.
  static int calls;
  calls = 0;
  std::set_new_handler([] {
    if (++calls == 3) std::set_new_handler(nullptr);
  });
  threw = false;
  try {
    void* p = ::operator new(g_size_max / 2);
    ::operator delete(p);
  } catch (const std::bad_alloc&) {
    threw = true;
  }
  std::set_new_handler(nullptr);
  v.expect(threw && calls == 3, "the new_handler was not called until it was removed");
  // The exception caught is the program's runtime's own (the LD_PRELOAD library carries
  // a libstdc++ of its own: Note [The LD_PRELOAD library's own runtime]): once caught,
  // none is left uncaught, and a nothrow new whose handler throws gives null.
  v.expect(std::uncaught_exceptions() == 0, "an exception still counted uncaught after bad_alloc was caught");
  static int nothrow_calls;
  nothrow_calls = 0;
  std::set_new_handler([] {
    if (++nothrow_calls >= 2) throw std::bad_alloc();
  });
  void* none = ::operator new(g_size_max / 2, std::nothrow);
  void* none_aligned = ::operator new(g_size_max / 2, std::align_val_t{64}, std::nothrow);
  std::set_new_handler(nullptr);
  v.expect(none == nullptr && none_aligned == nullptr && nothrow_calls >= 2,
           "nothrow new whose new_handler throws did not give null after calling it");
  v.expect(std::uncaught_exceptions() == 0, "an exception still counted uncaught after nothrow new's handler threw");
  void* a = ::operator new(opaque(4096), std::align_val_t{256});
  v.expect(aligned(a, 256), "operator new(4096, align 256) misaligned");
  ::operator delete(a, std::align_val_t{256});
  return v;
}

// malloc_usable_size of every kind of block: at least what was asked, all writable.
verdict usable_kinds(const std::vector<std::pair<void*, std::size_t>>& slab) {
  verdict v;
  struct kind {
    const char* name;
    void* p;
    std::size_t n;
  };
  std::vector<kind> ks = {
      {"below the minimum size", std::malloc(opaque(100)), 100},
      {"a size no plan has", std::malloc(opaque(123457)), 123457},
      {"calloc", std::calloc(opaque(3), 5000), 15000},
      {"aligned 4096", aligned_alloc(4096, opaque(20000)), 20000},
      {"aligned 4 MiB", aligned_alloc(opaque(4) << 20, 100), 100},
      {"large", std::malloc(opaque(16) << 20), opaque(16) << 20},
      {"zero", std::malloc(opaque(0)), 0},
  };
  for (const auto& [p, n] : slab) ks.push_back({"slab block", p, n});
  for (const kind& k : ks) {
    v.expect(k.p != nullptr && malloc_usable_size(k.p) >= k.n, std::string("usable size of ") + k.name);
    if (k.p != nullptr) scribble(k.p, 0x77);
  }
  for (std::size_t i = 0; i < ks.size() - slab.size(); ++i) std::free(ks[i].p);
  return v;
}

// ---- Places ----------------------------------------------------------------------------

// The replayed iteration: large enough for the preload's 4 KiB minimum size.
constexpr std::size_t k_warm[] = {65536, 8192, 20000, 4096 * 3};

long slab_hits() {
  if (g_stats == nullptr) return 0;
  char json[4096];
  g_stats(json, sizeof json);
  const char* h = std::strstr(json, "\"slab_hits\":");
  return h ? std::atol(h + 12) : 0;
}

void run_cases(const std::vector<std::pair<void*, std::size_t>>& slab) {
  report("size 0", size_zero());
  report("16-byte alignment", small_alignment());
  report("impossible sizes", impossible_sizes());
  report("calloc overflow and zeros", calloc_overflow());
  report("reallocarray overflow", reallocarray_overflow());
  report("power-of-two alignments", good_alignments());
  report("bad alignments", bad_alignments());
  report("valloc and pvalloc", page_aligned());
  void* fresh = std::malloc(opaque(3000));
  report("realloc of a block", realloc_on(fresh, 3000));
  report("free(NULL), realloc(NULL)", free_null());
  report("operator new", operator_new());
  std::vector<std::pair<void*, std::size_t>> rest(slab.begin(), slab.end());
  if (!rest.empty()) {
    report("realloc of a slab block", realloc_on(rest.back().first, rest.back().second));
    rest.pop_back();
  } else {
    void* p = std::malloc(opaque(k_warm[3]));
    report("realloc of a slab block", realloc_on(p, k_warm[3]));
  }
  report("malloc_usable_size kinds", usable_kinds(rest));
  for (const auto& [p, n] : rest) std::free(p);
}

}  // namespace

int main() {
  g_begin = reinterpret_cast<begin_fn>(dlsym(RTLD_DEFAULT, "replayalloc_iteration_begin"));
  g_end = reinterpret_cast<end_fn>(dlsym(RTLD_DEFAULT, "replayalloc_iteration_end"));
  g_recording = reinterpret_cast<recording_fn>(dlsym(RTLD_DEFAULT, "replayalloc_iteration_recording"));
  g_stats = reinterpret_cast<stats_fn>(dlsym(RTLD_DEFAULT, "replayalloc_stats_json"));
  const bool preloaded = g_begin && g_end && g_recording && g_stats;
  // REPLAYALLOC_MODE=off passes everything through; =record never replays.
  const char* mode = std::getenv("REPLAYALLOC_MODE");
  const bool records = preloaded && !(mode && std::strcmp(mode, "off") == 0);
  const bool replays = records && !(mode && std::strcmp(mode, "record") == 0);
  std::fprintf(stderr, "contract_probe: %s\n", preloaded ? "replayalloc preloaded" : "glibc (no replayalloc)");

  g_place = "outside";
  run_cases({});

  g_place = "recording";
  if (preloaded && (g_begin("contract/recording") != 0 || g_recording() != (records ? 1 : 0))) {
    std::printf("recording: FAIL: the iteration is not being recorded\n");
    ++g_failures;
  }
  run_cases({});
  if (preloaded) g_end();

  g_place = "replaying";
  for (int i = 0; preloaded && i < 3; ++i) {  // two identical recordings make the plan
    g_begin("contract/replaying");
    std::vector<void*> ps;
    for (std::size_t n : k_warm) ps.push_back(std::malloc(n));
    for (void* p : ps) std::free(p);
    g_end();
  }
  if (preloaded) g_begin("contract/replaying");
  const long before = slab_hits();
  std::vector<std::pair<void*, std::size_t>> slab;
  for (std::size_t n : k_warm) slab.push_back({std::malloc(n), n});
  if (replays) {
    // The hits of an open iteration are counted when it ends: the recording flag says
    // the iteration replays, the stats after it that the blocks came from the slab.
    if (g_recording() != 0) {
      std::printf("replaying: FAIL: the iteration is recorded, not replayed\n");
      ++g_failures;
    }
  }
  run_cases(slab);
  if (preloaded) {
    g_end();
    const long hits = slab_hits() - before;
    std::fprintf(stderr, "contract_probe: %ld slab hits in the replayed iteration\n", hits);
    if (replays && hits < static_cast<long>(std::size(k_warm))) {
      std::printf("replaying: FAIL: the warm blocks were not served from the slab\n");
      ++g_failures;
    }
  }
  std::fprintf(stderr, "contract_probe: %d failures\n", g_failures);
  return g_failures == 0 ? 0 : 1;
}
