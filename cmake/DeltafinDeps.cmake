# Dependencies come from Debian packages (tools/install-deps.sh); nothing is downloaded at build
# time. The runtime set is required; GoogleTest is optional: without it the tests are not
# configured (one line says so) and a runtime-only machine still builds `deltafin`.
find_package(nlohmann_json 3.10 CONFIG REQUIRED)
find_package(CLI11 CONFIG REQUIRED)
find_package(Threads REQUIRED)
if(DF_BUILD_TESTS)
  find_package(GTest CONFIG QUIET)
  if(NOT GTest_FOUND)
    message(STATUS "GoogleTest not found: tests are not configured "
                   "(tools/install-deps.sh --tests installs it)")
    set(DF_BUILD_TESTS OFF CACHE BOOL "Build the tests" FORCE)
  endif()
endif()
