// kernels/rebased/rebased_contract.cpp — the precision contracts of ReBased's three variants; the
// items come from the shared table in common/cpu/feature_map_cpu.h, README.md says why.
#include "common/cpu/feature_map_cpu.h"
#include "rebased/rebased.h"

namespace lav::kernels {

feature_map::Args rebased_engine_args(const RebasedArgs& a);

PrecisionContract rebased_contract(std::string_view variant, bool backward,
                                   const RebasedArgs& args) {
    return feature_map::contract(rebased_engine_args(args), variant, backward);
}

}  // namespace lav::kernels
