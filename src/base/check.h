// DF_CHECK: invariants that only a programmer can break. Failing one aborts with file:line, because
// continuing would compute garbage silently. Inputs from users and files never reach a DF_CHECK;
// they are validated into a Status first (status.h).
#pragma once

#include <cstdio>
#include <cstdlib>

#define DF_CHECK(cond, ...)                                                         \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      std::fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                                            \
      std::fputc('\n', stderr);                                                     \
      std::abort();                                                                 \
    }                                                                               \
  } while (0)
