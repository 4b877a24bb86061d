# Included from tests/CMakeLists.txt (so paths are relative to tests/). Tokenizer tests: unit tests (gtest), the npm-tiktoken oracle comparison (e2e), and the
# differential fuzzer's peer and the benchmark program (built, never run by ctest).
df_test(tokenizer_test LABEL unit SOURCES tokenizer/tokenizer_test.cc DEPS df_tokenizer)
df_test(chat_test LABEL unit SOURCES tokenizer/chat_test.cc DEPS df_tokenizer)

find_program(DF_NODE node)
find_program(DF_NPM npm)
if(DF_NODE AND DF_NPM)
  add_test(NAME tokenizer_oracle
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tokenizer/oracle/run_oracle.sh $<TARGET_FILE:deltafin>
                   ${CMAKE_CURRENT_BINARY_DIR}/tokenizer-oracle)
  set_tests_properties(tokenizer_oracle PROPERTIES LABELS e2e TIMEOUT 900)
endif()

# deltafin's side of the differential fuzzer against npm tiktoken (tests/tokenizer/difffuzz.sh, run
# by tools/test.sh for a bounded time; not a ctest test, so the e2e tier stays short).
add_executable(tokenizer_difffuzz_peer tokenizer/difffuzz_peer.cc)
target_link_libraries(tokenizer_difffuzz_peer PRIVATE df_tokenizer df_options nlohmann_json::nlohmann_json)
target_include_directories(tokenizer_difffuzz_peer PRIVATE ${PROJECT_SOURCE_DIR}/src
                                                           ${PROJECT_SOURCE_DIR}/include)

add_executable(tokenizer_bench tokenizer/tokenizer_bench.cc)
target_link_libraries(tokenizer_bench PRIVATE df_tokenizer df_options)
target_include_directories(tokenizer_bench PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/include)
