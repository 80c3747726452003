// tests/fuzz/mutator.h — lav_fuzz's input generator: byte edits, dictionary tokens and splices,
// the same sequence for the same seed.
//
//   Mutator mutator(1, read_dictionary("tests/fuzz/dict/scenario.dict"), 65536);
//   std::string next = mutator.mutate(corpus[mutator.below(n)], corpus[mutator.below(n)]);
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace lav::fuzz {

class Mutator {
  public:
    Mutator(uint64_t seed, std::vector<std::string> dictionary, size_t max_size);

    /// `input` after one to four random edits, at most max_size bytes; a splice joins a head of
    /// `input` to a tail of `other`.
    std::string mutate(std::string input, const std::string& other);

    /// A random number below `n` (n > 0).
    size_t below(size_t n) { return static_cast<size_t>(random_() % n); }

  private:
    void edit(std::string& input, const std::string& other);
    char some_byte();

    std::mt19937_64 random_;  // its sequence is fixed by the standard, unlike distributions'
    std::vector<std::string> dictionary_;
    size_t max_size_;
};

/// The tokens of a dictionary in libFuzzer's format: one quoted token a line, optionally named
/// (`kw="ops"`), with \\, \" and \xNN escapes; `#` starts a comment line. Throws
/// std::runtime_error for a file it cannot read or a line it cannot parse.
std::vector<std::string> read_dictionary(const std::string& path);

}  // namespace lav::fuzz
