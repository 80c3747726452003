// tests/fuzz/prologue_target.cpp — fuzz target: the bytes as the ops of a prologue, parsed and
// checked against declared tensors and kernel inputs, its diagnostics rendered.
#include "scenario/diagnostics.h"
#include "scenario/expr.h"
#include "targets.h"

namespace lav::fuzz {
namespace {

constexpr char kFile[] = "ops";

/// The bytes located as the whole of a file, as the loader locates a decoded TOML string.
scenario::SourceText located(std::string text) {
    scenario::SourceText source;
    int line = 1;
    int column = 1;
    for (const char c : text) {
        source.at.push_back({kFile, line, column});
        ++column;
        if (c == '\n') {
            ++line;
            column = 1;
        }
    }
    source.at.push_back({kFile, line, column});
    source.text = std::move(text);
    return source;
}

}  // namespace

int fuzz_prologue(const uint8_t* data, size_t size) {
    const std::string ops(reinterpret_cast<const char*>(data), size);
    // tensors the seed scenarios declare, and the inputs of gated families
    static const scenario::ProgramNames names{{"a", "k_a", "x", "w", "freqs"},
                                              {"q", "k", "v", "g", "beta", "h0", "cu_seqlens"}};
    return expect_user_errors([&] {
        scenario::DiagnosticList diags(kFile, ops);
        scenario::parse_program(located(ops), &names, diags);
        diags.throw_if_any();
    });
}

}  // namespace lav::fuzz
