#!/usr/bin/env bash
# The project's test command (README): installs missing Debian packages (--tests set), checks
# formatting, builds the release preset and runs every test tier, runs clang-tidy over src/, runs
# the bounded fuzzers (tokenizer libFuzzer, the tokenizer's differential fuzzer against npm
# tiktoken, the server's request parser), cross-builds the kernel tests for ARM64 and runs them
# under qemu-aarch64, then builds the ASan+UBSan preset (only the targets of its tiers) and runs
# the unit, golden and kernel tiers under the sanitizers, and builds the TSan preset (only the
# tsan tier's targets: the server's and scheduler's tests) and runs that tier under
# ThreadSanitizer. Ends with a table of stage durations (docs/TESTING.md has the measured table
# and what runs beside what).
#
# On two cores the single-threaded stages run side by side in two lanes: the two libFuzzer runs
# together, then the differential fuzzer beside the ARM64 cross build and its qemu run. A lane's
# output goes to build/logs/<stage>.log and is printed when the lane ends.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh --tests

# ccache (CMakeLists.txt uses it when present): paths relative to this checkout and no working
# directory in the key, so a fresh clone of the same sources reuses an earlier run's objects.
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=true

jobs=$(nproc)
mkdir -p build/logs
start_all=$(date +%s)
stage_names=()
stage_secs=()
record() { stage_names+=("$1"); stage_secs+=("$2"); }
print_table() {
  local total=$(($(date +%s) - start_all))
  echo "== stage durations (wall seconds; lanes that ran side by side are marked ‖)"
  local i
  for i in "${!stage_names[@]}"; do
    printf '  %-58s %5d\n' "${stage_names[$i]}" "${stage_secs[$i]}"
  done
  printf '  %-58s %5d  (%d min %02d s)\n' "total" "$total" $((total / 60)) $((total % 60))
}
trap print_table EXIT

# stage NAME CMD...: runs CMD in the foreground and records its wall time.
stage() {
  local name=$1
  shift
  echo "== $name"
  local t0
  t0=$(date +%s)
  "$@"
  record "$name" $(($(date +%s) - t0))
}

# lanes NAME1 CMD1 -- NAME2 CMD2: runs two commands side by side (each a single-threaded job),
# logs each to build/logs/, prints both logs when both ended, records each one's wall time and
# fails if either failed.
lanes() {
  local name1=$1 cmd1=$2 name2=$3 cmd2=$4
  local log1="build/logs/${name1//[^a-zA-Z0-9]/_}.log" log2="build/logs/${name2//[^a-zA-Z0-9]/_}.log"
  echo "== $name1  ‖  $name2"
  local t0
  t0=$(date +%s)
  (
    s=$(date +%s)
    rc=0
    bash -c "$cmd1" >"$log1" 2>&1 || rc=$?
    echo "$(($(date +%s) - s)) $rc" >"$log1.done"
  ) &
  local p1=$!
  (
    s=$(date +%s)
    rc=0
    bash -c "$cmd2" >"$log2" 2>&1 || rc=$?
    echo "$(($(date +%s) - s)) $rc" >"$log2.done"
  ) &
  local p2=$!
  wait "$p1" "$p2" || true
  local s1 rc1 s2 rc2
  read -r s1 rc1 <"$log1.done"
  read -r s2 rc2 <"$log2.done"
  echo "---- $name1 (exit $rc1, $s1 s)"
  cat "$log1"
  echo "---- $name2 (exit $rc2, $s2 s)"
  cat "$log2"
  record "‖ $name1" "$s1"
  record "‖ $name2" "$s2"
  record "  (both lanes, wall)" $(($(date +%s) - t0))
  if [[ $rc1 != 0 || $rc2 != 0 ]]; then
    echo "lane failed: $name1 exit $rc1, $name2 exit $rc2" >&2
    return 1
  fi
}

stage "clang-format check" \
  bash -c "git ls-files -- '*.h' '*.cc' | xargs clang-format --dry-run -Werror"

stage "release: configure + build" \
  bash -c "cmake --preset release >/dev/null && cmake --build --preset release -j $jobs"
stage "release: ctest (every tier)" ctest --preset release -j "$jobs"

# DF_SKIP_TIDY=1 skips it for a quick local run; CI never sets it.
if [[ "${DF_SKIP_TIDY:-0}" != 1 ]]; then
  stage "clang-tidy over src/ (release compile_commands.json)" \
    tools/clang_tidy.sh build/release "$jobs"
fi

lanes "tokenizer libFuzzer (ASan/UBSan, 45 s)" "tests/tokenizer/fuzz.sh build/fuzz-tokenizer 45" \
  "server request-parser libFuzzer (ASan/UBSan, 30 s)" "tests/server/fuzz.sh build/fuzz-server 30"

# The differential fuzzer reuses the oracle test's work folder (its npm ci of the pinned tiktoken).
lanes "tokenizer differential fuzzing vs npm tiktoken (60 s)" \
  "tests/tokenizer/difffuzz.sh build/release build/release/tests/tokenizer-oracle 60" \
  "ARM64 cross build of the kernel tests + qemu-aarch64 run" \
  "cmake -S tests/kernels -B build/aarch64 -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
     -DDF_WERROR=ON --toolchain '$PWD/cmake/aarch64-linux-gnu.cmake' >/dev/null && \
   cmake --build build/aarch64 -j $jobs && ctest --test-dir build/aarch64 --output-on-failure"

if [[ "${DF_SKIP_ASAN:-0}" != 1 ]]; then
  # Only the targets of the tiers the asan test preset runs (tests/CMakeLists.txt: df_tier_*).
  stage "ASan+UBSan: configure + build (unit, golden, kernels targets)" \
    bash -c "cmake --preset asan >/dev/null && cmake --build --preset asan -j $jobs \
      --target df_tier_unit df_tier_golden df_tier_kernels"
  stage "ASan+UBSan: ctest (unit, golden, kernels)" ctest --preset asan -j "$jobs"
fi

if [[ "${DF_SKIP_TSAN:-0}" != 1 ]]; then
  # Only the tsan tier's targets (tests/CMakeLists.txt: df_tier_tsan): the server library and its
  # two C++ tests, no CLI. Suppressions: tools/tsan.supp (third-party code only).
  stage "TSan: configure + build (tsan targets)" \
    bash -c "cmake --preset tsan >/dev/null && cmake --build --preset tsan -j $jobs \
      --target df_tier_tsan"
  stage "TSan: ctest (tsan: server and scheduler threads)" ctest --preset tsan -j "$jobs"
fi
