// Statistics (replayalloc.hpp's Stats): summed over the live domains and what exited
// threads left, formatted as JSON from the one field list (runtime/stats.h), and
// written at exit (Note [Statistics at exit]).
#include "runtime/stats.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <atomic>
#include <mutex>
#include <string>

#include "backend/backend.h"
#include "backend/boot_heap.h"
#include "backend/front_cache.h"
#include "backend/slab_range.h"
#include "replay/compiled_plan.h"
#include "runtime/auto_mode.h"
#include "runtime/engine.h"
#include "support/file_io.h"
#include "support/log.h"
#include "support/no_cancel.h"
#include "support/reentry.h"

namespace replayalloc::detail {

namespace {

std::int64_t g_started_ns = 0;  // this process's start (or fork), CLOCK_REALTIME

// Note [Statistics at exit]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
// REPLAYALLOC_STATS is inherited by every process that inherits LD_PRELOAD: a wrapper
// (timeout, a shell), the service, its workers. So:
//  * the path may name the process: %p the pid, %e the program's name, %% a '%' (as
//    core patterns do), expanded when the process exits (a forked worker its own pid);
//  * a process that did nothing (no iteration recorded or replayed, no plan loaded) writes
//    nothing unless REPLAYALLOC_STATS_IDLE=1: a wrapper's own allocations never replace
//    the service's statistics;
//  * the file is replaced whole (support/file_io.h: never through a link), with "pid" and
//    "program" first; replacing a file another process wrote while this one ran (two
//    workers on one path) is said, naming that process: put %p in the path instead.
//    A file from before this process started (the previous run) is replaced silently.

std::int64_t realtime_ns() {
  timespec ts;
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// The program's name as a JSON-safe string of printable characters.
void program_name(char* out, std::size_t cap) {
  std::size_t n = 0;
  for (const char* p = program_invocation_short_name; *p != '\0' && n + 1 < cap; ++p) {
    out[n++] = (*p >= 0x20 && *p < 0x7f && *p != '"' && *p != '\\' && *p != '/') ? *p : '_';
  }
  out[n] = '\0';
}

// `pattern` with %p, %e and %% expanded. False when the result does not fit.
bool expand_stats_path(const char* pattern, char* out, std::size_t cap) {
  std::size_t n = 0;
  auto put = [&](const char* s) {
    for (; *s != '\0'; ++s) {
      if (n + 1 >= cap) return false;
      out[n++] = *s;
    }
    return true;
  };
  for (const char* p = pattern; *p != '\0'; ++p) {
    char piece[64] = {p[0], '\0'};
    if (p[0] == '%' && p[1] == 'p') {
      std::snprintf(piece, sizeof piece, "%d", static_cast<int>(::getpid()));
      ++p;
    } else if (p[0] == '%' && p[1] == 'e') {
      program_name(piece, sizeof piece);
      ++p;
    } else if (p[0] == '%' && p[1] == '%') {
      ++p;
    }
    if (!put(piece)) return false;
  }
  out[n] = '\0';
  return true;
}

// The first cap - 1 bytes of the file at `path`, NUL-terminated, read with plain
// system calls (nothing here may allocate). False when it cannot be read or is empty.
bool read_head(const char* path, int flags, char* buf, std::size_t cap) {
  const no_cancel no_cancel;  // Note [No cancellation point inside]: engine::stats() reads /proc
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC | flags);
  if (fd < 0) return false;
  const ssize_t got = ::read(fd, buf, cap - 1);
  ::close(fd);
  if (got <= 0) return false;
  buf[got] = '\0';
  return true;
}

// When `path` holds statistics another process wrote since this one started: that
// process's pid (and name in `who`); otherwise 0.
// pre: `who` holds at least 64 characters.
int other_writer(const char* path, char* who) {
  struct stat st;
  if (::lstat(path, &st) != 0 || !S_ISREG(st.st_mode)) return 0;
  const std::int64_t written = static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  if (written < g_started_ns) return 0;
  char head[256];
  if (!read_head(path, O_NOFOLLOW, head, sizeof head)) return 0;
  int pid = 0;
  if (std::sscanf(head, "{\"pid\":%d,\"program\":\"%63[^\"]\"", &pid, who) < 1) return 0;
  return pid == ::getpid() ? 0 : pid;
}

}  // namespace

void write_stats_at_exit() {
  const no_cancel no_cancel;  // Note [No cancellation point inside]
  const options& o = engine::get().opts();
  const Stats s = engine::get().stats(nullptr);
  // (keys: a process whose counters replayalloc_reset_stats() set to zero did something.)
  if (!o.stats_idle && s.iterations == 0 && s.recordings == 0 && s.plans_loaded == 0 &&
      s.slab_hits == 0 && s.plan_files_ignored == 0 && s.keys == 0) {
    return;  // did nothing (Note [Statistics at exit])
  }
  char buf[8192];
  const std::size_t n = o.stats_text ? format_stats_text(s, buf, sizeof buf) : format_stats_json(s, buf, sizeof buf);
  const std::size_t len = n < sizeof buf ? n : sizeof buf - 1;
  if (std::strcmp(o.stats_path, "stderr") == 0) {
    std::fwrite(buf, 1, len, stderr);
    std::fputc('\n', stderr);
    return;
  }
  reentry_guard guard;
  if (std::strcmp(o.stats_path, "stdout") == 0) {
    // After the program's own output (exit() flushes it after this handler anyway).
    std::fwrite(buf, 1, len, stdout);
    std::fputc('\n', stdout);
    std::fflush(stdout);
    return;
  }
  char path[512];
  if (!expand_stats_path(o.stats_path, path, sizeof path)) {
    REPLAYALLOC_LOG(error, "REPLAYALLOC_STATS: '%s' is too long once expanded; statistics not written",
                    o.stats_path);
    return;
  }
  char who[64] = "?";
  if (const int pid = other_writer(path, who)) {
    REPLAYALLOC_LOG(warning, "REPLAYALLOC_STATS: replacing '%s', written by process %d (%s) while this "
                    "one ran; put %%p in the path for one file per process", path, pid, who);
  }
  char name[64];
  program_name(name, sizeof name);
  char head[128];
  std::string text;
  if (o.stats_text) {  // the table names the process in its title line instead
    const int h = std::snprintf(head, sizeof head, "pid %d (%s): ", static_cast<int>(::getpid()), name);
    text.assign(head, static_cast<std::size_t>(h));
    text.append(buf, len);
  } else {
    const int h = std::snprintf(head, sizeof head, "{\"pid\":%d,\"program\":\"%s\",",
                                static_cast<int>(::getpid()), name);
    text.assign(head, static_cast<std::size_t>(h));
    text.append(buf + 1, len > 0 ? len - 1 : 0);
    text.push_back('\n');
  }
  const absl::Status st = write_file_atomic(path, text);
  if (!st.ok()) {
    REPLAYALLOC_LOG(error, "REPLAYALLOC_STATS: cannot write '%s' (%.*s)", path,
                    static_cast<int>(st.message().size()), st.message().data());
  }
}

void note_process_start() { g_started_ns = realtime_ns(); }

// Note [Statistics reset]
// ~~~~~~~~~~~~~~~~~~~~~~~
// replayalloc_reset_stats() touches no counter: the hot path's counters are per domain
// and written only by their thread. It saves the statistics of that moment (one
// baseline per view: all domains, host, device) and stats() subtracts them from every
// counter; values that are current (slab_bytes, lower_bound_bytes, mapped_bytes,
// backend_bytes, regimes, keys) are not subtracted, and the peaks start again from the
// current values. backend_bytes_peak is the most backend_bytes seen when statistics
// were taken or reset; the fallback allocator keeps no peak of its own to ask.
namespace {
std::mutex g_reset_mu;
REPLAYALLOC_LARGE_ZEROED Stats g_baseline[3];  // [0] all domains, [1] host, [2] device
bool g_have_baseline = false;
std::uint64_t g_plan_wait_max_base = 0;  // plan_wait_us_max as it was at the reset
std::atomic<std::uint64_t> g_backend_peak{0};

constexpr bool is_current_value(std::size_t offset) {
  return offset == offsetof(Stats, slab_bytes) || offset == offsetof(Stats, lower_bound_bytes) ||
         offset == offsetof(Stats, mapped_bytes) || offset == offsetof(Stats, mapped_bytes_peak) ||
         offset == offsetof(Stats, backend_bytes) || offset == offsetof(Stats, backend_bytes_peak) ||
         offset == offsetof(Stats, regimes) || offset == offsetof(Stats, keys) ||
         offset == offsetof(Stats, plan_wait_us_max) || offset == offsetof(Stats, resident_bytes) ||
         offset == offsetof(Stats, resident_bytes_peak) || offset == offsetof(Stats, slab_resident_bytes) ||
         offset == offsetof(Stats, backend_resident_bytes) || offset == offsetof(Stats, front_depot_bytes) ||
         offset == offsetof(Stats, front_run_bytes) || offset == offsetof(Stats, front_stashed_bytes) ||
         offset == offsetof(Stats, boot_requests) || offset == offsetof(Stats, boot_bytes);
}
}  // namespace

namespace {

// The resident set now, in bytes: the second field of /proc/self/statm (pages), read
// with plain system calls (no stdio: nothing here may allocate). 0 when unreadable.
std::uint64_t process_resident_bytes() {
  char buf[128];
  if (!read_head("/proc/self/statm", 0, buf, sizeof buf)) return 0;
  const char* p = std::strchr(buf, ' ');
  if (p == nullptr) return 0;
  const std::uint64_t pages = std::strtoull(p + 1, nullptr, 10);
  return pages * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
}

// The most resident set since the process started (getrusage's ru_maxrss, KiB).
std::uint64_t process_resident_bytes_peak() {
  rusage r{};
  if (::getrusage(RUSAGE_SELF, &r) != 0) return 0;
  return static_cast<std::uint64_t>(r.ru_maxrss) * 1024;
}

}  // namespace

void note_backend_bytes(std::uint64_t bytes) {
  std::uint64_t peak = g_backend_peak.load(std::memory_order_relaxed);
  while (bytes > peak && !g_backend_peak.compare_exchange_weak(peak, bytes, std::memory_order_relaxed)) {
  }
}

void apply_stats_reset(Stats& s, int only) {
  s.backend_bytes_peak = g_backend_peak.load(std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(g_reset_mu);
  if (!g_have_baseline) return;
  const Stats& base = g_baseline[only + 1];
  auto* out = reinterpret_cast<std::uint64_t*>(&s);
  const auto* in = reinterpret_cast<const std::uint64_t*>(&base);
  for (std::size_t i = 0; i < sizeof(Stats) / sizeof(std::uint64_t); ++i) {
    if (is_current_value(i * sizeof(std::uint64_t))) continue;
    out[i] = out[i] >= in[i] ? out[i] - in[i] : 0;
  }
  // The longest plan wait since the reset: not known apart from the whole run's, so
  // shown only when a longer one came after it.
  if (s.plan_wait_us_max <= g_plan_wait_max_base) s.plan_wait_us_max = 0;
}

void reset_stats_baseline() {
  {
    std::lock_guard<std::mutex> lock(g_reset_mu);
    g_have_baseline = false;  // the raw statistics, below
  }
  const domain_kind host = domain_kind::host, device = domain_kind::device;
  const Stats all = engine::get().stats(nullptr);
  const Stats h = engine::get().stats(&host);
  const Stats d = engine::get().stats(&device);
  backend::reset_mapped_slab_peak();
  g_backend_peak.store(backend::fallback_allocated_bytes(), std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(g_reset_mu);
  g_baseline[0] = all;
  g_baseline[1] = h;
  g_baseline[2] = d;
  g_plan_wait_max_base = all.plan_wait_us_max;
  g_have_baseline = true;
}

void add_domain(Stats& s, const domain_state& d) {
  const replay_cursor& c = d.cursor;
  auto ld = [](const std::atomic<std::uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  s.slab_hits += ld(d.slab_hits);
  s.bytes_from_slab += ld(d.hit_bytes);
  s.passthrough += ld(d.passthrough) + ld(d.below_min) + ld(c.bypassed);
  s.below_min_size += ld(d.below_min) + ld(c.bypassed);
  s.bytes_from_backend += ld(d.backend_bytes) + ld(c.miss_bytes);
  s.fallback_no_slab += ld(d.no_slab_fallbacks);
  s.fallback_size_mismatch += ld(c.misses[static_cast<unsigned>(miss_reason::size_mismatch)]);
  s.fallback_beyond_plan += ld(c.misses[static_cast<unsigned>(miss_reason::beyond_plan)]);
  s.fallback_overlap_live += ld(c.misses[static_cast<unsigned>(miss_reason::overlap_live)]);
  s.fallback_alignment += ld(c.misses[static_cast<unsigned>(miss_reason::alignment)]);
  s.fallback_too_large += ld(c.misses[static_cast<unsigned>(miss_reason::too_large)]);
  s.backend_planned += ld(c.backend_planned);
  s.frees += ld(d.frees) + ld(c.remote_frees);
  s.remote_frees += ld(c.remote_frees);
  s.invalid_frees += ld(c.invalid_frees);
  s.double_frees += ld(c.double_frees);
  s.iterations += ld(d.iterations);
  s.iterations_set_aside += ld(d.set_aside);
  s.iterations_awaiting_plan += ld(d.awaiting_plan);
}

namespace {

// What exited threads left (retired_) added to the live domains' sums.
void add_stats(Stats& into, const Stats& s) {
#define REPLAYALLOC_ADD_domain(f) into.f += s.f;
#define REPLAYALLOC_ADD_engine(f)
#define REPLAYALLOC_ADD_derived(f)
#define X(f, how, json, group) REPLAYALLOC_ADD_##how(f)
  REPLAYALLOC_STATS_FIELDS(X)
#undef X
#undef REPLAYALLOC_ADD_domain
#undef REPLAYALLOC_ADD_engine
#undef REPLAYALLOC_ADD_derived
}

}  // namespace

Stats engine::stats(const domain_kind* only) {
  reentry_guard guard;
  Stats s;
  std::uint64_t keys = 0;
  {
    // Entries are read under the engine's mutex: an idle one may be evicted once it
    // is released (Note [Bounds]).
    std::lock_guard<std::mutex> lock(mu_);
    for (int k = 0; k < 2; ++k) {
      if (only == nullptr || static_cast<int>(*only) == k) add_stats(s, retired_[k]);
    }
    for (domain_state* d = domains_; d != nullptr; d = d->next) {
      if (only == nullptr || *only == d->kind) add_domain(s, *d);
    }
    for (const auto& [k, e] : keys_) {
      if (only != nullptr && *only != e->kind) continue;
      std::lock_guard<std::mutex> elock(e->mu);
      s.slab_bytes += e->slab_bytes();
      s.lower_bound_bytes += e->lower_bound_bytes();
      for (const regime& g : e->regimes) s.regimes += g.version != nullptr ? 1 : 0;
      ++keys;
    }
  }
  s.fallbacks = s.fallback_size_mismatch + s.fallback_beyond_plan + s.fallback_overlap_live +
                s.fallback_alignment + s.fallback_no_slab + s.fallback_too_large;
  s.allocations = s.slab_hits + s.fallbacks + s.backend_planned + s.passthrough;
  s.plans = plans_.load(std::memory_order_relaxed);
  s.rerecords = rerecords_.load(std::memory_order_relaxed);
  s.plans_loaded = plans_loaded_.load(std::memory_order_relaxed);
  s.plan_files_ignored = plan_files_ignored_.load(std::memory_order_relaxed);
  s.plans_evicted = plans_evicted_.load(std::memory_order_relaxed);
  s.plans_grown = plans_grown_.load(std::memory_order_relaxed);
  s.set_asides = set_asides_.load(std::memory_order_relaxed);
  s.keys_given_up = keys_given_up_.load(std::memory_order_relaxed);
  s.auto_rests = auto_mode::rests();
  s.probes = probes_.load(std::memory_order_relaxed);
  s.plans_predicted = plans_predicted_.load(std::memory_order_relaxed);
  s.plans_background = plans_background_.load(std::memory_order_relaxed);
  s.plan_wait_us_total = plan_wait_us_total_.load(std::memory_order_relaxed);
  s.plan_wait_us_max = plan_wait_us_max_.load(std::memory_order_relaxed);
  s.plans_improved = plans_improved_.load(std::memory_order_relaxed);
  s.plan_search_us_total = plan_search_us_total_.load(std::memory_order_relaxed);
  s.recordings = recordings_.load(std::memory_order_relaxed);
  s.mapped_bytes = backend::mapped_slab_bytes();
  s.mapped_bytes_peak = backend::mapped_slab_bytes_peak();
  s.backend_bytes = backend::fallback_allocated_bytes();
  note_backend_bytes(s.backend_bytes);
  s.keys = keys;
  // Note [Resident memory by owner]
  // ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
  // A plan packs the iteration at the lower bound, yet a process under replayalloc can
  // be resident above one under a general-purpose allocator (bench/RESULTS.md, issue
  // 34): the statistics say where its resident bytes are. resident_bytes is the
  // process's resident set (the kernel's count, /proc/self/statm), of which
  // slab_resident_bytes are the host slabs' pages (mincore: a slab's untouched pages are
  // not counted) and backend_resident_bytes the fallback allocator's (jemalloc's
  // stats.resident: the program's blocks it serves, the engine's own containers, its
  // metadata, and the free pages it has not yet given back); the rest is the program's
  // own (its code, its libraries, other mappings). Gathered when the statistics are
  // taken: a system call per slab chunk and two reads, never on the allocation path.
  s.resident_bytes = process_resident_bytes();
  s.resident_bytes_peak = process_resident_bytes_peak();
  s.slab_resident_bytes = backend::resident_slab_bytes();
  s.backend_resident_bytes = backend::fallback_resident_bytes();
  const backend::front_cache_counts front = backend::front_cache_stats();
  s.front_lists_handed = front.depot_puts;
  s.front_lists_taken = front.depot_takes;
  s.front_lists_released = front.depot_frees;
  s.front_lists_idle = front.depot_idle + front.thread_lists_idle;
  s.front_threads_closed = front.threads_closed;
  s.front_depot_bytes = front.depot_bytes[0] + front.depot_bytes[1] + front.depot_bytes[2];
  s.front_run_bytes = front.run_bytes;
  s.front_stashed_bytes = front.stashed_bytes;
  const backend::boot_counts boot = backend::boot_heap_counts();
  s.boot_requests = boot.requests;
  s.boot_bytes = boot.bytes;
  apply_stats_reset(s, only == nullptr ? -1 : static_cast<int>(*only));
  return s;
}

namespace {

// Stats and REPLAYALLOC_STATS_FIELDS: the same fields, in the same order.
#define X(f, how, json, group) +1
constexpr std::size_t n_fields = 0 REPLAYALLOC_STATS_FIELDS(X);
#undef X
static_assert(sizeof(Stats) == n_fields * sizeof(std::uint64_t),
              "Stats and REPLAYALLOC_STATS_FIELDS (runtime/stats.h) list different fields");
#define X(f, how, json, group) offsetof(Stats, f),
constexpr std::size_t field_offsets[] = {REPLAYALLOC_STATS_FIELDS(X)};
#undef X
constexpr bool in_struct_order() {
  for (std::size_t i = 0; i < n_fields; ++i) {
    if (field_offsets[i] != i * sizeof(std::uint64_t)) return false;
  }
  return true;
}
static_assert(in_struct_order(), "REPLAYALLOC_STATS_FIELDS is not in the order of Stats");

// Appends to a fixed buffer, counting what would not fit (snprintf's contract).
struct json_out {
  char* buf;
  std::size_t cap;
  std::size_t len = 0;
  void put(const char* s) {
    for (; *s != '\0'; ++s, ++len) {
      if (len + 1 < cap) buf[len] = *s;
    }
  }
  void put(std::uint64_t v) {
    char digits[24];
    std::snprintf(digits, sizeof digits, "%llu", static_cast<unsigned long long>(v));
    put(digits);
  }
};

}  // namespace

namespace {
bool is_bytes(const char* name) {
  const std::size_t n = std::strlen(name);
  return (n > 6 && std::strcmp(name + n - 6, "_bytes") == 0) ||
         (n > 11 && std::strcmp(name + n - 11, "_bytes_peak") == 0);
}
}  // namespace

// One line per field, as jemalloc's malloc_stats_print and PyTorch's memory_summary():
// the name, the value, and sizes also in KiB/MiB/GiB.
std::size_t format_stats_text(const Stats& s, char* buf, std::size_t cap) {
  json_out out{buf, cap};
  out.put("replayalloc statistics\n");
  int group = 0;
  auto field = [&](const char* name, int g, std::uint64_t v) {
    if (g == 1 && group == 0) out.put("  fallbacks by reason:\n");
    group = g;
    char line[128];
    if (is_bytes(name) && v >= 1024) {
      const char* unit = v >= (std::uint64_t{1} << 30) ? "GiB" : v >= (std::uint64_t{1} << 20) ? "MiB" : "KiB";
      const double div = v >= (std::uint64_t{1} << 30) ? 1073741824.0 : v >= (std::uint64_t{1} << 20) ? 1048576.0 : 1024.0;
      std::snprintf(line, sizeof line, "  %s%-26s %20llu  (%.1f %s)\n", g == 1 ? "  " : "", name,
                    static_cast<unsigned long long>(v), static_cast<double>(v) / div, unit);
    } else {
      std::snprintf(line, sizeof line, "  %s%-26s %20llu\n", g == 1 ? "  " : "", name,
                    static_cast<unsigned long long>(v));
    }
    out.put(line);
  };
#define X(f, how, json, group) field(json, group, s.f);
  REPLAYALLOC_STATS_FIELDS(X)
#undef X
  if (cap > 0) buf[out.len < cap ? out.len : cap - 1] = '\0';
  return out.len;
}

std::size_t format_stats_json(const Stats& s, char* buf, std::size_t cap) {
  json_out out{buf, cap};
  out.put("{");
  int group = 0;
  bool first = true;
  auto field = [&](const char* name, int g, std::uint64_t v) {
    if (g != group) {
      out.put(g == 1 ? ",\"fallbacks_by_reason\":{" : "}");
      first = g == 1;
      group = g;
    }
    out.put(first ? "\"" : ",\"");
    out.put(name);
    out.put("\":");
    out.put(v);
    first = false;
  };
#define X(f, how, json, group) field(json, group, s.f);
  REPLAYALLOC_STATS_FIELDS(X)
#undef X
  if (group == 1) out.put("}");
  out.put("}");
  if (cap > 0) buf[out.len < cap ? out.len : cap - 1] = '\0';
  return out.len;
}

}  // namespace replayalloc::detail
