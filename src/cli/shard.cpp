// src/cli/shard.cpp — shares a run's cases out to shards, balanced by estimated cost.
#include "cli/shard.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <numeric>

#include "core/error.h"
#include "core/text.h"

namespace lav::cli {
namespace {

// "12" -> 12; -1 for anything but up to six decimal digits
int whole_number(const std::string& text) {
    if (text.empty() || text.size() > 6) return -1;
    int value = 0;
    for (char ch : text) {
        if (ch < '0' || ch > '9') return -1;
        value = value * 10 + (ch - '0');
    }
    return value;
}

}  // namespace

std::string Shard::text() const {
    return whole() ? "" : std::to_string(index) + "/" + std::to_string(count);
}

Shard parse_shard(const std::string& text) {
    const auto bad = [&](const std::string& why) {
        return UsageError("bad --shard '" + text + "': " + why +
                          "; write K/N, shard K of N, with 1 <= K <= N <= " +
                          std::to_string(kMaxShards) + " (e.g. --shard 2/4)");
    };
    const auto slash = text.find('/');
    if (slash == std::string::npos) throw bad("no '/'");
    const int k = whole_number(text.substr(0, slash));
    const int n = whole_number(text.substr(slash + 1));
    if (k < 0 || n < 0) throw bad("K and N are whole decimal numbers");
    if (n < 1 || n > kMaxShards) throw bad("N out of range");
    if (k < 1 || k > n) throw bad("K out of range");
    return {k, n};
}

std::vector<size_t> shard_positions(const std::vector<ShardItem>& items, const Shard& shard) {
    std::vector<size_t> all(items.size());
    std::iota(all.begin(), all.end(), size_t{0});
    if (shard.whole()) return all;
    struct Group {
        double cost = 0;
        std::vector<size_t> members;
    };
    // keyed apart so that a group's name never meets a lone case's id
    std::map<std::string, Group> groups;
    for (const size_t i : all) {
        Group& g =
            groups[items[i].group.empty() ? "case " + items[i].id : "group " + items[i].group];
        g.cost += items[i].cost;
        g.members.push_back(i);
    }
    std::vector<const std::pair<const std::string, Group>*> order;
    for (const auto& g : groups) order.push_back(&g);
    std::stable_sort(order.begin(), order.end(),
                     [](const auto* a, const auto* b) { return a->second.cost > b->second.cost; });
    std::vector<double> load(shard.count, 0.0);
    std::vector<size_t> mine;
    for (const auto* g : order) {
        const size_t lightest =
            static_cast<size_t>(std::min_element(load.begin(), load.end()) - load.begin());
        load[lightest] += g->second.cost;
        if (static_cast<int>(lightest) + 1 == shard.index)
            mine.insert(mine.end(), g->second.members.begin(), g->second.members.end());
    }
    std::sort(mine.begin(), mine.end());
    return mine;
}

std::string selection_digest(size_t records, const std::vector<std::string>& parts) {
    uint64_t h = kFnv1aBasis;
    for (const auto& part : parts) {
        h = fnv1a(part, h);
        h = fnv1a(std::string(1, '\0'), h);  // "ab","c" and "a","bc" differ
    }
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
    return std::to_string(records) + " records " + hex;
}

}  // namespace lav::cli
