// kernels/hgrn/hgrn_rows.cpp — hgrn's CPU rows, and the argument and result mapping its CUDA
// rows share.
#include "kernels/common/rows.h"
#include "kernels/hgrn/hgrn.h"

namespace lav::kernels {

HgrnArgs hgrn_args(const Call& call) {
    HgrnArgs a;
    a.x = call.need("x");
    a.g = call.need("g");
    a.h0 = call.get("h0");
    set_common_args(a, call);
    return a;
}

TensorMap results(const HgrnFwd& f) { return {{"o", f.o}, {"ht", f.ht}}; }

TensorMap results(const HgrnGrads& g) { return {{"dx", g.dx}, {"dg", g.dg}, {"dh0", g.dh0}}; }

void add_hgrn_cpu_rows(RowTable& table) {
    add_rows<HgrnArgs, HgrnFwd, HgrnGrads>(
        table, {"hgrn", "cpu", "cpu"}, hgrn_args, hgrn_contract,
        {{"chunk", hgrn_chunk_fwd_cpu, hgrn_chunk_bwd_cpu},
         {"recurrent", hgrn_recurrent_fwd_cpu, hgrn_recurrent_bwd_cpu}});
}

}  // namespace lav::kernels
