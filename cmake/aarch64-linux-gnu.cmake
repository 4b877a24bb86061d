# Cross build for ARM64 Linux with Debian's g++-aarch64-linux-gnu; target libraries (Highway,
# GTest) come from Debian multiarch (`dpkg --add-architecture arm64`, libhwy-dev:arm64,
# libgtest-dev:arm64). Tests run under qemu-aarch64 (Debian qemu-user) through
# CMAKE_CROSSCOMPILING_EMULATOR, so `ctest` works unchanged.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
# Headers and CMake packages of the arm64 libraries live under /usr (multiarch paths), so search
# /usr for packages and libraries, never for programs.
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu /usr)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64;-L;/usr/aarch64-linux-gnu)
