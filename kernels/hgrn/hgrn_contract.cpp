// kernels/hgrn/hgrn_contract.cpp — the precision contracts of hgrn's chunk and recurrent variants,
// item by item. Declarations only; the CPU backend that keeps them is hgrn_cpu.cpp, and README.md
// says why each item has its dtype.
#include <string>

#include "core/dtype.h"
#include "core/error.h"
#include "hgrn/hgrn.h"

namespace lav::kernels {
namespace {

/// The lav dtype of a LibTorch storage type; float32 reads as fp32, never tf32.
DType lav_dtype(c10::ScalarType type) {
    const auto d = from_scalar_type(type);
    LAV_CHECK(d.has_value(), "hgrn takes floating dtypes, got ", scalar_type_name(type));
    return *d;
}

}  // namespace

PrecisionContract hgrn_contract(std::string_view variant, bool backward, const HgrnArgs& args) {
    const bool chunk = variant == "chunk";
    LAV_CHECK(chunk || variant == "recurrent", "hgrn has no variant '", variant,
              "'; expected chunk or recurrent");
    LAV_CHECK(args.x.defined() && args.g.defined(),
              "hgrn's contract needs x and g to name the input and gate dtypes");
    const DType in = lav_dtype(args.x.scalar_type());
    const DType gate = lav_dtype(args.g.scalar_type());
    const DType state = lav_dtype(args.state_dtype);
    const DType out =
        args.output_dtype == c10::ScalarType::Undefined ? in : lav_dtype(args.output_dtype);
    const DType fp32 = DType::fp32;

    PrecisionContract c;
    c.kernel = "hgrn." + std::string(variant) + (backward ? "_bwd" : "_fwd");
    const auto add = [&c](const char* item, DType dtype, const char* note) {
        c.items.push_back({item, dtype, note});
    };

    add("x", in, "input, widened to fp32 on load");
    add("g", gate, "log decay per channel, widened to fp32");
    add("h0", state, "initial state (zeros when absent), widened to fp32 on load");
    add("accumulator", fp32, "every scan step, cumsum and exp");
    if (chunk) {
        add("gate cumsum", fp32, "chunk-local inclusive cumsum G, restarted at chunk starts");
        add("local scan", fp32,
            backward ? "the within-chunk reverse scan z and the recomputed forward scan stay fp32"
                     : "the within-chunk scan from a zero state stays fp32 (FLA's chunk_hgrn "
                       "keeps it in an fp32 buffer)");
        add("chunk states h", state,
            backward ? "recomputed exactly as the forward stores them; read by the gradients"
                     : "state entering each chunk, stored; the output pass reads it");
        add("carried state", fp32, "state carried from chunk to chunk, rounded only when stored");
    } else {
        add("gate cumsum", fp32, "none formed: each step decays by exp(g_t), taken in fp32");
        add("state", fp32,
            backward ? "fp32 throughout; recomputed from checkpoints every ~sqrt(T) steps"
                     : "fp32 for the whole sequence");
    }
    add("o", out, backward ? "d_o is read in this dtype" : "rounded once from fp32");
    add("ht", state,
        backward ? "dht is read in this dtype"
                 : "rounded once from the fp32 state, in the case's state dtype (FLA's "
                   "fused_recurrent_hgrn returns it in x's dtype)");
    if (!backward) return c;

    if (chunk)
        add("chunk state grads dh", state,
            "gradient of each chunk's end state, stored; the carried gradient stays fp32");
    add("dx", in, "accumulated in fp32, rounded once");
    add("dg", gate, "exp(g_t) * h_{t-1} * dh_t in fp32, rounded once");
    if (args.h0.defined())
        add("dh0", state,
            chunk ? "the fp32 gradient at the sequence start, rounded once (FLA's chunk_hgrn "
                    "returns none and ignores dht)"
                  : "the fp32 gradient at the sequence start, rounded once");
    return c;
}

}  // namespace lav::kernels
