// tests/core/varlen_test.cpp — sequences of dense and varlen batches; layout views.
#include "core/varlen.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "core/error.h"
#include "core/layout.h"

namespace lav {
namespace {

TEST(Varlen, DenseBatchIsBSequences) {
    const auto seqs = sequences(3, 10, {});
    ASSERT_EQ(seqs.size(), 3u);
    EXPECT_EQ(seqs[2].batch, 2);
    EXPECT_EQ(seqs[2].begin, 0);
    EXPECT_EQ(seqs[2].length(), 10);
    EXPECT_EQ(num_sequences(3, {}), 3);
}

TEST(Varlen, SegmentsIncludeEmptyOnes) {
    const auto seqs = sequences(1, 16, {0, 0, 5, 16});
    ASSERT_EQ(seqs.size(), 3u);
    EXPECT_EQ(seqs[0].length(), 0);
    EXPECT_EQ(seqs[1].begin, 0);
    EXPECT_EQ(seqs[1].end, 5);
    EXPECT_EQ(seqs[2].index, 2);
    EXPECT_EQ(seqs[2].batch, 0);
    EXPECT_EQ(num_sequences(1, {0, 0, 5, 16}), 3);
}

TEST(Varlen, ChunksAreNumberedSequenceAfterSequence) {
    // lengths 0, 300, 724: no chunk, 5 (the last of 44), 12 (the last of 20)
    const ChunkIndex index = chunk_index(sequences(1, 1024, {0, 0, 300, 1024}), 64);
    EXPECT_EQ(index.first, (std::vector<int64_t>{0, 0, 5}));
    EXPECT_EQ(index.total, 17);
}

TEST(Varlen, RejectsBadOffsets) {
    EXPECT_THROW(sequences(2, 16, {0, 16}), ShapeError);
    EXPECT_THROW(sequences(1, 16, {0, 8, 4, 16}), ShapeError);
    EXPECT_THROW(sequences(1, 16, {0, 8}), ShapeError);
}

TEST(Layout, HeadFirstViewsShareStorage) {
    const at::Tensor x =
        at::arange(2 * 3 * 4 * 5, at::kFloat).reshape({2, 3, 4, 5});  // [B, H, T, D]
    const at::Tensor hl = to_head_last(x, Layout::head_first);        // [B, T, H, D]
    EXPECT_EQ(hl.sizes(), (at::IntArrayRef{2, 4, 3, 5}));
    EXPECT_EQ(hl.data_ptr(), x.data_ptr());
    EXPECT_EQ(hl[1][2][0][3].item<float>(), x[1][0][2][3].item<float>());
    EXPECT_TRUE(at::equal(from_head_last(hl, Layout::head_first), x));
    EXPECT_EQ(to_head_last(x, Layout::head_last).data_ptr(), x.data_ptr());
}

}  // namespace
}  // namespace lav
