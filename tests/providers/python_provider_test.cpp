// tests/providers/python_provider_test.cpp — `lav run --provider`: a Python module's functions as
// rows, in the interpreter embedded in lav, beside lav's CPU rows on the same inputs.
#include <gtest/gtest.h>

#include <string>

#include "common/lav_command.h"
#include "report/report.h"

namespace lav {
namespace {

const std::string kProvider = "tests/providers/torch_provider.py";

TEST(PythonProvider, RowsRunBesideLavsOwnWithErrorsAsRecords) {
    const std::string out = test::scratch("python.h5");
    const test::Result run = test::lav("run tests/data/scenarios/providers --provider " +
                                       kProvider + " --backend cpu,torchref --out " + out);
    EXPECT_EQ(run.code, 1) << run.output;  // chunk_simple_gla raises
    const report::Report rep = report::read_report(out);
    ASSERT_TRUE(rep.complete);
    EXPECT_EQ(rep.run.providers.rfind("torchref (" + kProvider + ", torch 2.", 0), 0u)
        << rep.run.providers;
    int passed = 0, errors = 0;
    for (const report::CaseRecord& r : rep.cases) {
        if (r.backend != "torchref") continue;
        if (r.variant == "recurrent") {
            ++passed;
            EXPECT_EQ(r.verdict, "pass") << r.id << ": " << r.message;
            EXPECT_EQ(r.metrics.size(), r.pass == "fwd" ? 2u : 5u) << r.id;
            // judged by lav's declared contract, whose inner items the provider cannot show
            for (const ContractItem& item : r.contract.items)
                EXPECT_EQ(item.note.rfind("not observable", 0) == 0,
                          item.item != "o" && item.item != "ht" && item.item.rfind("d", 0) != 0)
                    << r.id << " " << item.item << ": " << item.note;
        } else {
            ++errors;
            EXPECT_EQ(r.verdict, "error") << r.id;
            // the exception and the provider's frame that raised it
            EXPECT_NE(r.message.find("ValueError: torchref has no chunked form"), std::string::npos)
                << r.message;
            EXPECT_NE(r.message.find("torch_provider.py"), std::string::npos) << r.message;
        }
    }
    EXPECT_EQ(passed, 10);
    EXPECT_EQ(errors, 10);
}

TEST(PythonProvider, BadModulesAreClearErrors) {
    const test::Result missing =
        test::lav("run tests/data/scenarios/providers --provider no_such_module_here");
    EXPECT_EQ(missing.code, 2) << missing.output;
    EXPECT_NE(missing.output.find("No module named 'no_such_module_here'"), std::string::npos)
        << missing.output;
    const test::Result empty = test::lav("run tests/data/scenarios/providers --provider json");
    EXPECT_EQ(empty.code, 2) << empty.output;
    EXPECT_NE(empty.output.find("has no function named <variant>_<family>"), std::string::npos)
        << empty.output;
}

}  // namespace
}  // namespace lav
