// Durable file writes: the one place that writes a file so that after a crash or power loss its
// final name holds either the previous complete file or the new complete file, never a torn one.
//
// WriteFileDurably writes `<path><temp_suffix>`, fsyncs it, renames it over `path` and fsyncs the
// directory (without that last fsync the rename itself may be lost). The pieces are exported too
// for writers that stage several files and rename them together (make-model) or append records
// (convert-spine-int8's progress log). A caller that needs to act at the instant between the
// fsynced temp file and the rename (setup's crash points, setup/crash_point.h) passes a hook; io/
// itself knows nothing of setup.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

#include "base/status.h"

namespace deltafin {

struct DurableWriteOptions {
  int mode = 0644;                   // permissions of a newly created file
  std::string temp_suffix = ".tmp";  // the temporary file is `path` + this
  bool sync = true;                  // false: skip both fsyncs (atomic, not durable)
  // Called with `path` after the temporary file is complete (and fsynced), before the rename.
  std::function<void(const std::string& path)> before_rename;
};

// Writes [data, data + size) to `path` through a temporary file (see above). On failure the
// temporary file is removed and `path` is untouched.
Status WriteFileDurably(const std::string& path, const void* data, size_t size,
                        const DurableWriteOptions& options = {});
inline Status WriteFileDurably(const std::string& path, std::string_view text,
                               const DurableWriteOptions& options = {}) {
  return WriteFileDurably(path, text.data(), text.size(), options);
}

// Creates (truncates) `path` with `mode`, writes the bytes and, with `sync`, fsyncs it; no
// rename. The building block of WriteFileDurably, for files staged under a temporary name.
Status WriteFileContents(const std::string& path, const void* data, size_t size, bool sync,
                         int mode = 0644);

// Appends `text` to `path` (created with 0644 if missing) and fsyncs it: a record that is on
// disk when this returns. A crash mid-append can leave a torn last record; readers skip it.
Status AppendFileDurably(const std::string& path, std::string_view text);

// Writes all of [data, data + size) to `fd`, retrying short writes and EINTR; errors name `path`.
Status WriteAllToFd(int fd, const void* data, size_t size, const std::string& path);

// fsync of the file or directory at `path`.
Status SyncPath(const std::string& path);
// fsync of a directory after a rename into it. Best effort: some filesystems refuse to fsync a
// directory, and the data itself is already durable when this is called.
void SyncDirectory(const std::string& dir);

}  // namespace deltafin
