// staging: how an engine that moves host memory (Gloo, MPI, self) carries an op on device buffers.
// The bytes the op reads are copied into page-locked host memory, the engine runs on the host
// copies, and the bytes it writes are copied back; the copies run on the staging's own stream
// (never the caller's compute stream) and are synchronised before the op completes. With
// Device::kCpu the "device" side is host memory: tests run the same path on a machine without a GPU.
// Guarantees:
//  - The engine sees exactly the bytes the device buffers held when the op started; the device
//    buffers hold exactly the engine's result when stage_out returns (then bytes outside `write`
//    are untouched).
//  - In-place forms stay in place on the host copy: when the read and write ranges overlap
//    (all-reduce, broadcast, reduce-scatter with out = in + rank*shard, all-gather with
//    in = out + rank*shard) they share one host block at the same relative offsets.
//  - Host blocks come from a pool and go back to it when their StagedCopy dies: after warm-up no
//    allocation (pinned allocations are slow and synchronise the device).
//  - Thread-safe (a group's ops are staged on its thread, but a StagedCopy may die elsewhere).
#pragma once
#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

#include "base/device.h"  // Device, Stream

namespace ms {

struct StageRange {
  const void* p = nullptr;
  size_t bytes = 0;
};

class StagedCopy;

class HostStaging {
 public:
  // device: where the staged buffers live (kCuda: pinned host blocks and a copy stream of our own).
  explicit HostStaging(Device device);
  ~HostStaging();
  HostStaging(const HostStaging&) = delete;
  HostStaging& operator=(const HostStaging&) = delete;

  Device device() const { return device_; }
  // Copies `read` into a host block that also holds `write` (either may be empty) and waits for
  // the copy; the result maps device addresses inside read or write to their host copies.
  std::shared_ptr<StagedCopy> stage_in(StageRange read, StageRange write);
  // Copies the write range of `c` back to the device and waits for the copy.
  void stage_out(const StagedCopy& c);
  size_t allocations() const;  // host blocks allocated so far (tests: stays constant once warm)
  struct Pool;  // staging.cpp

 private:
  // A copy on the staging's stream (created on first use), waited for.
  void copy(void* dst, Device dd, const void* src, Device sd, size_t bytes);
  Device device_;
  Stream stream_{};  // kCuda: created on first use
  std::shared_ptr<Pool> pool_;
};

// One op's host copy (staging.h's HostStaging::stage_in).
class StagedCopy {
 public:
  ~StagedCopy();
  StagedCopy(const StagedCopy&) = delete;
  StagedCopy& operator=(const StagedCopy&) = delete;
  // The host address standing for device address p, which lies inside the read or write range
  // (or is their end); nullptr stays nullptr.
  void* host(const void* p) const;

 private:
  friend class HostStaging;
  StagedCopy() = default;
  std::shared_ptr<HostStaging::Pool> pool_;
  char* block_ = nullptr;
  size_t capacity_ = 0;
  StageRange read_, write_;
  char* read_host_ = nullptr;
  char* write_host_ = nullptr;
};

}  // namespace ms
