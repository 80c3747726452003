// kernels/rwkv6/rwkv6_contract.cpp — the precision contracts of rwkv6's chunk and recurrent
// variants, item by item. Declarations only; the CPU backend that keeps them is rwkv6_cpu.cpp,
// and README.md says why each item has its dtype.
#include <string>

#include "core/dtype.h"
#include "core/error.h"
#include "rwkv6/rwkv6.h"

namespace lav::kernels {
namespace {

DType lav_dtype(c10::ScalarType type) {
    const auto d = from_scalar_type(type);
    LAV_CHECK(d.has_value(), "rwkv6 takes floating dtypes, got ", scalar_type_name(type));
    return *d;
}

}  // namespace

PrecisionContract rwkv6_contract(std::string_view variant, bool backward, const Rwkv6Args& args) {
    const bool chunk = variant == "chunk";
    LAV_CHECK(chunk || variant == "recurrent", "rwkv6 has no variant '", variant,
              "'; expected chunk or recurrent");
    LAV_CHECK(args.q.defined() && args.w.defined() && args.u.defined(),
              "rwkv6's contract needs q, w and u to name the input and gate dtypes");
    const DType in = lav_dtype(args.q.scalar_type());
    const DType gate = lav_dtype(args.w.scalar_type());
    const DType bonus = lav_dtype(args.u.scalar_type());
    const DType state = lav_dtype(args.state_dtype);
    const DType out =
        args.output_dtype == c10::ScalarType::Undefined ? in : lav_dtype(args.output_dtype);
    const DType fp32 = DType::fp32;

    PrecisionContract c;
    c.kernel = "rwkv6." + std::string(variant) + (backward ? "_bwd" : "_fwd");
    const auto add = [&c](const char* item, DType dtype, const char* note) {
        c.items.push_back({item, dtype, note});
    };
    add("q, k, v", in, "inputs (q is FLA's r), widened to fp32 on load");
    add("w", gate, "log decay per key dimension, widened to fp32");
    add("u", bonus, "bonus of the current token, widened to fp32");
    add("h0", state, "initial state (zeros when absent), widened to fp32 on load");
    add("accumulator", fp32, "every matmul, reduction and exp");
    add("bonus term", fp32, "(q_t . (u * k_t)) v_t in fp32, never rounded before the output");
    if (chunk) {
        add("gate cumsum", fp32,
            "chunk-local inclusive and exclusive cumsums of w, restarted at chunk starts");
        add("chunk states h", state,
            backward ? "recomputed exactly as the forward stores them; read by the gradients"
                     : "state entering each chunk, stored; the output pass reads it");
        add("carried state", fp32, "state carried from chunk to chunk, rounded only when stored");
        add("decayed k", in, "k * exp(G_last - G) rounded before its product with v");
        if (backward) {
            add("decayed q", fp32, "the backward keeps q * exp(Gx) in fp32");
            add("intra-chunk scores", fp32, "the backward keeps the scores and d_o v^T in fp32");
        } else {
            add("decayed q", in, "q * exp(Gx) rounded before its product with h");
            add("intra-chunk scores", in,
                "sum_d q_i k_j exp(Gx_i - G_j) (j < i) elementwise in fp32, rounded before A v");
        }
    } else {
        add("gate cumsum", fp32, "none formed: each step decays by exp(w_t), taken in fp32");
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
    add("dw", gate,
        chunk ? "reverse cumsum of the per-position gate gradients in fp32, rounded once"
              : "exp(w_t) * rowsum(S_{t-1} * dS_t) in fp32, rounded once");
    add("du", bonus, "summed over every token in fp32, rounded once");
    if (args.h0.defined()) add("dh0", state, "the fp32 dS at the sequence start, rounded once");
    return c;
}

}  // namespace lav::kernels
