// kernels/gla/gla_rows.cpp — gla's CPU rows, and the argument and result mapping its CUDA rows
// share.
#include "kernels/common/rows.h"
#include "kernels/gla/gla.h"

namespace lav::kernels {

GlaArgs gla_args(const Call& call) {
    GlaArgs a;
    LAV_TENSORS_FROM(a, call, q, k, v, g, h0);
    set_common_args(a, call);
    return a;
}

TensorMap results(const GlaFwd& f) { return LAV_NAMED(f, o, ht, h); }

TensorMap results(const GlaGrads& g) { return LAV_NAMED(g, dq, dk, dv, dg, dh0); }

void add_gla_cpu_rows(RowTable& table) {
    add_rows<GlaArgs, GlaFwd, GlaGrads>(
        table, {"gla", "cpu", "cpu"}, gla_args, gla_contract,
        {{"chunk", gla_chunk_fwd_cpu, gla_chunk_bwd_cpu},
         {"recurrent", gla_recurrent_fwd_cpu, gla_recurrent_bwd_cpu}});
}

}  // namespace lav::kernels
