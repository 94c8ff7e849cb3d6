// Op names (runtime/engine.h): the table of the ops that recordings tag their
// allocations with, interned once per name, and the deferred names of call-stack tags
// (Note [Deferred op names]), named the first time a name is read.
#include <string>
#include <string_view>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "runtime/engine.h"
#include "support/reentry.h"
#include "support/grow_table.h"

namespace replayalloc::detail {

const char* engine::op_name_locked(std::uint32_t op) {
  // Called while reporting, possibly with the engine's mutex held by this thread.
  if (!mu_.try_lock()) return "?";
  reentry_guard guard;
  const char* n = op < op_names_.size() ? op_name_of_locked(op).c_str() : "unknown";
  mu_.unlock();
  return n;
}

const std::string& engine::op_name_of_locked(std::uint32_t op) {
  auto it = op_pending_.find(op);
  if (it == op_pending_.end()) return op_names_[op];
  char name[768];
  name[0] = '\0';
  if (deferred_op_namer f = g_deferred_op_namer.load(std::memory_order_acquire)) f(it->second, name, sizeof name);
  name[sizeof name - 1] = '\0';
  std::string& n = op_names_[op];
  n = name[0] != '\0' ? name : "unknown";
  op_pending_.erase(it);
  // Two stacks may share a name (frames beyond the depth differ); the first id keeps
  // the name's entry, as op_id() would have given it.
  grow_for_insert(op_ids_);  // Note [Tables that grow before they insert]
  op_ids_.emplace(n, op);
  return n;
}

std::uint32_t engine::op_id_deferred(std::uint64_t token) {
  reentry_guard guard;
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = op_tokens_.find(token); it != op_tokens_.end()) return it->second;
  const auto id = static_cast<std::uint32_t>(op_names_.size());
  op_names_.push_back(absl::StrCat("\x01", id));
  grow_for_insert(op_pending_);  // Note [Tables that grow before they insert]
  grow_for_insert(op_tokens_);
  op_pending_.emplace(id, token);
  op_tokens_.emplace(token, id);
  return id;
}

trace engine::with_op_names(const trace& t) {
  reentry_guard guard;
  trace out = t;
  std::lock_guard<std::mutex> lock(mu_);
  for (std::string& name : out.ops) {
    std::uint32_t id = 0;
    if (name.size() < 2 || name[0] != '\x01' || !absl::SimpleAtoi(absl::string_view(name).substr(1), &id) ||
        id >= op_names_.size()) {
      continue;
    }
    name = op_name_of_locked(id);
  }
  return out;
}

std::uint32_t engine::op_id(std::string_view name) {
  reentry_guard guard;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = op_ids_.find(absl::string_view(name.data(), name.size()));
  if (it != op_ids_.end()) return it->second;
  const auto id = static_cast<std::uint32_t>(op_names_.size());
  grow_for_insert(op_ids_);  // Note [Tables that grow before they insert]
  op_names_.emplace_back(name);
  op_ids_.emplace(op_names_.back(), id);
  return id;
}

}  // namespace replayalloc::detail
