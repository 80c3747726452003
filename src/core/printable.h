// src/core/printable.h — text from scenario files and reports made safe for a terminal: control
// characters written as escapes, so that the terminal shows them instead of obeying them.
//
//   std::cerr << printable(name);  // "\x1b[2J" erases no screen: it prints as \x1b[2J
//   PrintableBuf buf(std::cout.rdbuf());
//   std::cout.rdbuf(&buf);         // from here on, everything std::cout prints is escaped
#pragma once

#include <streambuf>
#include <string>
#include <string_view>

namespace lav {

/// Whether printable() keeps line breaks and tabs: lav's own multi-line messages and tables
/// are laid out with them; a single value from a file is not.
enum class Breaks { escape, keep };

/// `text` with each control character written as an escape: the C0 controls and DEL as \xNN
/// (ESC is \x1b), the C1 controls U+0080..U+009F (two bytes in UTF-8) as \u0080..\u009f.
/// Printable text comes back unchanged.
std::string printable(std::string_view text, Breaks breaks = Breaks::escape);

/// A stream buffer that passes what it is given to `target` through printable(text,
/// Breaks::keep), a line at a time (and at each flush).
class PrintableBuf : public std::streambuf {
  public:
    explicit PrintableBuf(std::streambuf* target) : target_(target) {}
    ~PrintableBuf() override { sync(); }
    /// Writes `codes` as they are, after what came before: lav's own colours, which printable()
    /// would escape.
    void pass_through(std::string_view codes);

  protected:
    int_type overflow(int_type c) override;
    std::streamsize xsputn(const char* s, std::streamsize n) override;
    int sync() override;

  private:
    std::streambuf* target_;
    std::string line_;  ///< what came since the last line break or flush
};

}  // namespace lav
