// src/scenario/capture.cpp — torch.save's zip archive through LibTorch's own reader and unpickler.
#include "scenario/capture.h"

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/import_read.h>

#include <filesystem>
#include <mutex>

namespace lav::scenario {
namespace {

const c10::IValue* entry(const c10::Dict<c10::IValue, c10::IValue>& dict, const char* key) {
    const auto found = dict.find(c10::IValue(std::string(key)));
    return found == dict.end() ? nullptr : &found->value();
}

}  // namespace

std::shared_ptr<const Capture> read_capture(const std::string& path) {
    // cases of one file share the file's tensors: a capture may be gigabytes
    static std::mutex mutex;
    static std::map<std::string, std::weak_ptr<const Capture>> read;
    const std::lock_guard<std::mutex> lock(mutex);
    if (auto held = read[path].lock()) return held;

    const auto fail = [&](const std::string& why) { throw CaptureError(path + ": " + why); };
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec)) fail("no such file");
    c10::IValue root;
    try {
        caffe2::serialize::PyTorchStreamReader reader(path);
        root = torch::jit::readArchiveAndTensors("data", "", "data/", std::nullopt, std::nullopt,
                                                 at::kCPU, reader);
    } catch (const c10::Error& e) {
        const std::string what = e.what_without_backtrace();
        fail("not a tensor archive as torch.save writes it (" + what.substr(0, what.find('\n')) +
             "); make one with python/lav/capture.py");
    }
    if (!root.isGenericDict()) fail("holds a " + root.tagKind() + ", not capture.py's dict");
    const auto dict = root.toGenericDict();
    const c10::IValue* format = entry(dict, "lav_capture");
    const c10::IValue* tensors = entry(dict, "tensors");
    if (!format || !format->isInt() || !tensors || !tensors->isGenericDict())
        fail("not a capture made by python/lav/capture.py (no lav_capture and tensors keys)");
    if (format->toInt() != 1)
        fail("capture format " + std::to_string(format->toInt()) + "; this lav reads format 1");

    auto capture = std::make_shared<Capture>();
    capture->path = path;
    if (const c10::IValue* fn = entry(dict, "function"); fn && fn->isString())
        capture->function = fn->toStringRef();
    for (const auto& item : tensors->toGenericDict()) {
        if (!item.key().isString() || !item.value().isTensor())
            fail("tensors holds " + item.key().tagKind() + " -> " + item.value().tagKind() +
                 ", not a name and a tensor");
        capture->tensors[item.key().toStringRef()] = item.value().toTensor();
    }
    if (const c10::IValue* devices = entry(dict, "devices"); devices && devices->isGenericDict())
        for (const auto& item : devices->toGenericDict())
            if (item.key().isString() && item.value().isString())
                capture->devices[item.key().toStringRef()] = item.value().toStringRef();
    if (const c10::IValue* kwargs = entry(dict, "kwargs"); kwargs && kwargs->isGenericDict())
        if (const c10::IValue* head_first = entry(kwargs->toGenericDict(), "head_first");
            head_first && head_first->isBool())
            capture->head_first = head_first->toBool();
    read[path] = capture;
    return capture;
}

}  // namespace lav::scenario
