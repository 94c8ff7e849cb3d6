// Large-model support and the CUDA options (large_model.h).
//
// Layer: integration (cuda), over runtime/domain.h. Owns: the options in force (under
// g_opts_mu) and the set of managed blocks (under g_managed_mu, counted so that a free
// of any other device block takes no lock).
//
// Note [Large-model support]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// When a device plan's slab would exceed the budget, the allocations at least
// REPLAYALLOC_CUDA_LMS_THRESHOLD large are taken out of the slab and served from
// managed (or pinned host) memory, as Caffe's LMS treats GPU memory as a cache of host
// memory; the rest is planned again into a smaller slab.
#include "large_model.h"

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "runtime/domain.h"
#include "runtime_table.h"

namespace replayalloc::detail {
namespace {

// ---- Options -----------------------------------------------------------------

std::mutex g_opts_mu;
bool g_opts_set = false;
cuda::options g_cuda_opts;

// ---- Managed (large-model support) blocks -------------------------------------

std::mutex g_managed_mu;
absl::flat_hash_set<void*> g_managed;  // blocks to free with cudaFree / cudaFreeHost
std::atomic<std::size_t> g_managed_count{0};

bool take_managed(void* p) {
  if (g_managed_count.load(std::memory_order_acquire) == 0) return false;
  std::lock_guard<std::mutex> lock(g_managed_mu);
  if (g_managed.erase(p) == 0) return false;
  g_managed_count.fetch_sub(1, std::memory_order_release);
  return true;
}

}  // namespace

cuda::options cuda_options() {
  std::lock_guard<std::mutex> lock(g_opts_mu);
  if (!g_opts_set) {
    const options& o = process_options();
    g_cuda_opts.budget_bytes = o.cuda_budget_bytes;
    g_cuda_opts.budget_fraction = o.cuda_budget_fraction;
    g_cuda_opts.lms_threshold = o.cuda_lms_threshold;
    g_cuda_opts.lms_pinned = o.cuda_lms_pinned;
    g_opts_set = true;
  }
  return g_cuda_opts;
}

void set_cuda_options(const cuda::options& o) {
  std::lock_guard<std::mutex> lock(g_opts_mu);
  g_cuda_opts = o;
  g_opts_set = true;
}

// ---- Large-model support --------------------------------------------------------

const char* lms_adjust(const trace& t, placement& p, void*) {
  const cuda::options o = cuda_options();
  std::uint64_t budget = o.budget_bytes;
  if (budget == 0 && o.budget_fraction > 0) {
    std::size_t free_b = 0, total_b = 0;
    if (cuda_rt().mem_get_info(&free_b, &total_b) != cudaSuccess) {
      cuda_rt().get_last_error();
      return nullptr;
    }
    budget = static_cast<std::uint64_t>(o.budget_fraction * static_cast<double>(total_b));
  }
  if (budget == 0 || p.slab_bytes <= budget) return nullptr;

  trace rest;
  rest.key = t.key;
  rest.ops = t.ops;
  rest.events = t.events;
  std::vector<std::size_t> kept;
  std::uint64_t moved = 0, moved_bytes = 0;
  for (std::size_t i = 0; i < t.allocations.size(); ++i) {
    if (p.offsets[i] == not_in_slab) continue;
    if (t.allocations[i].size >= o.lms_threshold) {
      p.offsets[i] = not_in_slab;
      ++moved;
      moved_bytes += t.allocations[i].size;
    } else {
      kept.push_back(i);
      rest.allocations.push_back(t.allocations[i]);
    }
  }
  const std::uint64_t before = p.slab_bytes;
  planner_options po;
  po.slot_align = process_options().slot_align;
  absl::StatusOr<placement> q = plan_greedy_by_size(rest, po);
  if (!q.ok()) return "large-model support could not plan the remaining allocations";
  for (std::size_t k = 0; k < kept.size(); ++k) p.offsets[kept[k]] = q->offsets[k];
  p.slab_bytes = q->slab_bytes;
  static thread_local char msg[320];
  std::snprintf(msg, sizeof msg,
                "large-model support: the slab needed %llu MiB for a budget of %llu MiB; %llu "
                "allocations of at least %llu bytes (%llu MiB) now use %s memory, the slab %llu MiB%s",
                static_cast<unsigned long long>(before >> 20),
                static_cast<unsigned long long>(budget >> 20),
                static_cast<unsigned long long>(moved),
                static_cast<unsigned long long>(o.lms_threshold),
                static_cast<unsigned long long>(moved_bytes >> 20),
                o.lms_pinned ? "pinned host" : "managed",
                static_cast<unsigned long long>(p.slab_bytes >> 20),
                p.slab_bytes > budget ? " (still above the budget: lower the threshold)" : "");
  return msg;
}

// ---- Managed blocks -------------------------------------------------------------

cudaError_t managed_alloc(void** p, std::size_t size) {
  const cuda_runtime_table& rt = cuda_rt();
  const cudaError_t err = cuda_options().lms_pinned ? rt.host_alloc(p, size, cudaHostAllocDefault)
                                                    : rt.malloc_managed(p, size, cudaMemAttachGlobal);
  if (err == cudaSuccess) {
    reentry_guard guard;
    std::lock_guard<std::mutex> lock(g_managed_mu);
    g_managed.insert(*p);
    g_managed_count.fetch_add(1, std::memory_order_release);
  }
  return err;
}

bool managed_free(void* p) {
  if (!take_managed(p)) return false;
  const cuda_runtime_table& rt = cuda_rt();
  if (cuda_options().lms_pinned) rt.free_host(p); else rt.free(p);
  return true;
}

}  // namespace replayalloc::detail
