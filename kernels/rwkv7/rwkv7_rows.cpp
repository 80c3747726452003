// kernels/rwkv7/rwkv7_rows.cpp — rwkv7's CPU rows.
#include "kernels/common/rows.h"
#include "kernels/rwkv7/rwkv7.h"

namespace lav::kernels {

Rwkv7Args rwkv7_args(const Call& call) {
    Rwkv7Args a;
    a.q = call.need("q");
    a.w = call.get("w");
    a.k = call.need("k");
    a.v = call.need("v");
    a.a = call.need("a");
    // negation is exact in every dtype, so a tied b costs no rounding
    a.b = call.option("b") == "neg_a" ? -a.a : call.need("b");
    a.h0 = call.get("h0");
    set_common_args(a, call);
    return a;
}

TensorMap results(const Rwkv7Fwd& f) { return {{"o", f.o}, {"ht", f.ht}, {"h", f.h}}; }

TensorMap results(const Rwkv7Grads& g) {
    return {{"dq", g.dq}, {"dk", g.dk}, {"dv", g.dv},  {"da", g.da},
            {"db", g.db}, {"dw", g.dw}, {"dh0", g.dh0}};
}

void add_rwkv7_cpu_rows(RowTable& table) {
    add_rows<Rwkv7Args, Rwkv7Fwd, Rwkv7Grads>(
        table, {"rwkv7", "cpu", "cpu"}, rwkv7_args, rwkv7_contract,
        {{"chunk", rwkv7_chunk_fwd_cpu, rwkv7_chunk_bwd_cpu},
         {"recurrent", rwkv7_recurrent_fwd_cpu, rwkv7_recurrent_bwd_cpu}});
}

}  // namespace lav::kernels
