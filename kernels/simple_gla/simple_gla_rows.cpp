// kernels/simple_gla/simple_gla_rows.cpp — simple_gla's CPU rows, and the argument and result
// mapping its CUDA rows share.
#include "kernels/common/rows.h"
#include "kernels/simple_gla/simple_gla.h"

namespace lav::kernels {

SimpleGlaArgs simple_gla_args(const Call& call) {
    SimpleGlaArgs a;
    a.q = call.need("q");
    a.k = call.need("k");
    a.v = call.need("v");
    a.g = call.get("g");
    a.g_gamma = call.get("g_gamma");
    a.h0 = call.get("h0");
    set_common_args(a, call);
    return a;
}

TensorMap results(const SimpleGlaFwd& f) { return {{"o", f.o}, {"ht", f.ht}, {"h", f.h}}; }

TensorMap results(const SimpleGlaGrads& g) {
    return {{"dq", g.dq}, {"dk", g.dk}, {"dv", g.dv}, {"dg", g.dg}, {"dh0", g.dh0}};
}

void add_simple_gla_cpu_rows(RowTable& table) {
    add_rows<SimpleGlaArgs, SimpleGlaFwd, SimpleGlaGrads>(
        table, {"simple_gla", "cpu", "cpu"}, simple_gla_args, simple_gla_contract,
        {{"chunk", simple_gla_chunk_fwd_cpu, simple_gla_chunk_bwd_cpu},
         {"recurrent", simple_gla_recurrent_fwd_cpu, simple_gla_recurrent_bwd_cpu}});
}

}  // namespace lav::kernels
