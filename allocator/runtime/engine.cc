#include "runtime/engine.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

#include "backend/backend.h"
#include "backend/slab_range.h"
#include "planner/plan_file.h"
#include "planner/planner.h"
#include "replay/compiled_plan.h"
#include "runtime/auto_detect.h"
#include "runtime/check.h"
#include "support/file_io.h"
#include "support/log.h"
#include "support/reentry.h"
#include "trace/recorder.h"
#include "trace/trace_io.h"

namespace replayalloc::detail {

constinit thread_local thread_state tls_state REPLAYALLOC_TLS_IE;

namespace {

pthread_key_t g_exit_key;

void thread_exit_hook(void* arg) {
  auto* t = static_cast<thread_state*>(arg);
  engine::get().on_thread_exit(*t);
}

// Note [Statistics at exit]: REPLAYALLOC_STATS is inherited by every process that
// inherits LD_PRELOAD: a wrapper (timeout, a shell), the service, its workers. So:
//  * the path may name the process: %p the pid, %e the program's name, %% a '%' (as
//    core patterns do), expanded when the process exits (a forked worker its own pid);
//  * a process that did nothing (no iteration recorded or replayed, no plan loaded) writes
//    nothing unless REPLAYALLOC_STATS_IDLE=1: a wrapper's own allocations never replace
//    the service's statistics;
//  * the file is replaced whole (support/file_io.h: never through a link), with "pid" and
//    "program" first; replacing a file another process wrote while this one ran (two
//    workers on one path) is said, naming that process: put %p in the path instead.
//    A file from before this process started (the previous run) is replaced silently.
std::int64_t g_started_ns = 0;  // this process's start (or fork), CLOCK_REALTIME

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

// When `path` holds statistics another process wrote since this one started: that
// process's pid (and name in `who`); otherwise 0.
int other_writer(const char* path, char* who, std::size_t cap) {
  struct stat st;
  if (::lstat(path, &st) != 0 || !S_ISREG(st.st_mode)) return 0;
  const std::int64_t written = static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  if (written < g_started_ns) return 0;
  const int fd = ::open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return 0;
  char head[256];
  const ssize_t got = ::read(fd, head, sizeof head - 1);
  ::close(fd);
  if (got <= 0) return 0;
  head[got] = '\0';
  int pid = 0;
  if (std::sscanf(head, "{\"pid\":%d,\"program\":\"%63[^\"]\"", &pid, who) < 1) return 0;
  (void)cap;
  return pid == ::getpid() ? 0 : pid;
}

void print_stats_at_exit() {
  const options& o = engine::get().opts();
  char buf[4096];
  const std::size_t n = replayalloc_stats_json(buf, sizeof buf);
  const std::size_t len = n < sizeof buf ? n : sizeof buf - 1;
  if (!o.stats_idle) {
    const Stats s = engine::get().stats(nullptr);
    if (s.iterations == 0 && s.recordings == 0 && s.plans_loaded == 0 && s.slab_hits == 0 &&
        s.plan_files_ignored == 0) {
      return;  // did nothing (Note [Statistics at exit])
    }
  }
  if (std::strcmp(o.stats_path, "stderr") == 0) {
    std::fwrite(buf, 1, len, stderr);
    std::fputc('\n', stderr);
    return;
  }
  reentry_guard guard;
  char path[512];
  if (!expand_stats_path(o.stats_path, path, sizeof path)) {
    REPLAYALLOC_LOG(error, "REPLAYALLOC_STATS: '%s' is too long once expanded; statistics not written",
                    o.stats_path);
    return;
  }
  char who[64] = "?";
  if (const int pid = other_writer(path, who, sizeof who)) {
    REPLAYALLOC_LOG(warning, "REPLAYALLOC_STATS: replacing '%s', written by process %d (%s) while this "
                    "one ran; put %%p in the path for one file per process", path, pid, who);
  }
  char name[64];
  program_name(name, sizeof name);
  char head[128];
  const int h = std::snprintf(head, sizeof head, "{\"pid\":%d,\"program\":\"%s\",",
                              static_cast<int>(::getpid()), name);
  std::string text(head, static_cast<std::size_t>(h));
  text.append(buf + 1, len > 0 ? len - 1 : 0);
  text.push_back('\n');
  const absl::Status st = write_file_atomic(path, text);
  if (!st.ok()) {
    REPLAYALLOC_LOG(error, "REPLAYALLOC_STATS: cannot write '%s' (%.*s)", path,
                    static_cast<int>(st.message().size()), st.message().data());
  }
}

std::uint64_t total_misses(const replay_cursor& c) {
  std::uint64_t n = 0;
  for (const auto& m : c.misses) n += m.load(std::memory_order_relaxed);
  return n;
}

void add_domain(Stats& s, const domain_state& d) {
  const replay_cursor& c = d.cursor;
  auto ld = [](const std::atomic<std::uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  s.slab_hits += ld(d.slab_hits);
  s.bytes_from_slab += ld(d.hit_bytes);
  s.passthrough += ld(d.passthrough) + ld(d.below_min) + ld(c.bypassed);
  s.below_min_size += ld(d.below_min) + ld(c.bypassed);
  s.bytes_from_backend += ld(d.backend_bytes) + ld(c.miss_bytes) + ld(c.bypassed_bytes);
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
}

void add_stats(Stats& into, const Stats& s) {
  into.slab_hits += s.slab_hits;
  into.bytes_from_slab += s.bytes_from_slab;
  into.passthrough += s.passthrough;
  into.below_min_size += s.below_min_size;
  into.bytes_from_backend += s.bytes_from_backend;
  into.fallback_no_slab += s.fallback_no_slab;
  into.fallback_size_mismatch += s.fallback_size_mismatch;
  into.fallback_beyond_plan += s.fallback_beyond_plan;
  into.fallback_overlap_live += s.fallback_overlap_live;
  into.fallback_alignment += s.fallback_alignment;
  into.fallback_too_large += s.fallback_too_large;
  into.backend_planned += s.backend_planned;
  into.frees += s.frees;
  into.remote_frees += s.remote_frees;
  into.invalid_frees += s.invalid_frees;
  into.double_frees += s.double_frees;
  into.iterations += s.iterations;
  into.iterations_set_aside += s.iterations_set_aside;
}

// Check mode: hides a replaying host cursor's counts so the hot path always misses
// (Note [Check mode]); the slow path unmasks around its own work.
void mask(domain_state& d) {
  if (!check::enabled() || d.masked || d.ph != phase::replay || d.kind != domain_kind::host) return;
  replay_cursor& c = d.cursor;
  d.masked_count = c.count;
  d.masked_free_count = c.free_count;
  c.count = 0;
  c.free_count = 0;
  d.masked = true;
}

void unmask(domain_state& d) {
  if (!d.masked) return;
  d.cursor.count = d.masked_count;
  d.cursor.free_count = d.masked_free_count;
  d.masked = false;
}

const char* op_name_for_check(std::uint32_t op);

void free_recorder(domain_state& d) {
  if (d.recorder == nullptr) return;
  d.recorder->~trace_recorder();
  backend::fallback_free(d.recorder);
  d.recorder = nullptr;
}

}  // namespace

engine& engine::get() {
  alignas(engine) static unsigned char storage[sizeof(engine)];
  static engine* instance = [] {
    reentry_guard guard;
    return new (storage) engine();
  }();
  return *instance;
}

engine::engine() : opts_(process_options()) {
  reentry_guard guard;
  backend::use_fast_entry_points();
  if (opts_.mode != run_mode::off) slabs_ok_ = backend::reserve_slab_range(opts_.reserve_bytes);
  set_host_slab_limit(opts_.max_slab_memory);
  pthread_key_create(&g_exit_key, thread_exit_hook);
  g_started_ns = realtime_ns();
  pthread_atfork([] { engine::get().prefork(); }, [] { engine::get().postfork_parent(); },
                 [] {
                   g_started_ns = realtime_ns();
                   engine::get().postfork_child();
                 });
  if (opts_.stats_path[0] != '\0') std::atexit(print_stats_at_exit);
  if (opts_.check && opts_.mode != run_mode::off) {
    check::enable(op_name_for_check);
    REPLAYALLOC_LOG(info, "REPLAYALLOC_CHECK: every host block is checked against a shadow record");
  }
}

namespace {
const char* op_name_for_check(std::uint32_t op) { return engine::get().op_name_locked(op); }
}  // namespace

const char* engine::op_name_locked(std::uint32_t op) {
  // Called while reporting, possibly with the engine's mutex held by this thread.
  if (!mu_.try_lock()) return "?";
  const char* n = op < op_names_.size() ? op_names_[op].c_str() : "unknown";
  mu_.unlock();
  return n;
}

// Note [Fork]: the child has one thread, the one that forked, and a copy of every
// lock as it was at fork(). Holding all of them across fork() makes the copies
// consistent: prefork takes the engine's mutex, then each key's (in the keys' order,
// always the same), then the version registry's and the pool mutex of every plan
// version alive, current or retired and still draining (slab_pool.h), then the slab
// range's and check mode's; the handlers after fork release them in reverse. Nothing
// here allocates.
void engine::prefork() {
  mu_.lock();
  for (auto& [k, e] : keys_) e->mu.lock();
  lock_versions_for_fork();  // current and retired ones alike
  backend::lock_for_fork();
  check::lock_for_fork();
}

void engine::postfork_parent() {
  check::unlock_after_fork();
  backend::unlock_after_fork();
  unlock_versions_after_fork();
  for (auto& [k, e] : keys_) e->mu.unlock();
  mu_.unlock();
}

void engine::postfork_child() {
  check::unlock_after_fork();
  backend::unlock_after_fork();
  unlock_versions_after_fork();
  for (auto& [k, e] : keys_) {
    e->recording = false;  // whoever was recording is not in the child
    e->mu.unlock();
  }
  mu_.unlock();
  // The forking thread's open iteration is abandoned: its blocks stay valid, its slab
  // never returns to the pool (its refcount never reaches zero), later calls pass
  // through until the thread begins a new iteration.
  thread_state& t = tls_state;
  if (t.depth > 0) {
    replay_cursor& c = t.host.cursor;
    c.count = 0;
    c.free_count = 0;
    c.current = nullptr;
    c.base = nullptr;
    t.host.masked = false;
    t.host.ph = phase::none;
    t.host.entry = nullptr;
    t.host.version = nullptr;
    t.depth = 0;
    t.entry = nullptr;
    t.auto_iteration = false;
  }
}

void engine::register_thread(thread_state& t) {
  if (t.registered || t.exited) return;
  reentry_guard guard;
  t.registered = true;
  t.min_size = opts_.min_size;
  t.small_below = backend::g_plain_malloc.load(std::memory_order_relaxed) != nullptr && !check::enabled()
                      ? opts_.min_size
                      : 0;
  t.host.kind = domain_kind::host;
  pthread_setspecific(g_exit_key, &t);
  {
    std::lock_guard<std::mutex> lock(mu_);
    t.thread_no = next_thread_no_++;
  }
  register_domain(t.host);
}

void engine::register_domain(domain_state& d) {
  if (d.registered) return;
  reentry_guard guard;
  d.cursor.resync_window = opts_.resync_window;
  d.cursor.min_size = opts_.min_size;
  std::lock_guard<std::mutex> lock(mu_);
  d.registered = true;
  d.prev = nullptr;
  d.next = domains_;
  if (domains_ != nullptr) domains_->prev = &d;
  domains_ = &d;
}

void engine::unregister_domain(domain_state& d) {
  if (!d.registered) return;
  reentry_guard guard;
  free_recorder(d);
  std::lock_guard<std::mutex> lock(mu_);
  add_domain(retired_[static_cast<int>(d.kind)], d);
  if (d.prev != nullptr) d.prev->next = d.next; else domains_ = d.next;
  if (d.next != nullptr) d.next->prev = d.prev;
  d.registered = false;
}

void engine::add_domain_hooks(const domain_hooks& h) {
  std::lock_guard<std::mutex> lock(mu_);
  const int n = n_hooks_.load(std::memory_order_relaxed);
  if (n < static_cast<int>(std::size(hooks_))) {
    hooks_[n] = h;
    n_hooks_.store(n + 1, std::memory_order_release);
  }
}

void engine::on_thread_exit(thread_state& t) {
  if (t.depth > 0) {
    t.depth = 1;
    end_impl(t);
  }
  const int n = n_hooks_.load(std::memory_order_acquire);
  for (int i = 0; i < n; ++i) {
    if (hooks_[i].on_exit != nullptr) hooks_[i].on_exit(t);
  }
  unregister_domain(t.host);
  if (t.autod != nullptr) {
    reentry_guard guard;
    t.autod->~auto_state();
    backend::fallback_free(t.autod);
    t.autod = nullptr;
  }
  t.auto_iteration = false;
  t.registered = false;
  t.exited = true;
}

key_entry* engine::entry_for(std::string_view key, domain_kind kind, slab_source* source,
                             placement_adjuster adjust, void* adjust_arg) {
  reentry_guard guard;
  key_entry* e = nullptr;
  try {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = keys_.find(absl::string_view(key.data(), key.size()));
    if (it != keys_.end()) {
      e = it->second;
      e->users.fetch_add(1, std::memory_order_relaxed);
      e->last_used = ++use_clock_;
      return e;
    }
    void* mem = backend::fallback_alloc(sizeof(key_entry), alignof(key_entry));
    if (mem == nullptr) return nullptr;
    e = new (mem) key_entry;
    e->key.assign(key.data(), key.size());
    e->kind = kind;
    e->source = source;
    e->adjust = adjust;
    e->adjust_arg = adjust_arg;
    e->users.store(1, std::memory_order_relaxed);
    e->last_used = ++use_clock_;
    keys_.emplace(e->key, e);
    if (keys_.size() > opts_.max_plans) evict_idle_keys_locked(e);
  } catch (const std::bad_alloc&) {
    // The map could not grow: this iteration passes through (domain_begin(null)).
    if (e != nullptr && keys_.find(e->key) == keys_.end()) {
      e->~key_entry();
      backend::fallback_free(e);
    }
    REPLAYALLOC_LOG(warning, "out of memory making the entry of key '%.*s'; its iteration passes through",
                    static_cast<int>(key.size()), key.data());
    return nullptr;
  }
  if ((opts_.plan_dir[0] != '\0' || opts_.plan_cache[0] != '\0') && replays()) {
    try {
      load_saved_plan(*e);
    } catch (const std::bad_alloc&) {
      REPLAYALLOC_LOG(warning, "out of memory loading the plan of '%s'; recording it instead", e->key.c_str());
    }
  }
  return e;
}

// Note [Bounds]: a service fed ever-new shapes makes ever-new keys. Two settings bound
// what they cost. REPLAYALLOC_MAX_PLANS bounds the keys remembered: past it, the least
// recently used key no thread holds is forgotten (its plan retired, so its slabs are
// unmapped as soon as they drain; its recordings dropped); asked for again, it records
// again. REPLAYALLOC_MAX_SLAB_MEMORY bounds the host slab bytes committed: a slab that
// would pass it is not made until idle slabs (waiting in their pools) of the least
// recently used other keys are unmapped; when that is not enough the iteration passes
// through to the backend, like any iteration without a slab. Neither ever touches a
// slab in use.
void engine::evict_idle_keys_locked(const key_entry* keep) {
  while (keys_.size() > opts_.max_plans) {
    key_entry* victim = nullptr;
    for (const auto& [k, e] : keys_) {
      if (e == keep || e->users.load(std::memory_order_acquire) != 0) continue;
      if (victim == nullptr || e->last_used < victim->last_used) victim = e;
    }
    if (victim == nullptr) return;  // every key is in use: over the bound until one ends
    plan_version* v = nullptr;
    {
      std::lock_guard<std::mutex> lock(victim->mu);
      v = victim->version;
      victim->version = nullptr;
    }
    keys_.erase(victim->key);
    REPLAYALLOC_LOG(info, "forgetting the least recently used key '%s' (REPLAYALLOC_MAX_PLANS=%u)",
                    victim->key.c_str(), opts_.max_plans);
    victim->~key_entry();
    backend::fallback_free(victim);
    if (v != nullptr) {
      plans_evicted_.fetch_add(1, std::memory_order_relaxed);
      v->retire();
    }
  }
}

std::size_t engine::trim_idle_slabs(const key_entry* except, std::size_t want) {
  reentry_guard guard;
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<key_entry*, backend::internal_allocator<key_entry*>> order;
  try {
    order.reserve(keys_.size());
    for (const auto& [k, e] : keys_) {
      if (e != except && e->kind == domain_kind::host) order.push_back(e);
    }
  } catch (const std::bad_alloc&) {
    return 0;
  }
  std::sort(order.begin(), order.end(),
            [](const key_entry* a, const key_entry* b) { return a->last_used < b->last_used; });
  std::size_t freed = 0;
  for (key_entry* e : order) {
    std::lock_guard<std::mutex> elock(e->mu);
    if (e->version != nullptr) freed += e->version->trim();
    if (freed >= want) break;
  }
  return freed;
}

void engine::abandon_recording(domain_state& d, const char* what) {
  REPLAYALLOC_LOG(warning, "out of memory while %s '%s'; this iteration passes through",
                  what, d.entry != nullptr ? d.entry->key.c_str() : "?");
  d.ph = phase::none;
  if (d.entry != nullptr) {
    std::lock_guard<std::mutex> lock(d.entry->mu);
    d.entry->recording = false;
  }
}

std::uint32_t engine::op_id(std::string_view name) {
  reentry_guard guard;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = op_ids_.find(absl::string_view(name.data(), name.size()));
  if (it != op_ids_.end()) return it->second;
  const auto id = static_cast<std::uint32_t>(op_names_.size());
  op_names_.emplace_back(name);
  op_ids_.emplace(op_names_.back(), id);
  return id;
}

// Note [Auto mode], the thread's side: while watching, every allocation of at least
// the minimum size is observed with the live bytes before it; once a period is
// found, the thread waits for the boundary and then runs back-to-back iterations of
// the period's key, each ended at the first slow-path allocation after the period's
// allocations were made (in replay: the plan's slots walked, or as many allocations
// made). A program that marks its own iterations on a thread switches auto off there.

void engine::auto_before_alloc(thread_state& t, std::size_t size) {
  if (t.marks_own || (t.depth > 0 && !t.auto_iteration)) return;
  reentry_guard guard;
  if (t.autod == nullptr) {
    void* mem = backend::fallback_alloc(sizeof(auto_state), alignof(auto_state));
    if (mem == nullptr) return;
    t.autod = new (mem) auto_state(opts_.auto_history);
  }
  auto_state& a = *t.autod;
  if (a.resting > 0) {  // Note [Auto mode rests]
    if (--a.resting == 0) a.watch_start = a.det.count();
    return;
  }
  if (t.auto_iteration) {
    const domain_state& d = t.host;
    const bool replaying = d.ph == phase::replay;
    const bool done = replaying
                          ? d.cursor.next >= d.cursor.count || d.cursor.handed + t.auto_count >= a.det.period()
                          : t.auto_count >= a.det.period();
    if (done) {
      // A replayed iteration that served less than (100 - DEVIATION_PERCENT)% of the
      // period from the slab did not repeat the period.
      const bool poor = replaying && std::uint64_t{d.cursor.handed} * 100 <
                                         std::uint64_t{a.det.period()} * (100 - opts_.deviation_percent);
      end_impl(t);
      t.auto_iteration = false;
      a.deviated_in_a_row = poor ? a.deviated_in_a_row + 1 : 0;
      if (a.deviated_in_a_row >= 2 * std::max<std::uint32_t>(1, opts_.replan_after)) {
        // The period is gone (a new shape, a new phase of the program), or was a
        // repeated part of a longer one: watch again, never picking it again.
        REPLAYALLOC_LOG(info, "auto: '%s' keeps deviating; watching the thread's allocations again", a.key);
        a.det.reject_current();
        a.deviated_in_a_row = 0;
        a.watch_start = a.det.count();
        return;
      }
      begin_impl(t, a.key);
      t.auto_iteration = true;
      t.auto_count = 0;
    }
    ++t.auto_count;
    return;
  }
  if (a.det.found() && a.det.count() == a.det.next_boundary()) {
    a.live.clear();
    a.live_bytes = 0;
    a.filter_clear();
    std::snprintf(a.key, sizeof a.key, "auto/%016llx/p%u",
                  static_cast<unsigned long long>(a.det.signature()), a.det.period());
    REPLAYALLOC_LOG(info, "auto: thread %u repeats every %u allocations; iterations of '%s' begin",
                    t.thread_no, a.det.period(), a.key);
    begin_impl(t, a.key);  // finds or makes the key's entry
    if (t.entry != nullptr) {
      std::lock_guard<std::mutex> lock(t.entry->mu);
      t.entry->automatic = true;
    }
    t.auto_iteration = true;
    t.auto_count = 1;
    a.rests = 0;
    return;
  }
  a.det.observe(size, a.live_bytes);
  // Note [Auto mode rests]: watching costs a hash-map update per watched allocation
  // and free, and a stream that has shown no period in four histories' worth of
  // allocations (65,536 by default) most likely has none (random sizes, shapes that
  // change every request): the thread stops watching for as many allocations again,
  // doubling with each rest in a row up to 64 times, then watches afresh. While it
  // rests its allocations and frees go to the backend after one counter.
  const std::uint64_t budget = std::uint64_t{4} * opts_.auto_history;
  if (!a.det.found() && a.det.count() - a.watch_start >= budget) {
    a.resting = budget << std::min<std::uint32_t>(a.rests, 6);
    ++a.rests;
    a.live.clear();
    a.live_bytes = 0;
    a.filter_clear();
    a.det.reset();
    auto_rests_.fetch_add(1, std::memory_order_relaxed);
    REPLAYALLOC_LOG(info, "auto: thread %u shows no period in %llu allocations; not watched for the next %llu",
                    t.thread_no, static_cast<unsigned long long>(budget),
                    static_cast<unsigned long long>(a.resting));
  }
}

void engine::auto_track(thread_state& t, const void* p, std::size_t size) {
  if (t.autod == nullptr || t.auto_iteration || t.marks_own || t.autod->resting > 0) return;
  reentry_guard guard;
  auto [it, fresh] = t.autod->live.try_emplace(p, size);
  if (fresh) t.autod->filter_add(p);
  if (!fresh) {
    t.autod->live_bytes -= it->second;
    it->second = size;
  }
  t.autod->live_bytes += size;
}

void engine::auto_untrack(thread_state& t, const void* p) {
  if (t.autod == nullptr || t.auto_iteration || t.marks_own || t.autod->resting > 0) return;
  reentry_guard guard;
  auto it = t.autod->live.find(p);
  if (it == t.autod->live.end()) return;
  t.autod->live_bytes -= it->second;
  t.autod->live.erase(it);
  t.autod->filter_remove(p);
}

int engine::begin(thread_state& t, const char* key) {
  if (key == nullptr || key[0] == '\0') {
    errno = EINVAL;
    return -1;
  }
  // The program marks its own iterations here: auto mode steps aside on this thread.
  if (t.auto_iteration) {
    end_impl(t);
    t.auto_iteration = false;
  }
  t.marks_own = true;
  return begin_impl(t, key);
}

int engine::end(thread_state& t) {
  if (t.auto_iteration) {  // nothing the program opened
    errno = EINVAL;
    return -1;
  }
  return end_impl(t);
}

int engine::begin_impl(thread_state& t, const char* key) {
  if (t.depth > 0) {
    ++t.depth;
    return REPLAYALLOC_NESTED;
  }
  register_thread(t);
  reentry_guard guard;
  t.depth = 1;
  t.entry = nullptr;
  if (opts_.mode == run_mode::off) {
    bump(t.host.iterations);
    return 0;
  }
  t.entry = entry_for(key, domain_kind::host, &host_slabs(opts_.prefault));
  domain_begin(t.host, t.entry, nullptr);
  return 0;
}

void engine::domain_begin(domain_state& d, key_entry* e, void* context) {
  reentry_guard guard;
  d.ph = phase::none;
  d.no_slab = false;
  d.entry = e;
  bump(d.iterations);
  if (e == nullptr || opts_.mode == run_mode::off) return;
  // The version is claimed from under the key's mutex: once that is released another
  // thread may retire it, and a retired version deletes itself with its last slab.
  // The claim counts as a slab (slab_pool.h), so `v` outlives it.
  plan_version* v = nullptr;
  plan_version::slab_claim claim;
  const char* why = "";
  bool claimed = false;
  std::size_t slab_bytes = 0;
  {
    std::lock_guard<std::mutex> lock(e->mu);
    if (e->failed) return;
    if (++e->uses < e->resume_at) {  // set aside (Note [Setting aside])
      bump(d.set_aside);
      return;
    }
    if (e->version == nullptr) {
      if (e->recording) return;  // another thread records this key: pass through
      e->recording = true;
    } else if (e->grow_wanted && !e->recording && replays()) {
      // A request outgrew the plan: this iteration records (its requests go to the
      // backend), and its recording grows the envelope (Note [Envelope]).
      e->recording = true;
    } else if (replays() && (slabs_ok_ || e->kind != domain_kind::host)) {
      v = e->version;
      slab_bytes = v->plan.slab_bytes;
      claimed = v->claim(opts_.max_slabs, &claim, &why);
    } else {
      return;
    }
  }
  if (v == nullptr) {
    if (d.recorder == nullptr) {
      void* mem = backend::fallback_alloc(sizeof(trace_recorder), alignof(trace_recorder));
      if (mem == nullptr) {
        std::lock_guard<std::mutex> lock(e->mu);
        e->recording = false;
        return;
      }
      d.recorder = new (mem) trace_recorder;
    }
    d.recorder->begin(tls_state.thread_no);
    d.ph = phase::record;
    return;
  }
  slab* s = claimed ? v->finish(claim, context, &why) : nullptr;
  // Over REPLAYALLOC_MAX_SLAB_MEMORY: unmap idle slabs of other keys and try once
  // more, with the key's version read again (the failed claim was dropped, and `v`
  // may be gone).
  if (s == nullptr && why == slab_limit_reason && trim_idle_slabs(e, slab_bytes) >= slab_bytes) {
    claimed = false;
    {
      std::lock_guard<std::mutex> lock(e->mu);
      v = e->version;
      if (v != nullptr) claimed = v->claim(opts_.max_slabs, &claim, &why);
    }
    if (v == nullptr) why = "plan retired";
    if (claimed) s = v->finish(claim, context, &why);
  }
  if (s == nullptr) {
    d.no_slab = true;
    REPLAYALLOC_LOG(info, "iteration of '%s' passes through: %s", e->key.c_str(), why);
    return;
  }
  replay_cursor& c = d.cursor;
  const compiled_plan& p = v->plan;
  c.slots = p.slots.data();
  c.overlaps = p.overlaps.data();
  c.free_order = p.free_order.data();
  c.state = s->state;
  c.slot_at = s->slot_at;
  c.base = s->base;
  c.next = 0;
  c.count = static_cast<std::uint32_t>(p.slots.size());
  c.free_next = 0;
  c.pending = 0;
  c.mismatched = false;
  c.free_count = static_cast<std::uint32_t>(p.free_order.size());
  c.live_tag = s->live_tag.load(std::memory_order_relaxed);
  c.handed = 0;
  c.freed_here = 0;
  c.hit_bytes = 0;
  c.current = s;
  d.version = v;
  d.misses_at_begin = total_misses(c);
  c.grown = 0;
  c.too_large_at = 0;
  d.ph = phase::replay;
  mask(d);
}

int engine::end_impl(thread_state& t) {
  if (t.depth == 0) {
    errno = EINVAL;
    return -1;
  }
  if (--t.depth > 0) return REPLAYALLOC_NESTED;
  reentry_guard guard;
  const int n = n_hooks_.load(std::memory_order_acquire);
  for (int i = 0; i < n; ++i) {
    if (hooks_[i].on_end != nullptr) hooks_[i].on_end(t);
  }
  domain_end(t.host);
  t.entry = nullptr;
  return 0;
}

void engine::domain_end(domain_state& d) {
  reentry_guard guard;
  unmask(d);
  if (d.ph == phase::record) end_record(d);
  if (d.ph == phase::replay) end_replay(d);
  d.ph = phase::none;
  if (d.entry != nullptr) d.entry->users.fetch_sub(1, std::memory_order_release);
  d.entry = nullptr;
  d.version = nullptr;
  d.no_slab = false;
}

void engine::record_alloc(domain_state& d, const void* p, std::size_t size, std::size_t align) {
  reentry_guard guard;
  std::uint32_t op = tls_state.op;
  if (op == 0) {
    if (untagged_op_source f = g_untagged_op_source.load(std::memory_order_acquire)) op = f();
  }
  d.recorder->record_alloc(p, size, static_cast<std::uint32_t>(align), op);
}

void engine::record_free(domain_state& d, const void* p) {
  reentry_guard guard;
  d.recorder->record_free(p);  // erases only: never allocates
}

void engine::end_record(domain_state& d) {
  try {
    end_record_impl(d);
  } catch (const std::bad_alloc&) {
    // Planning needs memory the system does not have: keep serving from the backend
    // and try again with a later recording.
    abandon_recording(d, "planning");
  }
}

void engine::end_record_impl(domain_state& d) {
  key_entry& e = *d.entry;
  trace tr = d.recorder->finish(e.key, [this](std::uint32_t id) {
    std::lock_guard<std::mutex> lock(mu_);
    return id < op_names_.size() ? op_names_[id] : std::string("unknown");
  });
  recordings_.fetch_add(1, std::memory_order_relaxed);
  const std::uint64_t sig = tr.signature();
  const std::uint64_t shape = tr.shape_signature();
  auto shared = std::make_shared<const trace>(std::move(tr));
  std::shared_ptr<const envelope> to_plan;
  plan_version* replace = nullptr;
  plan_version* retired = nullptr;
  {
    std::lock_guard<std::mutex> lock(e.mu);
    e.recording = false;
    ++e.recordings;
    // Note [Envelope]: a recording with the structure of the key's envelope (the same
    // allocations, made and freed in the same order, at other sizes) joins it.
    const bool same_shape = e.env != nullptr && e.envelope_shape == shape;
    bool grew = false;
    if (same_shape) {
      auto merged = std::make_shared<envelope>(*e.env);
      grew = merge_envelope(*merged, *shared);
      e.env = std::move(merged);
    } else {
      e.env = std::make_shared<const envelope>(make_envelope(*shared));
      e.envelope_shape = shape;
    }
    e.same_in_a_row = (e.recordings > 1 && same_shape) ? e.same_in_a_row + 1 : 1;
    e.last_signature = sig;
    e.last_trace = shared;
    if (e.version != nullptr && e.grow_wanted) {
      // Recorded because a request outgrew the plan: a grown envelope replaces it. A
      // recording of another structure means the program changed, not its shape: the
      // plan is retired as a deviating one would be, and this recording is the first
      // of the new structure.
      e.grow_wanted = false;
      if (same_shape && grew && replays() && !e.failed) {
        to_plan = e.env;
        replace = e.version;
      } else if (!same_shape) {
        retired = drop_plan_locked(e, "its allocation sequence changed");
        e.recordings = 1;  // this recording is the first of the new structure
        e.same_in_a_row = 1;
      }
    } else if (replays() && e.version == nullptr && !e.failed) {
      // Auto mode saw the period repeat three times before its first iteration: one
      // recording is enough.
      const std::uint32_t needed = e.automatic ? 1 : opts_.record_iterations;
      if (e.same_in_a_row >= needed) {
        to_plan = e.env;
      } else if (e.recordings >= opts_.record_limit) {
        to_plan = e.env;
        set_aside_locked(e, "its recordings never agreed");
      }
    }
  }
  if (retired != nullptr) retire_dropped(e, retired, retired->from_file, "its allocation sequence changed");
  if (to_plan != nullptr) make_plan(e, *to_plan, replace);
}

plan_version* engine::drop_plan_locked(key_entry& e, const char* why) {
  plan_version* v = e.version;
  e.version = nullptr;
  e.recordings = 0;
  e.same_in_a_row = 0;
  e.slab_bytes = 0;
  e.lower_bound_bytes = 0;
  e.grow_wanted = false;
  set_aside_locked(e, why);
  return v;
}

void engine::retire_dropped(key_entry& e, plan_version* v, bool from_file, const char* why) {
  rerecords_.fetch_add(1, std::memory_order_relaxed);
  if (from_file) {
    REPLAYALLOC_LOG(warning, "the plan of '%s' loaded from REPLAYALLOC_PLAN_DIR does not match "
                    "this program (%s); recording again", e.key.c_str(), why);
  } else {
    REPLAYALLOC_LOG(info, "'%s': %s; recording again", e.key.c_str(), why);
  }
  v->retire();
}

// Note [Setting aside]: a key whose iterations do not repeat (ever-new shapes, a
// different sequence each time) would otherwise cost a recording, a plan and a new
// slab (mapped and pre-faulted) every few iterations, and serve nothing from them:
// worse than the backend alone (DESIGN invariant 8). Each failure in a row (a plan
// retired for deviating, a plan made only because REPLAYALLOC_RECORD_LIMIT
// recordings never agreed, a larger request whose recording has another structure)
// sets the key aside for longer: after the 1st nothing, then 8, 32 and 128 of its
// iterations pass straight through to the backend (no recording, no slab; one
// counter per iteration), and from the 5th failure on the key is given up for
// 4,096 iterations before it is tried again. An iteration replayed without
// deviating clears the count. A plan loaded from a file that does not fit counts too.
void engine::set_aside_locked(key_entry& e, const char* why) {
  const std::uint32_t failures = e.failures.load(std::memory_order_relaxed) + 1;
  e.failures.store(failures, std::memory_order_relaxed);
  std::uint64_t wait = 0;
  switch (failures) {
    case 1: wait = 0; break;
    case 2: wait = 8; break;
    case 3: wait = 32; break;
    case 4: wait = 128; break;
    default: wait = 4096; break;
  }
  if (wait == 0 || !opts_.set_aside) return;
  e.resume_at = e.uses + wait;
  if (failures >= 5) {
    keys_given_up_.fetch_add(1, std::memory_order_relaxed);
    REPLAYALLOC_LOG(info, "'%s' does not repeat (%s; %u failures in a row): given up for %llu "
                    "iterations, which pass through to the backend", e.key.c_str(), why, failures,
                    static_cast<unsigned long long>(wait));
  } else {
    set_asides_.fetch_add(1, std::memory_order_relaxed);
    REPLAYALLOC_LOG(info, "'%s' set aside for %llu iterations (%s)", e.key.c_str(),
                    static_cast<unsigned long long>(wait), why);
  }
}

// Note [Plan files]: with REPLAYALLOC_PLAN_DIR set, every plan the engine makes is
// saved there (its trace and the placement before any device adjustment, under the
// key, the library version and the slot alignment), and a key's entry, when first
// made, loads its file: a restarted service replays from its first iteration. A file
// that cannot be read, is corrupt, or belongs to another key, library version or slot
// alignment is ignored with a message, and the key records as usual. A loaded plan the
// program does not follow (its first replayed iteration deviates) is retired at once and
// the key recorded again; what deviated was served by the backend like any other miss
// (invariant 1), so a stale file costs an iteration, never data.
//
// Note [Plan cache]: a fleet ships its plans read-only (REPLAYALLOC_PLAN_DIR baked into
// an image or mounted read-only: only read) and may name a writable directory for what
// a replica learns on its own (REPLAYALLOC_PLAN_CACHE: plans of keys the shipped
// directory lacks, plans grown to larger shapes, plans re-recorded because a shipped
// one no longer fits). With a cache, new plans are saved only there, never to the plan
// directory. A key loads the newer (by modification time) of its two files that can be
// used, so a plan re-made here wins over the shipped one it replaced, and a newer
// shipped plan (a new image) wins over an old cache. Any number of processes may share
// either directory: a file is replaced whole by rename (support/file_io.h), the last
// writer of identical plans wins, and a reader sees one whole file or none.

std::string engine::plan_path(const char* dir, const key_entry& e) const {
  const std::string name = e.kind == domain_kind::host ? e.key : "cuda:" + e.key;
  return std::string(dir) + "/" + plan_file_name(name);
}

// Note [Safe plan directories] (support/file_io.h): plans are read only from a
// directory no other user can write, and only from regular files only their owner
// can write; a refused directory is named once, with its mode, and the process runs
// on as without it (recording; nothing saved there either).
bool engine::plan_dir_trusted(const char* dir) {
  if (dir[0] == '\0') return false;
  const absl::Status st = check_private_dir(dir);
  if (st.ok()) return true;
  const bool cache = dir == opts_.plan_cache;
  static std::atomic<bool> said[2];
  if (!said[cache].exchange(true)) {
    REPLAYALLOC_LOG(error, "%s refused: %.*s; %s", cache ? "REPLAYALLOC_PLAN_CACHE" : "REPLAYALLOC_PLAN_DIR",
                    static_cast<int>(st.message().size()), st.message().data(),
                    cache ? "new plans are not saved there" : "plans are neither loaded nor saved there");
  }
  return false;
}

// Where a new plan is saved: REPLAYALLOC_PLAN_CACHE when named (Note [Plan cache]),
// else REPLAYALLOC_PLAN_DIR when this process may write it. A plan directory this
// process cannot write (baked into an image, mounted read-only) is only read: new plans
// stay in memory, said once. nullptr: nowhere.
const char* engine::plan_save_dir() {
  if (opts_.plan_cache[0] != '\0') return plan_dir_trusted(opts_.plan_cache) ? opts_.plan_cache : nullptr;
  if (!plan_dir_trusted(opts_.plan_dir)) return nullptr;
  if (::access(opts_.plan_dir, W_OK) == 0) return opts_.plan_dir;
  static std::atomic<bool> said{false};
  if (!said.exchange(true)) {
    REPLAYALLOC_LOG(info, "REPLAYALLOC_PLAN_DIR %s is read-only here (%s): plans are loaded from it, "
                    "new plans stay in memory (REPLAYALLOC_PLAN_CACHE names a directory for them)",
                    opts_.plan_dir, std::strerror(errno));
  }
  return nullptr;
}

namespace {

// A plan file found for a key: its path and modification time (0 when absent).
struct plan_candidate {
  std::string path;
  std::int64_t mtime_ns = 0;
};

std::int64_t mtime_ns(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return 0;
  return static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

}  // namespace

void engine::load_saved_plan(key_entry& e) {
  // The cache first on equal times: it was written by this deployment.
  plan_candidate c[2];
  int n = 0;
  for (const char* dir : {static_cast<const char*>(opts_.plan_cache), static_cast<const char*>(opts_.plan_dir)}) {
    if (!plan_dir_trusted(dir)) continue;
    c[n].path = plan_path(dir, e);
    c[n].mtime_ns = mtime_ns(c[n].path);
    ++n;
  }
  if (n == 2 && c[1].mtime_ns > c[0].mtime_ns) std::swap(c[0], c[1]);
  // The older is tried when the newer cannot be used (said, and counted, as ignored).
  for (int i = 0; i < n; ++i) {
    if (load_plan_file(e, c[i].path)) return;
  }
}

bool engine::load_plan_file(key_entry& e, const std::string& path) {
  absl::StatusOr<std::string> bytes = read_private_file(path);
  if (!bytes.ok()) {
    if (!absl::IsNotFound(bytes.status())) {
      plan_files_ignored_.fetch_add(1, std::memory_order_relaxed);
      REPLAYALLOC_LOG(warning, "plan file for '%s' not read (%.*s); recording it", e.key.c_str(),
                      static_cast<int>(bytes.status().message().size()), bytes.status().message().data());
    }
    return false;
  }
  absl::StatusOr<plan_file> f = decode_plan(*bytes);
  const absl::Status ok = f.ok() ? check_plan_key(*f, e.key, opts_.slot_align) : f.status();
  if (!ok.ok()) {
    plan_files_ignored_.fetch_add(1, std::memory_order_relaxed);
    REPLAYALLOC_LOG(warning, "plan file %s ignored: %.*s; recording '%s' instead", path.c_str(),
                    static_cast<int>(ok.message().size()), ok.message().data(), e.key.c_str());
    return false;
  }
  if (!install_plan(e, f->tr, std::move(f->p), true, nullptr, f->least.empty() ? nullptr : &f->least)) {
    return false;
  }
  plans_loaded_.fetch_add(1, std::memory_order_relaxed);
  REPLAYALLOC_LOG(info, "'%s': plan loaded from %s", e.key.c_str(), path.c_str());
  return true;
}

void engine::make_plan(key_entry& e, const envelope& env, plan_version* replace) {
  const trace& tr = env.tr;
  const std::vector<std::uint64_t> least = least_served(env);
  planner_options po;
  po.slot_align = opts_.slot_align;
  absl::StatusOr<placement> p = replayalloc::make_plan(tr, "best", po);
  const absl::Status ok = p.ok() ? validate(tr, *p, po) : p.status();
  if (!ok.ok()) {
    REPLAYALLOC_LOG(error, "planning '%s' failed (%.*s); its iterations pass through to the backend",
                    e.key.c_str(), static_cast<int>(ok.message().size()), ok.message().data());
    std::lock_guard<std::mutex> lock(e.mu);
    e.failed = true;
    return;
  }
  if (const char* dir = (opts_.plan_dir[0] != '\0' || opts_.plan_cache[0] != '\0') ? plan_save_dir() : nullptr) {
    const std::string path = plan_path(dir, e);
    plan_file f = make_plan_file(tr, *p, po);
    if (std::any_of(least.begin(), least.end(), [](std::uint64_t l) { return l == 1; })) f.least = least;
    const absl::Status st = write_plan_file(f, path);
    if (!st.ok()) {
      REPLAYALLOC_LOG(warning, "plan for '%s' not saved: %.*s", e.key.c_str(),
                      static_cast<int>(st.message().size()), st.message().data());
    } else {
      REPLAYALLOC_LOG(info, "'%s': plan saved to %s", e.key.c_str(), path.c_str());
    }
  }
  if (!install_plan(e, tr, *std::move(p), false, replace, &least)) {
    std::lock_guard<std::mutex> lock(e.mu);
    e.failed = true;
  }
}

bool engine::install_plan(key_entry& e, const trace& tr, placement p, bool from_file,
                          plan_version* replace, const std::vector<std::uint64_t>* least) {
  planner_options po;
  po.slot_align = opts_.slot_align;
  absl::Status ok = absl::OkStatus();
  std::vector<bool> managed;
  if (e.adjust != nullptr) {
    const std::vector<std::uint64_t> before = p.offsets;
    if (const char* note = e.adjust(tr, p, e.adjust_arg)) {
      REPLAYALLOC_LOG(warning, "'%s': %s", e.key.c_str(), note);
    }
    managed.resize(before.size());
    for (std::size_t i = 0; i < before.size(); ++i) {
      managed[i] = before[i] != not_in_slab && p.offsets[i] == not_in_slab;
    }
    ok = validate(tr, p, po);
  }
  void* mem = ok.ok() ? backend::fallback_alloc(sizeof(plan_version), alignof(plan_version)) : nullptr;
  if (!ok.ok() || mem == nullptr) {
    REPLAYALLOC_LOG(error, "planning '%s' failed (%.*s); its iterations pass through to the backend",
                    e.key.c_str(), static_cast<int>(ok.message().size()),
                    ok.ok() ? "out of memory" : ok.message().data());
    return false;
  }
  auto* v = new (mem) plan_version;
  v->source = e.source;
  v->plan = compile_plan(tr, p, po, managed.empty() ? nullptr : &managed, least);
  v->key = e.key;
  v->from_file = from_file;
  v->id = plans_.fetch_add(1, std::memory_order_relaxed) + 1;
  REPLAYALLOC_LOG(info, "planned '%s': %zu allocations, slab %llu bytes, lower bound %llu bytes (%s)",
                  e.key.c_str(), tr.allocations.size(),
                  static_cast<unsigned long long>(p.slab_bytes),
                  static_cast<unsigned long long>(p.lower_bound_bytes), p.algorithm.c_str());
  plan_version* old = nullptr;
  {
    std::lock_guard<std::mutex> lock(e.mu);
    // Another plan arrived meanwhile (a recording finished first; the version to
    // replace was retired or replaced already): keep it.
    if (e.version != replace) {
      v->retire();
      return true;
    }
    old = e.version;
    e.version = v;
    e.recordings = 0;
    e.same_in_a_row = 0;
    e.slab_bytes = p.slab_bytes;
    e.lower_bound_bytes = p.lower_bound_bytes;
    if (from_file) {
      envelope env = make_envelope(tr);
      if (least != nullptr) env.least = *least;  // 1 where the sizes varied
      e.env = std::make_shared<const envelope>(std::move(env));
      e.envelope_shape = tr.shape_signature();
    }
  }
  if (old != nullptr) {
    // Threads replaying the old version finish their iterations on it; its slabs are
    // unmapped as they drain (slab_pool.h).
    plans_grown_.fetch_add(1, std::memory_order_relaxed);
    REPLAYALLOC_LOG(info, "'%s': plan grown to the envelope of its shapes", e.key.c_str());
    old->retire();
  }
  return true;
}

void engine::end_replay(domain_state& d) {
  replay_cursor& c = d.cursor;
  slab* s = c.current;
  plan_version* v = d.version;
  const std::uint32_t planned = v->plan.planned_slots;
  // Read now: once the slab goes back below, a retired version may be deleted; after
  // that `v` is only compared, never read.
  const bool from_file = v->from_file;
  const std::uint64_t misses = total_misses(c) - d.misses_at_begin;
  // A larger shape: at least two slots whose allocation outgrew them (slow_path.cc
  // counts them). One larger block among the same shapes is a deviation; a shape
  // change makes every allocation that scales with it larger.
  const bool grew = c.grown >= 2;
  const std::uint32_t handed = c.handed;
  bump(d.slab_hits, handed);
  bump(d.hit_bytes, c.hit_bytes);
  bump(d.frees, c.freed_here);
  // Stop replaying before the slab may go back to the pool.
  const std::int64_t pending = static_cast<std::int64_t>(c.handed) - c.freed_here;
  c.count = 0;
  c.next = 0;
  c.free_count = 0;
  c.free_next = 0;
  c.current = nullptr;
  c.base = nullptr;
  if (s->refs.fetch_add(pending, std::memory_order_acq_rel) + pending == 0) v->release(s);

  const std::uint64_t pct = opts_.deviation_percent;
  // An iteration whose requests outgrew their slots is a larger shape, not a deviation:
  // it grows the envelope (below); the recording that does so says whether the
  // program's structure changed too.
  const bool deviated = !grew && planned > 0 &&
                        (misses * 100 > pct * planned ||
                         std::uint64_t{planned - std::min(handed, planned)} * 100 > pct * planned);
  // Deviation is counted per thread: a thread whose every iteration deviates has a
  // program that changed; threads that deviate now and then, interleaved, do not.
  if (d.deviation_entry != d.entry) {
    d.deviation_entry = d.entry;
    d.deviating_in_a_row = 0;
  }
  d.deviating_in_a_row = deviated ? d.deviating_in_a_row + 1 : 0;
  d.last_deviated = deviated;
  key_entry& e = *d.entry;
  if (grew) {
    // The next iteration of the key records, and the envelope grows (Note
    // [Envelope]). The plan serves on meanwhile.
    std::lock_guard<std::mutex> lock(e.mu);
    if (e.version == v) e.grow_wanted = true;
    return;
  }
  if (!deviated && e.failures.load(std::memory_order_relaxed) != 0) {
    std::lock_guard<std::mutex> lock(e.mu);
    e.failures.store(0, std::memory_order_relaxed);
  }
  // A plan from a file the program does not follow goes at once (Note [Plan files]).
  const std::uint32_t replan_after = from_file ? 1 : opts_.replan_after;
  if (!deviated || replan_after == 0 || d.deviating_in_a_row < replan_after) return;
  d.deviating_in_a_row = 0;
  const char* why = from_file ? "its replayed iteration deviated"
                              : "its replayed iterations deviated REPLAYALLOC_REPLAN_AFTER times in a row";
  bool retire = false;
  {
    std::lock_guard<std::mutex> lock(e.mu);
    if (e.version == v) retire = drop_plan_locked(e, why) != nullptr;  // not replaced meanwhile
  }
  // `v` is still alive: a version leaves the key here, and only retire() may free it.
  if (retire) retire_dropped(e, v, from_file, why);
}

void* engine::alloc_slow(thread_state& t, std::size_t size, std::size_t align, bool zero) {
  if (!check::enabled() || in_engine()) return alloc_slow_unchecked(t, size, align, zero);
  unmask(t.host);
  void* p = alloc_slow_unchecked(t, size, align, zero);
  mask(t.host);  // the phase may have changed (auto mode begins and ends iterations)
  if (p != nullptr) check::on_alloc(p, size, t.op, t.thread_no, backend::in_slab_range(p));
  return p;
}

void engine::free_checked(thread_state& t, void* p) {
  register_thread(t);
  check::on_free(p, t.thread_no);
  if (backend::in_slab_range(p)) {
    unmask(t.host);
    replay_free(t.host.cursor, p, [](void* q) { return static_cast<slab*>(backend::chunk_owner(q)); });
    mask(t.host);
    return;
  }
  free_backend(t, p);
}

void* engine::alloc_slow_unchecked(thread_state& t, std::size_t size, std::size_t align, bool zero) {
  if (size > max_request_bytes) [[unlikely]] {
    errno = ENOMEM;
    return nullptr;
  }
  if (in_engine()) return zero ? backend::fallback_calloc(size) : backend::fallback_alloc(size, align);
  register_thread(t);
  // Below the minimum: never recorded, planned or watched (api.cc takes this path
  // before calling here when it can).
  if (size < t.min_size || size == 0) return alloc_below_min(t, size, align, zero);
  const bool watched = opts_.mode == run_mode::automatic;
  if (watched) auto_before_alloc(t, size);
  domain_state& d = t.host;
  if (d.ph == phase::replay) {
    void* p = replay_malloc(d.cursor, size, align, [](std::size_t n, std::size_t a, backend_kind) {
      return backend::fallback_alloc(n, a);
    });
    if (p == nullptr) {
      errno = ENOMEM;
    } else if (zero) {
      std::memset(p, 0, size);
    }
    return p;
  }
  void* p = zero && align <= malloc_align ? backend::fallback_calloc(size)
                                          : backend::fallback_alloc(size, align);
  if (p == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  if (zero && align > malloc_align) std::memset(p, 0, size);
  bump(d.backend_bytes, size);
  if (d.no_slab) {
    bump(d.no_slab_fallbacks);
  } else {
    bump(d.passthrough);
  }
  if (d.ph == phase::record) record_alloc(d, p, size, align);
  if (watched) auto_track(t, p, size);
  return p;
}

void engine::free_backend(thread_state& t, void* p) {
  if (!t.registered) [[unlikely]] register_thread(t);
  bump(t.host.frees);
  if (t.host.ph == phase::record && !in_engine()) record_free(t.host, p);
  if (t.autod != nullptr && !in_engine()) auto_untrack(t, p);
  backend::fallback_free(p);
}

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
      s.slab_bytes += e->slab_bytes;
      s.lower_bound_bytes += e->lower_bound_bytes;
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
  s.auto_rests = auto_rests_.load(std::memory_order_relaxed);
  s.recordings = recordings_.load(std::memory_order_relaxed);
  s.mapped_bytes = backend::mapped_slab_bytes();
  s.keys = keys;
  return s;
}

int engine::save_trace(std::string_view key, const std::string& path) {
  reentry_guard guard;
  std::shared_ptr<const trace> tr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = keys_.find(absl::string_view(key.data(), key.size()));
    if (it != keys_.end()) {
      std::lock_guard<std::mutex> elock(it->second->mu);
      tr = it->second->last_trace;
    }
  }
  if (tr == nullptr) {
    REPLAYALLOC_LOG(error, "save_trace: no recording of '%.*s' yet", static_cast<int>(key.size()),
                    key.data());
    return -1;
  }
  const absl::Status st = write_trace_file(*tr, path);
  if (!st.ok()) {
    REPLAYALLOC_LOG(error, "save_trace: %.*s", static_cast<int>(st.message().size()),
                    st.message().data());
    return -1;
  }
  return 0;
}

std::size_t format_stats_json(const Stats& s, char* buf, std::size_t cap) {
  auto u = [](std::uint64_t v) { return static_cast<unsigned long long>(v); };
  const int n = std::snprintf(
      buf, cap,
      "{\"allocations\":%llu,\"slab_hits\":%llu,\"fallbacks\":%llu,"
      "\"fallbacks_by_reason\":{\"size_mismatch\":%llu,\"beyond_plan\":%llu,"
      "\"overlap_live\":%llu,\"alignment\":%llu,\"no_slab\":%llu,\"too_large\":%llu},"
      "\"backend_planned\":%llu,\"passthrough\":%llu,\"below_min_size\":%llu,\"frees\":%llu,"
      "\"remote_frees\":%llu,"
      "\"invalid_frees\":%llu,\"double_frees\":%llu,\"bytes_from_slab\":%llu,"
      "\"bytes_from_backend\":%llu,\"iterations\":%llu,\"recordings\":%llu,\"plans\":%llu,"
      "\"rerecords\":%llu,\"plans_loaded\":%llu,\"plan_files_ignored\":%llu,"
      "\"plans_evicted\":%llu,\"plans_grown\":%llu,\"set_asides\":%llu,\"keys_given_up\":%llu,"
      "\"iterations_set_aside\":%llu,\"auto_rests\":%llu,\"slab_bytes\":%llu,\"lower_bound_bytes\":%llu,"
      "\"mapped_bytes\":%llu,\"keys\":%llu}",
      u(s.allocations), u(s.slab_hits), u(s.fallbacks), u(s.fallback_size_mismatch),
      u(s.fallback_beyond_plan), u(s.fallback_overlap_live), u(s.fallback_alignment),
      u(s.fallback_no_slab), u(s.fallback_too_large), u(s.backend_planned), u(s.passthrough), u(s.below_min_size), u(s.frees),
      u(s.remote_frees), u(s.invalid_frees), u(s.double_frees), u(s.bytes_from_slab),
      u(s.bytes_from_backend), u(s.iterations), u(s.recordings), u(s.plans), u(s.rerecords),
      u(s.plans_loaded), u(s.plan_files_ignored), u(s.plans_evicted), u(s.plans_grown),
      u(s.set_asides), u(s.keys_given_up), u(s.iterations_set_aside), u(s.auto_rests), u(s.slab_bytes), u(s.lower_bound_bytes), u(s.mapped_bytes), u(s.keys));
  return n < 0 ? 0 : static_cast<std::size_t>(n);
}

}  // namespace replayalloc::detail
