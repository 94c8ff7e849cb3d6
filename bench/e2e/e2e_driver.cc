// bench/e2e/e2e_driver.cc: one cell of the end-to-end benchmark: T threads x N
// inferences of one shared TorchScript module (or, with --train, T threads x N training
// steps, each thread training its own copy), under whatever allocator this process runs
// with; prints one JSON line.
//
//   e2e_driver --model M.pt --input M.input.pt --reference REF [--write-reference]
//              [--threads T] [--warmup W] [--iterations N] [--label NAME]
//              [--iterations-api none|explicit|torch] [--torch-lib libreplayalloc_torch.so]
//              [--lengths L1,L2,...]
//              [--train --target M.target.pt [--optimizer sgd|adam]] [--mark-timed]
//              [--callgrind-timed]
//
// The allocator is chosen outside the program (bench/e2e/run_e2e.py): nothing (glibc),
// LD_PRELOAD of jemalloc, tcmalloc, mimalloc or libreplayalloc_preload.so, or, with
// --iterations-api torch, replayalloc as libtorch's CPU allocator (the integration's
// shared library is dlopen'ed and installed; everything else stays on glibc).
//
// --iterations-api says how replayalloc learns where an inference starts and ends:
//   none      it is not told (plain allocators; the preload library's auto mode)
//   explicit  replayalloc_iteration_begin/end, found with dlsym(RTLD_DEFAULT) (the
//             preload library exports them), around each inference; the run fails
//             when they are not there
//   torch     replayalloc_torch_iteration_begin/end of the dlopen'ed integration
// The key is "e2e/<model file name>": every thread shares the plan, each replays on a
// slab of its own.
// --mark-timed: writes "e2e_driver: timed phase" to stderr between the warm-up and the
// timed phase (every thread's warm-up done), and at the end "e2e_driver: timed_ms"
// with every timed inference's latency, so that what the allocator logged in the timed
// phase (REPLAYALLOC_VERBOSE=3, Note [The iteration log]) can be told from the warm-up's
// (bench/e2e/tail_events.py); then "e2e_driver: timed_cpu_ms" and "timed_faults", the
// first thread's CPU time, minor page faults and slab hits for each of its timed
// inferences.
// --callgrind-timed: under `valgrind --tool=callgrind --instr-atstart=no`, instruments
// the timed phase only (CALLGRIND_START/STOP_INSTRUMENTATION; nothing natively), so that
// the run's counts are its timed inferences' (bench/run_alloc_instructions.sh); with
// --mark-timed too, a profile is dumped after each of the first thread's inferences
// (bench/run_first_replay.sh).
//
// What is measured: the threads start their W warm-up inferences together, wait at a
// barrier, then run their N timed inferences together. Throughput = T*N / the wall
// time of the timed phase; latency: p50 and p99 over all T*N timed inferences; CPU
// time (user + system) and minor page faults of the process over the timed phase,
// per inference; peak RSS of the whole process (VmHWM, weights included).
// Correctness: every output (warm-up and timed) is compared with the reference file
// (--write-reference writes it from the first output instead, and still checks the
// rest against it); any difference beyond 1e-4 relative fails the run (exit 1).
// Intra-op threads are set to 1 (torch::set_num_threads), so T is the parallelism.
//
// --lengths: shapes that change. Each inference takes the input's first L positions
// along dimension 1 (a sequence of token ids), L drawn per inference from the list by
// a fixed pseudo-random sequence per thread (the same in every run); the reference
// holds one output per length, stacked.
//
// --train: training steps instead of inferences (Note [Training cells]).
#include <dlfcn.h>
#include <sys/resource.h>
#include <time.h>

#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>  // no-ops unless run under callgrind
#define E2E_CALLGRIND_START() CALLGRIND_START_INSTRUMENTATION
#define E2E_CALLGRIND_STOP() CALLGRIND_STOP_INSTRUMENTATION
#define E2E_CALLGRIND_DUMP() CALLGRIND_DUMP_STATS
#else
#define E2E_CALLGRIND_START() ((void)0)
#define E2E_CALLGRIND_STOP() ((void)0)
#define E2E_CALLGRIND_DUMP() ((void)0)
#endif

#include <torch/script.h>
#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

namespace {

using clock_type = std::chrono::steady_clock;

// The calling thread's CPU time in ms: a first inference's cost that other processes
// on a shared machine do not inflate (with T = 1 the inference runs on that thread).
double thread_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}
// Thread 0's first timed inferences' CPU time (first_cpu_ms in the JSON line).
std::vector<double> g_first_cpu_ms;
// The calling thread's minor page faults so far (--mark-timed's timed_faults).
long thread_minor_faults() {
  rusage r{};
  getrusage(RUSAGE_THREAD, &r);
  return r.ru_minflt;
}
// --mark-timed: thread 0's CPU ms and minor faults for each timed inference (printed
// on stderr as timed_cpu_ms and timed_faults, beside timed_ms): what one inference
// costs, the first replayed one against the next (bench/run_first_replay.sh).
std::vector<double> g_timed_cpu_ms;
std::vector<long> g_timed_faults;
using begin_fn = int (*)(const char*);
using end_fn = int (*)();

struct options {
  std::string model, input, reference, label = "unnamed", api = "none", torch_lib;
  std::string target, optimizer = "sgd";  // --train only
  bool write_reference = false, train = false, mark_timed = false, callgrind_timed = false;
  int threads = 1, warmup = 5, iterations = 10;
  std::vector<std::int64_t> lengths;  // empty: the input as it is
};

[[noreturn]] void die(const std::string& msg) {
  std::fprintf(stderr, "e2e_driver: %s\n", msg.c_str());
  std::exit(2);
}

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) die("missing value after " + a);
      return argv[++i];
    };
    auto number = [&]() {
      const std::string v = value();
      char* end = nullptr;
      const long n = std::strtol(v.c_str(), &end, 10);
      if (end == v.c_str() || *end != '\0' || n < 0 || n > 1000000) die("bad number '" + v + "' for " + a);
      return static_cast<int>(n);
    };
    if (a == "--model") o.model = value();
    else if (a == "--input") o.input = value();
    else if (a == "--reference") o.reference = value();
    else if (a == "--write-reference") o.write_reference = true;
    else if (a == "--threads") o.threads = number();
    else if (a == "--warmup") o.warmup = number();
    else if (a == "--iterations") o.iterations = number();
    else if (a == "--label") o.label = value();
    else if (a == "--iterations-api") o.api = value();
    else if (a == "--torch-lib") o.torch_lib = value();
    else if (a == "--train") o.train = true;
    else if (a == "--mark-timed") o.mark_timed = true;
    else if (a == "--callgrind-timed") o.callgrind_timed = true;
    else if (a == "--target") o.target = value();
    else if (a == "--optimizer") o.optimizer = value();
    else if (a == "--lengths") {
      const std::string v = value();
      for (std::size_t at = 0; at < v.size();) {
        const std::size_t comma = std::min(v.find(',', at), v.size());
        const long n = std::strtol(v.substr(at, comma - at).c_str(), nullptr, 10);
        if (n < 1 || n > 100000) die("bad length in --lengths '" + v + "'");
        o.lengths.push_back(n);
        at = comma + 1;
      }
    }
    else die("unknown argument '" + a + "' (see the comment at the top of e2e_driver.cc)");
  }
  if (o.model.empty() || o.input.empty() || o.reference.empty()) die("--model, --input and --reference are required");
  if (o.threads < 1 || o.iterations < 1) die("--threads and --iterations must be at least 1");
  if (o.api != "none" && o.api != "explicit" && o.api != "torch") die("--iterations-api: none, explicit or torch");
  if (o.api == "torch" && o.torch_lib.empty()) die("--iterations-api torch needs --torch-lib");
  if (o.train && o.target.empty()) die("--train needs --target (make_models.py writes M.target.pt)");
  if (o.train && !o.lengths.empty()) die("--lengths is for inference cells, not --train");
  if (!o.train && !o.target.empty()) die("--target is for --train");
  if (o.optimizer != "sgd" && o.optimizer != "adam") die("--optimizer: sgd or adam");
  return o;
}

long status_kib(const char* field) {
  std::ifstream f("/proc/self/status");
  std::string line;
  const std::size_t n = std::strlen(field);
  while (std::getline(f, line)) {
    if (line.compare(0, n, field) == 0) return std::atol(line.c_str() + n + 1);
  }
  return -1;
}

double percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(pos);
  const std::size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

// The reference: dims, then float32 values, raw.
void save_reference(const std::string& path, const torch::Tensor& y) {
  const torch::Tensor c = y.to(torch::kFloat).contiguous();
  std::ofstream f(path, std::ios::binary);
  const std::int64_t dims = c.dim();
  f.write(reinterpret_cast<const char*>(&dims), sizeof dims);
  for (std::int64_t d : c.sizes()) f.write(reinterpret_cast<const char*>(&d), sizeof d);
  f.write(reinterpret_cast<const char*>(c.data_ptr<float>()), static_cast<std::streamsize>(c.numel() * sizeof(float)));
  if (!f) die("cannot write the reference " + path);
}

torch::Tensor load_reference(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) die("no reference at " + path + " (the glibc run writes it with --write-reference)");
  std::int64_t dims = 0;
  f.read(reinterpret_cast<char*>(&dims), sizeof dims);
  if (!f || dims < 0 || dims > 8) die("bad reference file " + path);
  std::vector<std::int64_t> sizes(static_cast<std::size_t>(dims));
  for (auto& d : sizes) f.read(reinterpret_cast<char*>(&d), sizeof d);
  torch::Tensor t = torch::empty(sizes, torch::kFloat);
  f.read(reinterpret_cast<char*>(t.data_ptr<float>()), static_cast<std::streamsize>(t.numel() * sizeof(float)));
  if (!f) die("truncated reference file " + path);
  return t;
}

struct check_state {
  std::mutex mu;
  torch::Tensor reference;
  long checked = 0, bit_identical = 0, wrong = 0;
  double max_abs_diff = 0;
};

// `which` >= 0: the output for length `which` of --lengths (the reference's row).
void check(check_state& s, const torch::Tensor& y, int which = -1) {
  const torch::Tensor c = y.to(torch::kFloat).contiguous();
  std::lock_guard<std::mutex> lock(s.mu);
  const torch::Tensor ref = which >= 0 ? s.reference[which] : s.reference;
  ++s.checked;
  if (c.sizes() != ref.sizes()) {
    ++s.wrong;
    return;
  }
  if (torch::equal(c, ref)) {
    ++s.bit_identical;
    return;
  }
  const double diff = (c - ref).abs().max().item<double>();
  s.max_abs_diff = std::max(s.max_abs_diff, diff);
  if (!torch::allclose(c, ref, 1e-4, 1e-5)) ++s.wrong;
}

// Which of --lengths inference i of thread t uses: splitmix64 of (t, i).
int length_index(int t, int i, std::size_t n) {
  std::uint64_t z = (static_cast<std::uint64_t>(t) << 32 | static_cast<std::uint32_t>(i)) + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return static_cast<int>((z ^ (z >> 31)) % n);
}

using stats_fn = std::size_t (*)(char*, std::size_t);

// An exception's message; a c10::Error's without its backtrace (run_e2e.py keeps the
// last lines of stderr, which a backtrace would fill).
const char* message(const std::exception& e) {
  if (const auto* c = dynamic_cast<const c10::Error*>(&e)) return c->what_without_backtrace();
  return e.what();
}

// The plan key: "e2e/<model file name>", shared by every thread of the cell.
std::string cell_key(const options& o) { return "e2e/" + o.model.substr(o.model.find_last_of('/') + 1); }

// replayalloc's slab hits so far, read from its statistics into a buffer of its own (no
// allocation between inferences, which auto mode would see); -1 without replayalloc.
long slab_hits_now(stats_fn stats) {
  static char buf[1 << 16];
  if (stats == nullptr) return -1;
  const std::size_t len = stats(buf, sizeof buf - 1);
  if (len == 0 || len >= sizeof buf - 1) return -1;
  buf[len] = '\0';
  const char* at = std::strstr(buf, "\"slab_hits\":");
  return at == nullptr ? -1 : std::strtol(at + 12, nullptr, 10);
}
// --mark-timed: the slab hits of each of thread 0's timed inferences (timed_slab_hits):
// which inference replayed first.
std::vector<long> g_timed_slab_hits;

// replayalloc's statistics as JSON, or "null" when this process runs without it.
std::string stats_json(stats_fn stats) {
  std::string json = "null";
  if (stats != nullptr) {
    std::vector<char> buf(1 << 16);
    const std::size_t len = stats(buf.data(), buf.size());
    if (len > 0 && len < buf.size()) json.assign(buf.data(), len);
  }
  return json;
}

// What the process spent over the timed phase.
struct timed_phase {
  double wall_s = 0, cpu_s = 0;
  long minor_faults = 0;
};

// Runs worker(t) for t = 0..threads-1 on threads of their own and measures the timed
// phase. pre: `sync` expects threads + 1 parties; every worker arrives twice (warm-up
// done, then timed phase starts), or arrive_and_drop()s for the arrivals it will not
// make (a worker that failed), so the phase never waits for a dead thread.
timed_phase run_workers(int threads, std::barrier<>& sync, const std::function<void(int)>& worker) {
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(worker, t);
  sync.arrive_and_wait();
  rusage r0{}, r1{};
  getrusage(RUSAGE_SELF, &r0);
  const auto t0 = clock_type::now();
  sync.arrive_and_wait();
  for (auto& th : pool) th.join();
  timed_phase p;
  p.wall_s = std::chrono::duration<double>(clock_type::now() - t0).count();
  getrusage(RUSAGE_SELF, &r1);
  auto secs = [](const timeval& tv) { return static_cast<double>(tv.tv_sec) + static_cast<double>(tv.tv_usec) * 1e-6; };
  p.cpu_s = secs(r1.ru_utime) - secs(r0.ru_utime) + secs(r1.ru_stime) - secs(r0.ru_stime);
  p.minor_faults = r1.ru_minflt - r0.ru_minflt;
  return p;
}

// Prints the cell's JSON line and returns its exit status (1 when an output differs
// from the reference). `all`: every timed inference's (or step's) milliseconds.
// `extra`: more keys (", \"k\": v"), placed before "iterations_api".
int print_line(const options& o, const std::string& key, const std::vector<double>& all, const timed_phase& p,
               const check_state& chk, const std::string& stats, const std::string& extra) {
  const double n = static_cast<double>(all.size());
  // The first thread's first timed inferences: where time to steady state shows.
  std::string first = "[";
  for (std::size_t i = 0; i < all.size() && i < 5 && i < static_cast<std::size_t>(o.iterations); ++i) {
    char v[32];
    std::snprintf(v, sizeof v, "%s%.4g", i > 0 ? ", " : "", all[i]);
    first += v;
  }
  first += "]";
  std::string first_cpu = "[";
  for (std::size_t i = 0; i < g_first_cpu_ms.size(); ++i) {
    char v[32];
    std::snprintf(v, sizeof v, "%s%.4g", i > 0 ? ", " : "", g_first_cpu_ms[i]);
    first_cpu += v;
  }
  first_cpu += "]";
  std::printf(
      "{\"label\": \"%s\", \"model\": \"%s\", \"threads\": %d, \"warmup\": %d, \"iterations\": %d, "
      "\"throughput\": %.6g, \"p50_ms\": %.6g, \"p99_ms\": %.6g, \"mean_ms\": %.6g, \"wall_s\": %.6g, "
      "\"cpu_ms_per_inference\": %.6g, \"minor_faults_per_inference\": %.6g, \"peak_rss_mib\": %.6g, "
      "\"outputs_checked\": %ld, \"outputs_bit_identical\": %ld, \"outputs_wrong\": %ld, \"max_abs_diff\": %.3g%s, "
      "\"first_ms\": %s, \"first_cpu_ms\": %s, \"iterations_api\": \"%s\", \"replayalloc\": %s}\n",
      o.label.c_str(), key.c_str() + 4, o.threads, o.warmup, o.iterations, n / p.wall_s, percentile(all, 0.5),
      percentile(all, 0.99), std::accumulate(all.begin(), all.end(), 0.0) / n, p.wall_s, 1e3 * p.cpu_s / n,
      static_cast<double>(p.minor_faults) / n, static_cast<double>(status_kib("VmHWM:")) / 1024.0, chk.checked,
      chk.bit_identical, chk.wrong, chk.max_abs_diff, extra.c_str(), first.c_str(), first_cpu.c_str(), o.api.c_str(), stats.c_str());
  std::fflush(stdout);
  if (chk.wrong > 0) {
    std::fprintf(stderr, "e2e_driver: %ld of %ld outputs differ from the reference (max |diff| %.3g)\n", chk.wrong,
                 chk.checked, chk.max_abs_diff);
    return 1;
  }
  return 0;
}

// Note [Training cells]
// ~~~~~~~~~~~~~~~~~~~~~
// --train: each of the T threads loads its own copy of the module (a step changes the
// weights, so threads cannot share one; make_models.py's train_* files are traced in
// training mode with parameters that require grad) and makes its own optimizer, then
// runs W warm-up and N timed steps, all of the same fixed batch (--input) towards the
// same fixed target (--target). A step: forward; loss (cross entropy when the target
// holds class indices, MSE when it holds floats); backward; optimizer step (sgd: lr
// 0.01, momentum 0.9; adam: lr 1e-4); zero_grad (libtorch 1.13's C++ zero_grad zeroes
// the gradients in place). One replayalloc iteration per step, around all of it; the
// loss is read and dropped inside it, so nothing a step makes outlives the step but the
// first step's optimizer state. Backward runs on the calling thread (CPU autograd).
// Timing and figures are the inference cells', per step (the keys' "inference" reads
// "step"). Correctness: the reference holds every step's loss and, last, a checksum of
// the trained parameters (the sum of their absolute values); every thread of every run
// must match it, bit-identical or within 1e-4 relative. It depends on W + N, so
// run_e2e.py keeps one reference per model and step count.
int run_training(const options& o, begin_fn begin, end_fn end, stats_fn stats) {
  const std::string key = cell_key(o);
  std::vector<torch::jit::script::Module> copies;
  torch::Tensor input, target;
  try {
    for (int t = 0; t < o.threads; ++t) copies.push_back(torch::jit::load(o.model));
    input = torch::jit::load(o.input).forward({}).toTensor();
    target = torch::jit::load(o.target).forward({}).toTensor();
  } catch (const c10::Error& e) {
    die(std::string("cannot load the model, its input or its target: ") + e.what_without_backtrace());
  }
  for (auto& m : copies) {
    m.train();
    for (const torch::Tensor& p : m.parameters()) {
      if (!p.requires_grad()) die(o.model + " is not trainable (a parameter without requires_grad): see make_models.py train_*");
    }
  }
  const bool classes = !torch::isFloatingType(target.scalar_type());
  const int steps = o.warmup + o.iterations;
  check_state chk;
  if (!o.write_reference) {
    chk.reference = load_reference(o.reference);
    if (chk.reference.dim() != 1 || chk.reference.size(0) != steps + 1) {
      die("the reference " + o.reference + " is not that of " + std::to_string(steps) + " steps (one per W + N)");
    }
  }

  const auto threads = static_cast<std::size_t>(o.threads);
  std::vector<std::vector<double>> ms(threads);
  std::vector<std::vector<float>> losses(threads);  // per step, then the checksum
  // Per thread, outside the worker: the checksum and the optimizer state's release
  // happen after the timed phase (run_workers measures until the threads end).
  std::vector<std::vector<torch::Tensor>> params(threads);
  std::vector<std::unique_ptr<torch::optim::Optimizer>> optimizers(threads);
  std::barrier<> sync(o.threads + 1);
  std::atomic<bool> failed{false};
  auto worker = [&](int t) {
    int passed = 0;  // barriers passed
    try {
      const auto u = static_cast<std::size_t>(t);
      torch::jit::script::Module& m = copies[u];
      for (const torch::Tensor& p : m.parameters()) params[u].push_back(p);
      std::unique_ptr<torch::optim::Optimizer>& optimizer = optimizers[u];
      if (o.optimizer == "adam") {
        optimizer = std::make_unique<torch::optim::Adam>(params[u], torch::optim::AdamOptions(1e-4));
      } else {
        optimizer = std::make_unique<torch::optim::SGD>(params[u], torch::optim::SGDOptions(0.01).momentum(0.9));
      }
      std::vector<torch::jit::IValue> in{input};
      auto step = [&] {
        if (begin != nullptr) begin(key.c_str());
        float value = 0;
        {
          const torch::Tensor y = m.forward(in).toTensor();
          const torch::Tensor loss =
              classes ? torch::nn::functional::cross_entropy(y, target) : torch::mse_loss(y, target);
          loss.backward();
          optimizer->step();
          optimizer->zero_grad();
          value = loss.item<float>();
        }
        if (end != nullptr) end();
        return value;
      };
      auto& mine = losses[u];
      mine.reserve(static_cast<std::size_t>(steps + 1));
      for (int i = 0; i < o.warmup; ++i) mine.push_back(step());
      sync.arrive_and_wait();  // warm-up done
      ++passed;
      if (o.mark_timed && t == 0) std::fprintf(stderr, "e2e_driver: timed phase\n");
      if (o.callgrind_timed && t == 0) E2E_CALLGRIND_START();
      sync.arrive_and_wait();  // timed phase starts
      ++passed;
      auto& times = ms[u];
      times.reserve(static_cast<std::size_t>(o.iterations));
      for (int i = 0; i < o.iterations; ++i) {
        const auto t0 = clock_type::now();
        mine.push_back(step());
        times.push_back(std::chrono::duration<double, std::milli>(clock_type::now() - t0).count());
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "e2e_driver: thread %d: %s\n", t, message(e));
      failed = true;
      if (passed < 2) sync.arrive_and_drop();
    }
  };
  const timed_phase phase = run_workers(o.threads, sync, worker);
  if (failed) return 2;
  const std::string replayalloc_stats = stats_json(stats);  // the steps', not the checks'

  torch::NoGradGuard no_grad;
  for (std::size_t t = 0; t < threads; ++t) {
    double checksum = 0;
    for (const torch::Tensor& p : params[t]) checksum += p.abs().sum().item<double>();
    losses[t].push_back(static_cast<float>(checksum));
  }
  if (o.write_reference) {
    chk.reference = torch::tensor(losses[0]);
    save_reference(o.reference, chk.reference);
  }
  for (const auto& mine : losses) {
    for (std::size_t i = 0; i < mine.size(); ++i) check(chk, torch::tensor(mine[i]), static_cast<int>(i));
  }
  std::vector<double> all;
  for (const auto& v : ms) all.insert(all.end(), v.begin(), v.end());
  const std::string extra =
      std::string(", \"mode\": \"train\", \"optimizer\": \"") + o.optimizer + "\", \"loss\": \"" +
      (classes ? "cross_entropy" : "mse") + "\"" + ", \"first_loss\": " + std::to_string(losses[0].front()) +
      ", \"last_loss\": " + std::to_string(losses[0][static_cast<std::size_t>(steps - 1)]);
  return print_line(o, key, all, phase, chk, replayalloc_stats, extra);
}

}  // namespace

int main(int argc, char** argv) {
  const options o = parse(argc, argv);
  torch::set_num_threads(1);

  begin_fn begin = nullptr;
  end_fn end = nullptr;
  if (o.api == "explicit") {
    begin = reinterpret_cast<begin_fn>(dlsym(RTLD_DEFAULT, "replayalloc_iteration_begin"));
    end = reinterpret_cast<end_fn>(dlsym(RTLD_DEFAULT, "replayalloc_iteration_end"));
    if (begin == nullptr || end == nullptr) die("--iterations-api explicit: replayalloc_iteration_begin/end not found (preload libreplayalloc_preload.so)");
  } else if (o.api == "torch") {
    void* h = dlopen(o.torch_lib.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) die(std::string("cannot dlopen ") + o.torch_lib + ": " + dlerror());
    auto install = reinterpret_cast<int (*)()>(dlsym(h, "replayalloc_torch_install"));
    begin = reinterpret_cast<begin_fn>(dlsym(h, "replayalloc_torch_iteration_begin"));
    end = reinterpret_cast<end_fn>(dlsym(h, "replayalloc_torch_iteration_end"));
    if (install == nullptr || begin == nullptr || end == nullptr) die(o.torch_lib + " lacks the replayalloc_torch_* functions");
    if (install() != 0) die("replayalloc_torch_install failed");
  }
  stats_fn stats = nullptr;
  if (o.api == "torch") {
    stats = reinterpret_cast<stats_fn>(dlsym(dlopen(o.torch_lib.c_str(), RTLD_NOW | RTLD_NOLOAD), "replayalloc_stats_json"));
  } else {
    stats = reinterpret_cast<stats_fn>(dlsym(RTLD_DEFAULT, "replayalloc_stats_json"));
  }
  if (o.train) return run_training(o, begin, end, stats);

  torch::jit::script::Module model, input_module;
  torch::Tensor input;
  try {
    model = torch::jit::load(o.model);
    model.eval();
    input_module = torch::jit::load(o.input);
    input = input_module.forward({}).toTensor();
  } catch (const c10::Error& e) {
    die(std::string("cannot load the model or its input: ") + e.what_without_backtrace());
  }

  check_state chk;
  if (!o.write_reference) chk.reference = load_reference(o.reference);
  const std::string key = cell_key(o);

  std::vector<std::vector<double>> ms(static_cast<std::size_t>(o.threads));
  std::barrier<> sync(o.threads + 1);
  std::atomic<bool> failed{false};
  std::mutex first_mu;
  bool have_reference = !o.write_reference;

  auto one = [&](std::vector<torch::jit::IValue>& in) {
    if (begin != nullptr) begin(key.c_str());
    torch::Tensor y = model.forward(in).toTensor();
    if (end != nullptr) end();
    return y;
  };
  const bool varlen = !o.lengths.empty();
  std::vector<torch::Tensor> inputs;  // per length (varlen), else the one input
  if (varlen) {
    for (std::int64_t l : o.lengths) {
      if (input.dim() < 2 || l > input.size(1)) die("--lengths: the input has no dimension 1 that long");
      inputs.push_back(input.narrow(1, 0, l).contiguous());
    }
  }
  auto worker = [&](int t) {
    int passed = 0;  // barriers passed
    try {
      torch::NoGradGuard no_grad;
      std::vector<torch::jit::IValue> in{input};
      auto run = [&](int i, int* which) {
        if (!varlen) return one(in);
        *which = length_index(t, i, inputs.size());
        std::vector<torch::jit::IValue> x{inputs[static_cast<std::size_t>(*which)]};
        return one(x);
      };
      {
        // The first outputs of the --write-reference run become the reference.
        std::lock_guard<std::mutex> lock(first_mu);
        if (!have_reference) {
          if (varlen) {
            std::vector<torch::Tensor> rows;
            for (const torch::Tensor& x : inputs) {
              std::vector<torch::jit::IValue> xi{x};
              rows.push_back(one(xi).to(torch::kFloat).contiguous().clone());
            }
            chk.reference = torch::stack(rows);
          } else {
            chk.reference = one(in).to(torch::kFloat).contiguous().clone();
          }
          save_reference(o.reference, chk.reference);
          have_reference = true;
        }
      }
      for (int i = 0; i < o.warmup; ++i) {
        int which = -1;
        torch::Tensor y = run(i, &which);
        check(chk, y, which);
      }
      sync.arrive_and_wait();  // warm-up done
      ++passed;
      if (o.mark_timed && t == 0) std::fprintf(stderr, "e2e_driver: timed phase\n");
      if (o.callgrind_timed && t == 0) E2E_CALLGRIND_START();
      sync.arrive_and_wait();  // timed phase starts
      ++passed;
      auto& mine = ms[static_cast<std::size_t>(t)];
      mine.reserve(static_cast<std::size_t>(o.iterations));
      for (int i = 0; i < o.iterations; ++i) {
        int which = -1;
        const auto t0 = clock_type::now();
        const bool per = t == 0 && (i < 5 || o.mark_timed);
        const double c0 = per ? thread_cpu_ms() : 0;
        const long f0 = per ? thread_minor_faults() : 0;
        const long h0 = t == 0 && o.mark_timed ? slab_hits_now(stats) : 0;
        torch::Tensor y = run(o.warmup + i, &which);
        mine.push_back(std::chrono::duration<double, std::milli>(clock_type::now() - t0).count());
        if (per) {
          const double c = thread_cpu_ms() - c0;
          if (i < 5) g_first_cpu_ms.push_back(c);
          if (o.mark_timed) {
            g_timed_cpu_ms.push_back(c);
            g_timed_faults.push_back(thread_minor_faults() - f0);
            g_timed_slab_hits.push_back(h0 < 0 ? -1 : slab_hits_now(stats) - h0);
            if (o.callgrind_timed) E2E_CALLGRIND_DUMP();  // one profile per inference
          }
        }
        check(chk, y, which);
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "e2e_driver: thread %d: %s\n", t, message(e));
      failed = true;
      if (passed < 2) sync.arrive_and_drop();  // a warm-up that failed must not hang the others
    }
  };

  const timed_phase phase = run_workers(o.threads, sync, worker);
  if (failed) return 2;

  if (o.callgrind_timed) E2E_CALLGRIND_STOP();
  std::vector<double> all;
  for (const auto& v : ms) all.insert(all.end(), v.begin(), v.end());
  if (o.mark_timed) {
    std::fprintf(stderr, "e2e_driver: timed_ms");
    for (double v : all) std::fprintf(stderr, " %.3f", v);
    std::fprintf(stderr, "\ne2e_driver: timed_cpu_ms");
    for (double v : g_timed_cpu_ms) std::fprintf(stderr, " %.3f", v);
    std::fprintf(stderr, "\ne2e_driver: timed_faults");
    for (long v : g_timed_faults) std::fprintf(stderr, " %ld", v);
    std::fprintf(stderr, "\ne2e_driver: timed_slab_hits");
    for (long v : g_timed_slab_hits) std::fprintf(stderr, " %ld", v);
    std::fprintf(stderr, "\n");
  }
  return print_line(o, key, all, phase, chk, stats_json(stats), "");
}
