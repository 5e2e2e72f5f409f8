// The etrt driver: the driver seam on et-platform's runtime (rt::IRuntime,
// ../shared/docs/et-soc.md §2.2) for a real card: mallocDevice/freeDevice,
// memcpyHostToDevice/DeviceToHost on one stream, loadCode, kernelLaunch with
// a shire mask and the argument blob (the runtime copies it to the device
// and the firmware passes a0 = blob, a1 = environment; a tensor-unit launch's
// blob asks the kernel entry to turn the L1 scratchpad on: card_launch_blob),
// waitForStream and
// retrieveStreamErrors. UNTESTED: compiled only where CMake finds /opt/et,
// which this repository's CI does not have; it is kept small so that what it
// assumes of the runtime API is easy to check on a machine with a card.
#include "backends/et/driver/etrt/etrt_driver.h"

#include <chrono>
#include <map>

#include <device-layer/IDeviceLayer.h>
#include <runtime/IRuntime.h>

#include "backends/et/driver/elf_image.h"
#include "core/error.h"

namespace opal::et {
namespace {

class EtrtDriver final : public Driver {
 public:
  explicit EtrtDriver(const DriverOptions& o) {
    layer_ = dev::IDeviceLayer::createPcieDeviceLayer();
    rt_ = rt::IRuntime::create(layer_);
    auto devices = rt_->getDevices();
    if (devices.empty()) fail("et etrt: no ET-SoC-1 device found");
    dev_ = devices.front();
    stream_ = rt_->createStream(dev_);
    auto props = rt_->getDeviceProperties(dev_);
    info_.name = "etrt";
    info_.harts.shire_mask = props.computeMinionShireMask_ & 0xFFFFFFFFull;
    info_.harts.minion_mask = 0xFFFFFFFF;
    info_.harts.threads = 2;
    info_.memory_bytes = props.memorySize_;
    info_.description = fmt::format("ET-SoC-1 card through the et-platform runtime ({} MHz, {} shires)",
                                    props.frequency_, props.availableShires_);
  }
  ~EtrtDriver() override { rt_->destroyStream(stream_); }
  const DriverInfo& info() const override { return info_; }

  DevAddr alloc(uint64_t size, uint64_t align) override {
    auto* p = rt_->mallocDevice(dev_, size, align);
    DevAddr a = reinterpret_cast<DevAddr>(p);
    std::vector<uint8_t> zeros(size);
    copy_in(a, zeros.data(), size);
    sizes_[a] = size;
    return a;
  }
  void free(DevAddr a) override {
    if (!sizes_.erase(a)) fail("et etrt: free of {:#x}: not an allocation", a);
    rt_->freeDevice(dev_, reinterpret_cast<std::byte*>(a));
  }
  void copy_in(DevAddr dst, const void* src, uint64_t n) override {
    rt_->memcpyHostToDevice(stream_, static_cast<const std::byte*>(src), reinterpret_cast<std::byte*>(dst), n);
    sync("copy_in");
  }
  void copy_out(DevAddr src, void* dst, uint64_t n) override {
    rt_->memcpyDeviceToHost(stream_, reinterpret_cast<const std::byte*>(src), static_cast<std::byte*>(dst), n);
    sync("copy_out");
  }
  CodeId load_code(std::string_view name, std::span<const uint8_t> image) override {
    auto it = ids_.find(std::string(name));
    if (it != ids_.end()) return it->second;
    parse_elf(name, image);
    auto r = rt_->loadCode(stream_, reinterpret_cast<const std::byte*>(image.data()), image.size());
    sync("loadCode");
    kernels_.push_back(r.kernel_);
    return ids_[std::string(name)] = CodeId(kernels_.size() - 1);
  }
  void launch(const LaunchRequest& rq) override {
    if (rq.code >= kernels_.size()) fail("et etrt: launch of '{}': code id {} was never loaded", rq.kernel, rq.code);
    rt::KernelLaunchOptions lo;
    lo.setShireMask(rq.harts.shire_mask);
    lo.setBarrier(true);
    // a tensor-unit launch: the firmware splits the L1, the kernel's entry turns the scratchpad on
    const std::vector<uint8_t> blob = card_launch_blob(rq);
    rt_->kernelLaunch(stream_, kernels_[rq.code], reinterpret_cast<const std::byte*>(blob.data()), blob.size(), lo);
    pending_.push_back(rq.kernel);
    timeout_s_ = std::max(timeout_s_, rq.timeout_s);
  }
  LaunchResult wait() override {
    LaunchResult r;
    if (!pending_.empty()) r.kernel = pending_.back();
    auto t0 = std::chrono::steady_clock::now();
    bool done = rt_->waitForStream(stream_, std::chrono::seconds(int64_t(timeout_s_ + 1)));
    r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!done) {
      r.status = LaunchStatus::Timeout;
      rt_->abortStream(stream_);
    }
    for (const auto& e : rt_->retrieveStreamErrors(stream_)) {
      if (r.status == LaunchStatus::Ok) r.status = LaunchStatus::DeviceError;
      r.message += fmt::format("{}error code {}", r.message.empty() ? "" : "; ", int(e.errorCode_));
    }
    pending_.clear();
    timeout_s_ = 0;
    return r;
  }

 private:
  void sync(const char* what) {
    if (!rt_->waitForStream(stream_, std::chrono::seconds(30))) fail("et etrt: {} timed out", what);
  }
  std::shared_ptr<dev::IDeviceLayer> layer_;
  std::unique_ptr<rt::IRuntime> rt_;
  rt::DeviceId dev_{};
  rt::StreamId stream_{};
  DriverInfo info_;
  std::map<DevAddr, uint64_t> sizes_;
  std::map<std::string, CodeId> ids_;
  std::vector<rt::KernelId> kernels_;
  std::vector<std::string> pending_;
  double timeout_s_ = 0;
};

}  // namespace

std::unique_ptr<Driver> open_etrt_driver(const DriverOptions& options) { return std::make_unique<EtrtDriver>(options); }

}  // namespace opal::et
