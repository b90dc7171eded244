// Tests of base/aligned.h: zeroed, aligned buffers on both allocation paths, and the huge-page
// advice (train.huge_pages) as the kernel records it: the mapping's VmFlags in /proc/self/smaps carry
// "hg" (VM_HUGEPAGE) exactly when the advice was given, wherever the kernel has transparent huge
// pages (it refuses the advice only where they are compiled out: then no mapping carries it; the
// test asks the kernel itself which is the case).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "base/aligned.h"
#include "common/test_util.h"

namespace {

// The VmFlags of the mapping that holds `p` ("" when none is found).
std::string vm_flags_of(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  std::ifstream f("/proc/self/smaps");
  bool inside = false;
  for (std::string line; std::getline(f, line);) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find(':') > line.find(' ')) {
      inside = a >= lo && a < hi;
      continue;
    }
    if (inside && line.rfind("VmFlags:", 0) == 0) return line.substr(8) + " ";
  }
  return "";
}


struct HugePagesOff {
  ~HugePagesOff() { ms::set_huge_buffer_pages(false); }
};

TEST(AlignedBuffer, BothPathsAreZeroedAndAligned) {
  for (size_t n : {size_t{10}, size_t{1} << 16, size_t{3} << 20}) {  // heap, heap, mapped
    ms::AlignedBuffer<float> b(n);
    ASSERT_EQ(b.size(), n);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % 64, 0u);
    for (size_t i = 0; i < n; i += 997) EXPECT_EQ(b[i], 0.0f) << i;
    b[n - 1] = 3.0f;
    b.resize(n + 1);  // reallocated, zeroed again
    EXPECT_EQ(b[n - 1], 0.0f);
  }
}

TEST(AlignedBuffer, HugePagesAreAdvisedOnlyWhenAskedAndOnlyForLargeBuffers) {
  HugePagesOff restore;
  ms::set_huge_buffer_pages(false);
  ms::AlignedBuffer<float> plain(size_t{4} << 20);  // 16 MiB
  const std::string plain_flags = vm_flags_of(plain.data());
  ASSERT_FALSE(plain_flags.empty()) << "no mapping in /proc/self/smaps holds the buffer";
  EXPECT_EQ(plain_flags.find(" hg "), std::string::npos) << plain_flags;

  ms::set_huge_buffer_pages(true);
  EXPECT_TRUE(ms::huge_buffer_pages());
  const size_t advised_before = ms::huge_advised_bytes();
  {
    ms::AlignedBuffer<float> huge(size_t{4} << 20);
    const std::string huge_flags = vm_flags_of(huge.data());
    if (ms::testing::kernel_takes_huge_page_advice()) {
      EXPECT_NE(huge_flags.find(" hg "), std::string::npos) << "MADV_HUGEPAGE not recorded: " << huge_flags;
      EXPECT_EQ(ms::huge_advised_bytes(), advised_before + (size_t{16} << 20));
    } else {
      EXPECT_EQ(huge_flags.find(" hg "), std::string::npos) << huge_flags;
      EXPECT_EQ(ms::huge_advised_bytes(), advised_before);
    }
    for (size_t i = 0; i < huge.size(); i += 4096) huge[i] = 1.0f;  // usable either way
    EXPECT_EQ(huge[4096], 1.0f);
    ms::AlignedBuffer<float> moved(std::move(huge));  // the count follows the mapping, once
    EXPECT_EQ(moved[4096], 1.0f);
  }
  EXPECT_EQ(ms::huge_advised_bytes(), advised_before) << "a freed buffer still counted";

  // Below 2 MiB no advice, even when asked.
  ms::AlignedBuffer<float> small(size_t{3} << 17);  // 1.5 MiB: mapped, not advised
  const std::string small_flags = vm_flags_of(small.data());
  ASSERT_FALSE(small_flags.empty());
  EXPECT_EQ(small_flags.find(" hg "), std::string::npos) << small_flags;
}

}  // namespace
