// kernels/mesa_net/mesa_net_rows.cpp — mesa_net's CPU rows.
#include "kernels/common/rows.h"
#include "kernels/mesa_net/mesa_net.h"

namespace lav::kernels {

MesaNetArgs mesa_net_args(const Call& call) {
    MesaNetArgs a;
    LAV_TENSORS_FROM(a, call, q, k, v, g, beta, lamb, h_kk0, h_kv0);
    a.use_qk_l2norm_in_kernel = call.flag("use_qk_l2norm_in_kernel");
    // conjugate-gradient steps: "K" (the head dim, as FLA's tests run it) or a number
    const std::string& steps = call.option("max_cg_iterations");
    a.max_cg_iterations = steps == "K" ? call.dim("K") : std::stoll(steps);
    set_common_args(a, call);
    a.kk_dtype = call.state_dtype_of("kk");
    a.kv_dtype = call.state_dtype_of("kv");
    return a;
}

TensorMap results(const MesaNetFwd& f) { return LAV_NAMED(f, o, ht_kk, ht_kv); }

TensorMap results(const MesaNetGrads& g) {
    return LAV_NAMED(g, dq, dk, dv, dg, dbeta, dlamb, dh_kk0, dh_kv0);
}

namespace {

using MesaNetBackward = MesaNetGrads (*)(const MesaNetArgs&, const at::Tensor& d_o,
                                         const at::Tensor& dht_kk, const at::Tensor& dht_kv);

// the backward takes a cotangent for each of the two final states
Row mesa_net_row(const RowPlace& place, const char* variant,
                 MesaNetFwd (*forward)(const MesaNetArgs&), MesaNetBackward backward) {
    return make_row(place, variant, mesa_net_args, mesa_net_contract, forward,
                    [backward](const MesaNetArgs& a, const Call& c) {
                        return backward(a, c.need("d_o"), c.need("dht_kk"), c.need("dht_kv"));
                    });
}

}  // namespace

void add_mesa_net_cpu_rows(RowTable& table) {
    const RowPlace cpu{"mesa_net", "cpu", "cpu"};
    table.add(mesa_net_row(cpu, "chunk", mesa_net_chunk_fwd_cpu, mesa_net_chunk_bwd_cpu));
    table.add(
        mesa_net_row(cpu, "recurrent", mesa_net_recurrent_fwd_cpu, mesa_net_recurrent_bwd_cpu));
}

}  // namespace lav::kernels
