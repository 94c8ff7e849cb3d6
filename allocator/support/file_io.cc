// Whole-file helpers; Note [Safe plan directories] in file_io.h.
#include "support/file_io.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "support/no_cancel.h"

namespace replayalloc {
namespace {

absl::StatusOr<std::string> read_fd(int fd, const std::string& path) {
  std::string out;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int e = errno;
      ::close(fd);
      return absl::DataLossError(absl::StrCat(path, ": ", std::strerror(e)));
    }
    if (n == 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return out;
}

// 64 unpredictable bits: getrandom(), else the address of a stack object mixed with
// the clock and the pid (still unique per attempt; O_EXCL keeps it safe either way).
std::uint64_t random_bits() {
  std::uint64_t r = 0;
  if (::getrandom(&r, sizeof r, GRND_NONBLOCK) == static_cast<ssize_t>(sizeof r)) return r;
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  r = reinterpret_cast<std::uintptr_t>(&ts) ^ (static_cast<std::uint64_t>(ts.tv_nsec) << 20) ^
      static_cast<std::uint64_t>(ts.tv_sec) ^ (static_cast<std::uint64_t>(::getpid()) << 40);
  return r * 0x9e3779b97f4a7c15ull;
}

bool trusted_owner(uid_t uid) { return uid == ::geteuid() || uid == 0; }

}  // namespace

// Note [No cancellation point inside]: each reads or writes with cancellation disabled.
absl::StatusOr<std::string> read_file(const std::string& path) {
  const detail::no_cancel no_cancel;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::NotFoundError(absl::StrCat(path, ": ", std::strerror(errno)));
  return read_fd(fd, path);
}

absl::Status write_file_atomic(const std::string& path, std::string_view bytes) {
  const detail::no_cancel no_cancel;
  const std::size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? std::string() : path.substr(0, slash + 1);
  const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  std::string tmp;
  int fd = -1;
  for (int attempt = 0; attempt < 16 && fd < 0; ++attempt) {
    tmp = absl::StrFormat("%s.%s.%016x.tmp", dir, base, random_bits());
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) return absl::PermissionDeniedError(absl::StrCat(tmp, ": ", std::strerror(errno)));
  std::size_t done = 0;
  int err = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      err = n < 0 ? errno : EIO;
      break;
    }
    done += static_cast<std::size_t>(n);
  }
  // fsync before the rename: after a crash of the machine the final name holds the
  // old file or the whole new one, never an empty one.
  if (err == 0 && ::fsync(fd) != 0) err = errno;
  if (::close(fd) != 0 && err == 0) err = errno;
  if (err == 0 && ::rename(tmp.c_str(), path.c_str()) != 0) err = errno;
  if (err != 0) {
    ::unlink(tmp.c_str());
    return absl::DataLossError(absl::StrCat(path, ": ", std::strerror(err)));
  }
  return absl::OkStatus();
}

absl::Status check_private_dir(const std::string& dir) {
  struct stat st{};
  if (::stat(dir.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat(dir, ": ", std::strerror(errno)));
  }
  if (!S_ISDIR(st.st_mode)) return absl::FailedPreconditionError(absl::StrCat(dir, " is not a directory"));
  if (!trusted_owner(st.st_uid) || (st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "directory %s (owner uid %u, mode %04o) can be written by users other than uid %u; "
        "plans there could be replaced by another user (make it owned by this user and "
        "not group- or world-writable, e.g. chmod go-w)",
        dir, static_cast<unsigned>(st.st_uid), static_cast<unsigned>(st.st_mode & 07777),
        static_cast<unsigned>(::geteuid())));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> read_private_file(const std::string& path) {
  const detail::no_cancel no_cancel;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) {
    const int e = errno;
    if (e == ELOOP) {
      return absl::FailedPreconditionError(absl::StrCat(path, " is a symbolic link; not followed"));
    }
    if (e == ENOENT) return absl::NotFoundError(absl::StrCat(path, ": ", std::strerror(e)));
    return absl::PermissionDeniedError(absl::StrCat(path, ": ", std::strerror(e)));
  }
  struct stat st{};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || !trusted_owner(st.st_uid) ||
      (st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    ::close(fd);
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s (owner uid %u, mode %04o) is not a regular file that only its owner (this user "
        "or root) can write",
        path, static_cast<unsigned>(st.st_uid), static_cast<unsigned>(st.st_mode & 07777)));
  }
  return read_fd(fd, path);
}

}  // namespace replayalloc
