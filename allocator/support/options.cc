#include "support/options.h"

#include <strings.h>
#include <sys/auxv.h>
#include <sys/stat.h>

#include <atomic>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "support/log.h"

extern char** environ;

namespace replayalloc::detail {
namespace {

// Parses an unsigned decimal with an optional K/M/G/T suffix (powers of 1024).
bool parse_size(const char* s, std::uint64_t* out) {
  if (s == nullptr || *s == '\0') return false;
  std::uint64_t v = 0;
  const char* p = s;
  for (; *p >= '0' && *p <= '9'; ++p) {
    const std::uint64_t d = static_cast<std::uint64_t>(*p - '0');
    if (v > (UINT64_MAX - d) / 10) return false;
    v = v * 10 + d;
  }
  if (p == s) return false;
  unsigned shift = 0;
  switch (*p) {
    case '\0': break;
    case 'k': case 'K': shift = 10; ++p; break;
    case 'm': case 'M': shift = 20; ++p; break;
    case 'g': case 'G': shift = 30; ++p; break;
    case 't': case 'T': shift = 40; ++p; break;
    default: return false;
  }
  if (*p == 'i' || *p == 'I') ++p;  // accept KiB/MiB spellings
  if (*p == 'b' || *p == 'B') ++p;
  if (*p != '\0') return false;
  if (shift != 0 && v > (UINT64_MAX >> shift)) return false;
  *out = v << shift;
  return true;
}

// 1/0, true/false, yes/no, on/off, in any case (as the C library's strcasecmp).
bool parse_bool(const char* s, bool* out) {
  if (!std::strcmp(s, "1") || !::strcasecmp(s, "true") || !::strcasecmp(s, "yes") ||
      !::strcasecmp(s, "on")) {
    *out = true;
    return true;
  }
  if (!std::strcmp(s, "0") || !::strcasecmp(s, "false") || !::strcasecmp(s, "no") ||
      !::strcasecmp(s, "off")) {
    *out = false;
    return true;
  }
  return false;
}

const char* find_env(char* const* envp, const char* name) {
  if (envp == nullptr) return nullptr;
  const std::size_t n = std::strlen(name);
  for (char* const* e = envp; *e != nullptr; ++e) {
    if (std::strncmp(*e, name, n) == 0 && (*e)[n] == '=') return *e + n + 1;
  }
  return nullptr;
}

enum class kind { size, count, boolean, mode, path, dir, budget, lms_memory, stats_format };

// One row per setting, as mimalloc's options table: its name, how its value is read,
// the range a number must fall in, the member it sets and what it means (the README's
// configuration table says the same, in the same order: tests/unit/options_test.cc
// checks the names). The defaults are the member initializers of `options`.
struct option_desc {
  const char* name;
  kind k;
  std::uint64_t lo, hi;  // inclusive range for size/count
  bool pow2;             // size must be a power of two
  void (*set)(options& o, std::uint64_t v);  // size, count, boolean
  std::uint64_t (*get)(const options& o);    // the same: its value (the default's in messages)
  char* (*text)(options& o);                 // path, dir: the buffer it fills
  const char* doc;
};

#define REPLAYALLOC_SETS(member)                                                  \
  [](options& o, std::uint64_t v) { o.member = static_cast<decltype(o.member)>(v); }, \
      [](const options& o) { return static_cast<std::uint64_t>(o.member); }, nullptr
#define REPLAYALLOC_FILLS(member) nullptr, nullptr, [](options& o) -> char* { return o.member; }
#define REPLAYALLOC_OWN nullptr, nullptr, nullptr  // parsed by its kind's own case below

constexpr std::uint64_t K = 1024, M = K * K, G = M * K, T = G * K;

constexpr option_desc table[] = {
    {"REPLAYALLOC_MODE", kind::mode, 0, 0, false, REPLAYALLOC_OWN,
     "off | record | replay | auto"},
    {"REPLAYALLOC_VERBOSE", kind::count, 0, 3, false, REPLAYALLOC_SETS(verbose),
     "0 errors, 1 warnings, 2 info, 3 debug"},
    {"REPLAYALLOC_MAX_WARNINGS", kind::count, 0, 1u << 30, false, REPLAYALLOC_SETS(max_warnings),
     "warnings printed before going quiet"},
    {"REPLAYALLOC_STATS", kind::path, 0, 0, false, REPLAYALLOC_FILLS(stats_path),
     "where the statistics JSON goes at exit: 1 or stderr, stdout, or a path (%p, %e); 0 none"},
    {"REPLAYALLOC_STATS_FORMAT", kind::stats_format, 0, 0, false, REPLAYALLOC_OWN,
     "json | text: the statistics at exit as one JSON object or as a table"},
    {"REPLAYALLOC_STATS_IDLE", kind::boolean, 0, 1, false, REPLAYALLOC_SETS(stats_idle),
     "also write the statistics of a process that did nothing"},
    {"REPLAYALLOC_PLAN_DIR", kind::dir, 0, 0, false, REPLAYALLOC_FILLS(plan_dir),
     "plans loaded from (and saved to, when writable and no cache is named)"},
    {"REPLAYALLOC_PLAN_CACHE", kind::dir, 0, 0, false, REPLAYALLOC_FILLS(plan_cache),
     "a writable directory new plans are saved to"},
    {"REPLAYALLOC_CHECK", kind::boolean, 0, 1, false, REPLAYALLOC_SETS(check),
     "shadow-check every host block (Note [Check mode])"},
    {"REPLAYALLOC_MIN_SIZE", kind::size, 0, T, false, REPLAYALLOC_SETS(min_size),
     "requests below this bypass the plan"},
    {"REPLAYALLOC_SLOT_ALIGN", kind::size, 16, 4096, true, REPLAYALLOC_SETS(slot_align),
     "every slot offset is a multiple of this"},
    {"REPLAYALLOC_RESERVE", kind::size, 64 * M, 64 * T, false, REPLAYALLOC_SETS(reserve_bytes),
     "virtual address range reserved for slabs"},
    {"REPLAYALLOC_MAX_SLABS", kind::count, 1, 4096, false, REPLAYALLOC_SETS(max_slabs),
     "slabs per plan (iterations of one key at once)"},
    {"REPLAYALLOC_MAX_PLANS", kind::count, 1, 1u << 20, false, REPLAYALLOC_SETS(max_plans),
     "keys remembered; the least recently used idle one is forgotten"},
    {"REPLAYALLOC_MAX_SLAB_MEMORY", kind::size, M, 64 * T, false, REPLAYALLOC_SETS(max_slab_memory),
     "host slab memory committed at once"},
    {"REPLAYALLOC_RECORD_ITERATIONS", kind::count, 1, 64, false, REPLAYALLOC_SETS(record_iterations),
     "recordings of one structure needed before it is planned (Note [Regimes])"},
    {"REPLAYALLOC_RECORD_LIMIT", kind::count, 1, 1024, false, REPLAYALLOC_SETS(record_limit),
     "recordings of a key without a plan after which the latest is planned even if they never agreed"},
    {"REPLAYALLOC_REPLAN_AFTER", kind::count, 0, 1u << 20, false, REPLAYALLOC_SETS(replan_after),
     "a thread's consecutive deviating iterations (of a regime, not explained by another) after which that regime is recorded again (0: never)"},
    {"REPLAYALLOC_SET_ASIDE", kind::boolean, 0, 1, false, REPLAYALLOC_SETS(set_aside),
     "back off keys whose plans keep failing (Note [Setting aside])"},
    {"REPLAYALLOC_BACKGROUND_PLANNING", kind::boolean, 0, 1, false, REPLAYALLOC_SETS(background_planning),
     "plans made by a planner thread, off the request path (Note [Background planning]); 0: on the thread that ends the recording"},
    {"REPLAYALLOC_INLINE_PLAN_MAX", kind::count, 0, 1u << 20, false, REPLAYALLOC_SETS(inline_plan_max),
     "plans of at most this many allocations are made on the thread that ends the recording, so the next iteration replays (Note [Plans that arrive in time]); 0: every plan on the planner thread"},
    {"REPLAYALLOC_PLAN_SEARCH_MS", kind::count, 0, 600000, false, REPLAYALLOC_SETS(plan_search_ms),
     "milliseconds the planner thread may search for a smaller slab after installing a plan above its lower bound (Note [Improved plans]); 0: no search"},
    {"REPLAYALLOC_DEVIATION_PERCENT", kind::count, 0, 100, false, REPLAYALLOC_SETS(deviation_percent),
     "fallbacks (% of the plan) that make an iteration deviate"},
    {"REPLAYALLOC_RESYNC_WINDOW", kind::count, 0, 256, false, REPLAYALLOC_SETS(resync_window),
     "slots looked ahead after a mismatch"},
    {"REPLAYALLOC_PREFAULT", kind::boolean, 0, 1, false, REPLAYALLOC_SETS(prefault),
     "touch a new slab's pages when it is made"},
    {"REPLAYALLOC_STACK_DEPTH", kind::count, 0, 16, false, REPLAYALLOC_SETS(stack_depth),
     "call-stack frames naming an untagged recorded allocation"},
    {"REPLAYALLOC_STACK_CACHE", kind::boolean, 0, 1, false, REPLAYALLOC_SETS(stack_cache),
     "walk call stacks with the frame sizes learnt per return address, DWARF only for frames not seen before (Note [Cached unwind steps]); 0: DWARF for every frame"},
    {"REPLAYALLOC_FRONT_CACHE", kind::boolean, 0, 1, false, REPLAYALLOC_SETS(front_cache),
     "per-thread lists of small free blocks in front of the fallback's malloc and free, below the minimum size, handed between threads whole (Note [The fallback's front cache]); 0: jemalloc alone"},
    {"REPLAYALLOC_FALLBACK_AFTER", kind::count, 0, 1u << 30, false, REPLAYALLOC_SETS(fallback_after),
     "requests the fallback serves with jemalloc's own malloc and default settings before it makes its front cache and settings, at the first request of 1 MiB or more or calloc of 16 KiB or more if sooner (Note [The fallback made when first needed]); 0: at start-up"},
    {"REPLAYALLOC_CUDA_BUDGET", kind::budget, 0, 0, false, REPLAYALLOC_OWN,
     "device memory a plan's slab may use: bytes or a fraction"},
    {"REPLAYALLOC_CUDA_LMS_THRESHOLD", kind::size, 1, 64 * T, false, REPLAYALLOC_SETS(cuda_lms_threshold),
     "the smallest allocation large-model support moves out of the slab"},
    {"REPLAYALLOC_CUDA_LMS_MEMORY", kind::lms_memory, 0, 0, false, REPLAYALLOC_OWN,
     "managed | pinned: what moved allocations use"},
};

#undef REPLAYALLOC_SETS
#undef REPLAYALLOC_FILLS
#undef REPLAYALLOC_OWN

// A parser that sets nothing, a string kind without a buffer, or the reverse: a
// table row that cannot work is a build error, not a setting silently ignored.
constexpr bool table_complete() {
  for (const option_desc& d : table) {
    const bool number = d.k == kind::size || d.k == kind::count || d.k == kind::boolean;
    const bool text = d.k == kind::path || d.k == kind::dir;
    if (number != (d.set != nullptr) || number != (d.get != nullptr) || text != (d.text != nullptr)) {
      return false;
    }
    if (d.doc == nullptr || d.doc[0] == '\0') return false;
  }
  return true;
}
static_assert(table_complete(), "a row of the options table has no member to set, or no doc");

// A fraction in (0, 1]: "0.8", ".5", "1". Plain decimal, no exponent.
bool parse_fraction(const char* s, double* out) {
  double v = 0, scale = 1;
  bool digits = false, dot = false;
  for (const char* p = s; *p != '\0'; ++p) {
    if (*p == '.' && !dot) {
      dot = true;
    } else if (*p >= '0' && *p <= '9') {
      digits = true;
      if (dot) {
        scale /= 10;
        v += (*p - '0') * scale;
      } else {
        v = v * 10 + (*p - '0');
      }
    } else {
      return false;
    }
  }
  if (!digits || !dot || v <= 0 || v > 1) return false;
  *out = v;
  return true;
}

const char* mode_name(run_mode m) {
  switch (m) {
    case run_mode::off: return "off";
    case run_mode::record: return "record";
    case run_mode::replay: return "replay";
    case run_mode::automatic: return "auto";
  }
  return "?";
}

// The REPLAYALLOC_ entries of an environment, in order: parse_options searches them
// once a setting, where searching the whole environment once a setting was 57,000
// instructions of a process's start under the LD_PRELOAD library (callgrind, /bin/true:
// 7%). Up to 64 of them (the first of a name still wins); past that, the whole
// environment.
class settings_only {
 public:
  explicit settings_only(char* const* all) : envp_(all) {
    if (all == nullptr) return;
    std::size_t found = 0;
    for (char* const* e = all; *e != nullptr; ++e) {
      if ((*e)[0] != 'R' || std::strncmp(*e, "REPLAYALLOC_", 12) != 0) continue;
      if (found == 64) return;
      mine_[found++] = *e;
    }
    mine_[found] = nullptr;
    envp_ = mine_;
  }
  settings_only(const settings_only&) = delete;
  settings_only& operator=(const settings_only&) = delete;
  char* const* get() const { return envp_; }

 private:
  char* mine_[65];
  char* const* envp_;
};

std::atomic<bool> g_frozen{false};
std::atomic<int> g_state{0};  // 0 unparsed, 1 parsing, 2 ready
options g_options;

}  // namespace

int parse_options(char* const* all_env, options* out) {
  *out = options{};
  settings_only settings(all_env);
  char* const* envp = settings.get();
  // The verbosity decides whether the other messages print: read it first.
  if (const char* v = find_env(envp, "REPLAYALLOC_VERBOSE")) {
    if (v[0] >= '0' && v[0] <= '3' && v[1] == '\0') out->verbose = v[0] - '0';
  }
  set_log_verbosity(out->verbose);
  int bad = 0;
  for (const option_desc& d : table) {
    const char* v = find_env(envp, d.name);
    if (v == nullptr) continue;
    switch (d.k) {
      case kind::mode: {
        if (!std::strcmp(v, "off")) out->mode = run_mode::off;
        else if (!std::strcmp(v, "record")) out->mode = run_mode::record;
        else if (!std::strcmp(v, "replay")) out->mode = run_mode::replay;
        else if (!std::strcmp(v, "auto")) out->mode = run_mode::automatic;
        else {
          ++bad;
          REPLAYALLOC_LOG(error, "%s='%s' is not one of off|record|replay|auto; using the default, '%s'",
                          d.name, v, mode_name(out->mode));
        }
        break;
      }
      case kind::path: {
        // As jemalloc's stats_print: 1 is standard error (and 0 nothing), never a file
        // named "1" (or "stdout"); a file of that name is ./1.
        if (!std::strcmp(v, "1")) v = "stderr";
        if (!std::strcmp(v, "0")) v = "";
        const std::size_t n = std::strlen(v);
        if (n >= sizeof out->stats_path) {
          ++bad;
          REPLAYALLOC_LOG(error, "%s is longer than %zu characters; using the default, none: statistics "
                          "are not written", d.name, sizeof out->stats_path - 1);
        } else {
          std::memcpy(d.text(*out), v, n + 1);
        }
        break;
      }
      case kind::dir: {
        // Made when missing (one level, like mkdir; the cache private to this user); stat
        // and mkdir neither allocate nor re-enter the allocator.
        const bool cache = std::strcmp(d.name, "REPLAYALLOC_PLAN_CACHE") == 0;
        char* dst = d.text(*out);
        const std::size_t n = std::strlen(v);
        struct stat st;
        if (n == 0 || n >= sizeof out->plan_dir) {
          ++bad;
          REPLAYALLOC_LOG(error, "%s must be a directory path of 1 to %zu characters; using the default, none: %s", d.name,
                          sizeof out->plan_dir - 1, cache ? "new plans are not saved" : "plans are neither saved nor loaded");
        } else if (::stat(v, &st) != 0 && (errno != ENOENT || ::mkdir(v, cache ? 0700 : 0755) != 0)) {
          ++bad;
          REPLAYALLOC_LOG(error, "%s='%s' cannot be used (%s); using the default, none: %s", d.name, v,
                          std::strerror(errno),
                          cache ? "new plans are not saved" : "plans are neither saved nor loaded");
        } else if (::stat(v, &st) != 0 || !S_ISDIR(st.st_mode)) {
          ++bad;
          REPLAYALLOC_LOG(error, "%s='%s' is not a directory; using the default, none: %s", d.name, v,
                          cache ? "new plans are not saved" : "plans are neither saved nor loaded");
        } else {
          std::memcpy(dst, v, n + 1);
        }
        break;
      }
      case kind::budget: {
        std::uint64_t n;
        double f;
        if (std::strchr(v, '.') != nullptr && parse_fraction(v, &f)) {
          out->cuda_budget_fraction = f;
        } else if (std::strchr(v, '.') == nullptr && parse_size(v, &n) && n > 0) {
          out->cuda_budget_bytes = n;
        } else {
          ++bad;
          REPLAYALLOC_LOG(error,
                          "%s='%s' is neither a size (bytes, optional K/M/G suffix) nor a fraction "
                          "of device memory in (0, 1] such as 0.8; using the default, none: no budget",
                          d.name, v);
        }
        break;
      }
      case kind::lms_memory: {
        if (!std::strcmp(v, "managed")) out->cuda_lms_pinned = false;
        else if (!std::strcmp(v, "pinned")) out->cuda_lms_pinned = true;
        else {
          ++bad;
          REPLAYALLOC_LOG(error, "%s='%s' is not one of managed|pinned; using 'managed'", d.name, v);
        }
        break;
      }
      case kind::stats_format: {
        if (!::strcasecmp(v, "json")) out->stats_text = false;
        else if (!::strcasecmp(v, "text")) out->stats_text = true;
        else {
          ++bad;
          REPLAYALLOC_LOG(error, "%s='%s' is not one of json|text; using the default, 'json'", d.name, v);
        }
        break;
      }
      case kind::boolean: {
        bool b;
        if (parse_bool(v, &b)) {
          d.set(*out, b ? 1 : 0);
        } else {
          ++bad;
          REPLAYALLOC_LOG(error, "%s='%s' is not a boolean (1/0, true/false, yes/no, on/off, any case); "
                          "using the default, %d", d.name, v, static_cast<int>(d.get(options{})));
        }
        break;
      }
      case kind::size:
      case kind::count: {
        std::uint64_t n;
        const bool ok = d.k == kind::size ? parse_size(v, &n)
                                          : (parse_size(v, &n) && v[std::strlen(v) - 1] >= '0' &&
                                             v[std::strlen(v) - 1] <= '9');
        if (!ok || n < d.lo || n > d.hi || (d.pow2 && !std::has_single_bit(n))) {
          ++bad;
          REPLAYALLOC_LOG(error,
                          "%s='%s' is not %s in [%llu, %llu]%s; using the default, %llu", d.name, v,
                          d.k == kind::size ? "a size (bytes, optional K/M/G suffix)" : "a whole number",
                          static_cast<unsigned long long>(d.lo),
                          static_cast<unsigned long long>(d.hi),
                          d.pow2 ? " and a power of two" : "",
                          static_cast<unsigned long long>(d.get(options{})));
        } else {
          d.set(*out, n);
        }
        break;
      }
    }
  }
  if (out->record_limit < out->record_iterations) {
    // Only a contradiction when both were set; a raised RECORD_ITERATIONS alone
    // raises the limit with it.
    if (find_env(envp, "REPLAYALLOC_RECORD_LIMIT") != nullptr) {
      ++bad;
      REPLAYALLOC_LOG(error,
                      "REPLAYALLOC_RECORD_LIMIT=%u is below REPLAYALLOC_RECORD_ITERATIONS=%u; using %u",
                      out->record_limit, out->record_iterations, out->record_iterations);
    }
    out->record_limit = out->record_iterations;
  }
  // Warn about misspelled settings: a REPLAYALLOC_ variable that is not in the table.
  if (envp != nullptr) {
    for (char* const* e = envp; *e != nullptr; ++e) {
      if (std::strncmp(*e, "REPLAYALLOC_", 12) != 0) continue;
      bool known = false;
      for (const option_desc& d : table) {
        const std::size_t n = std::strlen(d.name);
        if (std::strncmp(*e, d.name, n) == 0 && (*e)[n] == '=') known = true;
      }
      // Read by the Python package, not the engine.
      for (const char* other : {"REPLAYALLOC_LIBRARY=", "REPLAYALLOC_TEST_LIBRARY=", "REPLAYALLOC_CUDA_ROUTE="}) {
        if (std::strncmp(*e, other, std::strlen(other)) == 0) known = true;
      }
      if (!known) {
        const char* eq = std::strchr(*e, '=');
        const int len = eq ? static_cast<int>(eq - *e) : static_cast<int>(std::strlen(*e));
        REPLAYALLOC_LOG(warning, "unknown setting %.*s ignored (see the README's configuration table)",
                        len, *e);
      }
    }
  }
  set_log_max_warnings(out->max_warnings);
  return bad;
}

void log_settings(const options& o) {
  if (o.verbose < 2) return;
  const options defaults{};
  REPLAYALLOC_LOG(info, "settings in effect (REPLAYALLOC_VERBOSE=%d):", o.verbose);
  for (const option_desc& d : table) {
    char value[320];
    bool is_default = true;
    switch (d.k) {
      case kind::size:
      case kind::count:
      case kind::boolean:
        std::snprintf(value, sizeof value, "%llu", static_cast<unsigned long long>(d.get(o)));
        is_default = d.get(o) == d.get(defaults);
        break;
      case kind::path:
      case kind::dir: {
        const char* t = d.text(const_cast<options&>(o));
        std::snprintf(value, sizeof value, "%s", t[0] != '\0' ? t : "(none)");
        is_default = t[0] == '\0';
        break;
      }
      case kind::mode:
        std::snprintf(value, sizeof value, "%s", mode_name(o.mode));
        is_default = o.mode == defaults.mode;
        break;
      case kind::stats_format:
        std::snprintf(value, sizeof value, "%s", o.stats_text ? "text" : "json");
        is_default = !o.stats_text;
        break;
      case kind::budget:
        if (o.cuda_budget_fraction > 0) std::snprintf(value, sizeof value, "%g", o.cuda_budget_fraction);
        else if (o.cuda_budget_bytes > 0) std::snprintf(value, sizeof value, "%llu",
                                                        static_cast<unsigned long long>(o.cuda_budget_bytes));
        else std::snprintf(value, sizeof value, "(none)");
        is_default = o.cuda_budget_fraction == 0 && o.cuda_budget_bytes == 0;
        break;
      case kind::lms_memory:
        std::snprintf(value, sizeof value, "%s", o.cuda_lms_pinned ? "pinned" : "managed");
        is_default = !o.cuda_lms_pinned;
        break;
    }
    REPLAYALLOC_LOG(info, "  %-32s %s%s", d.name, value, is_default ? "" : "  (set)");
  }
}

std::size_t option_count() { return sizeof table / sizeof table[0]; }
const char* option_name(std::size_t i) { return i < option_count() ? table[i].name : nullptr; }
const char* option_doc(std::size_t i) { return i < option_count() ? table[i].doc : nullptr; }

char* const* settings_environment(char* const* envp, bool secure) {
  static char* const none[] = {nullptr};
  return secure ? none : envp;
}

const options& process_options() {
  if (g_state.load(std::memory_order_acquire) == 2) return g_options;
  int expected = 0;
  if (g_state.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) {
    if (!g_frozen.load(std::memory_order_relaxed)) {
      parse_options(settings_environment(environ, getauxval(AT_SECURE) != 0), &g_options);
    }
    g_state.store(2, std::memory_order_release);
    log_settings(g_options);
  } else {
    while (g_state.load(std::memory_order_acquire) != 2) {
    }
  }
  return g_options;
}

bool set_process_options(const options& o) {
  int expected = 0;
  if (!g_state.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) return false;
  g_options = o;
  g_frozen.store(true, std::memory_order_relaxed);
  set_log_verbosity(o.verbose);
  set_log_max_warnings(o.max_warnings);
  g_state.store(2, std::memory_order_release);
  log_settings(o);
  return true;
}

}  // namespace replayalloc::detail
