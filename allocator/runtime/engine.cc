#include "runtime/engine.h"

#include <pthread.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

#include "backend/backend.h"
#include "backend/slab_range.h"
#include "planner/planner.h"
#include "replay/compiled_plan.h"
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

void print_stats_at_exit() {
  const char* path = engine::get().opts().stats_path;
  char buf[4096];
  const std::size_t n = replayalloc_stats_json(buf, sizeof buf);
  const std::size_t len = n < sizeof buf ? n : sizeof buf - 1;
  if (std::strcmp(path, "stderr") == 0) {
    std::fwrite(buf, 1, len, stderr);
    std::fputc('\n', stderr);
    return;
  }
  reentry_guard guard;
  if (std::FILE* f = std::fopen(path, "w")) {
    std::fwrite(buf, 1, len, f);
    std::fputc('\n', f);
    std::fclose(f);
  } else {
    REPLAYALLOC_LOG(error, "REPLAYALLOC_STATS: cannot write '%s' (%s)", path, std::strerror(errno));
  }
}

std::uint64_t total_misses(const replay_cursor& c) {
  std::uint64_t n = 0;
  for (const auto& m : c.misses) n += m.load(std::memory_order_relaxed);
  return n;
}

void add_thread(Stats& s, const thread_state& t) {
  const replay_cursor& c = t.cursor;
  auto ld = [](const std::atomic<std::uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  s.slab_hits += ld(t.slab_hits);
  s.bytes_from_slab += ld(t.hit_bytes);
  s.passthrough += ld(t.passthrough);
  s.bytes_from_backend += ld(t.backend_bytes) + ld(c.miss_bytes);
  s.fallback_no_slab += ld(t.no_slab_fallbacks);
  s.fallback_size_mismatch += ld(c.misses[static_cast<unsigned>(miss_reason::size_mismatch)]);
  s.fallback_beyond_plan += ld(c.misses[static_cast<unsigned>(miss_reason::beyond_plan)]);
  s.fallback_overlap_live += ld(c.misses[static_cast<unsigned>(miss_reason::overlap_live)]);
  s.fallback_alignment += ld(c.misses[static_cast<unsigned>(miss_reason::alignment)]);
  s.backend_planned += ld(c.backend_planned);
  s.frees += ld(t.frees);
  s.remote_frees += ld(c.remote_frees);
  s.frees += ld(c.remote_frees);
  s.invalid_frees += ld(c.invalid_frees);
  s.double_frees += ld(c.double_frees);
  s.iterations += ld(t.iterations);
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
  if (opts_.mode != run_mode::off) slabs_ok_ = backend::reserve_slab_range(opts_.reserve_bytes);
  pthread_key_create(&g_exit_key, thread_exit_hook);
  if (opts_.stats_path[0] != '\0') std::atexit(print_stats_at_exit);
}

void engine::register_thread(thread_state& t) {
  if (t.registered || t.exited) return;
  reentry_guard guard;
  t.registered = true;
  t.min_size = opts_.min_size;
  t.cursor.resync_window = opts_.resync_window;
  pthread_setspecific(g_exit_key, &t);
  std::lock_guard<std::mutex> lock(mu_);
  t.thread_no = next_thread_no_++;
  t.next = threads_;
  if (threads_ != nullptr) threads_->prev = &t;
  threads_ = &t;
}

void engine::on_thread_exit(thread_state& t) {
  if (t.depth > 0) {
    t.depth = 1;
    end(t);
  }
  reentry_guard guard;
  if (t.recorder != nullptr) {
    t.recorder->~trace_recorder();
    backend::fallback_free(t.recorder);
    t.recorder = nullptr;
  }
  std::lock_guard<std::mutex> lock(mu_);
  add_thread(retired_, t);
  if (t.prev != nullptr) t.prev->next = t.next; else threads_ = t.next;
  if (t.next != nullptr) t.next->prev = t.prev;
  t.registered = false;
  t.exited = true;
}

key_entry* engine::entry_for(std::string_view key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = keys_.find(absl::string_view(key.data(), key.size()));
  if (it != keys_.end()) return it->second;
  void* mem = backend::fallback_alloc(sizeof(key_entry), alignof(key_entry));
  if (mem == nullptr) return nullptr;
  auto* e = new (mem) key_entry;
  e->key.assign(key.data(), key.size());
  keys_.emplace(e->key, e);
  return e;
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

int engine::begin(thread_state& t, const char* key) {
  if (key == nullptr || key[0] == '\0') {
    errno = EINVAL;
    return -1;
  }
  if (t.depth > 0) {
    ++t.depth;
    return REPLAYALLOC_NESTED;
  }
  register_thread(t);
  reentry_guard guard;
  t.depth = 1;
  t.ph = phase::none;
  t.no_slab = false;
  bump(t.iterations);
  if (opts_.mode == run_mode::off) return 0;
  key_entry* e = entry_for(key);
  if (e == nullptr) return 0;
  t.entry = e;
  plan_version* v = nullptr;
  {
    std::lock_guard<std::mutex> lock(e->mu);
    if (e->failed) return 0;
    if (e->version == nullptr) {
      if (e->recording) return 0;  // another thread records this key: pass through
      e->recording = true;
    } else if (slabs_ok_ && opts_.mode == run_mode::replay) {
      v = e->version;
    } else {
      return 0;
    }
  }
  if (v == nullptr) {
    if (t.recorder == nullptr) {
      void* mem = backend::fallback_alloc(sizeof(trace_recorder), alignof(trace_recorder));
      if (mem == nullptr) {
        std::lock_guard<std::mutex> lock(e->mu);
        e->recording = false;
        return 0;
      }
      t.recorder = new (mem) trace_recorder;
    }
    t.recorder->begin(t.thread_no);
    t.ph = phase::record;
    return 0;
  }
  // The version cannot be deleted under us: it is deleted only once retired and
  // without slabs, and acquire() refuses a retired version. A version retired between
  // our unlock and acquire() answers null here.
  const char* why = "";
  slab* s = v->acquire(opts_.max_slabs, opts_.prefault, &why);
  if (s == nullptr) {
    t.no_slab = true;
    REPLAYALLOC_LOG(info, "iteration of '%s' passes through: %s", key, why);
    return 0;
  }
  replay_cursor& c = t.cursor;
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
  t.version = v;
  t.misses_at_begin = total_misses(c);
  t.ph = phase::replay;
  return 0;
}

int engine::end(thread_state& t) {
  if (t.depth == 0) {
    errno = EINVAL;
    return -1;
  }
  if (--t.depth > 0) return REPLAYALLOC_NESTED;
  reentry_guard guard;
  if (t.ph == phase::record) end_record(t);
  if (t.ph == phase::replay) end_replay(t);
  t.ph = phase::none;
  t.entry = nullptr;
  t.version = nullptr;
  t.no_slab = false;
  return 0;
}

void engine::end_record(thread_state& t) {
  key_entry& e = *t.entry;
  trace tr = t.recorder->finish(e.key, [this](std::uint32_t id) {
    std::lock_guard<std::mutex> lock(mu_);
    return id < op_names_.size() ? op_names_[id] : std::string("unknown");
  });
  recordings_.fetch_add(1, std::memory_order_relaxed);
  const std::uint64_t sig = tr.signature();
  auto shared = std::make_shared<const trace>(std::move(tr));
  bool plan_now = false;
  {
    std::lock_guard<std::mutex> lock(e.mu);
    e.recording = false;
    ++e.recordings;
    e.same_in_a_row = (e.recordings > 1 && sig == e.last_signature) ? e.same_in_a_row + 1 : 1;
    e.last_signature = sig;
    e.last_trace = shared;
    plan_now = opts_.mode == run_mode::replay && e.version == nullptr && !e.failed &&
               (e.same_in_a_row >= opts_.record_iterations || e.recordings >= opts_.record_limit);
  }
  if (plan_now) make_plan(e, *shared);
}

void engine::make_plan(key_entry& e, const trace& tr) {
  planner_options po;
  po.slot_align = opts_.slot_align;
  absl::StatusOr<placement> p = plan_greedy_by_size(tr, po);
  absl::Status ok = p.ok() ? validate(tr, *p, po) : p.status();
  void* mem = ok.ok() ? backend::fallback_alloc(sizeof(plan_version), alignof(plan_version)) : nullptr;
  if (!ok.ok() || mem == nullptr) {
    REPLAYALLOC_LOG(error, "planning '%s' failed (%.*s); its iterations pass through to jemalloc",
                    e.key.c_str(), static_cast<int>(ok.message().size()), ok.message().data());
    std::lock_guard<std::mutex> lock(e.mu);
    e.failed = true;
    return;
  }
  auto* v = new (mem) plan_version;
  v->plan = compile_plan(tr, *p, po);
  v->key = e.key;
  v->id = plans_.fetch_add(1, std::memory_order_relaxed) + 1;
  REPLAYALLOC_LOG(info, "planned '%s': %zu allocations, slab %llu bytes, lower bound %llu bytes",
                  e.key.c_str(), tr.allocations.size(),
                  static_cast<unsigned long long>(p->slab_bytes),
                  static_cast<unsigned long long>(p->lower_bound_bytes));
  std::lock_guard<std::mutex> lock(e.mu);
  e.version = v;
  e.recordings = 0;
  e.same_in_a_row = 0;
  e.slab_bytes = p->slab_bytes;
  e.lower_bound_bytes = p->lower_bound_bytes;
}

void engine::end_replay(thread_state& t) {
  replay_cursor& c = t.cursor;
  slab* s = c.current;
  plan_version* v = t.version;
  const std::uint32_t planned = v->plan.planned_slots;
  const std::uint64_t misses = total_misses(c) - t.misses_at_begin;
  const std::uint32_t handed = c.handed;
  bump(t.slab_hits, handed);
  bump(t.hit_bytes, c.hit_bytes);
  bump(t.frees, c.freed_here);
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
  const bool deviated = planned > 0 && (misses * 100 > pct * planned ||
                                        std::uint64_t{planned - std::min(handed, planned)} * 100 > pct * planned);
  // Deviation is counted per thread: a thread whose every iteration deviates has a
  // program that changed; threads that deviate now and then, interleaved, do not.
  if (t.deviation_entry != t.entry) {
    t.deviation_entry = t.entry;
    t.deviating_in_a_row = 0;
  }
  t.deviating_in_a_row = deviated ? t.deviating_in_a_row + 1 : 0;
  if (!deviated || opts_.replan_after == 0 || t.deviating_in_a_row < opts_.replan_after) return;
  t.deviating_in_a_row = 0;
  key_entry& e = *t.entry;
  bool retire = false;
  {
    std::lock_guard<std::mutex> lock(e.mu);
    if (e.version == v) {  // not already replaced by another thread
      e.version = nullptr;
      e.recordings = 0;
      e.same_in_a_row = 0;
      e.slab_bytes = 0;
      e.lower_bound_bytes = 0;
      retire = true;
    }
  }
  if (retire) {
    rerecords_.fetch_add(1, std::memory_order_relaxed);
    REPLAYALLOC_LOG(info, "'%s' deviated from its plan %u iterations in a row; recording again",
                    e.key.c_str(), opts_.replan_after);
    v->retire();
  }
}

void* engine::alloc_slow(thread_state& t, std::size_t size, std::size_t align, bool zero) {
  if (size > max_request_bytes) [[unlikely]] {
    errno = ENOMEM;
    return nullptr;
  }
  if (in_engine()) return zero ? backend::fallback_calloc(size) : backend::fallback_alloc(size, align);
  register_thread(t);
  if (t.ph == phase::replay) {
    void* p;
    if (size < t.min_size || size == 0) {
      bump(t.passthrough);
      bump(t.backend_bytes, size);
      p = backend::fallback_alloc(size, align);
    } else {
      p = replay_malloc(t.cursor, size, align);
    }
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
  bump(t.backend_bytes, size);
  if (t.no_slab && size >= t.min_size && size > 0) {
    bump(t.no_slab_fallbacks);
  } else {
    bump(t.passthrough);
  }
  if (t.ph == phase::record && size >= t.min_size && size > 0) {
    reentry_guard guard;
    t.recorder->record_alloc(p, size, static_cast<std::uint32_t>(align), t.op);
  }
  return p;
}

void engine::free_backend(thread_state& t, void* p) {
  if (!t.registered) [[unlikely]] register_thread(t);
  bump(t.frees);
  if (t.ph == phase::record && !in_engine()) {
    reentry_guard guard;
    t.recorder->record_free(p);
  }
  backend::fallback_free(p);
}

Stats engine::stats() {
  reentry_guard guard;
  Stats s;
  std::vector<key_entry*> entries;
  {
    std::lock_guard<std::mutex> lock(mu_);
    s = retired_;
    for (thread_state* t = threads_; t != nullptr; t = t->next) add_thread(s, *t);
    for (const auto& [k, e] : keys_) entries.push_back(e);
  }
  for (key_entry* e : entries) {
    std::lock_guard<std::mutex> lock(e->mu);
    s.slab_bytes += e->slab_bytes;
    s.lower_bound_bytes += e->lower_bound_bytes;
  }
  s.fallbacks = s.fallback_size_mismatch + s.fallback_beyond_plan + s.fallback_overlap_live +
                s.fallback_alignment + s.fallback_no_slab;
  s.allocations = s.slab_hits + s.fallbacks + s.backend_planned + s.passthrough;
  s.plans = plans_.load(std::memory_order_relaxed);
  s.rerecords = rerecords_.load(std::memory_order_relaxed);
  s.recordings = recordings_.load(std::memory_order_relaxed);
  s.mapped_bytes = backend::mapped_slab_bytes();
  s.keys = entries.size();
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
      "\"overlap_live\":%llu,\"alignment\":%llu,\"no_slab\":%llu},"
      "\"backend_planned\":%llu,\"passthrough\":%llu,\"frees\":%llu,\"remote_frees\":%llu,"
      "\"invalid_frees\":%llu,\"double_frees\":%llu,\"bytes_from_slab\":%llu,"
      "\"bytes_from_backend\":%llu,\"iterations\":%llu,\"recordings\":%llu,\"plans\":%llu,"
      "\"rerecords\":%llu,\"slab_bytes\":%llu,\"lower_bound_bytes\":%llu,"
      "\"mapped_bytes\":%llu,\"keys\":%llu}",
      u(s.allocations), u(s.slab_hits), u(s.fallbacks), u(s.fallback_size_mismatch),
      u(s.fallback_beyond_plan), u(s.fallback_overlap_live), u(s.fallback_alignment),
      u(s.fallback_no_slab), u(s.backend_planned), u(s.passthrough), u(s.frees),
      u(s.remote_frees), u(s.invalid_frees), u(s.double_frees), u(s.bytes_from_slab),
      u(s.bytes_from_backend), u(s.iterations), u(s.recordings), u(s.plans), u(s.rerecords),
      u(s.slab_bytes), u(s.lower_bound_bytes), u(s.mapped_bytes), u(s.keys));
  return n < 0 ? 0 : static_cast<std::size_t>(n);
}

}  // namespace replayalloc::detail
