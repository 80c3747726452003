// kernels/gsa/gsa_contract.cpp — the precision contracts of gsa's chunk and recurrent variants,
// item by item. Declarations only; the CPU backend that keeps them is gsa_cpu.cpp, and README.md
// says why each item has its dtype.
#include <string>

#include "core/dtype.h"
#include "core/error.h"
#include "gsa/gsa.h"

namespace lav::kernels {
namespace {

/// The lav dtype of a LibTorch storage type; float32 reads as fp32, never tf32.
DType lav_dtype(c10::ScalarType type) {
    const auto d = from_scalar_type(type);
    LAV_CHECK(d.has_value(), "gsa takes floating dtypes, got ", scalar_type_name(type));
    return *d;
}

}  // namespace

PrecisionContract gsa_contract(std::string_view variant, bool backward, const GsaArgs& args) {
    const bool chunk = variant == "chunk";
    LAV_CHECK(chunk || variant == "recurrent", "gsa has no variant '", variant,
              "'; expected chunk or recurrent");
    LAV_CHECK(args.q.defined() && args.g.defined(),
              "gsa's contract needs q and g to name the input and gate dtypes");
    const DType in = lav_dtype(args.q.scalar_type());
    const DType gate = lav_dtype(args.g.scalar_type());
    const DType state_k = lav_dtype(args.hk_state());
    const DType state_v = lav_dtype(args.hv_state());
    const DType out =
        args.output_dtype == c10::ScalarType::Undefined ? in : lav_dtype(args.output_dtype);
    const DType fp32 = DType::fp32;

    PrecisionContract c;
    c.kernel = "gsa." + std::string(variant) + (backward ? "_bwd" : "_fwd");
    const auto add = [&c](const char* item, DType dtype, const char* note) {
        c.items.push_back({item, dtype, note});
    };

    add("q, k, v, s", in, "inputs, widened to fp32 on load");
    add("g", gate, "log forget gate per slot, shared by both states, widened to fp32");
    const char* initial =
        "initial state (zeros when absent), widened to fp32 on load; FLA passes fp32, lav takes "
        "the case's state dtype";
    add("hk0", state_k, initial);
    add("hv0", state_v, initial);
    add("accumulator", fp32, "every matmul, reduction, exp and the softmax");
    if (chunk) {
        add("gate cumsum", fp32, "chunk-local inclusive cumsum G per slot, restarted per chunk");
        const char* stored =
            backward ? "recomputed exactly as the forward stores them; read by the gradients"
                     : "the state entering each chunk, stored; the two passes read it";
        add("chunk states hk", state_k, stored);
        add("chunk states hv", state_v, stored);
        add("carried states", fp32, "both states carried from chunk to chunk, rounded when stored");
        add("scaled q", in, "scale·q rounded before q·k and q·hk (as FLA's chunk_gsa_fwd_k)");
        add("key-pass scores", in, "scale·q kᵀ, lower triangle, stored (FLA's A of the key pass)");
        add("decayed s", in,
            "s ⊙ exp(Λ − G) rounded before both state updates (as FLA's chunk_fwd_h)");
        add("slot scores ok", in,
            "the key pass's output, stored in s's dtype (as FLA's chunk_gsa)");
        add("slot probabilities p", fp32, "softmax(ok) kept in fp32 (FLA's p)");
        add("value-pass query qv", in, "p rounded before the value pass (FLA's p.to(q.dtype))");
        if (backward) {
            add("intra-chunk products", fp32,
                "the backward keeps the value-pass scores, dA and the decayed s in fp32");
            const char* grads =
                "gradients of each chunk's end state, stored; the carried ones stay fp32";
            add("chunk state grads dhk", state_k, grads);
            add("chunk state grads dhv", state_v, grads);
            add("slot score grad dok", in,
                "p ⊙ (dqv − ⟨p, dqv⟩) rounded to ok's dtype (as FLA's softmax_bwd)");
        } else {
            add("decayed qv", in, "qv ⊙ exp(G) rounded before its product with hv (chunk_gla)");
            add("value-pass scores", in,
                "Σ_m qv s exp(G_i − G_j) in fp32, rounded before Av·v (as FLA's chunk_gla)");
        }
    } else {
        add("gate cumsum", fp32, "none formed: each step decays by exp(g_t), taken in fp32");
        add("states", fp32,
            backward ? "fp32 throughout; both recomputed from checkpoints every ~sqrt(T) steps"
                     : "fp32 for the whole sequence (FLA's fused_recurrent_gsa)");
        add("slot scores ok", fp32, "fp32, as FLA's fused_recurrent_gsa");
        add("slot probabilities p", fp32, "softmax in fp32, fed to the value pass unrounded");
    }
    add("o", out, backward ? "d_o is read in this dtype" : "rounded once from fp32");
    add("hkt", state_k, backward ? "dhkt is read in this dtype" : "rounded once from fp32");
    add("hvt", state_v, backward ? "dhvt is read in this dtype" : "rounded once from fp32");
    if (!backward) return c;

    add("dq", in, "accumulated in fp32, rounded once");
    add("dk", in, "accumulated in fp32, rounded once");
    add("dv", in, "accumulated in fp32, rounded once");
    add("ds", in, "the two passes' parts summed in fp32, rounded once");
    add("dg", gate,
        chunk ? "reverse cumsum of both passes' dG per slot in fp32, rounded once"
              : "both passes' exp(g_t)-weighted state products in fp32, rounded once");
    if (args.hk0.defined())
        add("dhk0", state_k, "the fp32 dHk at the sequence start, rounded once");
    if (args.hv0.defined())
        add("dhv0", state_v, "the fp32 dHv at the sequence start, rounded once");
    return c;
}

}  // namespace lav::kernels
