// tests/fuzz/mutator.cpp — the edits of lav_fuzz's mutations, and dictionary files.
#include "mutator.h"

#include <fstream>
#include <stdexcept>

namespace lav::fuzz {
namespace {

// bytes that delimit TOML, ops and numbers, so that random edits reach the parsers' branches
constexpr char kInteresting[] = "\n\r\t \"'[]{}()=,.#\\+-*/_0123456789eE\xff";

}  // namespace

Mutator::Mutator(uint64_t seed, std::vector<std::string> dictionary, size_t max_size)
    : random_(seed), dictionary_(std::move(dictionary)), max_size_(max_size) {}

std::string Mutator::mutate(std::string input, const std::string& other) {
    const size_t edits = 1 + below(4);
    for (size_t i = 0; i < edits; ++i) edit(input, other);
    if (input.size() > max_size_) input.resize(max_size_);
    return input;
}

char Mutator::some_byte() {
    if (below(2) == 0) return static_cast<char>(below(256));
    return kInteresting[below(sizeof kInteresting - 1)];
}

void Mutator::edit(std::string& input, const std::string& other) {
    const size_t size = input.size();
    const size_t at = below(size + 1);  // a position to insert at; below size for a byte
    const size_t span = 1 + below(size < 16 ? size + 1 : 16);
    switch (below(7)) {
        case 0:  // flip a bit
            if (size > 0) input[at % size] ^= static_cast<char>(1 << below(8));
            break;
        case 1:  // set a byte
            if (size > 0) input[at % size] = some_byte();
            break;
        case 2:  // insert a few bytes
            input.insert(at, 1 + below(4), some_byte());
            break;
        case 3:  // delete a range
            if (size > 0) input.erase(at % size, span);
            break;
        case 4:  // copy a range elsewhere: repeated lines, deeper nesting
            if (size > 0) input.insert(at, input.substr(below(size), span));
            break;
        case 5:  // insert a token of the target's language
            if (!dictionary_.empty()) input.insert(at, dictionary_[below(dictionary_.size())]);
            break;
        case 6:  // a head of this input, a tail of another
            input = input.substr(0, at) + other.substr(below(other.size() + 1));
            break;
    }
}

std::vector<std::string> read_dictionary(const std::string& path) {
    std::ifstream in(path);
    if (!in) throw std::runtime_error("cannot read the dictionary " + path);
    std::vector<std::string> tokens;
    int number = 0;
    for (std::string line; std::getline(in, line);) {
        ++number;
        const size_t open = line.find('"');
        if (line.find_first_not_of(" \t") == std::string::npos || line[0] == '#') continue;
        const size_t close = line.rfind('"');
        if (open == std::string::npos || close == open)
            throw std::runtime_error(path + ":" + std::to_string(number) + ": not a \"token\"");
        std::string token;
        for (size_t i = open + 1; i < close; ++i) {
            if (line[i] != '\\' || i + 1 == close) {
                token += line[i];
            } else if (line[i + 1] == 'x' && i + 3 < close) {
                token += static_cast<char>(std::stoi(line.substr(i + 2, 2), nullptr, 16));
                i += 3;
            } else {
                token += line[++i];
            }
        }
        tokens.push_back(token);
    }
    return tokens;
}

}  // namespace lav::fuzz
