// src/harness/registry.h — the families of this build and the rows that run them.
//
// Families and rows are added by one explicit register_all() call (no static registrars): the
// families from src/harness/<f>_family.cpp, the rows from kernels/<f>/ (CPU) and, in CUDA
// builds, from the families' CUDA glue. cmake/LavFamilies.cmake is the one list of both.
//
//   Registry registry;
//   register_all(registry);
//   const Family& f = registry.get("simple_gla");
//   const Row* row = registry.rows().find("simple_gla", "chunk", "cpu");
#pragma once

#include <string>
#include <vector>

#include "core/row.h"
#include "harness/family.h"
#include "scenario/catalog.h"

namespace lav::harness {

class Registry {
  public:
    void add(Family family);
    /// The family called `name`; throws UsageError naming the known ones otherwise.
    const Family& get(const std::string& name) const;
    const std::vector<Family>& families() const { return families_; }
    RowTable& rows() { return rows_; }
    const RowTable& rows() const { return rows_; }
    /// The backends some row of this build runs on, in the order rows were added.
    std::vector<std::string> backends() const;
    /// What the scenario validator needs to know of every family.
    scenario::Catalog catalog() const;

  private:
    std::vector<Family> families_;
    RowTable rows_;
};

/// Adds every family of this build and every row.
void register_all(Registry& registry);

// One `Family <f>_family();` per family, each in src/harness/<f>_family.cpp.
#define LAV_FAMILY(name) Family name##_family();
#include "harness/families.inc"
#undef LAV_FAMILY

}  // namespace lav::harness
