// replayalloc/trace/size_model.h: each allocation's size as a function of the shape,
// fitted from recordings of one structure at several shapes.
//
// Layer: trace (pure functions).
//
// Note [Predicted plans]
// ~~~~~~~~~~~~~~~~~~~~~~
// An envelope (Note [Envelope], trace.h) serves every shape up to the largest recorded.
// A larger one used to cost a recording: its requests outgrew their slots, the next
// iteration was recorded at the backend, and its envelope planned. With recordings at
// two or more shapes, the engine predicts instead:
//  * The shape is not known to the allocator (nothing says "sequence length 96"), but it
//    is seen in the sizes: the first allocation whose size differs between the
//    recordings is the model's parameter x (an input, a first activation: its size is
//    an affine function of the length or the batch).
//  * Every allocation's size is fitted as a polynomial in x through the recorded points,
//    of degree up to 2 (attention scores grow with the square of the length), at most
//    two less than the distinct x recorded: at least one recording more than the
//    polynomial was made through must be reproduced (within 16 bytes), every one must,
//    or there is no model. So a model needs three recorded shapes (a line, checked),
//    four for a square. Sizes that never changed are constants.
//  * When a replayed iteration outgrows its slots, the first request that outgrew one
//    gives x: its slot's fitted size is solved for the request. Only when that was the
//    iteration's first miss (every request before it met its own slot, so the slot is
//    the request's own: a request read as another slot's, because sizes coincide,
//    would give a wrong x); a slot whose size is constant, or does not grow with x,
//    cannot say either, and the key records as before.
//    The envelope is raised to the fitted sizes at x plus a quarter (Note [Growth
//    headroom]), never lowered, and planned at once, without recording: well under a
//    millisecond for an encoder's few hundred allocations (bench: the DynamicShapes unit
//    tests print the time).
// Which shapes the plan serves: every shape whose requests fit the raised capacities,
// i.e. up to x plus a quarter where the fit is right. Why it is safe: a prediction is
// only a capacity. A slot still serves a request only when it fits (invariant 7) and
// its bytes are free (invariant 1); a wrong prediction costs fallbacks (too_large) and
// then a recording, as before, never memory. The recordings kept for fitting are a
// handful of size vectors per regime (size_samples), bounded by max_size_samples and
// by max_sampled_allocations.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <vector>

namespace replayalloc {

inline constexpr std::size_t max_size_samples = 4;
inline constexpr std::size_t max_sampled_allocations = 1 << 16;

// The sizes of one recording of a structure, allocation by allocation.
using size_sample = std::vector<std::uint64_t>;

// Adds `s` to `samples` unless one with the same sizes is there; the oldest goes when
// there are max_size_samples. pre: every sample has s.size() entries.
void add_size_sample(std::vector<size_sample>& samples, const size_sample& s);

struct size_model {
  std::uint32_t param = 0;                    // the allocation whose size is x
  std::vector<std::array<double, 3>> coef;    // per allocation: c0 + c1*x + c2*x^2
  double x_max = 0;                           // the largest x recorded

  // Allocation i's size at x, rounded up to 64 bytes; at least 1.
  std::uint64_t size_at(std::size_t i, double x) const;
  // The x at which allocation i asks for `size`, when its fitted size grows with x
  // beyond x_max; nullopt otherwise (a constant slot, or one that shrinks).
  std::optional<double> solve(std::size_t i, std::uint64_t size) const;
};

// The model of `samples` (see the Note), or nullopt: fewer than three distinct x, or a
// fit that does not reproduce the recordings.
std::optional<size_model> fit_size_model(const std::vector<size_sample>& samples);

}  // namespace replayalloc
