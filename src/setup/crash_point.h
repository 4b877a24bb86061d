// Crash points: exact instants at which the setup tests kill -9 an install.
//
// Some of the moments a crash must be survived at are too short to hit from outside by timing (the
// instant between a verified partial file's fdatasync and its rename, between a manifest's temp
// file and its rename, between an expert's pwrite and its log record). At each such moment the
// code calls CrashPoint(name, subject). When the environment variable DELTAFIN_CRASH_AT is
//   NAME[:SUBSTRING][#N]
// the process sends itself SIGKILL at the N-th (default first) time it reaches point NAME with a
// subject containing SUBSTRING: no destructor, buffer flush or atexit handler runs, exactly as with
// an outside `kill -9`. Unset (the normal case), a call only reads a flag cached at first use. The
// points are listed in docs/RELIABILITY.md; tests/e2e/setup_faults_test.cc uses them.
#pragma once

#include <string>

namespace deltafin::setup {

void CrashPoint(const char* name, const std::string& subject = "");

}  // namespace deltafin::setup
