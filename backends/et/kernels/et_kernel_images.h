// et_kernel_images.h - the ET-SoC-1 kernel images embedded in the binary (host side).
//
// Built by cmake/et_kernels.cmake from backends/et/kernels: "boot" (the M-mode boot stub
// that stands in for the firmware on the emulator, linked at ET_BOOT_ENTRY), one image per
// kernel family ("elementwise", "norm", "matmul", ...), "all" (every family; one load serves
// every kernel id) and "test" (every family plus test-only kernels). Kernel images are linked
// at ET_KERNEL_ENTRY and pick the kernel by EtArgsHeader.kernel_id (backends/et/abi).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

namespace opal::et {

// The ELF bytes of an image; empty if there is no such image or the kernels were not built.
std::span<const uint8_t> et_kernel_image(std::string_view name);
// Names of the embedded images (empty when the kernels were not built).
std::span<const std::string_view> et_kernel_image_names();
// Empty when the images are built; otherwise why not (shown by the backend as unavailable).
std::string_view et_kernels_unavailable_reason();

}  // namespace opal::et
