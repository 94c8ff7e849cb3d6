// The plan as torch.cuda.memory._snapshot()'s pickle: Note [Torch snapshot].
//
// The pickle is written by hand (a small protocol 2 subset: PROTO, EMPTY_DICT/SETITEMS,
// EMPTY_LIST/APPENDS, BININT*/LONG1, BINUNICODE, NEWTRUE/NEWFALSE, STOP), never read:
// no memo, every object written where it is used.
#include "cli/torch_snapshot.h"

#include <algorithm>
#include <string_view>
#include <vector>

namespace replayalloc::cli {
namespace {

class pickle_writer {
 public:
  pickle_writer() { out_ += "\x80\x02"; }  // PROTO 2

  void integer(std::uint64_t v) {
    if (v < 0x100) {
      out_ += 'K', out_ += static_cast<char>(v);  // BININT1
    } else if (v < 0x10000) {
      out_ += 'M', le(v, 2);  // BININT2
    } else if (v < 0x80000000ull) {
      out_ += 'J', le(v, 4);  // BININT: signed 32 bits
    } else {
      // LONG1: little-endian two's complement; a ninth byte keeps the top bit clear.
      const int n = v >> 63 ? 9 : 8;
      out_ += '\x8a', out_ += static_cast<char>(n), le(v, 8);
      if (n == 9) out_ += '\0';
    }
  }
  void string(std::string_view s) {
    out_ += 'X', le(s.size(), 4), out_ += s;  // BINUNICODE (UTF-8)
  }
  void boolean(bool b) { out_ += b ? '\x88' : '\x89'; }
  // A dict or a list: open, then key/value pairs or items, then close.
  void open_dict() { out_ += "}("; }    // EMPTY_DICT MARK
  void close_dict() { out_ += 'u'; }    // SETITEMS
  void open_list() { out_ += "]("; }    // EMPTY_LIST MARK
  void close_list() { out_ += 'e'; }    // APPENDS
  void key(std::string_view k) { string(k); }

  std::string finish() && {
    out_ += '.';  // STOP
    return std::move(out_);
  }

 private:
  void le(std::uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) out_ += static_cast<char>((v >> (8 * i)) & 0xff);
  }
  std::string out_;
};

// [{"name": op, "filename": key, "line": 0}]
void frames(pickle_writer& w, const trace& t, std::uint32_t op) {
  w.open_list();
  w.open_dict();
  w.key("name"), w.string(t.ops[op]);
  w.key("filename"), w.string(t.key.empty() ? "replayalloc" : t.key);
  w.key("line"), w.integer(0);
  w.close_dict();
  w.close_list();
}

void block(pickle_writer& w, std::uint64_t address, std::uint64_t size, std::uint64_t requested,
           const char* state, const trace* t, std::uint32_t op) {
  w.open_dict();
  w.key("address"), w.integer(address);
  w.key("size"), w.integer(size);
  w.key("requested_size"), w.integer(requested);
  w.key("state"), w.string(state);
  w.key("frames");
  if (t != nullptr) {
    frames(w, *t, op);
  } else {
    w.open_list(), w.close_list();
  }
  w.close_dict();
}

void trace_entry(pickle_writer& w, const char* action, std::uint64_t addr, std::uint64_t size,
                 std::uint64_t at, const trace& t, std::int64_t op) {
  w.open_dict();
  w.key("action"), w.string(action);
  w.key("addr"), w.integer(addr);
  w.key("size"), w.integer(size);
  w.key("stream"), w.integer(0);
  w.key("time_us"), w.integer(at);
  w.key("frames");
  if (op >= 0) {
    frames(w, t, static_cast<std::uint32_t>(op));
  } else {
    w.open_list(), w.close_list();
  }
  w.close_dict();
}

}  // namespace

std::string torch_snapshot_pickle(const trace& t, const placement& p, const trace_analysis& r,
                                  const planner_options& o) {
  // The slots live at the peak, by offset; and every slab allocation's two events.
  std::vector<std::size_t> at_peak;
  struct event {
    std::uint64_t at;
    bool alloc;  // frees first at one position
    std::size_t i;
  };
  std::vector<event> events;
  for (std::size_t i = 0; i < t.allocations.size(); ++i) {
    const trace_allocation& a = t.allocations[i];
    if (p.offsets[i] == not_in_slab || a.outlives()) continue;
    if (r.lower_bound_bytes > 0 && a.alloc_at <= r.peak_at && r.peak_at < a.free_at) at_peak.push_back(i);
    events.push_back({a.alloc_at, true, i});
    events.push_back({a.free_at, false, i});
  }
  std::sort(at_peak.begin(), at_peak.end(), [&](std::size_t x, std::size_t y) { return p.offsets[x] < p.offsets[y]; });
  std::sort(events.begin(), events.end(), [](const event& x, const event& y) {
    return x.at != y.at ? x.at < y.at : x.alloc != y.alloc ? !x.alloc : x.i < y.i;
  });

  pickle_writer w;
  w.open_dict();
  w.key("segments");
  w.open_list();
  if (p.slab_bytes > 0) {
    std::uint64_t allocated = 0, requested = 0;
    for (const std::size_t i : at_peak) {
      allocated += slot_footprint(t.allocations[i], o);
      requested += t.allocations[i].size;
    }
    w.open_dict();
    w.key("device"), w.integer(0);
    w.key("address"), w.integer(torch_snapshot_base);
    w.key("total_size"), w.integer(p.slab_bytes);
    w.key("allocated_size"), w.integer(allocated);
    w.key("active_size"), w.integer(allocated);
    w.key("requested_size"), w.integer(requested);
    w.key("stream"), w.integer(0);
    w.key("segment_type"), w.string("large");
    w.key("is_expandable"), w.boolean(false);
    w.key("frames"), w.open_list(), w.close_list();
    w.key("blocks");
    w.open_list();
    std::uint64_t end = 0;  // of the previous block, from the slab's start
    for (const std::size_t i : at_peak) {
      const trace_allocation& a = t.allocations[i];
      const std::uint64_t off = p.offsets[i], size = std::min(slot_footprint(a, o), p.slab_bytes - off);
      if (off > end) block(w, torch_snapshot_base + end, off - end, 0, "inactive", nullptr, 0);
      block(w, torch_snapshot_base + off, size, a.size, "active_allocated", &t, a.op);
      end = off + size;
    }
    if (end < p.slab_bytes) block(w, torch_snapshot_base + end, p.slab_bytes - end, 0, "inactive", nullptr, 0);
    w.close_list();
    w.close_dict();
  }
  w.close_list();

  w.key("device_traces");
  w.open_list();
  w.open_list();
  if (p.slab_bytes > 0) trace_entry(w, "segment_alloc", torch_snapshot_base, p.slab_bytes, 0, t, -1);
  for (const event& e : events) {
    const trace_allocation& a = t.allocations[e.i];
    const std::uint64_t addr = torch_snapshot_base + p.offsets[e.i], size = slot_footprint(a, o);
    if (e.alloc) {
      trace_entry(w, "alloc", addr, size, e.at, t, a.op);
    } else {
      trace_entry(w, "free_requested", addr, size, e.at, t, a.op);
      trace_entry(w, "free_completed", addr, size, e.at, t, a.op);
    }
  }
  w.close_list();
  w.close_list();
  w.close_dict();
  return std::move(w).finish();
}

}  // namespace replayalloc::cli
