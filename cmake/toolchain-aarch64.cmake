# cmake/toolchain-aarch64.cmake — cross-build for 64-bit ARM Linux on a Debian x86-64 machine, with
# Debian's gcc-aarch64-linux-gnu and the arm64 libraries installed through multiarch
# (scripts/install-deps.sh aarch64). Tests run under qemu-aarch64 (qemu-user).
#   cmake -S . -B build-aarch64 -DCMAKE_TOOLCHAIN_FILE=cmake/toolchain-aarch64.cmake
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
# headers are shared (/usr/include, /usr/include/aarch64-linux-gnu), libraries in /usr/lib/aarch64-linux-gnu
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu /usr)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
# qemu's -L must name ONE glibc: the dynamic loader and libc.so.6 have to come from the same build
# (libc reads private fields of the loader's state, e.g. pthread_create's stack cache list). The
# arm64 libraries we link (libcjson, libpng, ...) pull Debian's multiarch libc6:arm64 into
# /lib/aarch64-linux-gnu; with -L /usr/aarch64-linux-gnu qemu took the cross package's loader from
# there but the loader then found the multiarch libc.so.6 first, a different build (2.36-8cross1 vs
# 2.36-9+deb12u14 here), and every pthread_create spun forever in the stack-cache walk (the "two
# thread hang", docs/arm.md). So: the multiarch root when its loader is installed, else the cross one.
if(EXISTS /lib/ld-linux-aarch64.so.1)
  set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64;-L;/)
else()
  set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64;-L;/usr/aarch64-linux-gnu)
endif()
