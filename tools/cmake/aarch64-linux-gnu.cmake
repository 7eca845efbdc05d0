# Cross build for arm64 Linux with Debian's gcc-aarch64-linux-gnu (portable
# armv8-a; the dotprod kernels get their -march per file).  Tests run under
# qemu-aarch64 user-mode emulation when it is installed (qemu-user);
# QEMU_CPU in a test's environment picks the emulated CPU.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_C_FLAGS_INIT "-march=armv8-a")
set(TK_ARM64_SYSROOT /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH ${TK_ARM64_SYSROOT})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
find_program(TK_QEMU_AARCH64 qemu-aarch64)
if(TK_QEMU_AARCH64)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${TK_QEMU_AARCH64} -L ${TK_ARM64_SYSROOT})
endif()
