// replayalloc/cli/minimalloc_csv.h: MiniMalloc's CSV, the interchange format of static
// memory allocation (DSA) solvers.
//
// Layer: cli (offline; above trace and planner). MiniMalloc (google/minimalloc, Moffitt,
// ASPLOS 2023) reads a problem as
//     id,lower,upper,size
// one buffer a row, alive over the half-open interval [lower, upper) (as a trace's
// [alloc_at, free_at): a buffer that ends at t and one that starts at t never meet),
// and writes its solution with a fifth column, `offset`. A problem read here becomes a
// trace (one allocation a row, sorted by lower; alignment 1, since the format has none:
// plan it with --slot-align 1 to solve exactly MiniMalloc's problem), and its offsets,
// when the file has them, a placement of that trace. Ids that are integers stay the
// allocations' ids; a file whose ids are not all integers (MiniMalloc's own example
// names them b1, b2, ...) gets ids 0, 1, ... in row order and keeps each name as the
// allocation's op tag. Never trusts its input: every error names the line.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "trace/trace.h"

namespace replayalloc::cli {

struct minimalloc_problem {
  trace tr;                            // allocations sorted by lower (alloc_at)
  std::vector<std::uint64_t> offsets;  // empty, or one per allocation of tr (the offset column)
};

// True when `text` begins with MiniMalloc's header ("id,lower,upper,size").
bool is_minimalloc_csv(std::string_view text);

absl::StatusOr<minimalloc_problem> decode_minimalloc_csv(std::string_view text);

// The allocations of `t` that do not outlive it, one row each in trace order: id,
// alloc_at, free_at, size. With `offsets` (one per allocation of t, as a placement's),
// the solution's form: an offset column too. Outliving allocations have no interval
// in MiniMalloc's model and are left out.
std::string encode_minimalloc_csv(const trace& t, const std::vector<std::uint64_t>* offsets = nullptr);

}  // namespace replayalloc::cli
