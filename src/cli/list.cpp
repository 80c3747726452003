// src/cli/list.cpp — `lav list`: the families, variants, backends and dtypes this build can run.
#include <iostream>

#include "cli/commands.h"
#include "core/build_info.h"
#include "harness/backend.h"

namespace lav::cli {
namespace {

std::string join(const std::vector<std::string>& items) {
    std::string out;
    for (const auto& s : items) out += (out.empty() ? "" : ", ") + s;
    return out;
}

}  // namespace

int cmd_list(const std::vector<std::string>& args) {
    po::options_description options("lav list options");
    po::variables_map vm;
    if (!parse_args(args, options, {}, "usage: lav list", vm)) return 0;

    harness::Registry registry;
    harness::register_all(registry);
    std::cout << "lav " << kLavVersion << " (" << kGitCommit << "), LibTorch " << kTorchVersion
              << "\n\nbackends: cpu"
              << (kCudaBuild ? (harness::cuda_available() ? ", cuda" : ", cuda (no device visible)")
                             : "")
              << "\ninput and output dtypes: fp32, fp16, bf16"
              << "\ngate and state dtypes:   fp32, fp16, bf16\nlayouts: head_first, head_last\n\n";
    for (const auto& f : registry.families()) {
        std::cout << f.info.name << "  — " << f.info.summary << "\n"
                  << "  variants: " << join(f.info.variants) << "\n"
                  << (f.cuda_variants.empty() ? "" : "  cuda:     " + join(f.cuda_variants) + "\n")
                  << "  passes:   fwd, bwd\n"
                  << "  inputs:   " << join(f.info.inputs) << "\n"
                  << "  measured: " << join(f.info.measured) << "\n";
        for (const auto& [name, values] : f.info.options)
            std::cout << "  option " << name << ": " << join(values) << " (default "
                      << values.front() << ")\n";
    }
    return 0;
}

}  // namespace lav::cli
