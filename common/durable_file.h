// Durable file writes: the one place that gets the POSIX sequence right, so
// that callers neither forget the fsync of the directory nor read errno after
// a call that may have clobbered it.
//
// A whole-file replace (WriteFileDurably) writes a temp file next to the
// target, fsyncs it, closes it (checked: NFS and some FUSE file systems report
// write-back errors only there), renames it over the target and fsyncs the
// parent directory. After a crash or a power loss the target holds the old
// content or the new one, never a mix; a crash may leave the temp file
// (`<path>.tmp.<pid>.<n>`), which RemoveStaleTempFiles clears at the next start.
//
// Every error is Internal and its message names the operation, the path and
// strerror(errno), e.g. "fsync /var/lib/x/epoch.tmp.12.3: Input/output error".
// EINTR is retried where retrying is correct (write, fsync, fdatasync); never
// for close, which on Linux releases the descriptor even when it fails.
//
// Threading: all functions are thread-safe (system calls and one atomic
// counter). Two writers replacing the same path concurrently do not corrupt it
// (each has its own temp file); the last rename wins.
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>

#include "common/status.h"

namespace clusterd {

enum class SyncKind {
  kAll,   // fsync: data and all metadata
  kData,  // fdatasync: data and the metadata needed to read it back (size)
};

// Replaces `path` with `content` durably (see above). `mode` is the new file's
// mode before the umask, as for open(2). On failure the temp file is removed
// and the target is untouched, unless only the final directory fsync failed:
// then the target already holds the new content but may not keep it across a
// power loss.
Status WriteFileDurably(const std::string& path, std::string_view content, mode_t mode = 0644);

// A fresh temp file name next to `path`: `<path>.tmp.<pid>.<n>`, unique on
// this host while this process lives. For callers that stream a large file
// into a temp file themselves (and rename it with RenameDurably): the name is
// one that RemoveStaleTempFiles clears after a crash.
std::string TempPathFor(const std::string& path);

// Writes all of `data` to fd, retrying EINTR and short writes.
// `path_for_errors` only names the file in the error message.
Status WriteAll(int fd, std::string_view data, const std::string& path_for_errors);

// fsync (kAll) or fdatasync (kData) of fd, retrying EINTR. After a failure the
// kernel may have dropped the dirty pages: do not retry the sync and assume
// the data reached the disk.
Status SyncFile(int fd, const std::string& path, SyncKind kind);

// fsync of a directory, which makes the creations, renames and removals of
// entries in it durable.
Status SyncDirectory(const std::string& dir);

// close(2), checked. The descriptor is released whatever the result.
Status CloseFile(int fd, const std::string& path);

// rename(2), then fsync of the parent directory of `to` and, when it differs,
// of the parent of `from`. Works for directories as for files (rename's rules
// apply: a directory replaces only an empty directory).
Status RenameDurably(const std::string& from, const std::string& to);

// The directory that holds `path`: "a/b" -> "a", "/a" -> "/", "a" -> ".".
std::string ParentDirectory(const std::string& path);

// Removes the temp files `<basename of path>.tmp.<pid>.<n>` (TempPathFor's
// names) that a crash left in path's directory. Other files are left alone. Call it where no other process writes
// `path` (e.g. under the lock that guards it): it would remove that writer's temp file. A missing directory is not an
// error.
Status RemoveStaleTempFiles(const std::string& path);

}  // namespace clusterd
