// src/core/printable.cpp — control characters as escapes, for text and for a stream buffer.
#include "core/printable.h"

#include <cstdio>

namespace lav {

std::string printable(std::string_view text, Breaks breaks) {
    std::string out;
    out.reserve(text.size());
    for (std::size_t i = 0; i < text.size(); ++i) {
        const auto byte = static_cast<unsigned char>(text[i]);
        const auto next = i + 1 < text.size() ? static_cast<unsigned char>(text[i + 1]) : 0;
        char escape[8];
        if (breaks == Breaks::keep && (byte == '\n' || byte == '\t')) {
            out += text[i];
        } else if (byte < 0x20 || byte == 0x7F) {
            std::snprintf(escape, sizeof escape, "\\x%02x", byte);
            out += escape;
        } else if (byte == 0xC2 && next >= 0x80 && next <= 0x9F) {
            // a C1 control such as CSI (U+009B) starts escape sequences on some terminals
            std::snprintf(escape, sizeof escape, "\\u%04x", next);
            out += escape;
            ++i;
        } else {
            out += text[i];
        }
    }
    return out;
}

PrintableBuf::int_type PrintableBuf::overflow(int_type c) {
    if (traits_type::eq_int_type(c, traits_type::eof())) return traits_type::not_eof(c);
    const char ch = traits_type::to_char_type(c);
    xsputn(&ch, 1);
    return c;
}

std::streamsize PrintableBuf::xsputn(const char* s, std::streamsize n) {
    for (std::streamsize i = 0; i < n; ++i) {
        line_ += s[i];
        if (s[i] == '\n' && sync() != 0) return i;
    }
    return n;
}

void PrintableBuf::pass_through(std::string_view codes) {
    sync();
    target_->sputn(codes.data(), static_cast<std::streamsize>(codes.size()));
}

int PrintableBuf::sync() {
    const std::string text = printable(line_, Breaks::keep);
    line_.clear();
    const auto size = static_cast<std::streamsize>(text.size());
    if (target_->sputn(text.data(), size) != size) return -1;
    return target_->pubsync();
}

}  // namespace lav
