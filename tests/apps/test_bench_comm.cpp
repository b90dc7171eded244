// test_bench_comm: the argument helpers of `megascale bench comm` (apps/bench_comm.h): --sizes as a
// list or a "4K..64M" range of powers of 4 (CLI11 size units), rejected specs, overflow (an error,
// never a hang), and format_bytes. The benchmark itself runs in tests/launch/test_launcher.cpp.
#include <cstddef>
#include <string>
#include <vector>

#include "base/check.h"
#include "bench_comm.h"
#include "common/test_util.h"

namespace {

TEST(CommBench, SizesParse) {
  EXPECT_EQ(ms::parse_byte_sizes("4K..64M"),
            (std::vector<size_t>{4u << 10, 16u << 10, 64u << 10, 256u << 10, 1u << 20, 4u << 20, 16u << 20, 64u << 20}));
  EXPECT_EQ(ms::parse_byte_sizes("4K,1M,3000"), (std::vector<size_t>{4096, 1u << 20, 3000}));
  EXPECT_EQ(ms::format_bytes(4096), "4 KiB");
  EXPECT_EQ(ms::format_bytes(64u << 20), "64 MiB");
  EXPECT_EQ(ms::format_bytes(3000), "3000 B");
  for (const char* bad : {"", "4X", "3", "0", "64M..4K", "abc"})
    EXPECT_THROW(ms::parse_byte_sizes(bad), ms::Error) << bad;
}

TEST(CommBench, SizeUnitsAreBinaryAndCaseInsensitive) {
  EXPECT_EQ(ms::parse_byte_sizes("4k,4KiB,4kb,1m,1MiB,1g,4096B"),
            (std::vector<size_t>{4096, 4096, 4096, 1u << 20, 1u << 20, 1u << 30, 4096}));
  // A range whose end is not a power-of-4 step from its start stops below the end.
  EXPECT_EQ(ms::parse_byte_sizes("4K..100K"), (std::vector<size_t>{4u << 10, 16u << 10, 64u << 10}));
  EXPECT_EQ(ms::parse_byte_sizes("8..8"), (std::vector<size_t>{8}));
  // Leading zeros are decimal, not octal.
  EXPECT_EQ(ms::parse_byte_sizes("0016"), (std::vector<size_t>{16}));
  for (const char* bad : {"K", "-4K", "+4K", "0x10", "1.5M", "4K5", "4K,,8K", "4K..", "..4K", "4K..8K..16K"})
    EXPECT_THROW(ms::parse_byte_sizes(bad), ms::Error) << bad;
}

TEST(CommBench, SizeOverflowIsAnErrorNotAHang) {
  // The product overflows 64 bits: CLI11 refuses it.
  for (const char* bad : {"99999999999G", "1..99999999999G", "16E", "99999999999999999999", "4..184467440737095516160"})
    EXPECT_THROW(ms::parse_byte_sizes(bad), ms::Error) << bad;
  // Ends near the top of size_t: the powers of 4 stop before they would overflow.
  const std::vector<size_t> big = ms::parse_byte_sizes("4..8E");
  ASSERT_FALSE(big.empty());
  EXPECT_EQ(big.front(), 4u);
  EXPECT_EQ(big.size(), 31u);  // 4^1 .. 4^31 = 2^62 <= 8 EiB = 2^63 < 4^32
  EXPECT_EQ(big.back(), size_t(1) << 62);
  try {
    ms::parse_byte_sizes("4..99999999999G");
    ADD_FAILURE() << "4..99999999999G accepted";
  } catch (const ms::Error& e) {
    EXPECT_NE(std::string(e.what()).find("99999999999G"), std::string::npos) << e.what();
  }
}

}  // namespace
