// src/harness/registry.cpp — the family registry and the list of families in this build.
#include "harness/registry.h"

#include "core/error.h"

namespace lav::harness {

at::Tensor get_or_undefined(const TensorMap& m, const std::string& name) {
    const auto it = m.find(name);
    return it == m.end() ? at::Tensor() : it->second;
}

void Registry::add(Family family) {
    for (const auto& f : families_)
        LAV_ASSERT(f.info.name != family.info.name, "family registered twice: ", f.info.name);
    families_.push_back(std::move(family));
}

const Family& Registry::get(const std::string& name) const {
    std::string known;
    for (const auto& f : families_) {
        if (f.info.name == name) return f;
        known += (known.empty() ? "" : ", ") + f.info.name;
    }
    throw UsageError("unknown kernel family '" + name + "' (this build has: " + known + ")");
}

scenario::Catalog Registry::catalog() const {
    scenario::Catalog out;
    for (const auto& f : families_) out.push_back(f.info);
    return out;
}

void register_all(Registry& registry) {
#define LAV_FAMILY(name) registry.add(name##_family());
#include "harness/families.inc"
#undef LAV_FAMILY
}

}  // namespace lav::harness
