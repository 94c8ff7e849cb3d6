// The domain contract (runtime/domain.h) over the engine: each function is one or two
// engine calls, so a domain's sources need none of runtime/engine.h.
//
// Layer: runtime. Never on the hot path.
#include "runtime/domain.h"

#include <mutex>

#include "runtime/engine.h"
#include "runtime/stats.h"

namespace replayalloc::detail {

void domain_add_hooks(domain_thread_hook on_end, domain_thread_hook on_exit) {
  reentry_guard guard;
  domain_hooks h;
  h.on_end = on_end;
  h.on_exit = on_exit;
  engine::get().add_domain_hooks(h);
}

void domain_register(thread_state& t, domain_state& d, domain_kind kind) {
  if (d.registered) return;
  reentry_guard guard;
  engine& eng = engine::get();
  eng.register_thread(t);
  if (t.exited) return;  // a late call during the thread's exit: stay unregistered
  d.kind = kind;
  eng.register_domain(d);
}

void domain_unregister(domain_state& d) {
  reentry_guard guard;
  engine::get().unregister_domain(d);
}

std::string_view domain_host_key(const thread_state& t) {
  return t.entry != nullptr ? std::string_view(t.entry->key) : std::string_view("unnamed");
}

void domain_open(domain_state& d, std::string_view key, slab_source* source,
                 placement_adjuster adjust, void* adjust_arg, void* context) {
  reentry_guard guard;
  engine& eng = engine::get();
  key_entry* e = eng.entry_for(key, d.kind, source, adjust, adjust_arg);
  eng.domain_begin(d, e, context);
}

void domain_close(domain_state& d) {
  reentry_guard guard;
  engine::get().domain_end(d);
}

void domain_record_alloc(domain_state& d, const void* p, std::size_t size, std::size_t align) {
  engine::get().record_alloc(d, p, size, align);  // takes the guard
}

void domain_record_free(domain_state& d, const void* p) {
  engine::get().record_free(d, p);  // takes the guard
}

Stats domain_stats(domain_kind kind) {
  reentry_guard guard;
  return engine::get().stats(&kind);
}

std::size_t domain_stats_json(domain_kind kind, char* buf, std::size_t cap) {
  const Stats s = domain_stats(kind);
  char local[1];
  return format_stats_json(s, cap == 0 ? local : buf, cap == 0 ? 1 : cap);
}

}  // namespace replayalloc::detail
