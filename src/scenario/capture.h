// src/scenario/capture.h — `[inputs] from = "capture.pt"`: a kernel call's arguments saved by
// python/lav/capture.py (torch.save's zip format), read in C++ without Python.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

namespace lav::scenario {

struct Capture {
    std::string path;
    std::string function;                        ///< the callee's qualified name
    std::map<std::string, at::Tensor> tensors;   ///< by argument name, on the CPU, as saved
    std::map<std::string, std::string> devices;  ///< where each tensor was ("cuda:0")
    std::optional<bool> head_first;              ///< the call's head_first argument, if any
};

/// What makes a file no capture lav can replay; the message names the file and the problem.
struct CaptureError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

/// Reads the capture at `path`: every tensor with its dtype, shape, strides and values. A file
/// read before and still held by a case is shared, not read again. Throws CaptureError for a
/// file that is missing, not a tensor archive, or not a dict as capture.py writes.
std::shared_ptr<const Capture> read_capture(const std::string& path);

}  // namespace lav::scenario
