// kernels/rwkv7/rwkv7_contract.cpp — the precision contracts of rwkv7's chunk and recurrent
// variants, item by item. Declarations only; the CPU backend that keeps them is rwkv7_cpu.cpp,
// and README.md says why each item has its dtype.
#include <string>

#include "core/dtype.h"
#include "core/error.h"
#include "rwkv7/rwkv7.h"

namespace lav::kernels {
namespace {

DType lav_dtype(c10::ScalarType type) {
    const auto d = from_scalar_type(type);
    LAV_CHECK(d.has_value(), "rwkv7 takes floating dtypes, got ", scalar_type_name(type));
    return *d;
}

}  // namespace

PrecisionContract rwkv7_contract(std::string_view variant, bool backward, const Rwkv7Args& args) {
    const bool chunk = variant == "chunk";
    LAV_CHECK(chunk || variant == "recurrent", "rwkv7 has no variant '", variant,
              "'; expected chunk or recurrent");
    LAV_CHECK(args.q.defined(), "rwkv7's contract needs q to name the input dtype");
    const DType in = lav_dtype(args.q.scalar_type());
    const bool dplr = args.w.defined();
    const DType state = lav_dtype(args.state_dtype);
    const DType out =
        args.output_dtype == c10::ScalarType::Undefined ? in : lav_dtype(args.output_dtype);
    const DType fp32 = DType::fp32;

    PrecisionContract c;
    c.kernel = "rwkv7." + std::string(variant) + (backward ? "_bwd" : "_fwd");
    const auto add = [&c](const char* item, DType dtype, const char* note) {
        c.items.push_back({item, dtype, note});
    };
    add("q, k, v, a, b", in, "inputs (q is FLA's r), one dtype, widened to fp32 on load");
    if (dplr) add("w", lav_dtype(args.w.scalar_type()), "log decay per key dim, widened to fp32");
    add("h0", state, "initial state (zeros when absent), widened to fp32 on load");
    add("accumulator", fp32, "every matmul, reduction, exp and the triangular solve");
    if (chunk) {
        add("gate cumsum", fp32, "chunk-local inclusive and exclusive cumsums of w");
        add("chunk states h", state, "state entering each chunk, stored; v_new and o read it");
        add("carried state", fp32, "state carried from chunk to chunk, rounded only when stored");
        add("A_ab, A_ak", fp32, "a-row scores against b and k, and the solve of I - A_ab");
        add("A_qk, A_qb", in, "q-row scores in fp32, rounded before their products");
        add("WY w, u", in, "T (a * exp(Ge)) and T A_ak v, rounded (as FLA's wy_fast)");
        add("v_new", in, "ha = u + w h, the values a reads, rounded before o and the state");
        add("decayed q, k, b", in, "q * exp(Gi), k and b * exp(G_last - Gi), rounded");
        if (backward)
            add("chunk gradients", fp32,
                "reverse mode through each chunk's fp32 ops; the rounding points pass "
                "gradients unchanged; the carried dS stays fp32 and is not stored");
    } else {
        add("state", fp32,
            backward ? "fp32 throughout; recomputed from checkpoints every ~sqrt(T) steps"
                     : "fp32 for the whole sequence");
        add("ha", fp32, "a_t^T S_{t-1} per step, never stored");
    }
    add("o", out, backward ? "d_o is read in this dtype" : "rounded once from fp32");
    add("ht", state, backward ? "dht is read in this dtype" : "rounded once from the fp32 state");
    if (!backward) return c;

    add("dq", in, "accumulated in fp32, rounded once");
    add("dk", in, "accumulated in fp32, rounded once");
    add("dv", in, "accumulated in fp32, rounded once");
    add("da", in, "accumulated in fp32, rounded once");
    add("db", in, "accumulated in fp32, rounded once");
    if (dplr) add("dw", lav_dtype(args.w.scalar_type()), "accumulated in fp32, rounded once");
    if (args.h0.defined()) add("dh0", state, "the fp32 dS at the sequence start, rounded once");
    return c;
}

}  // namespace lav::kernels
