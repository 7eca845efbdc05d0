# TK_KERNELS_ONLY (included by CMakeLists.txt): the compute kernels with what
# they need (util, the dtype tables, the KV pool) and their tests, nothing
# that needs PCRE2, jansson, utf8proc or libmicrohttpd, so that a cross
# build needs only a cross C library.  Under an emulator
# (CMAKE_CROSSCOMPILING_EMULATOR, tools/cmake/aarch64-linux-gnu.cmake)
# test_qgemm runs twice: on an emulated CPU with the arm64 dot-product
# instructions (qemu -cpu max) and on one without (cortex-a53), so both
# NEON kernel sets are tested; TK_TEST_DOTPROD tells the test which to
# expect.  test_attention, test_glu and test_exp_row (no dotprod kernels)
# run on the cortex-a53.
find_package(Threads REQUIRED)
file(GLOB TK_CORE_SOURCES CONFIGURE_DEPENDS
  ${CMAKE_SOURCE_DIR}/src/util/*.c
  ${CMAKE_SOURCE_DIR}/src/formats/dtype.c
  ${CMAKE_SOURCE_DIR}/src/kernels/*.c
  ${CMAKE_SOURCE_DIR}/src/kv/*.c)
add_library(tokamak_core STATIC ${TK_CORE_SOURCES})
target_include_directories(tokamak_core PUBLIC ${CMAKE_SOURCE_DIR}/include PRIVATE ${CMAKE_SOURCE_DIR}/src)
target_link_libraries(tokamak_core PUBLIC Threads::Threads m)

enable_testing()
foreach(name test_qgemm test_attention test_glu test_exp_row)
  add_executable(${name} ${CMAKE_SOURCE_DIR}/tests/${name}.c)
  target_link_libraries(${name} PRIVATE tokamak_core)
  target_include_directories(${name} PRIVATE ${CMAKE_SOURCE_DIR}/src)
  target_compile_definitions(${name} PRIVATE TK_SHARED_DIR="${CMAKE_SOURCE_DIR}/../shared" TK_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
  # only test_qgemm has dotprod kernels; the others run once, on the armv8.0 CPU
  set(cpus max:1 cortex-a53:0) # qemu CPU : has dotprod
  if(NOT name STREQUAL "test_qgemm")
    set(cpus cortex-a53:0)
  endif()
  if(CMAKE_CROSSCOMPILING_EMULATOR)
    foreach(cpu ${cpus})
      string(REGEX REPLACE ":.*" "" qemu_cpu "${cpu}")
      string(REGEX REPLACE ".*:" "" dotprod "${cpu}")
      add_test(NAME ${name}_${qemu_cpu} COMMAND ${name})
      set_tests_properties(${name}_${qemu_cpu} PROPERTIES TIMEOUT 900 LABELS kernels
        ENVIRONMENT "QEMU_CPU=${qemu_cpu};TK_TEST_DOTPROD=${dotprod}")
    endforeach()
  else()
    add_test(NAME ${name} COMMAND ${name})
    set_tests_properties(${name} PROPERTIES TIMEOUT 600 LABELS kernels)
  endif()
endforeach()
