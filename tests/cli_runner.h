// Runs the built `deltafin` binary (DF_BINARY, set per test target in tests/CMakeLists.txt) the
// way a user's shell would, for tests that check exit codes and messages end to end. Every run is
// bounded by `timeout 60`, so a hang fails the test (exit 124) instead of stalling CI.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>

namespace deltafin::testing {

struct CliRun {
  int exit_code = -1;  // -1: the shell did not exit normally; 124: timed out; 128+N: signal N
  std::string output;  // stdout and stderr together
};

// Single-quotes `s` for the shell.
inline std::string ShellQuote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// Runs a shell command line; `output` is what it writes to the pipe (its stdout).
inline CliRun RunShell(const std::string& cmd) {
  CliRun run;
  std::FILE* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr) {
    ADD_FAILURE() << "popen failed: " << cmd;
    return run;
  }
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), pipe)) > 0) run.output.append(buf.data(), n);
  const int status = ::pclose(pipe);
  if (status != -1 && WIFEXITED(status)) run.exit_code = WEXITSTATUS(status);
  return run;
}

// Runs `deltafin <args>` (args are passed to the shell as written).
inline CliRun RunCli(const std::string& args) {
  return RunShell("timeout 60 " + ShellQuote(DF_BINARY) + " " + args + " 2>&1");
}

struct CliRunStreams {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

// Runs `deltafin <args>` with stdout and stderr captured apart.
inline CliRunStreams RunCliStreams(const std::string& args) {
  char err_path[] = "/tmp/deltafin_stderr_XXXXXX";
  const int fd = ::mkstemp(err_path);
  if (fd < 0) {
    ADD_FAILURE() << "mkstemp failed";
    return {};
  }
  ::close(fd);
  CliRun run =
      RunShell("timeout 60 " + ShellQuote(DF_BINARY) + " " + args + " 2>" + ShellQuote(err_path));
  std::ifstream err(err_path, std::ios::binary);
  CliRunStreams streams{run.exit_code, std::move(run.output),
                        std::string(std::istreambuf_iterator<char>(err), {})};
  ::unlink(err_path);
  return streams;
}

}  // namespace deltafin::testing
