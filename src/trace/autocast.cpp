// src/trace/autocast.cpp — AutocastGuard.
#include "trace/autocast.h"

#include <ATen/autocast_mode.h>

namespace lav::trace {

AutocastGuard::AutocastGuard(at::DeviceType device, bool enabled,
                             std::optional<at::ScalarType> dtype)
    : device_(device),
      was_enabled_(at::autocast::is_autocast_enabled(device)),
      was_dtype_(at::autocast::get_autocast_dtype(device)) {
    at::autocast::set_autocast_enabled(device, enabled);
    if (dtype) at::autocast::set_autocast_dtype(device, *dtype);
    at::autocast::increment_nesting();
}

AutocastGuard::~AutocastGuard() {
    // as torch.autocast's __exit__: the cast cache lives as long as the outermost region
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    at::autocast::set_autocast_enabled(device_, was_enabled_);
    at::autocast::set_autocast_dtype(device_, was_dtype_);
}

}  // namespace lav::trace
