// src/core/varlen.cpp — enumerates the sequences of a dense or varlen batch.
#include "core/varlen.h"

#include "core/error.h"

namespace lav {

std::vector<Sequence> sequences(int64_t B, int64_t T, const std::vector<int64_t>& cu_seqlens) {
    std::vector<Sequence> out;
    if (cu_seqlens.empty()) {
        for (int64_t b = 0; b < B; ++b) out.push_back({b, b, 0, T});
        return out;
    }
    LAV_CHECK(B == 1, "cu_seqlens needs B == 1, got B = ", B);
    LAV_CHECK(cu_seqlens.front() == 0 && cu_seqlens.back() == T,
              "cu_seqlens must run from 0 to T = ", T);
    for (size_t i = 0; i + 1 < cu_seqlens.size(); ++i) {
        LAV_CHECK(cu_seqlens[i] <= cu_seqlens[i + 1], "cu_seqlens must not decrease");
        out.push_back({static_cast<int64_t>(i), 0, cu_seqlens[i], cu_seqlens[i + 1]});
    }
    return out;
}

int64_t num_sequences(int64_t B, const std::vector<int64_t>& cu_seqlens) {
    return cu_seqlens.empty() ? B : static_cast<int64_t>(cu_seqlens.size()) - 1;
}

ChunkIndex chunk_index(const std::vector<Sequence>& seqs, int64_t chunk) {
    LAV_CHECK(chunk > 0, "chunk size must be positive, got ", chunk);
    ChunkIndex out;
    out.first.resize(seqs.size());
    for (const Sequence& s : seqs) {
        out.first[s.index] = out.total;
        out.total += (s.length() + chunk - 1) / chunk;
    }
    return out;
}

}  // namespace lav
