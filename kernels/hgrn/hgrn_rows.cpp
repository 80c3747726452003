// kernels/hgrn/hgrn_rows.cpp — hgrn's CPU rows, and the argument and result mapping its CUDA
// rows share.
#include "kernels/common/rows.h"
#include "kernels/hgrn/hgrn.h"

namespace lav::kernels {

HgrnArgs hgrn_args(const Call& call) {
    HgrnArgs a;
    LAV_TENSORS_FROM(a, call, x, g, h0);
    set_common_args(a, call);
    return a;
}

TensorMap results(const HgrnFwd& f) { return LAV_NAMED(f, o, ht); }

TensorMap results(const HgrnGrads& g) { return LAV_NAMED(g, dx, dg, dh0); }

void add_hgrn_cpu_rows(RowTable& table) {
    add_rows<HgrnArgs, HgrnFwd, HgrnGrads>(
        table, {"hgrn", "cpu", "cpu"}, hgrn_args, hgrn_contract,
        {{"chunk", hgrn_chunk_fwd_cpu, hgrn_chunk_bwd_cpu},
         {"recurrent", hgrn_recurrent_fwd_cpu, hgrn_recurrent_bwd_cpu}});
}

}  // namespace lav::kernels
