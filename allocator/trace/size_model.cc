// Note [Predicted plans] (trace/size_model.h): the fit, and solving it for a request.
#include "trace/size_model.h"

#include <algorithm>
#include <cmath>

namespace replayalloc {

void add_size_sample(std::vector<size_sample>& samples, const size_sample& s) {
  if (std::find(samples.begin(), samples.end(), s) != samples.end()) return;
  if (samples.size() >= max_size_samples) samples.erase(samples.begin());
  samples.push_back(s);
}

namespace {

// The polynomial of degree points.size() - 1 (at most 2) through `points` (t, y), in
// monomial form.
std::array<double, 3> through(const std::vector<std::pair<double, double>>& p) {
  std::array<double, 3> c{0, 0, 0};
  if (p.size() == 1) {
    c[0] = p[0].second;
  } else if (p.size() == 2) {
    c[1] = (p[1].second - p[0].second) / (p[1].first - p[0].first);
    c[0] = p[0].second - c[1] * p[0].first;
  } else {
    // Lagrange basis, expanded: y_j * (t - a)(t - b) / ((t_j - a)(t_j - b)).
    for (int j = 0; j < 3; ++j) {
      const double tj = p[j].first;
      const double a = p[(j + 1) % 3].first;
      const double b = p[(j + 2) % 3].first;
      const double w = p[j].second / ((tj - a) * (tj - b));
      c[2] += w;
      c[1] -= w * (a + b);
      c[0] += w * a * b;
    }
  }
  return c;
}

double eval(const std::array<double, 3>& c, double t) { return c[0] + t * (c[1] + t * c[2]); }

}  // namespace

std::optional<size_model> fit_size_model(const std::vector<size_sample>& samples) {
  if (samples.size() < 2) return std::nullopt;
  const std::size_t n = samples[0].size();
  for (const size_sample& s : samples) {
    if (s.size() != n) return std::nullopt;
  }
  // The parameter: the first allocation whose size differs between the samples.
  std::size_t param = n;
  for (std::size_t i = 0; i < n && param == n; ++i) {
    for (const size_sample& s : samples) {
      if (s[i] != samples[0][i]) {
        param = i;
        break;
      }
    }
  }
  if (param == n) return std::nullopt;
  // Distinct x, in the order met; samples at the same x must agree everywhere (else x
  // does not determine the shape: two dimensions change independently).
  std::vector<std::size_t> at;  // one sample per distinct x
  for (std::size_t j = 0; j < samples.size(); ++j) {
    auto same = std::find_if(at.begin(), at.end(), [&](std::size_t k) { return samples[k][param] == samples[j][param]; });
    if (same == at.end()) {
      at.push_back(j);
    } else if (samples[*same] != samples[j]) {
      return std::nullopt;
    }
  }
  size_model m;
  m.param = static_cast<std::uint32_t>(param);
  for (std::size_t j : at) m.x_max = std::max(m.x_max, static_cast<double>(samples[j][param]));
  // One recorded shape more than the degree needs checks the fit.
  if (at.size() < 3) return std::nullopt;
  const std::size_t degree = std::min<std::size_t>(2, at.size() - 2);
  m.coef.resize(n);
  std::vector<std::pair<double, double>> pts;
  for (std::size_t i = 0; i < n; ++i) {
    pts.clear();
    for (std::size_t k = 0; k <= degree; ++k) {
      const size_sample& s = samples[at[k]];
      pts.emplace_back(static_cast<double>(s[param]) / m.x_max, static_cast<double>(s[i]));
    }
    // A size that never changed stays a constant, whatever the degree.
    const bool constant = std::all_of(samples.begin(), samples.end(), [&](const size_sample& s) { return s[i] == samples[0][i]; });
    if (constant) pts.resize(1);
    m.coef[i] = through(pts);
    // Points beyond those the polynomial was made through check it.
    for (std::size_t k = degree + 1; k < at.size(); ++k) {
      const size_sample& s = samples[at[k]];
      const double y = eval(m.coef[i], static_cast<double>(s[param]) / m.x_max);
      if (std::fabs(y - static_cast<double>(s[i])) > 16.0) return std::nullopt;
    }
  }
  return m;
}

std::uint64_t size_model::size_at(std::size_t i, double x) const {
  const double y = eval(coef[i], x / x_max);
  if (!(y >= 1)) return 1;  // also NaN
  if (y >= 0x1p62) return std::uint64_t{1} << 62;
  return (static_cast<std::uint64_t>(std::ceil(y)) + 63) & ~std::uint64_t{63};
}

std::optional<double> size_model::solve(std::size_t i, std::uint64_t size) const {
  const std::array<double, 3>& c = coef[i];
  const double y = static_cast<double>(size);
  // Grows past the largest x recorded: f'(1) > 0, and f(t) = y for some t >= 1.
  if (!(c[1] + 2 * c[2] > 0) || y < eval(c, 1.0)) return std::nullopt;
  double t = 0;
  if (std::fabs(c[2]) < 1e-12 * std::max(1.0, std::fabs(c[1]))) {
    t = (y - c[0]) / c[1];
  } else {
    const double disc = c[1] * c[1] - 4 * c[2] * (c[0] - y);
    if (disc < 0) return std::nullopt;
    // The root on the side where f grows: f'(t) = c1 + 2 c2 t > 0.
    t = (-c[1] + std::sqrt(disc)) / (2 * c[2]);
    if (c[1] + 2 * c[2] * t <= 0) t = (-c[1] - std::sqrt(disc)) / (2 * c[2]);
  }
  if (!(t >= 1.0) || !std::isfinite(t)) return std::nullopt;
  return t * x_max;
}

}  // namespace replayalloc
