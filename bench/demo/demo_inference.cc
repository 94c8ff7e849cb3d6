// bench/demo/demo_inference.cc: replayalloc's main job, shown without a framework.
//
// Until the PyTorch integration lands, this program stands in for an inference
// server: it runs a ResNet-18-shaped forward pass (batch 1, 224x224, float32) as a
// sequence of allocations, the way a CPU framework would make them:
//   * per conv: an output activation, a small tensor-metadata block that lives as
//     long as it, a small op-context block and a workspace, both freed when the op
//     ends; bn+relu run in place;
//   * residual blocks keep their input alive across two convs (and the 1x1
//     projection of the downsampling blocks);
//   * weights (and bn parameters) are allocated lazily by the first iteration and
//     kept: persistent blocks the plan must not contain;
//   * the logits outlive the iteration: the caller frees them at the start of the
//     next request (invariant 4: served by the backend, as planned).
// No arithmetic is done; instead every block is stamped when allocated (the op
// "writes its output") and checked just before its free. The program aborts with
// a message if any block was overwritten while live.
//
// The same pattern runs through three allocators, interleaved iteration by
// iteration (the order rotates): replayalloc (replayalloc_malloc/free inside a
// replayalloc::Iteration), glibc (__libc_malloc/__libc_free) and jemalloc (plain
// malloc/free, which jemalloc owns in this binary). Two modes, each N iterations:
//   full   every byte of every block written and checked (an op writing its
//          output: page faults and memory bandwidth included);
//   light  only the first and last 8 bytes of a block written and checked: the
//          allocator's own cost dominates.
// It prints the replayalloc statistics (hits, fallbacks, slab vs lower bound) and
// the median time per iteration per allocator and mode.
//
// Usage: demo_inference [iterations per mode, default 50]
#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "replayalloc/replayalloc.hpp"

extern "C" {
// glibc's allocator under its own names (jemalloc owns `malloc` in this binary).
void* __libc_malloc(std::size_t size);
void __libc_free(void* p);
}

namespace {

constexpr const char* kKey = "demo/resnet18/bs1";

// ---- The allocators compared -------------------------------------------------------

struct allocator_ops {
  const char* name;
  void* (*alloc)(std::size_t);
  void (*release)(void*);
  bool iterations;  // wrap each forward pass in a replayalloc::Iteration
};

const allocator_ops kReplay{"replayalloc", replayalloc_malloc, replayalloc_free, true};
const allocator_ops kGlibc{"glibc", __libc_malloc, __libc_free, false};
const allocator_ops kJemalloc{"jemalloc", std::malloc, std::free, false};

// ---- Blocks and their patterns -----------------------------------------------------

enum class touch { full, light };

struct block {
  void* p = nullptr;
  std::size_t size = 0;
  std::uint64_t tag = 0;
};

inline std::uint64_t word(std::uint64_t tag, std::size_t i) {
  return (tag * 0x9e3779b97f4a7c15ull) ^ (i * 0xff51afd7ed558ccdull);
}

// Writes the block's pattern: every 8-byte word (full), or the first and last one.
void stamp(const block& b, touch t) {
  auto* bytes = static_cast<unsigned char*>(b.p);
  const std::size_t words = b.size / 8;
  if (t == touch::full) {
    auto* w = static_cast<std::uint64_t*>(b.p);
    for (std::size_t i = 0; i < words; ++i) w[i] = word(b.tag, i);
  } else {
    const std::uint64_t first = word(b.tag, 0), last = word(b.tag, words - 1);
    std::memcpy(bytes, &first, 8);
    std::memcpy(bytes + (words - 1) * 8, &last, 8);
  }
}

// True when the pattern written by stamp() is intact.
bool intact(const block& b, touch t) {
  const auto* bytes = static_cast<const unsigned char*>(b.p);
  const std::size_t words = b.size / 8;
  if (t == touch::full) {
    const auto* w = static_cast<const std::uint64_t*>(b.p);
    for (std::size_t i = 0; i < words; ++i) {
      if (w[i] != word(b.tag, i)) return false;
    }
    return true;
  }
  std::uint64_t first, last;
  std::memcpy(&first, bytes, 8);
  std::memcpy(&last, bytes + (words - 1) * 8, 8);
  return first == word(b.tag, 0) && last == word(b.tag, words - 1);
}

// ---- The network ---------------------------------------------------------------------

constexpr std::size_t kFloat = 4;
constexpr std::size_t kTensorMeta = 192;  // a TensorImpl-sized block per tensor
constexpr std::size_t kOpContext = 48;    // per-op scratch (shape vectors, arguments)

struct tensor {
  block data;
  block meta;
  int c = 0, h = 0, w = 0;
};

// Runs the forward pass with one allocator; owns that allocator's weights.
class model_runner {
 public:
  explicit model_runner(const allocator_ops& ops) : ops_(ops) {}

  const allocator_ops& ops() const { return ops_; }
  std::uint64_t allocations() const { return allocations_; }
  std::uint64_t bytes() const { return bytes_; }

  // One request: frees the previous request's logits, then runs a forward pass.
  void request(touch t, int iteration) {
    t_ = t;
    iteration_ = iteration;
    release_tensor(output_);  // the caller consumed the previous output
    if (ops_.iterations) {
      replayalloc::Iteration it(kKey);
      output_ = forward();
    } else {
      output_ = forward();
    }
  }

  // Checks and frees what outlives the requests (the last logits, the weights).
  void finish() {
    t_ = touch::light;  // the last logits were stamped in light mode
    release_tensor(output_);
    t_ = touch::full;   // weights are always stamped in full
    for (block& b : weights_) release(b);
    weights_.clear();
  }

 private:
  block alloc(std::size_t size) {
    block b{ops_.alloc(size), size, ++next_tag_};
    if (b.p == nullptr) {
      std::fprintf(stderr, "demo_inference: %s: out of memory (%zu bytes)\n", ops_.name, size);
      std::exit(1);
    }
    stamp(b, t_);
    ++allocations_;
    bytes_ += size;
    return b;
  }

  void release(block& b) {
    if (b.p == nullptr) return;
    if (!intact(b, t_)) {
      std::fprintf(stderr,
                   "demo_inference: CORRUPTION: %s block #%" PRIu64 " (%zu bytes at %p) was "
                   "overwritten while live (iteration %d)\n",
                   ops_.name, b.tag, b.size, b.p, iteration_);
      std::abort();
    }
    ops_.release(b.p);
    b = block{};
  }

  tensor make_tensor(int c, int h, int w) {
    tensor x;
    x.meta = alloc(kTensorMeta);
    x.data = alloc(static_cast<std::size_t>(c) * h * w * kFloat);
    x.c = c;
    x.h = h;
    x.w = w;
    return x;
  }

  void release_tensor(tensor& x) {
    release(x.data);
    release(x.meta);
  }

  // Weights are made by the first pass that reaches layer `layer` and then kept.
  void ensure_weights(std::size_t layer, std::size_t weight_bytes, int channels) {
    if (layer < weights_.size() / 2) return;
    // Persistent blocks are stamped in full whatever the mode: they are checked at
    // the end, after both modes.
    const touch saved = t_;
    t_ = touch::full;
    weights_.push_back(alloc(weight_bytes));
    weights_.push_back(alloc(static_cast<std::size_t>(4) * channels * kFloat));  // bn
    t_ = saved;
  }

  // A conv (+ bn + relu in place): output, op context and workspace.
  tensor conv(const tensor& in, int cout, int k, int stride) {
    const std::size_t layer = layer_++;
    ensure_weights(layer, static_cast<std::size_t>(cout) * in.c * k * k * kFloat, cout);
    block ctx = alloc(kOpContext);
    const int h = (in.h + stride - 1) / stride, w = (in.w + stride - 1) / stride;
    tensor out = make_tensor(cout, h, w);
    // An im2col workspace computed in 8 row tiles.
    block ws = alloc(static_cast<std::size_t>(in.c) * k * k * h * w * kFloat / 8);
    release(ws);
    release(ctx);
    return out;
  }

  tensor max_pool(tensor& in) {
    block ctx = alloc(kOpContext);
    tensor out = make_tensor(in.c, in.h / 2, in.w / 2);
    release(ctx);
    release_tensor(in);
    return out;
  }

  // A basic residual block; consumes `x`.
  tensor basic_block(tensor& x, int cout, int stride) {
    tensor a = conv(x, cout, 3, stride);
    tensor b = conv(a, cout, 3, 1);
    release_tensor(a);
    if (stride != 1 || x.c != cout) {
      tensor shortcut = conv(x, cout, 1, stride);  // projection
      release_tensor(shortcut);                    // added into b
    }
    release_tensor(x);  // the residual input, alive across both convs
    return b;
  }

  tensor forward() {
    layer_ = 0;
    tensor input = make_tensor(3, 224, 224);  // the request, decoded
    tensor x = conv(input, 64, 7, 2);
    release_tensor(input);
    x = max_pool(x);
    const int stages[4][2] = {{64, 1}, {128, 2}, {256, 2}, {512, 2}};
    for (const auto& s : stages) {
      x = basic_block(x, s[0], s[1]);
      x = basic_block(x, s[0], 1);
    }
    block ctx = alloc(kOpContext);
    tensor pooled = make_tensor(x.c, 1, 1);
    release(ctx);
    release_tensor(x);
    ensure_weights(layer_++, static_cast<std::size_t>(1000) * pooled.c * kFloat, 1000);
    ctx = alloc(kOpContext);
    tensor logits = make_tensor(1000, 1, 1);
    release(ctx);
    release_tensor(pooled);
    return logits;  // outlives the iteration
  }

  const allocator_ops& ops_;
  touch t_ = touch::full;
  int iteration_ = 0;
  std::size_t layer_ = 0;
  std::uint64_t next_tag_ = 0;
  std::uint64_t allocations_ = 0;
  std::uint64_t bytes_ = 0;
  std::vector<block> weights_;  // weight, bn per layer
  tensor output_;
};

// ---- Report helpers ------------------------------------------------------------------

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// "12.3 ms" / "45.6 us".
void print_time(double seconds) {
  if (seconds >= 1e-3) std::printf("%10.3f ms", seconds * 1e3);
  else std::printf("%10.1f us", seconds * 1e6);
}

double mib(std::uint64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

}  // namespace

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 50;
  if (n < 5) {
    std::fprintf(stderr, "usage: %s [iterations per mode, >= 5; default 50]\n", argv[0]);
    return 2;
  }
  model_runner runners[3] = {model_runner(kReplay), model_runner(kGlibc), model_runner(kJemalloc)};
  // times[mode][runner][iteration]
  std::vector<double> times[2][3];
  int plan_after = -1;  // iteration (1-based) at whose end the plan was made
  replayalloc::Stats at_plan{};
  const touch modes[2] = {touch::full, touch::light};
  std::uint64_t allocs_first = 0, bytes_first = 0, allocs_steady = 0, bytes_steady = 0;

  for (int m = 0; m < 2; ++m) {
    for (int i = 0; i < n; ++i) {
      for (int k = 0; k < 3; ++k) {
        const int r = (i + k) % 3;  // rotate the order: no allocator always runs first
        model_runner& mr = runners[r];
        const std::uint64_t a0 = mr.allocations(), b0 = mr.bytes();
        const auto t0 = std::chrono::steady_clock::now();
        mr.request(modes[m], m * n + i + 1);
        const auto t1 = std::chrono::steady_clock::now();
        times[m][r].push_back(std::chrono::duration<double>(t1 - t0).count());
        if (r == 0 && m == 0 && i == 0) {
          allocs_first = mr.allocations() - a0;
          bytes_first = mr.bytes() - b0;
        }
        if (r == 0 && m == 0 && i == 1) {
          allocs_steady = mr.allocations() - a0;
          bytes_steady = mr.bytes() - b0;
        }
        if (r == 0 && plan_after < 0 && replayalloc::stats().plans > 0) {
          plan_after = m * n + i + 1;
          at_plan = replayalloc::stats();
        }
      }
    }
  }
  for (model_runner& mr : runners) mr.finish();
  const replayalloc::Stats end = replayalloc::stats();

  std::printf("replayalloc demo: a ResNet-18-shaped inference (batch 1, 224x224, float32)\n");
  std::printf("  %d iterations per mode (full touch, then light touch) per allocator, interleaved\n", n);
  std::printf("  per iteration: %" PRIu64 " allocations, %.1f MiB (the first also makes the weights: "
              "%" PRIu64 " allocations, %.1f MiB)\n",
              allocs_steady, mib(bytes_steady), allocs_first, mib(bytes_first));
  std::printf("  every block was stamped when allocated and checked before its free: no corruption\n\n");

  const std::uint64_t hits = end.slab_hits - at_plan.slab_hits;
  const std::uint64_t fallbacks = end.fallbacks - at_plan.fallbacks;
  std::printf("replayalloc (key \"%s\"):\n", kKey);
  std::printf("  iterations              %" PRIu64 "\n", end.iterations);
  std::printf("  allocations             %" PRIu64 "\n", end.allocations);
  std::printf("  slab hits               %" PRIu64 "\n", end.slab_hits);
  if (plan_after > 0) {
    std::printf("  warm-up                 %d iterations recorded, plan made at the end of iteration %d\n",
                plan_after, plan_after);
    std::printf("  after warm-up           %.2f%% of planned allocations served from the slab "
                "(%" PRIu64 " hits, %" PRIu64 " fallbacks)\n",
                hits + fallbacks ? 100.0 * static_cast<double>(hits) / static_cast<double>(hits + fallbacks) : 0.0,
                hits, fallbacks);
    std::printf("                          + %" PRIu64 " served by jemalloc as planned (outlive the iteration)\n",
                end.backend_planned - at_plan.backend_planned);
  } else {
    std::printf("  warm-up                 no plan was made (nothing replayed)\n");
  }
  std::printf("  fallbacks (all)         %" PRIu64 " (size %" PRIu64 ", beyond plan %" PRIu64
              ", overlap %" PRIu64 ", alignment %" PRIu64 ", no slab %" PRIu64 ")\n",
              end.fallbacks, end.fallback_size_mismatch, end.fallback_beyond_plan,
              end.fallback_overlap_live, end.fallback_alignment, end.fallback_no_slab);
  std::printf("  pass-through            %" PRIu64 " (recording iterations and what preceded the plan)\n",
              end.passthrough);
  std::printf("  slab                    %.2f MiB vs lower bound %.2f MiB (peak of live bytes): +%.1f%%\n",
              mib(end.slab_bytes), mib(end.lower_bound_bytes),
              end.lower_bound_bytes ? 100.0 * (static_cast<double>(end.slab_bytes) /
                                                   static_cast<double>(end.lower_bound_bytes) - 1)
                                    : 0.0);
  std::printf("  slab memory committed   %.2f MiB\n\n", mib(end.mapped_bytes));

  // Steady state: from the iteration after the plan on; the same iterations for all.
  const int first = plan_after > 0 ? plan_after : 1;
  std::printf("median time per iteration (full: iterations %d..%d; light: all %d)\n", first + 1, n, n);
  std::printf("  %-12s %13s %13s %16s\n", "allocator", "full touch", "light touch", "light per alloc");
  for (int r = 0; r < 3; ++r) {
    std::vector<double> full(times[0][r].begin() + std::min(first, n), times[0][r].end());
    const double light = median(times[1][r]);
    std::printf("  %-12s ", runners[r].ops().name);
    print_time(median(full));
    std::printf("   ");
    print_time(light);
    std::printf("   %10.1f ns\n", light * 1e9 / static_cast<double>(allocs_steady));
  }
  char json[2048];
  const std::size_t len = replayalloc_stats_json(json, sizeof json);
  std::printf("\nstats json: %.*s\n", static_cast<int>(std::min(len, sizeof json - 1)), json);
  return 0;
}
