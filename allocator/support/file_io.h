// replayalloc/support/file_io.h: whole files, written so that nobody can subvert them.
//
// Layer: support. Used by the trace and plan files, the CLI and the engine's plan
// directory. Nothing here is on an allocation path; everything returns a Status.
//
// Note [Safe plan directories]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A plan directory may be shared (a volume several replicas mount, a directory in
// /tmp). Three rules keep a file written there from being turned against the writer,
// and a file read from there from being planted:
//  * a file is written to a temporary name with 64 random bits in it, created with
//    O_CREAT|O_EXCL|O_NOFOLLOW (never opened if anything, a symbolic link included,
//    already has that name), filled, flushed and renamed over the final name. rename()
//    replaces a link at the final name, never its target, and a reader sees the old
//    file or the whole new one, also when the writer is killed mid-way (a killed
//    writer leaves its temporary file, which no reader opens: the name says .tmp).
//    The mode is 0666 less the umask, as for any file the process makes.
//  * a file is read with O_NOFOLLOW and only when it is a regular file owned by this
//    user (or root) that no other user may write (group or others' write bit clear).
//  * a directory is trusted only when it is owned by this user (or root) and no other
//    user may write it (as OpenSSH's StrictModes): anyone who can write a directory
//    can replace any file in it, whatever the file's own mode.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace replayalloc {

// The whole file. NotFound when it does not exist (or cannot be opened).
absl::StatusOr<std::string> read_file(const std::string& path);

// Writes through an exclusively created temporary file with an unpredictable name in
// the same directory and a rename, so a reader never sees half a file and a link
// placed at any name the writer uses is never followed (Note [Safe plan directories]).
absl::Status write_file_atomic(const std::string& path, std::string_view bytes);

// OK when no user but this one (or root) can replace what `dir` holds: it is a
// directory owned by this user or root, without group or others' write permission.
// FailedPrecondition naming the directory, its owner and its mode otherwise.
absl::Status check_private_dir(const std::string& dir);

// read_file() for a file in a trusted directory: not a symbolic link, a regular
// file, owned by this user or root, writable by nobody else. NotFound when absent;
// FailedPrecondition naming the file and its mode when it may have been planted.
absl::StatusOr<std::string> read_private_file(const std::string& path);

}  // namespace replayalloc
