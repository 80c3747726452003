// tests/fuzz/scenario_target.cpp — fuzz target: the bytes as a scenario file, loaded as `lav
// validate` loads it.
#include "harness/registry.h"
#include "scenario/scenario.h"
#include "targets.h"

namespace lav::fuzz {

int fuzz_scenario(const uint8_t* data, size_t size) {
    static const scenario::Catalog catalog = [] {
        harness::Registry registry;
        harness::register_all(registry);
        return registry.catalog();
    }();
    // a .toml name, so that the file is taken as a folder's scenario would be
    static const ScratchFile file("scenario.toml");
    file.write(data, size);
    // long cases too, and a memory limit a case can exceed: every check `lav validate` can make
    const scenario::LoadOptions options{uint64_t{8} << 30, true};
    return expect_user_errors([&] {
        for (const std::string& path : scenario::collect_files({file.path()}))
            scenario::load_file(path, catalog, options);
    });
}

}  // namespace lav::fuzz
