// src/cli/list.cpp — `lav list`: the families, variants, rows and dtypes this build can run, as
// text or as JSON (what the ops library's checks and the benchmark read).
#include <iostream>
#include <sstream>

#include "cli/commands.h"
#include "core/build_info.h"
#include "core/error.h"
#include "harness/backend.h"

namespace lav::cli {
namespace {

std::string join(const std::vector<std::string>& items) {
    std::string out;
    for (const auto& s : items) out += (out.empty() ? "" : ", ") + s;
    return out;
}

const char* role_name(harness::Role r) {
    switch (r) {
        case harness::Role::input:
            return "input";
        case harness::Role::gate:
            return "gate";
        case harness::Role::state:
            return "state";
        case harness::Role::output:
            return "output";
        case harness::Role::cotangent:
            return "cotangent";
    }
    return "";
}

const char* dtype_setting_name(harness::DTypeSetting d) {
    switch (d) {
        case harness::DTypeSetting::inputs:
            return "inputs";
        case harness::DTypeSetting::gate:
            return "gate";
        case harness::DTypeSetting::state:
            return "state";
        case harness::DTypeSetting::output:
            return "output";
    }
    return "";
}

// names, options and shapes are identifiers and letters: quoting is all they need
std::string quoted(const std::string& s) {
    std::string out = "\"";
    for (char ch : s) {
        if (ch == '"' || ch == '\\') out += '\\';
        out += ch;
    }
    return out + "\"";
}

std::string quoted_list(const std::vector<std::string>& items) {
    std::string out = "[";
    for (size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + quoted(items[i]);
    return out + "]";
}

// "chunk (cpu, cuda), recurrent (cpu)": the backends each variant has a row on
std::string rows_of(const harness::Registry& registry, const harness::Family& f) {
    std::vector<std::string> parts;
    for (const auto& variant : f.variants) {
        std::vector<std::string> backends;
        for (const Row& r : registry.rows().rows())
            if (r.family == f.name && r.variant == variant) backends.push_back(r.backend);
        parts.push_back(variant + " (" + join(backends) + ")");
    }
    return join(parts);
}

void print_text(const harness::Registry& registry) {
    std::cout << "lav " << kLavVersion << " (" << kGitCommit << "), LibTorch " << kTorchVersion
              << "\n\nbackends: " << join(registry.backends())
              << (kCudaBuild && !harness::cuda_available() ? " (no CUDA device visible)" : "")
              << "\ninput and output dtypes: fp32, fp16, bf16"
              << "\ngate and state dtypes:   fp32, fp16, bf16\nlayouts: head_first, head_last\n\n";
    for (const auto& f : registry.families()) {
        const scenario::FamilyInfo info = harness::info_of(f);
        std::cout << f.name << "  — " << f.summary << "\n"
                  << "  variants: " << rows_of(registry, f) << "\n"
                  << "  passes:   fwd, bwd\n"
                  << "  inputs:   " << join(info.inputs) << "\n"
                  << "  measured: " << join(info.measured) << "\n";
        for (const auto& [name, values] : f.options)
            std::cout << "  option " << name << ": " << join(values) << " (default "
                      << values.front() << ")\n";
        for (const auto& [component, tensors] : f.state_components)
            std::cout << "  state " << component << ": " << join(tensors) << "\n";
    }
}

void print_json(const harness::Registry& registry) {
    std::ostringstream out;
    out << "{\"lav\": " << quoted(kLavVersion) << ", \"commit\": " << quoted(kGitCommit)
        << ", \"backends\": " << quoted_list(registry.backends()) << ", \"families\": [";
    for (size_t i = 0; i < registry.families().size(); ++i) {
        const harness::Family& f = registry.families()[i];
        out << (i ? ", " : "") << "\n  {\"name\": " << quoted(f.name)
            << ", \"summary\": " << quoted(f.summary)
            << ", \"variants\": " << quoted_list(f.variants) << ", \"options\": {";
        size_t n = 0;
        for (const auto& [name, values] : f.options)
            out << (n++ ? ", " : "") << quoted(name) << ": " << quoted_list(values);
        out << "}, \"tensors\": [";
        for (size_t t = 0; t < f.tensors.size(); ++t) {
            const harness::TensorDecl& d = f.tensors[t];
            out << (t ? ", " : "") << "{\"name\": " << quoted(d.name)
                << ", \"role\": " << quoted(role_name(d.role)) << ", \"shape\": " << quoted(d.shape)
                << ", \"dtype\": " << quoted(dtype_setting_name(d.dtype))
                << ", \"when\": " << quoted(d.when) << ", \"grad\": " << (d.grad ? "true" : "false")
                << "}";
        }
        out << "], \"rows\": [";
        n = 0;
        for (const Row& r : registry.rows().rows())
            if (r.family == f.name)
                out << (n++ ? ", " : "") << "{\"variant\": " << quoted(r.variant)
                    << ", \"backend\": " << quoted(r.backend)
                    << ", \"device\": " << quoted(r.device) << "}";
        out << "]}";
    }
    std::cout << out.str() << "\n]}\n";
}

}  // namespace

int cmd_list(const std::vector<std::string>& args) {
    std::string format;
    po::options_description options("lav list options");
    options.add_options()("format", po::value(&format)->default_value("text"),
                          "text, or json: every family's declaration and rows");
    po::variables_map vm;
    if (!parse_args(args, options, {}, "usage: lav list [--format text|json]", vm)) return 0;
    LAV_CHECK_AS(UsageError, format == "text" || format == "json",
                 "--format takes text or json, got '", format, "'");

    harness::Registry registry;
    harness::register_all(registry);
    if (format == "json")
        print_json(registry);
    else
        print_text(registry);
    return 0;
}

}  // namespace lav::cli
