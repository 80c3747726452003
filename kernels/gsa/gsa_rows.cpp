// kernels/gsa/gsa_rows.cpp — gsa's CPU rows.
#include "kernels/common/rows.h"
#include "kernels/gsa/gsa.h"

namespace lav::kernels {

GsaArgs gsa_args(const Call& call) {
    GsaArgs a;
    LAV_TENSORS_FROM(a, call, q, k, v, s, g, hk0, hv0);
    set_common_args(a, call);
    a.hk_dtype = call.state_dtype_of("hk");
    a.hv_dtype = call.state_dtype_of("hv");
    return a;
}

TensorMap results(const GsaFwd& f) { return LAV_NAMED(f, o, hkt, hvt); }

TensorMap results(const GsaGrads& g) { return LAV_NAMED(g, dq, dk, dv, ds, dg, dhk0, dhv0); }

namespace {

using GsaBackward = GsaGrads (*)(const GsaArgs&, const at::Tensor& d_o, const at::Tensor& dhkt,
                                 const at::Tensor& dhvt);

// the backward takes a cotangent for each of the two final states
Row gsa_row(const RowPlace& place, const char* variant, GsaFwd (*forward)(const GsaArgs&),
            GsaBackward backward) {
    return make_row(place, variant, gsa_args, gsa_contract, forward,
                    [backward](const GsaArgs& a, const Call& c) {
                        return backward(a, c.need("d_o"), c.need("dhkt"), c.need("dhvt"));
                    });
}

}  // namespace

void add_gsa_cpu_rows(RowTable& table) {
    const RowPlace cpu{"gsa", "cpu", "cpu"};
    table.add(gsa_row(cpu, "chunk", gsa_chunk_fwd_cpu, gsa_chunk_bwd_cpu));
    table.add(gsa_row(cpu, "recurrent", gsa_recurrent_fwd_cpu, gsa_recurrent_bwd_cpu));
}

}  // namespace lav::kernels
