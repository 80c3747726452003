// kernels/common/glue/cuda_device.cpp — what a CUDA build tells a report of the GPU it runs on.
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <map>
#include <string>

#include "core/row.h"

namespace lav::kernels {
namespace {

std::string cuda_version(int v) {  // 13000 -> "13.0"
    return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
}

// The driver's own version ("580.159.04") is NVML's to give; NVML is opened at run time, so a
// machine without it still runs lav and reports the driver by its CUDA version alone
std::string nvml_driver_version() {
    void* nvml = dlopen("libnvidia-ml.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (nvml == nullptr) return "";
    using Init = int (*)();
    using Version = int (*)(char*, unsigned);
    const auto init = reinterpret_cast<Init>(dlsym(nvml, "nvmlInit_v2"));
    const auto version = reinterpret_cast<Version>(dlsym(nvml, "nvmlSystemGetDriverVersion"));
    const auto shutdown = reinterpret_cast<Init>(dlsym(nvml, "nvmlShutdown"));
    std::string out;
    char text[96] = {};
    if (init != nullptr && version != nullptr && shutdown != nullptr && init() == 0) {
        if (version(text, sizeof text) == 0) out = text;
        shutdown();
    }
    dlclose(nvml);
    return out;
}

std::map<std::string, std::string> describe_gpu() {
    std::map<std::string, std::string> out;
    int runtime = 0, driver = 0, count = 0;
    if (cudaRuntimeGetVersion(&runtime) == cudaSuccess) out["cuda_runtime"] = cuda_version(runtime);
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        cudaGetLastError();  // a machine without a GPU leaves no error behind for later calls
        return out;
    }
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) {
        out["gpu"] = prop.name + (count > 1 ? " (device 0 of " + std::to_string(count) + ")" : "");
        out["compute_capability"] = std::to_string(prop.major) + "." + std::to_string(prop.minor);
    }
    if (cudaDriverGetVersion(&driver) == cudaSuccess) {
        const std::string nvml = nvml_driver_version();
        out["cuda_driver"] = (nvml.empty() ? "" : nvml + ", ") + "CUDA " + cuda_version(driver);
    }
    return out;
}

}  // namespace

void add_cuda_device_rows(RowTable& table) { table.set_device_probe(describe_gpu); }

}  // namespace lav::kernels
