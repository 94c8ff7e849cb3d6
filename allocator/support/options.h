// replayalloc/support/options.h: the one table of run-time settings.
//
// Layer: support. Every setting is an environment variable with the REPLAYALLOC_
// prefix, listed once in options.cc (name, default, unit, doc) and once in the
// README's configuration table. Values are read from `environ` directly (no getenv,
// no allocation), validated, and an invalid value produces one message naming the
// variable, the value and the value used instead. Integrations set options through
// the API, not the environment.
#pragma once

#include <cstddef>
#include <cstdint>

namespace replayalloc::detail {

enum class run_mode : int {
  off = 0,     // every call passes straight to the backend; nothing recorded
  record = 1,  // record iterations (stats, traces) but never replay
  replay = 2,  // record, plan, then replay iterations the program marks (the default)
  automatic = 3,  // also find iterations in threads that mark none (LD_PRELOAD default)
};

// The LD_PRELOAD build starts in auto mode with a 4 KiB minimum size (README); every
// other build in replay mode with none.
#if defined(REPLAYALLOC_PRELOAD_DEFAULTS) && REPLAYALLOC_PRELOAD_DEFAULTS
inline constexpr run_mode default_mode = run_mode::automatic;
inline constexpr std::uint64_t default_min_size = 4096;
inline constexpr std::uint32_t default_stack_depth = 4;
#else
inline constexpr run_mode default_mode = run_mode::replay;
inline constexpr std::uint64_t default_min_size = 0;
inline constexpr std::uint32_t default_stack_depth = 0;
#endif

struct options {
  run_mode mode = default_mode;
  int verbose = 1;                    // 0 errors, 1 +warnings, 2 +info, 3 +debug
  long max_warnings = 100;            // warnings printed before going quiet
  char stats_path[256] = "";          // "" none, "stderr", "stdout", or a file path
  bool stats_text = false;            // REPLAYALLOC_STATS_FORMAT=text: a table instead of JSON
  bool stats_idle = false;            // also write REPLAYALLOC_STATS for a process that did nothing
  char plan_dir[256] = "";            // "" none, or a directory plans are loaded from (and saved to)
  char plan_cache[256] = "";          // "" none, or a writable directory new plans are saved to
  bool check = false;                 // shadow-check every slab hand-out and free (Note [Check mode])
  std::uint64_t min_size = default_min_size;  // requests below this bypass the plan
  std::uint64_t slot_align = 64;      // every slot offset is a multiple of this
  std::uint64_t reserve_bytes = std::uint64_t{64} << 30;  // virtual range for slabs
  std::uint32_t max_slabs = 64;       // slabs per plan (concurrent iterations)
  std::uint32_t max_plans = 256;      // plans kept; the least recently used is evicted
  std::uint64_t max_slab_memory = std::uint64_t{16} << 30;  // host slab bytes mapped at once
  std::uint32_t record_iterations = 2;  // identical recordings needed to plan
  std::uint32_t record_limit = 8;     // recordings after which we plan anyway
  std::uint32_t replan_after = 3;     // deviating iterations in a row -> record again
  std::uint32_t deviation_percent = 10;  // fallbacks (% of slots) making one deviate
  std::uint32_t resync_window = 8;    // slots looked ahead after a mismatch
  std::uint32_t auto_history = 16384; // allocations auto mode looks back over
  bool prefault = true;               // touch slab pages when a slab is made
  bool set_aside = true;              // back off keys whose plans keep failing (Note [Setting aside])
  bool background_planning = true;    // plans made by a planner thread (Note [Background planning])
  std::uint32_t plan_search_ms = 250; // Note [Improved plans]: the search's time per installed plan; 0 none
  // Note [Plans that arrive in time]: plans of at most this many allocations are made on
  // the thread that ends the recording; 0: every plan on the planner thread.
  std::uint32_t inline_plan_max = 256;
  // Frames of the call stack naming a recorded allocation's op when the program sets
  // none (LD_PRELOAD library only; 0: no stack tags).
  std::uint32_t stack_depth = default_stack_depth;
  // Note [Cached unwind steps]: call stacks walked with the frame sizes learnt per return
  // address, DWARF only where a frame is new; false: DWARF for every frame.
  bool stack_cache = true;
  // Note [The fallback's front cache]: per-thread lists of small free blocks in front of
  // the fallback's malloc and free, below the minimum size; false: jemalloc alone.
  bool front_cache = true;
  // Note [The fallback made when first needed]: requests the fallback serves with
  // jemalloc's own malloc and settings before it makes its front cache and settings.
  std::uint32_t fallback_after = 4096;
  // CUDA (integrations/cuda): the device-memory budget for slabs, in bytes, or as a
  // fraction of the device's memory (exactly one of the two is non-zero, or neither:
  // no budget); allocations at least this large move out of a slab that would not fit.
  std::uint64_t cuda_budget_bytes = 0;
  double cuda_budget_fraction = 0;
  std::uint64_t cuda_lms_threshold = std::uint64_t{1} << 20;
  bool cuda_lms_pinned = false;       // pinned host memory instead of managed memory
};

// Parses `envp` (a NULL-terminated environ array) into `out`, starting from the
// defaults. Invalid values are reported (one message each) and replaced by the
// default. Returns the number of invalid settings. Never allocates.
int parse_options(char* const* envp, options* out);

// The environment the process's settings come from: `envp`, or none (every setting at
// its default) in a secure-execution process (`secure`: AT_SECURE, set for setuid,
// setgid and file-capability programs), whose environment a less privileged caller
// chose: a path in REPLAYALLOC_STATS or REPLAYALLOC_PLAN_DIR must not make such a program
// write files (glibc ignores its own MALLOC_ settings there, jemalloc its MALLOC_CONF).
char* const* settings_environment(char* const* envp, bool secure);

// The settings, in the order of the table in options.cc (and of the README's
// configuration table): names and one-line meanings, for tests and tools.
std::size_t option_count();
const char* option_name(std::size_t i);
const char* option_doc(std::size_t i);

// At REPLAYALLOC_VERBOSE=2 and above: every setting's value, one line each, marked
// "(set)" where it is not the default. Called once, when the options are parsed or set.
void log_settings(const options& o);

// Options from the process environment, parsed once. Thread-safe.
const options& process_options();

// Replaces the process options before the engine starts (integrations, tests).
// Returns false, and changes nothing, once the engine has started.
bool set_process_options(const options& o);

}  // namespace replayalloc::detail
