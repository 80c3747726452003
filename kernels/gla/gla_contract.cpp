// kernels/gla/gla_contract.cpp — the precision contracts of gla's chunk and recurrent variants,
// item by item. Declarations only; the CPU backend that keeps them is gla_cpu.cpp, and README.md
// says why each item has its dtype.
#include <string>

#include "common/cpu/gated_linear_contract.h"
#include "core/dtype.h"
#include "core/error.h"
#include "gla/gla.h"

namespace lav::kernels {
namespace {

/// The lav dtype of a LibTorch storage type; float32 reads as fp32, never tf32.
DType lav_dtype(c10::ScalarType type) {
    const auto d = from_scalar_type(type);
    LAV_CHECK(d.has_value(), "gla takes floating dtypes, got ", scalar_type_name(type));
    return *d;
}

}  // namespace

PrecisionContract gla_contract(std::string_view variant, bool backward, const GlaArgs& args) {
    const bool chunk = variant == "chunk";
    LAV_CHECK(chunk || variant == "recurrent", "gla has no variant '", variant,
              "'; expected chunk or recurrent");
    LAV_CHECK(args.q.defined() && args.g.defined(),
              "gla's contract needs q and g to name the input and gate dtypes");
    const DType in = lav_dtype(args.q.scalar_type());
    const DType gate = lav_dtype(args.g.scalar_type());
    const DType state = lav_dtype(args.state_dtype);
    const DType out =
        args.output_dtype == c10::ScalarType::Undefined ? in : lav_dtype(args.output_dtype);
    const DType fp32 = DType::fp32;

    PrecisionContract c;
    c.kernel = "gla." + std::string(variant) + (backward ? "_bwd" : "_fwd");
    const auto add = [&c](const char* item, DType dtype, const char* note) {
        c.items.push_back({item, dtype, note});
    };

    add("q, k, v", in, "inputs, widened to fp32 on load");
    add("g", gate, "log decay per key dimension, widened to fp32");
    add("h0", state,
        "initial state (zeros when absent), widened to fp32 on load; FLA's chunk_gla asserts "
        "fp32, lav takes the case's state dtype");
    add("accumulator", fp32, "every matmul, reduction and exp");
    if (chunk) add_tensor_core_item(c, args.q, args.k, args.v);
    if (chunk) {
        add("gate cumsum", fp32,
            "chunk-local inclusive cumsum G per key dimension, restarted at chunk starts");
        add("chunk states h", state,
            backward ? "recomputed exactly as the forward stores them; read by the gradients"
                     : "state entering each chunk, stored; the output pass reads it");
        add("carried state", fp32, "state carried from chunk to chunk, rounded only when stored");
        add("decayed k", in,
            "k * exp(G_last - G) rounded before its product with v (as FLA's chunk_fwd_h)");
        if (backward) {
            add("decayed q", fp32, "the backward keeps q * exp(G) in fp32");
            add("intra-chunk scores", fp32,
                "the backward keeps the scores and d_o v^T in fp32, by 16-row sub-chunks");
        } else {
            add("decayed q", in,
                "q * exp(G) rounded before its product with h (as FLA's chunk_gla_fwd_o)");
            add("intra-chunk scores", in,
                "sum_d q k exp(G_i - G_j) in fp32 by 16-row sub-chunks, rounded before A v "
                "(as FLA's chunk_gla_fwd_o)");
        }
    } else {
        add("gate cumsum", fp32, "none formed: each step decays by exp(g_t), taken in fp32");
        add("state", fp32,
            backward ? "fp32 throughout; recomputed from checkpoints every ~sqrt(T) steps"
                     : "fp32 for the whole sequence");
    }
    add("o", out, backward ? "d_o is read in this dtype" : "rounded once from fp32");
    add("ht", state, backward ? "dht is read in this dtype" : "rounded once from the fp32 state");
    if (!backward) return c;

    if (chunk)
        add("chunk state grads dh", state,
            "gradient of each chunk's end state, stored; the carried dS stays fp32");
    add("dq", in, "accumulated in fp32, rounded once");
    add("dk", in, "accumulated in fp32, rounded once");
    add("dv", in, "accumulated in fp32, rounded once");
    add("dg", gate,
        chunk ? "reverse cumsum of dG per key dimension in fp32, rounded once"
              : "exp(g_t) * rowsum(S_{t-1} * dS_t) in fp32, rounded once");
    if (args.h0.defined()) add("dh0", state, "the fp32 dS at the sequence start, rounded once");
    return c;
}

}  // namespace lav::kernels
