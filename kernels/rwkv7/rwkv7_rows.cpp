// kernels/rwkv7/rwkv7_rows.cpp — rwkv7's CPU rows.
#include "kernels/common/rows.h"
#include "kernels/rwkv7/rwkv7.h"

namespace lav::kernels {

Rwkv7Args rwkv7_args(const Call& call) {
    Rwkv7Args a;
    LAV_TENSORS_FROM(a, call, q, w, k, v, a);
    // negation is exact in every dtype, so a tied b costs no rounding
    a.b = call.option("b") == "neg_a" ? -a.a : call.need("b");
    a.h0 = call.get("h0");
    set_common_args(a, call);
    return a;
}

TensorMap results(const Rwkv7Fwd& f) { return LAV_NAMED(f, o, ht, h); }

TensorMap results(const Rwkv7Grads& g) { return LAV_NAMED(g, dq, dk, dv, da, db, dw, dh0); }

void add_rwkv7_cpu_rows(RowTable& table) {
    add_rows<Rwkv7Args, Rwkv7Fwd, Rwkv7Grads>(
        table, {"rwkv7", "cpu", "cpu"}, rwkv7_args, rwkv7_contract,
        {{"chunk", rwkv7_chunk_fwd_cpu, rwkv7_chunk_bwd_cpu},
         {"recurrent", rwkv7_recurrent_fwd_cpu, rwkv7_recurrent_bwd_cpu}});
}

}  // namespace lav::kernels
