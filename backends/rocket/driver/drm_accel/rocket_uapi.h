// Opal's own declaration of the mainline `rocket` DRM accel uAPI (Linux 6.18,
// include/uapi/drm/rocket_accel.h, 4-ioctl revision): struct layouts and ioctl
// numbers written from the header's documented facts, so the backend builds
// without kernel headers. All structs are naturally aligned; sizes are checked.
#pragma once
#include <cstdint>

namespace opal::rocket::uapi {

struct drm_rocket_create_bo {
  uint32_t size;         // in: bytes
  uint32_t handle;       // out: GEM handle
  uint64_t dma_address;  // out: NPU IOVA, private to this fd
  uint64_t offset;       // out: fake offset for mmap()
};

struct drm_rocket_prep_bo {
  uint32_t handle;
  uint32_t reserved;   // 0
  int64_t timeout_ns;  // absolute CLOCK_MONOTONIC deadline
};

struct drm_rocket_fini_bo {
  uint32_t handle;
  uint32_t reserved;  // 0
};

struct drm_rocket_task {
  uint32_t regcmd;        // IOVA of the task's regcmd entries
  uint32_t regcmd_count;  // 64-bit entries, tail included
};

struct drm_rocket_job {
  uint64_t tasks;           // pointer to drm_rocket_task[task_count]
  uint64_t in_bo_handles;   // pointer to uint32_t[in_bo_handle_count]
  uint64_t out_bo_handles;  // pointer to uint32_t[out_bo_handle_count]
  uint32_t task_count;
  uint32_t task_struct_size;
  uint32_t in_bo_handle_count;
  uint32_t out_bo_handle_count;
};

struct drm_rocket_submit {
  uint64_t jobs;  // pointer to drm_rocket_job[job_count]
  uint32_t job_count;
  uint32_t job_struct_size;
  uint64_t reserved;  // 0
};

struct drm_gem_close {
  uint32_t handle;
  uint32_t pad;
};

static_assert(sizeof(drm_rocket_create_bo) == 24);
static_assert(sizeof(drm_rocket_prep_bo) == 16);
static_assert(sizeof(drm_rocket_fini_bo) == 8);
static_assert(sizeof(drm_rocket_task) == 8);
static_assert(sizeof(drm_rocket_job) == 40);
static_assert(sizeof(drm_rocket_submit) == 24);

// Linux _IOC encoding (asm-generic: nr 8 bits, type 8, size 14, dir 2).
constexpr uint32_t kIocWrite = 1, kIocRead = 2;
constexpr unsigned long ioc(uint32_t dir, uint32_t type, uint32_t nr, uint32_t size) {
  return (unsigned long)((dir << 30) | (size << 16) | (type << 8) | nr);
}
constexpr uint32_t kDrmIoctlBase = 'd';
constexpr uint32_t kDrmCommandBase = 0x40;

constexpr unsigned long DRM_IOCTL_ROCKET_CREATE_BO =
    ioc(kIocRead | kIocWrite, kDrmIoctlBase, kDrmCommandBase + 0x00, sizeof(drm_rocket_create_bo));
constexpr unsigned long DRM_IOCTL_ROCKET_SUBMIT =
    ioc(kIocWrite, kDrmIoctlBase, kDrmCommandBase + 0x01, sizeof(drm_rocket_submit));
constexpr unsigned long DRM_IOCTL_ROCKET_PREP_BO =
    ioc(kIocWrite, kDrmIoctlBase, kDrmCommandBase + 0x02, sizeof(drm_rocket_prep_bo));
constexpr unsigned long DRM_IOCTL_ROCKET_FINI_BO =
    ioc(kIocWrite, kDrmIoctlBase, kDrmCommandBase + 0x03, sizeof(drm_rocket_fini_bo));
constexpr unsigned long DRM_IOCTL_GEM_CLOSE = ioc(kIocWrite, kDrmIoctlBase, 0x09, sizeof(drm_gem_close));

}  // namespace opal::rocket::uapi
