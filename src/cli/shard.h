// src/cli/shard.h — lav run --shard K/N: which cases one shard of a run takes, and the digest
// that tells the shards of one run apart from others' (lav merge).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lav::cli {

/// Shard `index` (1-based) of `count`; count 0 means the whole run.
struct Shard {
    int index = 0;
    int count = 0;
    bool whole() const { return count == 0; }
    /// "K/N", or "" for the whole run (the report's `shard` attribute)
    std::string text() const;
};

/// The most shards a run splits into: more than there are cases only makes empty shards.
inline constexpr int kMaxShards = 100000;

/// "K/N" with whole decimal numbers, 1 <= K <= N <= kMaxShards; UsageError naming the form
/// otherwise ("3/2", "0/4", "1/", "a/b", " 1/2").
Shard parse_shard(const std::string& text);

/// One case to share out: its id, estimated cost, and the group it goes with.
struct ShardItem {
    std::string id;
    double cost = 0;
    /// cases of one group share a shard (--shard-by family: what a provider compiles once per
    /// process stays in one); empty: the case goes alone
    std::string group;
};

/// The positions in `items` of the cases shard `shard` runs, in increasing order: every case
/// goes to exactly one shard, a group's cases to the same one. Groups (a lone case is a group of
/// one) are dealt costliest first (ties by name) to the shard with the least cost so far (ties to
/// the lowest K), so the result depends only on the ids, groups and costs, never on the order
/// they were given in or the machine.
std::vector<size_t> shard_positions(const std::vector<ShardItem>& items, const Shard& shard);

/// The `selection` attribute: "<n> records <16 hex digits>", the digest over `parts` (the
/// scenario texts, record ids and record-changing options, in a fixed order).
std::string selection_digest(size_t records, const std::vector<std::string>& parts);

}  // namespace lav::cli
