#include "replay/compiled_plan.h"
#include "support/grow_table.h"

#include <algorithm>
#include <map>

namespace replayalloc::detail {

compiled_plan compile_plan(const trace& t, const placement& p, const planner_options& o,
                           const std::vector<bool>* managed,
                           const std::vector<std::uint64_t>* least, std::uint64_t min_size) {
  compiled_plan c;
  const auto& all = t.allocations;
  c.slots.resize(all.size());
  c.slab_bytes = p.slab_bytes;
  c.lower_bound_bytes = p.lower_bound_bytes;
  c.signature = t.signature();
  c.slot_align = o.slot_align;

  // Painting the slab in allocation order: `painted` maps the start of each covered
  // byte range to (its end, the latest slot that covered it). Ranges are disjoint.
  struct span {
    std::uint64_t end;
    std::uint32_t slot;
  };
  std::map<std::uint64_t, span> painted;
  std::vector<std::uint32_t> mine;
  std::vector<std::pair<std::uint64_t, span>> keep;
  for (std::uint32_t i = 0; i < all.size(); ++i) {
    slot& s = c.slots[i];
    s.size = all[i].size;
    s.least = std::max(least != nullptr && i < least->size() ? std::min((*least)[i], s.size) : s.size, min_size);
    s.offset = p.offsets[i];
    s.overlap_begin = static_cast<std::uint32_t>(c.overlaps.size());
    s.overlap_count = 0;
    s.offset_row = 0;
    s.free_rank = no_rank;
    s.need_rank = no_rank;
    if (s.offset == not_in_slab) {
      const bool m = managed != nullptr && i < managed->size() && (*managed)[i];
      s.offset_row = static_cast<std::uint32_t>(m ? backend_kind::managed : backend_kind::ordinary);
      continue;
    }
    ++c.planned_slots;
    c.planned_bytes += s.size;
    grow_for_insert(c.offset_rows);  // Note [Tables that grow before they insert]
    const auto [row, fresh] =
        c.offset_rows.emplace(s.offset, static_cast<std::uint32_t>(c.offset_rows.size()));
    s.offset_row = row->second;

    const std::uint64_t lo = s.offset, hi = s.offset + slot_footprint(all[i], o);
    mine.clear();
    keep.clear();
    auto it = painted.upper_bound(lo);
    if (it != painted.begin() && std::prev(it)->second.end > lo) --it;
    while (it != painted.end() && it->first < hi) {
      mine.push_back(it->second.slot);
      if (it->first < lo) keep.push_back({it->first, {lo, it->second.slot}});
      if (it->second.end > hi) keep.push_back({hi, {it->second.end, it->second.slot}});
      it = painted.erase(it);
    }
    for (const auto& k : keep) painted.emplace(k.first, k.second);
    painted.emplace(lo, span{hi, i});
    std::sort(mine.begin(), mine.end());
    mine.erase(std::unique(mine.begin(), mine.end()), mine.end());
    c.overlaps.insert(c.overlaps.end(), mine.begin(), mine.end());
    s.overlap_count = static_cast<std::uint32_t>(mine.size());
  }

  std::vector<std::uint32_t> by_free;
  for (std::uint32_t i = 0; i < all.size(); ++i) {
    if (c.slots[i].offset != not_in_slab) by_free.push_back(i);
  }
  std::sort(by_free.begin(), by_free.end(), [&](std::uint32_t x, std::uint32_t y) {
    return all[x].free_at != all[y].free_at ? all[x].free_at < all[y].free_at : x < y;
  });
  c.free_order.assign(by_free.begin(), by_free.end());
  for (std::uint32_t r = 0; r < c.free_order.size(); ++r) c.slots[c.free_order[r]].free_rank = r;
  c.row_begin.assign(c.offset_rows.size() + 1, 0);
  for (const slot& s : c.slots) {
    if (s.offset != not_in_slab) ++c.row_begin[s.offset_row + 1];
  }
  for (std::size_t r = 1; r < c.row_begin.size(); ++r) c.row_begin[r] += c.row_begin[r - 1];
  c.row_slots.resize(c.row_begin.back());
  {
    std::vector<std::uint32_t> fill(c.row_begin.begin(), c.row_begin.end() - 1);
    for (std::uint32_t i = 0; i < c.slots.size(); ++i) {
      if (c.slots[i].offset != not_in_slab) c.row_slots[fill[c.slots[i].offset_row]++] = i;
    }
  }
  for (slot& s : c.slots) {
    s.need_rank = 0;
    for (std::uint32_t k = 0; k < s.overlap_count; ++k) {
      const std::uint32_t rank = c.slots[c.overlaps[s.overlap_begin + k]].free_rank;
      if (rank == no_rank) {
        s.need_rank = no_rank;
        break;
      }
      s.need_rank = std::max(s.need_rank, rank + 1);
    }
  }
  return c;
}

}  // namespace replayalloc::detail
