// src/trace/autocast.h — an autocast region as a scope, as torch.autocast opens one: the
// prologue runs user ops in it, and tests trace ops under it.
#pragma once

#include <ATen/ATen.h>

#include <optional>

namespace lav::trace {

/// An autocast region on one device type for its lifetime: sets whether autocast is enabled and
/// its lower precision type, and restores both (and the nesting count and cast cache, as
/// torch.autocast does) when it ends.
class AutocastGuard {
  public:
    /// `dtype`: the lower precision type when `enabled`; nullopt keeps the current one.
    AutocastGuard(at::DeviceType device, bool enabled, std::optional<at::ScalarType> dtype);
    ~AutocastGuard();
    AutocastGuard(const AutocastGuard&) = delete;
    AutocastGuard& operator=(const AutocastGuard&) = delete;

  private:
    at::DeviceType device_;
    bool was_enabled_;
    at::ScalarType was_dtype_;
};

}  // namespace lav::trace
