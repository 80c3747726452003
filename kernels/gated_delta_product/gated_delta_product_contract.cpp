// kernels/gated_delta_product/gated_delta_product_contract.cpp — the precision contracts of
// gated DeltaProduct's chunk and recurrent variants: the gated delta rule engine's items
// (common/cpu/delta_chunk.h) over the interleaved sub-steps, plus the interleaving itself.
#include "common/cpu/delta_chunk.h"
#include "gated_delta_product/gated_delta_product.h"

namespace lav::kernels {

PrecisionContract gated_delta_product_contract(std::string_view variant, bool backward,
                                               const GatedDeltaProductArgs& args) {
    delta::Args e;
    e.family = "gated_delta_product";
    e.q = args.q;
    e.g = args.g;
    e.beta = args.beta;
    e.h0 = args.h0;
    e.l2norm = args.use_qk_l2norm_in_kernel;
    e.state_dtype = args.state_dtype;
    e.output_dtype = args.output_dtype;
    PrecisionContract c = delta::contract(e, variant, backward);
    const DType in = delta::lav_dtype(e, args.q.scalar_type());
    c.items.push_back({"interleaved q", in,
                       "q on each token's last sub-step, zeros on the others: exact copies"});
    if (args.g.defined())
        c.items.push_back({"interleaved g", delta::lav_dtype(e, args.g.scalar_type()),
                           "g on each token's first sub-step, zeros on the others"});
    if (backward)
        c.items.push_back({"interleaved d_o",
                           delta::lav_dtype(e, args.output_dtype == c10::ScalarType::Undefined
                                                   ? args.q.scalar_type()
                                                   : args.output_dtype),
                           "d_o on each token's last sub-step, zeros on the others"});
    return c;
}

}  // namespace lav::kernels
