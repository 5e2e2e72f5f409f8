# OPAL_KERNELS_ONLY (the neon preset): the CPU kernel layer (core/dtype,
# core/quant, backends/cpu/kernels: scalar reference, dispatch and the host
# architecture's SIMD kernels) and tests/kernels_arm/check_kernels.cpp, which
# checks every SIMD kernel against the scalar reference without GoogleTest.
# Needs no library for the target: fmt is used header-only, from the build
# host's headers (OPAL_HOST_FMT_INCLUDE).
set(OPAL_HOST_FMT_INCLUDE /usr/include/fmt CACHE PATH "The build host's fmt headers (used header-only)")
if(NOT EXISTS ${OPAL_HOST_FMT_INCLUDE}/format.h)
  message(FATAL_ERROR "OPAL_KERNELS_ONLY: no fmt headers in ${OPAL_HOST_FMT_INCLUDE} (apt-get install libfmt-dev)")
endif()
# Only fmt/ from the host's include folder: the rest of it is the host's, not the target's.
file(MAKE_DIRECTORY ${CMAKE_BINARY_DIR}/host_include)
file(CREATE_LINK ${OPAL_HOST_FMT_INCLUDE} ${CMAKE_BINARY_DIR}/host_include/fmt SYMBOLIC)

file(GLOB OPAL_KERNEL_SRCS CONFIGURE_DEPENDS
  ${CMAKE_SOURCE_DIR}/core/dtype.cpp
  ${CMAKE_SOURCE_DIR}/core/quant/*.cpp
  ${CMAKE_SOURCE_DIR}/backends/cpu/kernels/isa.cpp
  ${CMAKE_SOURCE_DIR}/backends/cpu/kernels/matmul_dispatch.cpp
  ${CMAKE_SOURCE_DIR}/backends/cpu/kernels/ref/*.cpp
  ${CMAKE_SOURCE_DIR}/backends/cpu/kernels/*/table.cpp)  # every ISA's: the x86 ones are empty off x86
list(FILTER OPAL_KERNEL_SRCS EXCLUDE REGEX "/core/quant/recipe\\.cpp$")  # the GGUF quantize recipes: not kernels
if(CMAKE_SYSTEM_PROCESSOR MATCHES "aarch64|arm64")
  list(APPEND OPAL_KERNEL_SRCS ${OPAL_NEON_SRCS})
else()
  message(FATAL_ERROR "OPAL_KERNELS_ONLY is for the aarch64 cross build (cmake --preset neon)")
endif()
add_library(opal_kernels STATIC ${OPAL_KERNEL_SRCS})
target_include_directories(opal_kernels PUBLIC ${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR}/host_include)
target_compile_definitions(opal_kernels PUBLIC FMT_HEADER_ONLY)

enable_testing()
add_executable(check_kernels ${CMAKE_SOURCE_DIR}/tests/kernels_arm/check_kernels.cpp)
target_include_directories(check_kernels PRIVATE ${CMAKE_SOURCE_DIR}/tests)  # tests/support helpers
target_link_libraries(check_kernels PRIVATE opal_kernels pthread)
target_link_options(check_kernels PRIVATE -static)  # qemu-aarch64 then needs no target libraries
add_test(NAME neon_kernels COMMAND check_kernels)
set_tests_properties(neon_kernels PROPERTIES LABELS kernels_arm TIMEOUT 600)
