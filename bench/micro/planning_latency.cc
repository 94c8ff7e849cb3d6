// bench/micro/planning_latency.cc: what the first iterations of a request stream cost
// (issue 30): the recorded ones, the one whose end makes the plan, and those after it,
// under whatever allocator serves `malloc` (one process per allocator and mode,
// LD_PRELOAD; bench/run_planning_latency.sh runs them side by side).
//
//   planning_latency ALLOCATIONS [ITERATIONS]   (default 12 iterations)
//
// Every iteration is one LLM request of exactly ALLOCATIONS allocations, the same in
// every iteration and every process: a prefill of 32 tokens, then decode steps until
// the count is reached. A step runs 12 layers of 20 allocations (hidden states of
// 4 KiB, FFN blocks of 16 KiB, attention scores that grow with the position, a few
// blocks under 4 KiB: the preload library's default REPLAYALLOC_MIN_SIZE), then
// 4 more (embedding, final norm, logits of 125 KiB, the sampled token). Each layer's K
// and V caches are concatenated every step (a new block one row longer, the old one
// freed), so the largest blocks grow with the step and live across steps, as do the
// sampled tokens; everything else is freed within its step. Allocations left over
// after the last whole step are scratch blocks freed at once. One byte in each 4 KiB
// page of every block is written; nothing else is computed, so the allocator's share
// of an iteration is far above a real model's.
//
// Each iteration is marked with replayalloc_iteration_begin/end of one key when those
// are found with dlsym (replayalloc preloaded), and skipped otherwise. Nothing waits
// for a plan made in the background (no replayalloc_wait_plans): the figures are what
// a request sees. Prints one line per iteration, "iteration I us T cpu_us C faults F"
// (I from 1; T the wall time in microseconds, steady_clock, begin and end included; C
// the calling thread's CPU time over the same span, CLOCK_THREAD_CPUTIME_ID: its own
// work, without the time it waited for a core, nor a planner thread's; F the calling
// thread's minor page faults over the span, getrusage(RUSAGE_THREAD)), and replayalloc's
// statistics ("stats {...}") when it is loaded.
#include <dlfcn.h>
#include <sys/resource.h>
#include <time.h>

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

constexpr int layers = 12;
constexpr int prompt = 32;                      // prefill tokens
constexpr std::size_t hidden = 4096;            // one token's hidden state (1,024 floats)
constexpr std::size_t kv_row = 1024;            // one token's K (or V) in one layer
constexpr std::size_t score_row = 128;          // one position's scores over 32 heads
constexpr std::size_t logits = 32000 * 4;       // the vocabulary's logits
constexpr long per_layer = 20;
constexpr long per_step = layers * per_layer + 4;

long thread_faults() {
  rusage u{};
  getrusage(RUSAGE_THREAD, &u);
  return u.ru_minflt;
}

long long thread_cpu_us() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<long long>(t.tv_sec) * 1000000 + t.tv_nsec / 1000;
}

class request {
 public:
  explicit request(long budget) : budget_(budget) {}

  // Runs the whole request; returns a checksum of bytes read back (so that nothing
  // is optimised away).
  unsigned long long run() {
    std::vector<unsigned char*> k(layers, nullptr), v(layers, nullptr);
    std::vector<unsigned char*> tokens;
    tokens.reserve(static_cast<std::size_t>(budget_ / per_step) + 1);
    for (int pos = prompt;; ++pos) {
      if (made_ + per_step > budget_) break;
      const std::size_t t = pos == prompt ? prompt : 1;  // tokens this step computes
      unsigned char* x = make(t * hidden);               // embedding
      for (int l = 0; l < layers; ++l) x = layer(x, k[l], v[l], t, static_cast<std::size_t>(pos));
      unsigned char* norm = make(t * hidden);
      drop(x);
      unsigned char* out = make(logits);
      drop(norm);
      tokens.push_back(make(16));  // the sampled token, kept to the end
      drop(out);
    }
    while (made_ < budget_) drop(make(hidden));  // the remainder: scratch blocks
    for (int l = 0; l < layers; ++l) {
      if (k[l] != nullptr) drop(k[l]);
      if (v[l] != nullptr) drop(v[l]);
    }
    for (unsigned char* p : tokens) drop(p);
    return sum_;
  }

 private:
  // One layer's 20 allocations for `t` new tokens at position `pos` (the tokens before
  // included); `x` is the layer's input, freed here; returns the layer's output.
  unsigned char* layer(unsigned char* x, unsigned char*& k, unsigned char*& v, std::size_t t,
                       std::size_t pos) {
    unsigned char* mask = make(64);                 // small: shape and mask metadata
    unsigned char* rope = make(t * 512);            // small in decode: rotary tables
    unsigned char* ln1 = make(t * hidden);
    unsigned char* q = make(t * hidden);
    unsigned char* k_new = make(t * kv_row);        // small in decode
    unsigned char* v_new = make(t * kv_row);
    drop(ln1);
    k = concat(k, k_new, pos);
    v = concat(v, v_new, pos);
    unsigned char* scores = make(t * pos * score_row);
    drop(q);
    unsigned char* work = make(t * pos * 16);       // softmax's workspace
    unsigned char* probs = make(t * pos * score_row);
    drop(work);
    drop(scores);
    unsigned char* ctx = make(t * hidden);
    drop(probs);
    unsigned char* proj = make(t * hidden);
    drop(ctx);
    unsigned char* resid1 = make(t * hidden);
    drop(proj);
    drop(x);
    unsigned char* ln2 = make(t * hidden);
    unsigned char* up = make(t * 4 * hidden);
    unsigned char* gate = make(t * 4 * hidden);
    drop(ln2);
    unsigned char* act = make(t * 4 * hidden);
    drop(up);
    drop(gate);
    unsigned char* down = make(t * hidden);
    drop(act);
    unsigned char* out = make(t * hidden);
    drop(down);
    drop(resid1);
    drop(rope);
    drop(mask);
    return out;
  }

  // The cache one step longer: a new block of `pos` rows; the old cache and the new
  // rows freed.
  unsigned char* concat(unsigned char* cache, unsigned char* rows, std::size_t pos) {
    unsigned char* grown = make(pos * kv_row);
    if (cache != nullptr) drop(cache);
    drop(rows);
    return grown;
  }

  unsigned char* make(std::size_t n) {
    auto* p = static_cast<unsigned char*>(std::malloc(n));
    if (p == nullptr) std::abort();
    for (std::size_t i = 0; i < n; i += 4096) p[i] = static_cast<unsigned char>(made_);
    ++made_;
    return p;
  }

  void drop(unsigned char* p) {
    sum_ += p[0];
    std::free(p);
  }

  const long budget_;
  long made_ = 0;
  unsigned long long sum_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::atol(argv[1]) < per_step) {
    std::fprintf(stderr, "usage: planning_latency ALLOCATIONS [ITERATIONS]   (ALLOCATIONS >= %ld)\n",
                 per_step);
    return 2;
  }
  const long allocations = std::atol(argv[1]);
  const int iterations = argc > 2 ? std::atoi(argv[2]) : 12;
  using begin_fn = int (*)(const char*);
  using end_fn = int (*)();
  using stats_fn = std::size_t (*)(char*, std::size_t);
  auto begin = reinterpret_cast<begin_fn>(dlsym(RTLD_DEFAULT, "replayalloc_iteration_begin"));
  auto end = reinterpret_cast<end_fn>(dlsym(RTLD_DEFAULT, "replayalloc_iteration_end"));
  auto stats = reinterpret_cast<stats_fn>(dlsym(RTLD_DEFAULT, "replayalloc_stats_json"));
  unsigned long long sum = 0;
  std::vector<long long> us(static_cast<std::size_t>(iterations)), cpu_us(us.size());
  std::vector<long> faults(us.size());
  for (int i = 0; i < iterations; ++i) {
    const long f0 = thread_faults();
    const long long c0 = thread_cpu_us();
    const auto t0 = std::chrono::steady_clock::now();
    if (begin != nullptr) begin("planning-latency");
    sum += request(allocations).run();
    if (end != nullptr) end();
    const auto t1 = std::chrono::steady_clock::now();
    const auto at = static_cast<std::size_t>(i);
    us[at] = std::chrono::duration_cast<std::chrono::microseconds>(t1 - t0).count();
    cpu_us[at] = thread_cpu_us() - c0;
    faults[at] = thread_faults() - f0;
  }
  // Printed after the last iteration, so that stdio's buffer is no allocation inside one.
  for (std::size_t i = 0; i < us.size(); ++i) {
    std::printf("iteration %zu us %lld cpu_us %lld faults %ld\n", i + 1, us[i], cpu_us[i], faults[i]);
  }
  std::printf("checksum %llu\n", sum);
  if (stats != nullptr) {
    std::string buf(stats(nullptr, 0) + 1, '\0');
    stats(buf.data(), buf.size());
    std::printf("stats %s\n", buf.c_str());
  }
  return 0;
}
