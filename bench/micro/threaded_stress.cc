// bench/micro/threaded_stress.cc: the multi-threaded stress programs of classic
// allocator benchmark suites, under whatever allocator serves `malloc` (one process per
// allocator, LD_PRELOAD), so that auto mode's cost where nothing repeats is measured
// against the allocator it falls back to (issue 34, part 3; invariant 8 of
// allocator/DESIGN.md).
//
//   threaded_stress KIND THREADS OPS [MAX_SIZE]
//
// KIND:
//   larson    each thread keeps a window of 1,000 blocks of random sizes (16 B to
//             MAX_SIZE, log-uniform) and replaces a random one per step; after 10,000
//             steps it exits, and a new thread takes over the window of the previous
//             one in the ring (as larson's threads end and their successors inherit
//             their blocks), so most blocks are freed by a thread other than the one
//             that made them, and threads are short-lived;
//   rptest    each thread allocates a batch of 64 random sizes and frees the batch a
//             neighbour left in a shared slot (a lock-free exchange), rptest's
//             cross-thread pattern;
//   prodcons  half the threads allocate and push through a queue (one per pair), the
//             other half pop and free;
//   small     each thread on its own: a loop of 16-256 B blocks allocated and freed in
//             a ring of 64 (a small-object loop);
//   aligned   each thread on its own: blocks of random sizes (16 B to MAX_SIZE,
//             log-uniform) from posix_memalign(64), as libtorch's CPU allocator and ONNX
//             Runtime's make every tensor, in a window of 256 of which a random one is
//             replaced per step (a framework's op-by-op loop).
// MAX_SIZE defaults to 64 KiB (so that some requests are above REPLAYALLOC_MIN_SIZE and
// reach auto mode's watcher). A fixed seed per thread: every allocator sees the same
// requests. Each block has one byte written per 4 KiB. Prints the wall time, the CPU
// time (user + system), the peak RSS and a checksum (which must not depend on the
// allocator), and replayalloc's statistics when it is loaded.
#include <dlfcn.h>
#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

std::size_t g_max_size = 64 * 1024;
std::size_t g_align = 0;  // aligned: posix_memalign's alignment

std::size_t random_size(std::mt19937_64& rng) {
  // log-uniform from 16 B to g_max_size
  const double lo = std::log2(16.0), hi = std::log2(static_cast<double>(g_max_size));
  const double e = lo + (hi - lo) * static_cast<double>(rng() % 1000000) / 1e6;
  return static_cast<std::size_t>(std::exp2(e));
}

unsigned char* make(std::size_t size, std::uint64_t tag) {
  void* m = nullptr;
  if (g_align == 0) {
    m = std::malloc(size);
  } else if (posix_memalign(&m, g_align, size) != 0 || reinterpret_cast<std::uintptr_t>(m) % g_align != 0) {
    std::fprintf(stderr, "posix_memalign(%zu, %zu) failed or misaligned\n", g_align, size);
    std::exit(1);
  }
  auto* p = static_cast<unsigned char*>(m);
  if (p == nullptr) {
    std::fprintf(stderr, "out of memory\n");
    std::exit(1);
  }
  for (std::size_t k = 0; k < size; k += 4096) p[k] = static_cast<unsigned char>(tag);
  p[size - 1] = static_cast<unsigned char>(tag >> 8);
  return p;
}

struct block {
  unsigned char* p = nullptr;
  std::size_t size = 0;
};

std::uint64_t consume(block& b) {
  if (b.p == nullptr) return 0;
  const std::uint64_t v = b.p[0] + b.p[b.size - 1];
  std::free(b.p);
  b.p = nullptr;
  return v;
}

// larson: windows handed around the ring of threads; every round is run by new threads
// (as larson's threads end and start successors that inherit their blocks).
void larson(int threads, long ops, std::atomic<std::uint64_t>& sum) {
  constexpr int window = 1000;
  constexpr long round = 10000;
  std::vector<std::vector<block>> windows(threads, std::vector<block>(window));
  const long rounds = std::max<long>(1, ops / round);
  for (long r = 0; r < rounds; ++r) {
    std::vector<std::thread> ts;
    for (int t = 0; t < threads; ++t) {
      ts.emplace_back([&, t, r] {
        std::mt19937_64 rng(1000 + 7919 * r + t);
        std::uint64_t local = 0;
        std::vector<block>& w = windows[(t + r) % threads];  // the predecessor's window
        for (long i = 0; i < round; ++i) {
          block& b = w[rng() % window];
          local += consume(b);
          b.size = random_size(rng);
          b.p = make(b.size, rng());
        }
        sum += local;
      });
    }
    for (auto& th : ts) th.join();
  }
  for (auto& w : windows) {
    for (block& b : w) sum += consume(b);
  }
}

// rptest: batches exchanged through one slot per thread.
void rptest(int threads, long ops, std::atomic<std::uint64_t>& sum) {
  constexpr int batch = 64;
  struct slot {
    std::atomic<std::vector<block>*> full{nullptr};
    char pad[56];
  };
  std::vector<slot> slots(threads);
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t) {
    ts.emplace_back([&, t] {
      std::mt19937_64 rng(2000 + t);
      std::uint64_t local = 0;
      for (long i = 0; i < ops / batch; ++i) {
        auto* mine = new std::vector<block>(batch);
        for (block& b : *mine) {
          b.size = random_size(rng);
          b.p = make(b.size, rng());
        }
        // Leave ours for the next thread; free what the previous one left.
        std::vector<block>* old = slots[(t + 1) % threads].full.exchange(mine);
        if (old == nullptr) old = slots[t].full.exchange(nullptr);
        if (old != nullptr) {
          for (block& b : *old) local += consume(b);
          delete old;
        }
      }
      sum += local;
    });
  }
  for (auto& th : ts) th.join();
  for (slot& s : slots) {
    if (std::vector<block>* v = s.full.exchange(nullptr)) {
      for (block& b : *v) sum += consume(b);
      delete v;
    }
  }
}

// prodcons: pairs of threads, blocks passed through a bounded queue (a mutex and two
// condition variables).
void prodcons(int threads, long ops, std::atomic<std::uint64_t>& sum) {
  const int pairs = std::max(1, threads / 2);
  struct queue {
    std::mutex mu;
    std::condition_variable not_full, not_empty;
    std::vector<block> q;
    bool done = false;
  };
  std::vector<queue> qs(pairs);
  std::vector<std::thread> ts;
  for (int k = 0; k < pairs; ++k) {
    ts.emplace_back([&, k] {
      std::mt19937_64 rng(3000 + k);
      queue& q = qs[k];
      for (long i = 0; i < ops; ++i) {
        block b;
        b.size = random_size(rng);
        b.p = make(b.size, rng());
        std::unique_lock<std::mutex> lock(q.mu);
        q.not_full.wait(lock, [&] { return q.q.size() < 256; });
        q.q.push_back(b);
        if (q.q.size() == 64) q.not_empty.notify_one();
      }
      std::lock_guard<std::mutex> lock(q.mu);
      q.done = true;
      q.not_empty.notify_one();
    });
    ts.emplace_back([&, k] {
      std::uint64_t local = 0;
      queue& q = qs[k];
      std::vector<block> got;
      for (;;) {
        bool done;
        {
          std::unique_lock<std::mutex> lock(q.mu);
          q.not_empty.wait(lock, [&] { return q.q.size() >= 64 || q.done; });
          got.swap(q.q);
          done = q.done;
          q.not_full.notify_one();
        }
        for (block& b : got) local += consume(b);
        got.clear();
        if (done) {
          std::lock_guard<std::mutex> lock(q.mu);
          if (q.q.empty()) break;
        }
      }
      sum += local;
    });
  }
  for (auto& th : ts) th.join();
}

// small: each thread's own ring of small blocks.
void small(int threads, long ops, std::atomic<std::uint64_t>& sum) {
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t) {
    ts.emplace_back([&, t] {
      std::mt19937_64 rng(4000 + t);
      std::vector<block> ring(64);
      std::uint64_t local = 0;
      for (long i = 0; i < ops; ++i) {
        block& b = ring[i % 64];
        local += consume(b);
        b.size = 16 + rng() % 241;
        b.p = make(b.size, i);
      }
      for (block& b : ring) local += consume(b);
      sum += local;
    });
  }
  for (auto& th : ts) th.join();
}

// aligned: each thread's own window of aligned blocks, one replaced per step.
void aligned(int threads, long ops, std::atomic<std::uint64_t>& sum) {
  g_align = 64;
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t) {
    ts.emplace_back([&, t] {
      std::mt19937_64 rng(5000 + t);
      std::vector<block> window(256);
      std::uint64_t local = 0;
      for (long i = 0; i < ops; ++i) {
        block& b = window[rng() % 256];
        local += consume(b);
        b.size = random_size(rng);
        b.p = make(b.size, i);
      }
      for (block& b : window) local += consume(b);
      sum += local;
    });
  }
  for (auto& th : ts) th.join();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: threaded_stress larson|rptest|prodcons|small|aligned THREADS OPS [MAX_SIZE]\n");
    return 2;
  }
  const std::string kind = argv[1];
  const int threads = std::max(1, std::atoi(argv[2]));
  const long ops = std::atol(argv[3]);
  if (argc > 4) g_max_size = std::max<std::size_t>(32, std::strtoull(argv[4], nullptr, 10));
  std::atomic<std::uint64_t> sum{0};
  rusage r0{}, r1{};
  getrusage(RUSAGE_SELF, &r0);
  const auto t0 = std::chrono::steady_clock::now();
  if (kind == "larson") {
    larson(threads, ops, sum);
  } else if (kind == "rptest") {
    rptest(threads, ops, sum);
  } else if (kind == "prodcons") {
    prodcons(threads, ops, sum);
  } else if (kind == "small") {
    small(threads, ops, sum);
  } else if (kind == "aligned") {
    aligned(threads, ops, sum);
  } else {
    std::fprintf(stderr, "threaded_stress: unknown kind '%s'\n", kind.c_str());
    return 2;
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  getrusage(RUSAGE_SELF, &r1);
  auto secs = [](const timeval& a, const timeval& b) { return (b.tv_sec - a.tv_sec) + (b.tv_usec - a.tv_usec) / 1e6; };
  const double cpu = secs(r0.ru_utime, r1.ru_utime) + secs(r0.ru_stime, r1.ru_stime);
  std::printf("kind %s threads %d ops %ld\n", kind.c_str(), threads, ops);
  std::printf("wall_s %.4f\ncpu_s %.4f\nmaxrss_kib %ld\nchecksum %llu\n", wall, cpu, r1.ru_maxrss,
              static_cast<unsigned long long>(sum.load()));
  using stats_fn = std::size_t (*)(char*, std::size_t);
  if (auto stats = reinterpret_cast<stats_fn>(dlsym(RTLD_DEFAULT, "replayalloc_stats_json"))) {
    static char buf[8192];
    stats(buf, sizeof buf);
    std::printf("replayalloc %s\n", buf);
  }
  return 0;
}
