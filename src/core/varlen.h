// src/core/varlen.h — the sequences of a batch: B rows of length T, or the cu_seqlens segments.
#pragma once

#include <cstdint>
#include <vector>

namespace lav {

/// One independent sequence: row `batch` of the [B, T, ...] tensors, positions [begin, end).
/// `index` is its number among all sequences, i.e. its row in the [N, H, K, V] states.
struct Sequence {
    int64_t index;
    int64_t batch;
    int64_t begin;
    int64_t end;
    int64_t length() const { return end - begin; }
};

/// The sequences of a batch: without cu_seqlens, B sequences of length T; with cu_seqlens
/// (B == 1), one per segment, empty ones included.
std::vector<Sequence> sequences(int64_t B, int64_t T, const std::vector<int64_t>& cu_seqlens);

/// N, the number of sequences (rows of the state tensors).
int64_t num_sequences(int64_t B, const std::vector<int64_t>& cu_seqlens);

/// The chunks of a batch numbered as FLA numbers its stored chunk states: sequence after
/// sequence, `chunk` positions each, the last chunk of a sequence possibly shorter and an empty
/// sequence without any. `first[n]` is the number of sequence n's first chunk.
struct ChunkIndex {
    std::vector<int64_t> first;  ///< [N]
    int64_t total = 0;           ///< NT, the number of chunks in the batch
};

ChunkIndex chunk_index(const std::vector<Sequence>& seqs, int64_t chunk);

}  // namespace lav
