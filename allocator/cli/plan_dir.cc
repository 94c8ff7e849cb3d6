// The verdicts of cli/plan_dir.h.
#include "cli/plan_dir.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "support/config.h"
#include "support/file_io.h"

namespace replayalloc::cli {

namespace {

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

}  // namespace

const char* verdict_name(verdict v) {
  switch (v) {
    case verdict::ok: return "ok";
    case verdict::corrupt: return "corrupt";
    case verdict::truncated: return "truncated";
    case verdict::other_version: return "other_version";
    case verdict::other_slot_align: return "other_slot_align";
    case verdict::wrong_name: return "wrong_name";
    case verdict::unsafe: return "unsafe";
    case verdict::temporary: return "temporary";
    case verdict::not_a_plan: return "not_a_plan";
  }
  return "?";
}

bool stale_plan(verdict v) {
  return v == verdict::corrupt || v == verdict::truncated || v == verdict::other_version ||
         v == verdict::other_slot_align || v == verdict::wrong_name;
}

bool is_plan_name(std::string_view name) { return name.size() > 7 && ends_with(name, ".raplan"); }

double age_seconds(const struct stat& st) {
  timespec now{};
  ::clock_gettime(CLOCK_REALTIME, &now);
  return static_cast<double>(now.tv_sec - st.st_mtim.tv_sec) +
         1e-9 * static_cast<double>(now.tv_nsec - st.st_mtim.tv_nsec);
}

namespace {

// write_file_atomic()'s temporary name for a plan: "." + final name + "." + 16
// lowercase hex digits + ".tmp" (support/file_io.cc).
bool is_temp_name(std::string_view name) {
  constexpr std::size_t hex = 16;
  if (name.size() < 1 + 8 + 1 + hex + 4 || name[0] != '.' || !ends_with(name, ".tmp")) return false;
  const std::string_view digits = name.substr(name.size() - 4 - hex, hex);
  if (!std::all_of(digits.begin(), digits.end(),
                   [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); })) {
    return false;
  }
  const std::string_view final_name = name.substr(1, name.size() - 1 - 1 - hex - 4);
  return name[name.size() - 4 - hex - 1] == '.' && is_plan_name(final_name);
}

// Judges `name` in `dir` as the engine would (see the top of this file); nullopt when
// it is gone (removed since the directory was read).
std::optional<entry> judge(const std::string& dir, const std::string& name, std::uint64_t slot_align) {
  entry e;
  e.name = name;
  const std::string path = absl::StrCat(dir, "/", name);
  if (::lstat(path.c_str(), &e.st) != 0) return std::nullopt;
  if (is_temp_name(name)) {
    e.v = verdict::temporary;
    e.why = absl::StrFormat("a writer's temporary file, %.0f s old (killed mid-write, or writing now)",
                            std::max(0.0, age_seconds(e.st)));
    if (!S_ISREG(e.st.st_mode)) absl::StrAppend(&e.why, "; not a regular file");
    return e;
  }
  if (!is_plan_name(name)) return e;  // not_a_plan
  absl::StatusOr<std::string> bytes = read_private_file(path);
  if (absl::IsNotFound(bytes.status())) return std::nullopt;
  if (!bytes.ok()) {
    e.v = verdict::unsafe;
    e.why = std::string(bytes.status().message());
    return e;
  }
  absl::StatusOr<plan_file> f = decode_plan(*bytes);
  if (!f.ok()) {
    e.v = plan_file_cut_short(*bytes) ? verdict::truncated : verdict::corrupt;
    e.why = std::string(f.status().message());
    return e;
  }
  const std::string& key = f->tr.key;
  const std::string host_name = plan_file_name(key);
  const std::string cuda_name = plan_file_name(absl::StrCat("cuda:", key));
  e.domain = name == host_name ? "host" : name == cuda_name ? "cuda" : "";
  if (e.domain.empty()) {
    e.v = verdict::wrong_name;
    e.why = absl::StrCat("the engine looks for key '", key, "' at ", host_name, " (host) or ",
                         cuda_name, " (cuda), never at this name");
  } else if (f->library_version != REPLAYALLOC_VERSION_STRING || f->slot_align != slot_align) {
    e.v = f->library_version != REPLAYALLOC_VERSION_STRING ? verdict::other_version
                                                           : verdict::other_slot_align;
    e.why = std::string(check_plan_key(*f, key, slot_align).message());
  } else {
    e.v = verdict::ok;
  }
  e.plan = *std::move(f);
  return e;
}

// The directory's entries, sorted by name (not "." and ".."); NotFound when it cannot
// be opened, DataLoss when reading it fails.
absl::StatusOr<std::vector<std::string>> list_dir(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) {
    return absl::NotFoundError(absl::StrCat(dir, ": ", std::strerror(errno)));
  }
  std::vector<std::string> names;
  int err = 0;
  for (;;) {
    errno = 0;  // readdir() returns null at the end and on an error; only errno tells
    const dirent* de = ::readdir(d);
    if (de == nullptr) {
      err = errno;
      break;
    }
    const std::string_view n = de->d_name;
    if (n != "." && n != "..") names.emplace_back(n);
  }
  ::closedir(d);
  if (err != 0) return absl::DataLossError(absl::StrCat(dir, ": ", std::strerror(err)));
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

absl::StatusOr<std::vector<entry>> judge_dir(const std::string& dir, std::uint64_t slot_align) {
  absl::StatusOr<std::vector<std::string>> names = list_dir(dir);
  if (!names.ok()) return names.status();
  std::vector<entry> out;
  out.reserve(names->size());
  for (const std::string& n : *names) {
    if (std::optional<entry> e = judge(dir, n, slot_align)) out.push_back(*std::move(e));
  }
  return out;
}

}  // namespace replayalloc::cli
