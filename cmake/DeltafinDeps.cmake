# Dependencies come from Debian packages (see .ci/run); nothing is downloaded at build time.
find_package(nlohmann_json 3.10 CONFIG REQUIRED)
find_package(CLI11 CONFIG REQUIRED)
find_package(Threads REQUIRED)
if(DF_BUILD_TESTS)
  find_package(GTest CONFIG REQUIRED)
endif()
