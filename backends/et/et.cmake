# The ET-SoC-1 backend's host side (opal_et, declared in CMakeLists.txt): the
# optional drivers, found at configure time (docs/backends/et.md).
#   sysemu: sw-sysemu's static library and full header tree, from
#           OPAL_ET_SYSEMU_DIR (default: the shared dir's et-sysemu, which CI
#           uses) or an et-platform install under OPAL_ET_ROOT (/opt/et).
#   etrt:   et-platform's runtime and device layer under OPAL_ET_ROOT (below).
# Without them opal_et builds with the fake driver only and says so here and
# at run time (`opal ops --backend et`).
set(OPAL_ET_ROOT "/opt/et" CACHE PATH "et-platform install prefix (runtime, deviceLayer, sysemu) for the ET drivers")
set(OPAL_ET_SYSEMU_DIR "${OPAL_SHARED_DIR}/et-sysemu" CACHE PATH "sw-sysemu build (bin/ lib/ include/) for the ET backend")
set(OPAL_ET_SYSEMU_FOUND OFF)
foreach(dir ${OPAL_ET_SYSEMU_DIR} ${OPAL_ET_ROOT})
  if(EXISTS ${dir}/lib/libsw-sysemu.a AND EXISTS ${dir}/include/sw-sysemu/sys_emu/sys_emu.h)
    get_filename_component(OPAL_ET_SYSEMU_ROOT ${dir} REALPATH)
    set(OPAL_ET_SYSEMU_FOUND ON)
    break()
  endif()
endforeach()
if(OPAL_ET_SYSEMU_FOUND)
  message(STATUS "ET backend: sysemu driver with ${OPAL_ET_SYSEMU_ROOT}/lib/libsw-sysemu.a")
  add_library(opal_et_sysemu STATIC IMPORTED)
  set_target_properties(opal_et_sysemu PROPERTIES IMPORTED_LOCATION ${OPAL_ET_SYSEMU_ROOT}/lib/libsw-sysemu.a)
  target_sources(opal_et PRIVATE ${CMAKE_SOURCE_DIR}/backends/et/driver/sysemu/sysemu_driver.cpp)
  # The emulator's headers (C++17, class layouts depend on SYS_EMU) only for its driver. GCC 12 at -O1 with
  # the sanitizers reports a false maybe-uninitialized inside libstdc++'s <regex> (std::function in the NFA).
  set_source_files_properties(${CMAKE_SOURCE_DIR}/backends/et/driver/sysemu/sysemu_driver.cpp PROPERTIES
    COMPILE_DEFINITIONS SYS_EMU
    INCLUDE_DIRECTORIES "${OPAL_ET_SYSEMU_ROOT}/include/sw-sysemu;${OPAL_ET_SYSEMU_ROOT}/include/sw-sysemu/sys_emu"
    COMPILE_OPTIONS "-isystem;${OPAL_ET_SYSEMU_ROOT}/include/sw-sysemu;-isystem;${OPAL_ET_SYSEMU_ROOT}/include/sw-sysemu/sys_emu;-Wno-maybe-uninitialized")
  target_compile_definitions(opal_et PRIVATE OPAL_ET_HAVE_SYSEMU OPAL_ET_SYSEMU_DIR="${OPAL_ET_SYSEMU_ROOT}")
  target_link_libraries(opal_et PUBLIC opal_et_sysemu)
else()
  message(STATUS "ET backend: no sw-sysemu in ${OPAL_ET_SYSEMU_DIR} or ${OPAL_ET_ROOT}: built without the sysemu driver")
endif()

# etrt: et-platform's top-level build installs the runtime (esperanto-tools-libs: CMake package
# `runtime`, target runtime::etrt_static) and the device layer (dev::IDeviceLayer, package
# `deviceLayer`) under one prefix, /opt/et by default (../shared/docs/et-soc.md §2). The driver
# includes <runtime/IRuntime.h> and <device-layer/IDeviceLayer.h> and calls
# IDeviceLayer::createPcieDeviceLayer(), so it needs both; the include directories come with the
# imported targets. Never configured here (no /opt/et on this project's machines).
find_package(runtime CONFIG QUIET PATHS ${OPAL_ET_ROOT} NO_DEFAULT_PATH)
find_package(deviceLayer CONFIG QUIET PATHS ${OPAL_ET_ROOT} NO_DEFAULT_PATH)
if(runtime_FOUND AND deviceLayer_FOUND AND TARGET runtime::etrt_static)
  message(STATUS "ET backend: etrt driver with the et-platform runtime in ${OPAL_ET_ROOT}")
  target_sources(opal_et PRIVATE ${CMAKE_SOURCE_DIR}/backends/et/driver/etrt/etrt_driver.cpp)
  target_compile_definitions(opal_et PRIVATE OPAL_ET_HAVE_ETRT)
  target_link_libraries(opal_et PUBLIC runtime::etrt_static)
  if(TARGET deviceLayer::deviceLayer)
    target_link_libraries(opal_et PUBLIC deviceLayer::deviceLayer)
  endif()
elseif(runtime_FOUND OR deviceLayer_FOUND)
  message(WARNING "ET backend: ${OPAL_ET_ROOT} has only part of et-platform (package runtime: ${runtime_FOUND}, "
                  "package deviceLayer: ${deviceLayer_FOUND}; the driver needs both and runtime::etrt_static): "
                  "built without the etrt driver")
else()
  message(STATUS "ET backend: no et-platform runtime under ${OPAL_ET_ROOT}: built without the etrt driver (no card)")
endif()

# The driver tests' own kernels (tests/et/kernels): a probe ELF per test
# case mode, built with Debian's cross GCC when it is installed.
find_program(OPAL_ET_TEST_CC riscv64-unknown-elf-gcc)
if(OPAL_BUILD_TESTS AND OPAL_ET_TEST_CC)
  set(k ${CMAKE_SOURCE_DIR}/tests/et/kernels)
  add_custom_command(OUTPUT ${CMAKE_BINARY_DIR}/et_test_kernels/driver_probe.elf
    COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_BINARY_DIR}/et_test_kernels
    COMMAND ${OPAL_ET_TEST_CC} -march=rv64imf -mabi=lp64f -mcmodel=medany -ffreestanding -nostdlib -fno-builtin
            -fno-zero-initialized-in-bss -O2 -Wall -T ${k}/link.ld -o ${CMAKE_BINARY_DIR}/et_test_kernels/driver_probe.elf
            ${k}/boot.S ${k}/driver_probe.c
    DEPENDS ${k}/boot.S ${k}/driver_probe.c ${k}/link.ld
    COMMENT "ET test kernel driver_probe.elf")
  add_custom_target(opal_et_test_kernels DEPENDS ${CMAKE_BINARY_DIR}/et_test_kernels/driver_probe.elf)
endif()
