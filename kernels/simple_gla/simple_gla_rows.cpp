// kernels/simple_gla/simple_gla_rows.cpp — simple_gla's CPU rows, and the argument and result
// mapping its CUDA rows share.
#include "kernels/common/rows.h"
#include "kernels/simple_gla/simple_gla.h"

namespace lav::kernels {

SimpleGlaArgs simple_gla_args(const Call& call) {
    SimpleGlaArgs a;
    LAV_TENSORS_FROM(a, call, q, k, v, g, g_gamma, h0);
    set_common_args(a, call);
    return a;
}

TensorMap results(const SimpleGlaFwd& f) { return LAV_NAMED(f, o, ht, h); }

TensorMap results(const SimpleGlaGrads& g) { return LAV_NAMED(g, dq, dk, dv, dg, dh0); }

void add_simple_gla_cpu_rows(RowTable& table) {
    add_rows<SimpleGlaArgs, SimpleGlaFwd, SimpleGlaGrads>(
        table, {"simple_gla", "cpu", "cpu"}, simple_gla_args, simple_gla_contract,
        {{"chunk", simple_gla_chunk_fwd_cpu, simple_gla_chunk_bwd_cpu},
         {"recurrent", simple_gla_recurrent_fwd_cpu, simple_gla_recurrent_bwd_cpu}});
}

}  // namespace lav::kernels
