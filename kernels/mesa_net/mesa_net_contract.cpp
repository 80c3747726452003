// kernels/mesa_net/mesa_net_contract.cpp — the precision contracts of MesaNet's chunk and
// recurrent variants. Declarations only; README.md says why each item has its dtype.
#include <string>

#include "core/dtype.h"
#include "core/error.h"
#include "mesa_net/mesa_net.h"

namespace lav::kernels {
namespace {

DType lav_dtype(c10::ScalarType type) {
    const auto d = from_scalar_type(type);
    LAV_CHECK(d.has_value(), "mesa_net takes floating dtypes, got ", scalar_type_name(type));
    return *d;
}

}  // namespace

PrecisionContract mesa_net_contract(std::string_view variant, bool backward, const MesaNetArgs& a) {
    const bool chunk = variant == "chunk";
    LAV_CHECK(chunk || variant == "recurrent", "mesa_net has no variant '", variant,
              "'; expected chunk or recurrent");
    LAV_CHECK(a.q.defined() && a.g.defined() && a.beta.defined() && a.lamb.defined(),
              "mesa_net's contract needs q, g, beta and lamb to name the input dtypes");
    const DType in = lav_dtype(a.q.scalar_type());
    const DType state_kk = lav_dtype(a.kk_state());
    const DType state_kv = lav_dtype(a.kv_state());
    const DType out = a.output_dtype == c10::ScalarType::Undefined ? in : lav_dtype(a.output_dtype);
    const DType fp32 = DType::fp32;
    PrecisionContract c;
    c.kernel = "mesa_net." + std::string(variant) + (backward ? "_bwd" : "_fwd");
    const auto add = [&c](const char* item, DType dtype, const char* note) {
        c.items.push_back({item, dtype, note});
    };
    add("q, k, v", in, "inputs, widened to fp32 on load");
    add("g", lav_dtype(a.g.scalar_type()), "per-step log decay, widened to fp32");
    add("beta", lav_dtype(a.beta.scalar_type()), "per-step beta, widened to fp32");
    add("lamb", lav_dtype(a.lamb.scalar_type()), "per-head ridge, widened to fp32");
    const char* initial = "initial state (zeros when absent), widened to fp32 on load";
    add("h_kk0", state_kk, initial);
    add("h_kv0", state_kv, initial);
    add("accumulator", fp32, "every matmul, reduction, exp and conjugate-gradient step");
    if (a.use_qk_l2norm_in_kernel)
        add("normalised q, k", chunk ? in : fp32,
            chunk ? "x / sqrt(sum x^2 + 1e-6) in fp32, stored" : "inlined in fp32, never rounded");
    add("x (q_star)", fp32, "the conjugate-gradient solution, kept in fp32");
    if (chunk) {
        add("gate cumsum", fp32, "chunk-local inclusive cumsum G of the log decay");
        const char* stored =
            "the state entering each chunk, stored; read by the solve, the output and the "
            "gradients";
        add("chunk states h_kk", state_kk, stored);
        add("chunk states h_kv", state_kv, stored);
        add("carried states", fp32, "carried from chunk to chunk, rounded only when stored");
        add("intra-chunk scores", fp32, "decayed x k^T and d_o v^T kept in fp32");
    } else {
        add("states", fp32,
            backward ? "fp32 throughout; recomputed step by step" : "fp32 for the whole sequence");
    }
    add("o", out, backward ? "d_o is read in this dtype" : "rounded once from fp32");
    add("ht_kk", state_kk, backward ? "dht_kk is read in this dtype" : "rounded once from fp32");
    add("ht_kv", state_kv, backward ? "dht_kv is read in this dtype" : "rounded once from fp32");
    if (!backward) return c;
    add("y", fp32, "A^-T (Hkv d_o) by the same conjugate gradient, kept in fp32");
    add("dq", in, "y through the norm, rounded once");
    add("dk", in, "accumulated in fp32, rounded once");
    add("dv", in, "accumulated in fp32, rounded once");
    add("dg", lav_dtype(a.g.scalar_type()),
        chunk ? "reverse chunk-local cumsum of dG in fp32, rounded once"
              : "per step in fp32, rounded once");
    add("dbeta", lav_dtype(a.beta.scalar_type()), "accumulated in fp32, rounded once");
    add("dlamb", lav_dtype(a.lamb.scalar_type()), "-sum y x over steps in fp32, rounded once");
    if (a.h_kk0.defined()) add("dh_kk0", state_kk, "the fp32 gradient at the start, rounded once");
    if (a.h_kv0.defined()) add("dh_kv0", state_kv, "the fp32 gradient at the start, rounded once");
    return c;
}

}  // namespace lav::kernels
