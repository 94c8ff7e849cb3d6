// replayalloc/support/byte_io.h: little-endian fields in and out of byte strings, for
// the binary trace and plan files.
//
// Layer: support. The reader never reads past its input: every get reports whether the
// bytes were there, so a truncated file is an error, never an out-of-bounds read.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace replayalloc::detail {

template <class T>
void put(std::string& out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.append(b, sizeof(T));
}

// A u32 length, then the bytes.
inline void put_string(std::string& out, std::string_view s) {
  put<std::uint32_t>(out, static_cast<std::uint32_t>(s.size()));
  out.append(s);
}

class byte_reader {
 public:
  explicit byte_reader(std::string_view s) : s_(s) {}
  template <class T>
  bool get(T* v) {
    if (s_.size() - pos_ < sizeof(T)) return false;
    std::memcpy(v, s_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  bool get_view(std::uint64_t n, std::string_view* out) {
    if (s_.size() - pos_ < n) return false;
    *out = s_.substr(pos_, n);
    pos_ += n;
    return true;
  }
  bool get_bytes(std::uint64_t n, std::string* out) {
    std::string_view v;
    if (!get_view(n, &v)) return false;
    out->assign(v);
    return true;
  }
  // A string written by put_string, refused when longer than `max`.
  bool get_string(std::string* out, std::uint32_t max) {
    std::uint32_t n = 0;
    return get(&n) && n <= max && get_bytes(n, out);
  }
  std::size_t pos() const { return pos_; }
  std::size_t left() const { return s_.size() - pos_; }

 private:
  std::string_view s_;
  std::size_t pos_ = 0;
};

}  // namespace replayalloc::detail
