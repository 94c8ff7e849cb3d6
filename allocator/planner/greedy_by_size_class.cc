// Greedy by size class: allocations by size class (powers of four, the largest class
// first), and within a class the longest lifetimes first (ties: the larger footprint,
// then the id).
//
// Note [Size classes, then lifetime]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// By size alone (Note [Why largest first]) a small allocation that lives over most of
// the trace is placed after every larger one, short-lived ones included; by then no
// gap is free over its whole lifetime and it goes on top. On a real trace with
// thousands of buffers live at once (bench/planner/iopddl/S_1.csv: 28,526 buffers)
// the slab by size is 1.0249x the lower bound and its top is set by buffers of 5 to
// 25 bytes that live over half the trace; the buffers of 100 KB and more alone end at
// 1.0022x. By lifetime alone the long-lived small buffers go first and fragment the
// bottom for the large ones (1.0298x there). Between the two: sizes in classes of
// [4^k, 4^(k+1)), the largest class first, so the large buffers still make the
// skeleton, and inside a class, where sizes differ by less than 4x, the longest
// lifetimes first, so a buffer placed late is short and finds a gap: 1.0005x on S_1
// (measured with lifetimes counted in positions instead of events: 1.0009x; classes of
// 2x: 1.0243x, as by size; of 8x: 1.0009x; of 16x: 1.0028x). On training
// steps recorded from real models (activations live from the forward pass to the
// backward) it is below size on three of four (ResNet-50, MobileNetV3, DenseNet-121;
// not BERT; breadth reaches the bound on all four), and where sizes repeat exactly
// (inference traces) it is often size's own order.
//
// "best" tries it first, then size: a run stops once its slab reaches the best so far,
// and by size the top is reached early (the largest go first) where by class it may
// come last (a large class's long buffers go before its short ones), so the other way
// round both run to their ends (S_1 at 8912846: best 375 ms that way, 244 ms this way). On traces
// small enough for best's searches it is a candidate beside them (Note [Best of
// orderings, then improve]).
#include <bit>

#include "planner/greedy.h"
#include "support/status.h"

namespace replayalloc {
namespace detail {

std::vector<std::uint32_t> order_by_size_class(const greedy_input& in) {
  const auto& all = in.tr->allocations;
  std::vector<order_key> keys;
  keys.reserve(in.plannable.size());
  for (const std::uint32_t i : in.plannable) {
    // floor(log4(footprint)); a slot of zero bytes is in the lowest class.
    const std::uint64_t size_class = in.footprint[i] == 0 ? 0 : (std::bit_width(in.footprint[i]) - 1) / 2;
    keys.push_back({~size_class, ~(all[i].free_at - all[i].alloc_at), ~in.footprint[i], i});
  }
  return sort_by_keys(in, keys);
}

}  // namespace detail

absl::StatusOr<placement> plan_greedy_by_size_class(const trace& t, const planner_options& o) {
  absl::StatusOr<detail::greedy_input> in = detail::prepare_greedy(t, o);
  REPLAYALLOC_RETURN_IF_ERROR(in.status());
  return detail::greedy_placement(*in, detail::order_by_size_class(*in), "greedy_by_size_class");
}

}  // namespace replayalloc
