// tests/core/printable_test.cpp — control characters become escapes, in text and through a stream.
#include "core/printable.h"

#include <gtest/gtest.h>

#include <ostream>
#include <sstream>

namespace lav {
namespace {

TEST(Printable, ControlCharactersBecomeEscapes) {
    EXPECT_EQ(printable("\x1b[31mred\x1b[0m"), "\\x1b[31mred\\x1b[0m");
    EXPECT_EQ(printable(std::string("a\0b\x7f", 4)), "a\\x00b\\x7f");
    // CSI as a C1 control, two bytes in UTF-8
    EXPECT_EQ(printable("\xc2\x9b"
                        "2J"),
              "\\u009b2J");
    EXPECT_EQ(printable("line\nnext\ttab\r"), "line\\x0anext\\x09tab\\x0d");
    EXPECT_EQ(printable("line\nnext\ttab\r", Breaks::keep), "line\nnext\ttab\\x0d");
}

TEST(Printable, PrintableTextIsUnchanged) {
    const std::string text = "é … ü \xc2\xa0 \\x1b plain";
    EXPECT_EQ(printable(text), text);
    EXPECT_EQ(printable(printable("\x1b")), "\\x1b");
}

TEST(Printable, StreamEscapesWhatPassesThrough) {
    std::ostringstream target;
    {
        PrintableBuf buf(target.rdbuf());
        std::ostream out(&buf);
        out << "id \x1b]0;title\x07 done\n" << 42 << '\x1b';
        out.flush();
        EXPECT_EQ(target.str(), "id \\x1b]0;title\\x07 done\n42\\x1b");
        out << "\xc2\x9b";
    }
    // what was left unflushed goes out when the buffer ends
    EXPECT_EQ(target.str(), "id \\x1b]0;title\\x07 done\n42\\x1b\\u009b");
}

}  // namespace
}  // namespace lav
