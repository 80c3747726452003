// kernels/kda/kda_contract.cpp — the precision contracts of KDA's chunk and recurrent variants,
// item by item. Declarations only; the CPU backend that keeps them is kda_cpu.cpp, and README.md
// says why each item has its dtype.
#include <string>

#include "core/dtype.h"
#include "core/error.h"
#include "kda/kda.h"

namespace lav::kernels {
namespace {

/// The lav dtype of a LibTorch storage type; float32 reads as fp32, never tf32.
DType lav_dtype(c10::ScalarType type) {
    const auto d = from_scalar_type(type);
    LAV_CHECK(d.has_value(), "kda takes floating dtypes, got ", scalar_type_name(type));
    return *d;
}

}  // namespace

PrecisionContract kda_contract(std::string_view variant, bool backward, const KdaArgs& args) {
    const bool chunk = variant == "chunk";
    LAV_CHECK(chunk || variant == "recurrent", "kda has no variant '", variant,
              "'; expected chunk or recurrent");
    LAV_CHECK(args.q.defined() && args.g.defined() && args.beta.defined(),
              "kda's contract needs q, g and beta to name their dtypes");
    const DType in = lav_dtype(args.q.scalar_type());
    const DType gate = lav_dtype(args.g.scalar_type());
    const DType beta = lav_dtype(args.beta.scalar_type());
    const DType state = lav_dtype(args.state_dtype);
    const DType out =
        args.output_dtype == c10::ScalarType::Undefined ? in : lav_dtype(args.output_dtype);
    const DType fp32 = DType::fp32;
    const bool gate_params = args.use_gate_in_kernel && args.A_log.defined();
    const bool bias = gate_params && args.dt_bias.defined();

    PrecisionContract c;
    c.kernel = "kda." + std::string(variant) + (backward ? "_bwd" : "_fwd");
    const auto add = [&c](const char* item, DType dtype, const char* note) {
        c.items.push_back({item, dtype, note});
    };

    add("q, k, v", in, "inputs, widened to fp32 on load");
    add("g", gate,
        args.use_gate_in_kernel ? "raw gate, widened to fp32"
                                : "per-key log decay, widened to fp32");
    add("beta", beta,
        args.use_beta_sigmoid_in_kernel ? "logit, widened to fp32" : "widened to fp32");
    if (gate_params) add("A_log", lav_dtype(args.A_log.scalar_type()), "widened to fp32");
    if (bias) add("dt_bias", lav_dtype(args.dt_bias.scalar_type()), "widened to fp32");
    add("h0", state,
        "initial state (zeros when absent), widened to fp32; FLA's chunk_kda asserts fp32, lav "
        "takes the case's state dtype");
    add("accumulator", fp32, "every matmul, reduction and exp");
    add("activations", fp32, "l2norm rstd, in-kernel gate and beta sigmoid, all in fp32");
    if (args.use_qk_l2norm_in_kernel)
        add("normalised q, k", chunk ? in : fp32,
            chunk ? "rounded to the input dtype (FLA's l2norm_fwd returns x's dtype)"
                  : "normalised inline in fp32");
    if (chunk) {
        add("gate cumsum", fp32, "chunk-local inclusive cumsum G of the log decay");
        add("intra-chunk decay", fp32,
            "exp(G_i - G_j) per key dim, formed pairwise and masked before the exp");
        add("A_kk", fp32, "beta_i sum_d k_id k_jd exp(G_id - G_jd), solved in fp32");
        add("solved inverse", in,
            backward ? "(I + A_kk)^-1 in the input dtype for the recompute of w, u; fp32 in the "
                       "gradients"
                     : "(I + A_kk)^-1 by forward substitution, rounded (as FLA's solve_tril)");
        add("wy operands", in,
            "beta v and beta k exp(G), rounded before the products with the "
            "inverse (as FLA's recompute_w_u)");
        add("w, u", in, "rounded (as FLA's recompute_w_u)");
        add("decayed keys kg", in, "k exp(G_last - G), rounded before kg^T v_new");
        add("v_new", in,
            backward ? "recomputed exactly as the forward stores it; read by the gradients"
                     : "u - w h, rounded (as FLA's chunk_gated_delta_rule_fwd_h)");
        add("chunk states h", state,
            backward ? "recomputed exactly as the forward stores them; read by the gradients"
                     : "state entering each chunk, stored; v_new and the output read it");
        add("carried state", fp32, "state carried from chunk to chunk, rounded only when stored");
        if (backward) {
            add("decayed queries qg", fp32, "q exp(G) in the gradients");
            add("A_qk", fp32, "scale sum_d q_id k_jd exp(G_id - G_jd) in the gradients");
        } else {
            add("decayed queries qg", in, "q exp(G), rounded before qg h (as FLA's chunk_fwd_o)");
            add("A_qk", in,
                "scale sum_d q_id k_jd exp(G_id - G_jd), rounded before A_qk v_new (as FLA)");
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

    if (chunk) {
        add("chunk state grads dh", state,
            "gradient of each chunk's end state, stored; the carried dS stays fp32");
        add("gradient intermediates", fp32,
            "dA_kk, dT, dw, du, dv_new and the intra-chunk products stay fp32");
    }
    add("dq", in, "summed over each key head's value heads in fp32, rounded once");
    add("dk", in, "summed over each key head's value heads in fp32, rounded once");
    add("dv", in, "accumulated in fp32, rounded once");
    add("dg", gate,
        chunk ? "reverse chunk-local cumsum of dG in fp32, then the gate backward, rounded once"
              : "rowsum(S_bar * dS_bar) in fp32, then the gate backward, rounded once");
    add("dbeta", beta, "accumulated in fp32, then the sigmoid backward, rounded once");
    if (gate_params)
        add("dA_log", lav_dtype(args.A_log.scalar_type()), "summed over B and T in fp32");
    if (bias) add("ddt_bias", lav_dtype(args.dt_bias.scalar_type()), "summed over B and T in fp32");
    if (args.h0.defined()) add("dh0", state, "the fp32 dS at the sequence start, rounded once");
    return c;
}

}  // namespace lav::kernels
