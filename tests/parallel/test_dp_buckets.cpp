// test_dp_buckets: the ZeRO-2 bucket layout (pure): buckets tile the buffer from the end in
// backward order, all but the first-in-memory one hold a multiple of dp elements, the ranks' owned
// ranges partition every bucket, and each rank's pieces cover exactly its owned elements with the
// right tensor; config layout resolution rejects impossible layouts by name.
#include <gtest/gtest.h>

#include "common/test_util.h"

#include <vector>

#include <fmt/format.h>

#include "base/check.h"
#include "config/config.h"
#include "parallel/dp/dp_buckets.h"

using namespace ms;

namespace {

std::vector<ParamTensor> tensors_for(size_t numel, size_t seed) {
  std::vector<ParamTensor> t;
  size_t off = 0, k = 0;
  while (off < numel) {
    size_t n = std::min(numel - off, 1 + (seed * 7919 + k * 104729) % 300);
    t.push_back(ParamTensor{fmt::format("t{}", k), off, n, k % 2 == 0});
    off += n;
    k++;
  }
  return t;
}

TEST(DpBuckets, TileOwnAndCover) {
  for (size_t numel : {1u, 7u, 1000u, 12345u})
    for (int dp : {1, 2, 3, 4})
      for (size_t be : {16u, 100u, 5000u}) {
        const auto tensors = tensors_for(numel, numel + be);
        std::vector<int> owner(numel, -1);
        size_t nb = 0;
        for (int r = 0; r < dp; r++) {
          DpBucketLayout L(numel, dp, r, be, tensors);
          const auto& bk = L.buckets();
          nb = bk.size();
          size_t end = numel, local = 0;
          for (size_t b = 0; b < bk.size(); b++) {
            EXPECT_EQ(bk[b].end, end);
            EXPECT_LT(bk[b].start, bk[b].end);
            if (bk[b].start > 0) {
              EXPECT_EQ((bk[b].end - bk[b].start) % dp, 0u) << numel << " " << dp << " " << be;
            }
            EXPECT_GE(bk[b].padded(dp), bk[b].end - bk[b].start);
            EXPECT_LT(bk[b].padded(dp) - (bk[b].end - bk[b].start), static_cast<size_t>(dp));
            EXPECT_EQ(bk[b].local, local);
            local += bk[b].shard;
            end = bk[b].start;
            for (size_t i = L.owned_lo(b); i < L.owned_hi(b); i++) {
              EXPECT_EQ(owner[i], -1) << "element " << i << " owned twice";
              owner[i] = r;
            }
          }
          EXPECT_EQ(end, 0u);
          EXPECT_EQ(L.local_size(), local);
          // Pieces: exactly the owned elements, each inside its tensor, local offsets consistent.
          size_t covered = 0;
          for (const DpPiece& p : L.pieces()) {
            const ParamTensor& t = tensors[p.tensor];
            EXPECT_GE(p.global, t.offset);
            EXPECT_LE(p.global + p.view.numel, t.offset + t.numel);
            EXPECT_EQ(p.view.name, t.name);
            EXPECT_EQ(p.view.decay, t.decay);
            for (size_t i = 0; i < p.view.numel; i++) EXPECT_EQ(owner[p.global + i], r);
            covered += p.view.numel;
          }
          size_t owned = 0;
          for (size_t b = 0; b < bk.size(); b++) owned += L.owned_hi(b) - L.owned_lo(b);
          EXPECT_EQ(covered, owned);
        }
        for (size_t i = 0; i < numel; i++) ASSERT_NE(owner[i], -1) << "element " << i << " owned by nobody";
        EXPECT_GE(nb, 1u);
      }
}

TEST(DpLayout, ResolveAgainstWorldSize) {
  Config c;
  c.data.train = "x";
  c.train.batch_size = 2;
  c.train.global_batch = 16;
  Config a = c;
  a.resolve_layout(4);  // dp = 0 -> 4; grad_accum = 16 / (4*2)
  EXPECT_EQ(a.parallel.dp, 4);
  EXPECT_EQ(a.train.grad_accum, 2);
  Config b = c;
  b.parallel.dp = 2;
  try {
    b.resolve_layout(3);
    FAIL() << "dp=2 on 3 ranks accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not match the world size 3"), std::string::npos) << e.what();
  }
  Config d = c;
  d.train.global_batch = 6;
  try {
    d.resolve_layout(4);
    FAIL() << "global batch 6 on dp=4 x B=2 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("train.global_batch=6 is not divisible by parallel.dp=4"), std::string::npos) << e.what();
  }
  Config g = c;
  g.train.global_batch = 0;
  g.train.grad_accum = 3;
  g.resolve_layout(2);
  EXPECT_EQ(g.train.global_batch, 2 * 3 * 2);
  Config f = c;
  f.parallel.tp = 5;  // does not divide the heads
  ms::testing::expect_error([&] { f.validate(); }, {"parallel.tp=5 does not divide model.n_head"});
  Config p = c;
  p.parallel.pp = 2;
  p.parallel.virtual_stages = 2;  // needs the interleaved schedule
  ms::testing::expect_error([&] { p.validate(); }, {"parallel.virtual_stages=2 needs parallel.schedule='interleaved'"});
  p.parallel.schedule = PipelineScheduleKind::kInterleaved;
  p.model.n_layer = 6;  // not divisible by 2 x 2 chunks
  ms::testing::expect_error([&] { p.validate(); }, {"model.n_layer=6 is not divisible by parallel.pp=2 x parallel.virtual_stages=2"});
  p.model.n_layer = 4;
  p.train.grad_accum = 3;  // interleaving needs a multiple of pp micro-batches
  p.train.global_batch = 0;
  ms::testing::expect_error([&] { p.validate(); }, {"train.grad_accum=3", "not a multiple of parallel.pp=2"});
  p.train.grad_accum = 4;
  EXPECT_NO_THROW(p.validate());
}

}  // namespace
