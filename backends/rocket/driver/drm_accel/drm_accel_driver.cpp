// DRM accel implementation of the driver seam for the mainline `rocket`
// kernel driver: CREATE_BO (+ mmap at the returned fake offset), PREP_BO with
// an absolute deadline, FINI_BO, SUBMIT (per-job task and handle arrays owned
// by this call), GEM_CLOSE. SUBMIT ignores per-job errors in the kernel, so
// callers must validate jobs (the emulator's checks) and wait with deadlines.
#include "backends/rocket/driver/drm_accel/drm_accel_driver.h"

#include "core/error.h"

#if defined(__linux__)
#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "backends/rocket/driver/drm_accel/rocket_uapi.h"
#endif

namespace opal::rocket {

#if defined(__linux__)
namespace {

class DrmAccelDriver : public Driver {
 public:
  DrmAccelDriver(int fd, std::string device) : fd_(fd), device_(std::move(device)) {}
  ~DrmAccelDriver() override {
    for (auto& [h, m] : maps_) {
      munmap(m.ptr, m.size);
      uapi::drm_gem_close c{h, 0};
      ioctl(fd_, uapi::DRM_IOCTL_GEM_CLOSE, &c);
    }
    close(fd_);
  }
  std::string name() const override { return "rocket-drm:" + device_; }

  BoInfo create_bo(uint64_t size) override {
    if (size == 0 || size >= (uint64_t(1) << 32)) fail("rocket: CREATE_BO size {} out of range", size);
    uapi::drm_rocket_create_bo req{};
    req.size = uint32_t(size);
    call(uapi::DRM_IOCTL_ROCKET_CREATE_BO, &req, "CREATE_BO");
    void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, off_t(req.offset));
    if (p == MAP_FAILED) {
      const int err = errno;
      uapi::drm_gem_close c{req.handle, 0};
      ioctl(fd_, uapi::DRM_IOCTL_GEM_CLOSE, &c);
      fail("rocket: mmap of BO {} on {} failed: {}", req.handle, device_, std::strerror(err));
    }
    if (req.dma_address >= (uint64_t(1) << 32)) fail("rocket: BO IOVA 0x{:x} beyond 32 bits", req.dma_address);
    maps_[req.handle] = {p, size};
    return {req.handle, uint32_t(req.dma_address), size};
  }

  uint8_t* cpu_pointer(uint32_t handle) override { return static_cast<uint8_t*>(mapping(handle).ptr); }

  void prep_bo(uint32_t handle, int64_t deadline_ns) override {
    uapi::drm_rocket_prep_bo req{handle, 0, deadline_ns};
    call(uapi::DRM_IOCTL_ROCKET_PREP_BO, &req, "PREP_BO");
  }

  void fini_bo(uint32_t handle) override {
    uapi::drm_rocket_fini_bo req{handle, 0};
    call(uapi::DRM_IOCTL_ROCKET_FINI_BO, &req, "FINI_BO");
  }

  void submit(std::span<const abi::JobDesc> jobs) override {
    // Each job gets its own arrays, released once after the ioctl.
    std::vector<std::vector<uapi::drm_rocket_task>> tasks(jobs.size());
    std::vector<uapi::drm_rocket_job> kjobs(jobs.size());
    for (size_t j = 0; j < jobs.size(); j++) {
      for (const abi::TaskDesc& t : jobs[j].tasks) tasks[j].push_back({t.regcmd_iova, t.regcmd_count});
      uapi::drm_rocket_job& k = kjobs[j];
      k.tasks = reinterpret_cast<uintptr_t>(tasks[j].data());
      k.task_count = uint32_t(tasks[j].size());
      k.task_struct_size = sizeof(uapi::drm_rocket_task);
      k.in_bo_handles = reinterpret_cast<uintptr_t>(jobs[j].in_bo_handles.data());
      k.in_bo_handle_count = uint32_t(jobs[j].in_bo_handles.size());
      k.out_bo_handles = reinterpret_cast<uintptr_t>(jobs[j].out_bo_handles.data());
      k.out_bo_handle_count = uint32_t(jobs[j].out_bo_handles.size());
    }
    uapi::drm_rocket_submit req{};
    req.jobs = reinterpret_cast<uintptr_t>(kjobs.data());
    req.job_count = uint32_t(kjobs.size());
    req.job_struct_size = sizeof(uapi::drm_rocket_job);
    call(uapi::DRM_IOCTL_ROCKET_SUBMIT, &req, "SUBMIT");
  }

  void destroy_bo(uint32_t handle) override {
    Mapping m = mapping(handle);
    munmap(m.ptr, m.size);
    maps_.erase(handle);
    uapi::drm_gem_close c{handle, 0};
    call(uapi::DRM_IOCTL_GEM_CLOSE, &c, "GEM_CLOSE");
  }

 private:
  struct Mapping {
    void* ptr = nullptr;
    uint64_t size = 0;
  };
  Mapping mapping(uint32_t handle) const {
    auto it = maps_.find(handle);
    if (it == maps_.end()) fail("rocket: no BO with handle {} on {}", handle, device_);
    return it->second;
  }
  void call(unsigned long request, void* arg, const char* what) {
    int r;
    do r = ioctl(fd_, request, arg);
    while (r == -1 && (errno == EINTR || errno == EAGAIN));
    if (r == -1) fail("rocket: {} on {} failed: {}", what, device_, std::strerror(errno));
  }

  int fd_;
  std::string device_;
  std::map<uint32_t, Mapping> maps_;
};

}  // namespace

std::unique_ptr<Driver> open_drm_accel(const std::string& device) {
  const int fd = open(device.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) fail("rocket: cannot open {}: {}", device, std::strerror(errno));
  return std::make_unique<DrmAccelDriver>(fd, device);
}

#else

std::unique_ptr<Driver> open_drm_accel(const std::string& device) {
  fail("rocket: the drm_accel driver ({}) needs Linux", device);
}

#endif

}  // namespace opal::rocket
