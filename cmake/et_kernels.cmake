# ET-SoC-1 device code (backends/et/kernels): cross-compiled with Debian's riscv64-unknown-elf-gcc
# (rv64imf, lp64f, ET instructions through .insn), linked into images, each image checked for the
# instructions ET-SoC-1 does not implement (scripts/check_et_kernels.py: the build fails naming
# the kernel and the instruction), then embedded into the library opal_et_kernels
# (backends/et/kernels/et_kernel_images.h: et_kernel_image(name), et_kernel_image_names()).
#
# Images: "boot" (the M-mode boot stub that stands in for the firmware on the emulator, at
# ET_BOOT_ENTRY), one per kernel family (U-mode, at ET_KERNEL_ENTRY, each with its entry
# table), "all" (every family in one image: one load serves every launch, and what a fused
# dispatcher builds on) and "test" (test-only kernels).
# Without the cross compiler the library still builds, empty, and says why
# (et_kernels_unavailable_reason()); the ET backend then reports itself unavailable.

set(OPAL_ET_KDIR ${CMAKE_SOURCE_DIR}/backends/et/kernels)
set(OPAL_ET_OUT ${CMAKE_BINARY_DIR}/et_kernels)
# family name -> source (one per op family)
set(OPAL_ET_FAMILIES elementwise norm matmul get_rows rope attention kv_store reduce fused)

find_program(OPAL_ET_CC riscv64-unknown-elf-gcc)
find_program(OPAL_ET_OBJCOPY riscv64-unknown-elf-objcopy)
find_program(OPAL_ET_OBJDUMP riscv64-unknown-elf-objdump)
find_package(Python3 COMPONENTS Interpreter)

set(OPAL_ET_KERNELS_BUILT OFF)
if(OPAL_ET_CC AND OPAL_ET_OBJCOPY AND OPAL_ET_OBJDUMP AND Python3_Interpreter_FOUND)
  set(OPAL_ET_KERNELS_BUILT ON)
  message(STATUS "ET kernels: building with ${OPAL_ET_CC}")
else()
  set(OPAL_ET_MISSING_REASON "riscv64-unknown-elf-gcc/objcopy/objdump or python3 not found at configure time (install gcc-riscv64-unknown-elf: scripts/setup.sh)")
  message(STATUS "ET kernels: NOT built: ${OPAL_ET_MISSING_REASON}; the ET backend will be unavailable")
endif()

if(OPAL_ET_KERNELS_BUILT)
  # -mno-fdiv: no fdiv.s / fsqrt.s from the compiler (a division in C becomes an undefined
  # __divsf3 at link time instead); -ffp-contract=off: the math helpers fuse only where written.
  set(OPAL_ET_CFLAGS -march=rv64imf -mabi=lp64f -mcmodel=medany -mno-fdiv -ffreestanding -nostdlib -fno-builtin
      -fno-zero-initialized-in-bss -fno-pic -fno-common -ffp-contract=off -O2 -std=c11 -Wall -Wextra -Werror
      -I${CMAKE_SOURCE_DIR})
  set(OPAL_ET_LDFLAGS -nostdlib -nostartfiles -Wl,--no-warn-rwx-segments -Wl,--gc-sections)
  file(MAKE_DIRECTORY ${OPAL_ET_OUT}/obj)
  file(GLOB OPAL_ET_HEADERS ${OPAL_ET_KDIR}/*.h ${CMAKE_SOURCE_DIR}/backends/et/abi/*.h)

  # compile one source -> object
  function(opal_et_object out src)
    get_filename_component(n ${src} NAME)
    set(o ${OPAL_ET_OUT}/obj/${n}.o)
    add_custom_command(OUTPUT ${o}
      COMMAND ${OPAL_ET_CC} ${OPAL_ET_CFLAGS} -ffunction-sections -c ${src} -o ${o}
      DEPENDS ${src} ${OPAL_ET_HEADERS}
      COMMENT "ET kernel object ${n}" VERBATIM)
    set(${out} ${o} PARENT_SCOPE)
  endfunction()

  opal_et_object(OPAL_ET_START_O ${OPAL_ET_KDIR}/start.S)
  opal_et_object(OPAL_ET_DISPATCH_O ${OPAL_ET_KDIR}/dispatch.c)
  opal_et_object(OPAL_ET_BOOT_S_O ${OPAL_ET_KDIR}/boot/boot.S)
  opal_et_object(OPAL_ET_BOOT_C_O ${OPAL_ET_KDIR}/boot/boot.c)
  opal_et_object(OPAL_ET_TEST_O ${OPAL_ET_KDIR}/test_kernels.c)
  set(OPAL_ET_FAMILY_OBJS)
  foreach(f ${OPAL_ET_FAMILIES})
    opal_et_object(o ${OPAL_ET_KDIR}/${f}.c)
    set(OPAL_ET_OBJ_${f} ${o})
    list(APPEND OPAL_ET_FAMILY_OBJS ${o})
  endforeach()

  # link, strip the attributes section (sys_emu's loader rejects it), check the instructions
  set(OPAL_ET_ELFS)
  set(OPAL_ET_IMAGE_NAMES)
  function(opal_et_image name script)
    set(elf ${OPAL_ET_OUT}/${name}.elf)
    add_custom_command(OUTPUT ${elf}
      COMMAND ${OPAL_ET_CC} ${OPAL_ET_CFLAGS} ${OPAL_ET_LDFLAGS} -T ${script} -o ${elf} ${ARGN}
      COMMAND ${OPAL_ET_OBJCOPY} --remove-section=.riscv.attributes ${elf}
      COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/scripts/check_et_kernels.py --objdump ${OPAL_ET_OBJDUMP} ${elf}
      DEPENDS ${ARGN} ${script} ${CMAKE_SOURCE_DIR}/scripts/check_et_kernels.py
      COMMENT "ET kernel image ${name} (link + unimplemented-instruction check)" VERBATIM)
    set(OPAL_ET_ELFS ${OPAL_ET_ELFS} ${elf} PARENT_SCOPE)
    set(OPAL_ET_IMAGE_NAMES ${OPAL_ET_IMAGE_NAMES} ${name} PARENT_SCOPE)
  endfunction()

  opal_et_image(boot ${OPAL_ET_KDIR}/boot/boot.ld ${OPAL_ET_BOOT_S_O} ${OPAL_ET_BOOT_C_O})
  foreach(f ${OPAL_ET_FAMILIES})
    opal_et_image(${f} ${OPAL_ET_KDIR}/kernel.ld ${OPAL_ET_START_O} ${OPAL_ET_DISPATCH_O} ${OPAL_ET_OBJ_${f}})
  endforeach()
  opal_et_image(all ${OPAL_ET_KDIR}/kernel.ld ${OPAL_ET_START_O} ${OPAL_ET_DISPATCH_O} ${OPAL_ET_FAMILY_OBJS})
  opal_et_image(test ${OPAL_ET_KDIR}/kernel.ld ${OPAL_ET_START_O} ${OPAL_ET_DISPATCH_O} ${OPAL_ET_TEST_O}
                ${OPAL_ET_FAMILY_OBJS})

  # The negative check: an image with an fdiv.s must be rejected (ctest et_kernels_check_rejects_fdiv).
  opal_et_object(OPAL_ET_BAD_O ${CMAKE_SOURCE_DIR}/tests/et_kernels/bad_fdiv_kernel.c)
  set(OPAL_ET_BAD_ELF ${OPAL_ET_OUT}/bad_fdiv.elf)
  add_custom_command(OUTPUT ${OPAL_ET_BAD_ELF}
    COMMAND ${OPAL_ET_CC} ${OPAL_ET_CFLAGS} ${OPAL_ET_LDFLAGS} -T ${OPAL_ET_KDIR}/kernel.ld -o ${OPAL_ET_BAD_ELF}
            ${OPAL_ET_START_O} ${OPAL_ET_DISPATCH_O} ${OPAL_ET_BAD_O}
    DEPENDS ${OPAL_ET_START_O} ${OPAL_ET_DISPATCH_O} ${OPAL_ET_BAD_O} ${OPAL_ET_KDIR}/kernel.ld VERBATIM)
  add_custom_target(opal_et_bad_fdiv_elf DEPENDS ${OPAL_ET_BAD_ELF})

  set(OPAL_ET_GEN ${OPAL_ET_OUT}/et_kernel_images.cpp)
  add_custom_command(OUTPUT ${OPAL_ET_GEN}
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/scripts/embed_et_kernels.py ${OPAL_ET_GEN} ${OPAL_ET_ELFS}
    DEPENDS ${OPAL_ET_ELFS} ${CMAKE_SOURCE_DIR}/scripts/embed_et_kernels.py
    COMMENT "Embedding ET kernel images" VERBATIM)
else()
  set(OPAL_ET_GEN ${OPAL_ET_OUT}/et_kernel_images.cpp)
  file(MAKE_DIRECTORY ${OPAL_ET_OUT})
  file(WRITE ${OPAL_ET_GEN}.in
"// Generated by cmake/et_kernels.cmake: no cross compiler, no ET kernel images.\n\
#include \"backends/et/kernels/et_kernel_images.h\"\n\
namespace opal::et {\n\
std::span<const uint8_t> et_kernel_image(std::string_view) { return {}; }\n\
std::span<const std::string_view> et_kernel_image_names() { return {}; }\n\
std::string_view et_kernels_unavailable_reason() { return \"${OPAL_ET_MISSING_REASON}\"; }\n\
}  // namespace opal::et\n")
  configure_file(${OPAL_ET_GEN}.in ${OPAL_ET_GEN} COPYONLY)
endif()

add_library(opal_et_kernels STATIC ${OPAL_ET_GEN})
target_include_directories(opal_et_kernels PUBLIC ${CMAKE_SOURCE_DIR})
