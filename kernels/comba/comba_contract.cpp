// kernels/comba/comba_contract.cpp — the precision contracts of Comba's chunk and recurrent
// variants: every tensor each stores and in what dtype. README.md says why.
#include <string>

#include "comba/comba.h"
#include "core/dtype.h"
#include "core/error.h"

namespace lav::kernels {
namespace {

DType lav_dtype(c10::ScalarType type) {
    const auto d = from_scalar_type(type);
    LAV_CHECK(d.has_value(), "comba takes floating dtypes, got ", scalar_type_name(type));
    return *d;
}

}  // namespace

PrecisionContract comba_contract(std::string_view variant, bool backward, const CombaArgs& args) {
    const bool chunk = variant == "chunk";
    LAV_CHECK(chunk || variant == "recurrent", "comba has no variant '", variant,
              "'; expected chunk or recurrent");
    LAV_CHECK(args.q.defined() && args.g.defined() && args.beta.defined(),
              "comba's contract needs q, g and beta to name the input dtypes");
    const DType in = lav_dtype(args.q.scalar_type());
    const DType state = lav_dtype(args.state_dtype);
    const DType out =
        args.output_dtype == c10::ScalarType::Undefined ? in : lav_dtype(args.output_dtype);
    const DType gate = lav_dtype(args.g.scalar_type());
    const DType beta = lav_dtype(args.beta.scalar_type());
    const DType fp32 = DType::fp32;

    PrecisionContract c;
    c.kernel = "comba." + std::string(variant) + (backward ? "_bwd" : "_fwd");
    const auto add = [&c](const char* item, DType dtype, const char* note) {
        c.items.push_back({item, dtype, note});
    };
    add("q, k, v, p", in, "inputs, widened to fp32 on load");
    add("g", gate, "per-step log decay, widened to fp32");
    add("beta", beta, "per-step beta, widened to fp32");
    add("h0", state, "initial state (zeros when absent), widened to fp32 on load");
    add("accumulator", fp32, "every matmul, reduction, exp and the triangular solve");
    if (args.use_qk_l2norm_in_kernel)
        add("normalised q, k, p", chunk ? in : fp32,
            chunk ? "x / sqrt(sum x^2 + 1e-6) in fp32, stored (as FLA's l2norm_fwd)"
                  : "x / sqrt(sum x^2 + 1e-6) inlined in fp32, never rounded");
    if (chunk) {
        add("gate cumsums", fp32, "chunk-local inclusive G and exclusive Gx = G - g");
        add("pk A", fp32, "beta_i p_i.k_j exp(Gx_i - G_j), strictly lower, kept in fp32");
        add("WY inverse", in, "(I + A)^-1 by forward substitution in fp32, then stored");
        add("beta-scaled p, v", in, "p beta exp(Gx) and v beta, rounded before the WY matmuls");
        add("w, u", in, "Ti (beta p) and Ti (beta v), stored");
        add("chunk states h", state,
            backward ? "recomputed exactly as the forward stores them; read by the gradients"
                     : "state entering each chunk, stored; the v_new and output passes read it");
        add("carried state", fp32, "state carried from chunk to chunk, rounded only when stored");
        add("v_new", in, "u - w h, stored; the output and state passes read it");
        add("decayed v_new", in, "v_new exp(G_last - G) rounded before k^T v_new");
        if (backward)
            add("intra-chunk scores", fp32, "the backward keeps q k^T, d_o v_new^T and dA in fp32");
        else
            add("intra-chunk scores", in, "masked decayed q k^T rounded before A v_new");
    } else {
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
    add("dp", in, "accumulated in fp32, rounded once");
    add("dg", gate,
        chunk ? "reverse chunk-local cumsum of dG and the shifted dGx in fp32, rounded once"
              : "exp(g_t) <S_{t-1}, dS_t> in fp32, rounded once");
    add("dbeta", beta, "accumulated in fp32, rounded once");
    if (args.h0.defined()) add("dh0", state, "the fp32 dS at the sequence start, rounded once");
    return c;
}

}  // namespace lav::kernels
