// ForEachOnThreads: `count` independent jobs run on `threads` short-lived threads (the caller is
// one of them), taken in index order from a shared counter. It is for blocking work — reading the
// pinned spine at load, a disk probe — that must not occupy the kernels' compute pool
// (base/thread_pool.h), whose threads are sized for arithmetic, not for a disk queue.
//
// After a job fails no new job starts; jobs already running finish. The result is the error of the
// failing job with the lowest index: every job before it was taken earlier and completes, so when
// failures sit at fixed indices the error does not depend on which thread saw what first.
#pragma once

#include <cstddef>
#include <functional>

#include "base/status.h"

namespace deltafin {

// job(index, thread): thread is in [0, threads) and names the thread that runs it (for per-thread
// buffers); the caller is thread 0. threads < 1 counts as 1.
Status ForEachOnThreads(int threads, size_t count,
                        const std::function<Status(size_t index, int thread)>& job);

}  // namespace deltafin
