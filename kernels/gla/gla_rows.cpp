// kernels/gla/gla_rows.cpp — gla's CPU rows, and the argument and result mapping its CUDA rows
// share.
#include "kernels/common/rows.h"
#include "kernels/gla/gla.h"

namespace lav::kernels {

GlaArgs gla_args(const Call& call) {
    GlaArgs a;
    a.q = call.need("q");
    a.k = call.need("k");
    a.v = call.need("v");
    a.g = call.need("g");
    a.h0 = call.get("h0");
    set_common_args(a, call);
    return a;
}

TensorMap results(const GlaFwd& f) { return {{"o", f.o}, {"ht", f.ht}, {"h", f.h}}; }

TensorMap results(const GlaGrads& g) {
    return {{"dq", g.dq}, {"dk", g.dk}, {"dv", g.dv}, {"dg", g.dg}, {"dh0", g.dh0}};
}

void add_gla_cpu_rows(RowTable& table) {
    add_rows<GlaArgs, GlaFwd, GlaGrads>(
        table, {"gla", "cpu", "cpu"}, gla_args, gla_contract,
        {{"chunk", gla_chunk_fwd_cpu, gla_chunk_bwd_cpu},
         {"recurrent", gla_recurrent_fwd_cpu, gla_recurrent_bwd_cpu}});
}

}  // namespace lav::kernels
