// Note [Predicted plans] (trace/size_model.h): the fit of sizes in the shape, and
// solving it for a request.
#include "trace/size_model.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace replayalloc {
namespace {

// An encoder-shaped iteration at length L: an input (L x 1 KiB), a fixed workspace,
// attention scores (4 x L^2 floats), an activation (L x 4 KiB).
size_sample encoder(std::uint64_t L) { return {L * 1024, 65536, 16 * L * L, L * 4096}; }

TEST(SizeModel, FitsLinesAndSquaresAndSolvesForTheLength) {
  std::vector<size_sample> s;
  add_size_sample(s, encoder(32));
  add_size_sample(s, encoder(64));
  add_size_sample(s, encoder(64));  // the same sizes: kept once
  EXPECT_EQ(s.size(), 2u);
  add_size_sample(s, encoder(48));
  EXPECT_FALSE(fit_size_model(s).has_value()) << "three shapes check a line; the scores are no line";
  add_size_sample(s, encoder(16));
  const std::optional<size_model> m = fit_size_model(s);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->param, 0u);  // the input: the first size that changes
  for (std::uint64_t L : {16, 100, 256}) {
    const size_sample want = encoder(L);
    const double x = static_cast<double>(L * 1024);
    for (std::size_t i = 0; i < want.size(); ++i) {
      const std::uint64_t rounded = (want[i] + 63) & ~std::uint64_t{63};
      EXPECT_EQ(m->size_at(i, x), rounded) << "allocation " << i << " at L=" << L;
    }
  }
  // The scores' slot outgrown by a request of 16 * 100^2 bytes: the length is 100.
  const std::optional<double> x = m->solve(2, 16 * 100 * 100);
  ASSERT_TRUE(x.has_value());
  EXPECT_NEAR(*x, 100 * 1024, 1e-6 * 100 * 1024);
  EXPECT_FALSE(m->solve(1, 70000).has_value()) << "a constant slot cannot say";
  EXPECT_FALSE(m->solve(3, 32 * 4096).has_value()) << "not beyond the largest length recorded";
}

TEST(SizeModel, ThreeShapesCheckALine) {
  // Without the scores every size is a line in the length: three shapes fit and check it.
  auto linear = [](std::uint64_t L) { return size_sample{L * 1024, 65536, L * 4096}; };
  EXPECT_FALSE(fit_size_model({linear(32), linear(64)}).has_value()) << "two shapes check nothing";
  const std::optional<size_model> m = fit_size_model({linear(32), linear(64), linear(48)});
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->size_at(2, 128 * 1024.0), 128u * 4096);
  EXPECT_EQ(m->size_at(1, 128 * 1024.0), 65536u);
}

TEST(SizeModel, RefusesWhatTheShapeDoesNotExplain) {
  EXPECT_FALSE(fit_size_model({encoder(32)}).has_value()) << "one shape";
  EXPECT_FALSE(fit_size_model({encoder(32), encoder(32)}).has_value()) << "one distinct shape";
  // Two samples at the same x that differ elsewhere: a second dimension changed.
  size_sample other = encoder(32);
  other[3] += 4096;
  EXPECT_FALSE(fit_size_model({encoder(32), other, encoder(64), encoder(48)}).has_value());
  // Four shapes that no parabola goes through.
  std::vector<size_sample> s = {encoder(16), encoder(32), encoder(64)};
  size_sample cubic = encoder(128);
  cubic[2] = 128ull * 128 * 128;
  s.push_back(cubic);
  EXPECT_FALSE(fit_size_model(s).has_value());
  // Samples of different lengths.
  EXPECT_FALSE(fit_size_model({encoder(32), size_sample{1, 2}}).has_value());
}

}  // namespace
}  // namespace replayalloc
