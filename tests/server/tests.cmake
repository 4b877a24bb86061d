# Included from tests/CMakeLists.txt (paths relative to tests/). Server tests: unit tests of the
# pure parts (gtest), the server's threads in one process (gtest, also run under ThreadSanitizer:
# label tsan), the OpenAI Node SDK client test, the raw HTTP / load tests and the web chat page in
# headless chromium (e2e), all on loopback against `deltafin serve` with the tiny model.
df_test(server_unit_test LABEL unit tsan NO_CLI SOURCES server/server_unit_test.cc DEPS df_server)
# The server's threads together in one process: all three APIs at once, a cancel, metrics polling
# (the tsan preset runs it under ThreadSanitizer; docs/TESTING.md).
df_test(server_threads_test LABEL e2e tsan NO_CLI SOURCES server/server_threads_test.cc
        DEPS df_server)

find_program(DF_NODE node)
find_program(DF_NPM npm)
if(DF_NODE AND DF_NPM)
  add_test(NAME server_sdk
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/server/run_sdk_test.sh $<TARGET_FILE:deltafin>
                   ${CMAKE_CURRENT_BINARY_DIR}/server-sdk)
  set_tests_properties(server_sdk PROPERTIES LABELS e2e TIMEOUT 300)
  # Fails with a clear message when chromium is missing (tools/install-deps.sh installs it). The
  # browser part is bounded at 60 s; the rest is npm ci (first run) and the tiny model.
  add_test(NAME server_browser
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/server/run_browser_test.sh
                   $<TARGET_FILE:deltafin> ${CMAKE_CURRENT_BINARY_DIR}/server-browser)
  set_tests_properties(server_browser PROPERTIES LABELS e2e TIMEOUT 180)
  # The bundled trained demo model answers the SDK in English (issue: a trained demo model).
  add_test(NAME server_trained_sdk
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/server/run_trained_sdk_test.sh
                   $<TARGET_FILE:deltafin> ${PROJECT_SOURCE_DIR}/models/k3-kjv-demo
                   ${CMAKE_CURRENT_BINARY_DIR}/server-trained-sdk)
  set_tests_properties(server_trained_sdk PROPERTIES LABELS e2e TIMEOUT 180)
  # JSON output and restart-and-reuse of the prefix cache through both SDKs (docs/SERVER.md).
  add_test(NAME server_json_cache_sdk
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/server/run_json_cache_sdk_test.sh
                   $<TARGET_FILE:deltafin> ${CMAKE_CURRENT_BINARY_DIR}/server-json-cache-sdk)
  set_tests_properties(server_json_cache_sdk PROPERTIES LABELS e2e TIMEOUT 600)
  # Schema-bound tool calls, budget-aware JSON, logprobs and penalties through both SDKs
  # (docs/SERVER.md): about 11,000 decoded tokens of the tiny model (90 forced calls at 64 tokens,
  # 50 JSON answers at 96): 7.4 minutes on the shared 2-core dev VM (~60 ms/token), ~17 at load 15
  # (~100 ms/token, constrained or not); less on an idle machine.
  add_test(NAME server_agents_sdk
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/server/run_agents_sdk_test.sh
                   $<TARGET_FILE:deltafin> ${CMAKE_CURRENT_BINARY_DIR}/server-agents-sdk)
  set_tests_properties(server_agents_sdk PROPERTIES LABELS e2e TIMEOUT 1500)
endif()
add_test(NAME server_http
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/server/run_http_test.sh $<TARGET_FILE:deltafin>
                 ${CMAKE_CURRENT_BINARY_DIR}/server-http)
set_tests_properties(server_http PROPERTIES LABELS e2e TIMEOUT 300)
# The server-under-abuse campaign (docs/RELIABILITY.md) and the busy-port check.
add_test(NAME server_abuse
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/server/run_abuse_test.sh $<TARGET_FILE:deltafin>
                 ${CMAKE_CURRENT_BINARY_DIR}/server-abuse)
set_tests_properties(server_abuse PROPERTIES LABELS e2e TIMEOUT 300)
# Constrained JSON output and the persistent prefix cache (docs/SERVER.md).
add_test(NAME server_json_cache
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/server/run_json_cache_test.sh
                 $<TARGET_FILE:deltafin> ${CMAKE_CURRENT_BINARY_DIR}/server-json-cache)
# Two ~2,400-token prefills and ~60 sampled JSON answers: 12 minutes on the shared 2-core dev VM
# under load (tiny-model decode at ~70 ms/token there), far less on an idle machine.
set_tests_properties(server_json_cache PROPERTIES LABELS e2e TIMEOUT 900)
# serve --speculate ngram against off on the demo model: identical greedy answers (docs/SPECULATION.md).
add_test(NAME server_speculate
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/server/run_speculate_test.sh $<TARGET_FILE:deltafin>
                 ${PROJECT_SOURCE_DIR}/models/k3-kjv-demo ${CMAKE_CURRENT_BINARY_DIR}/server-speculate)
set_tests_properties(server_speculate PROPERTIES LABELS e2e TIMEOUT 300)
