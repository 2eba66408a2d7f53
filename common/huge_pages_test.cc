#include "common/huge_pages.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace kernelserve {
namespace {

// The VmFlags of the mapping that holds `p`, from /proc/self/smaps ("hg":
// MADV_HUGEPAGE was advised for it); empty if no mapping holds it.
std::string VmFlagsAt(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const auto addr = reinterpret_cast<uintptr_t>(p);
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    unsigned long lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-' && line.find(':') > line.find(' ')) {
      inside = addr >= lo && addr < hi;
      continue;
    }
    if (inside && line.rfind("VmFlags:", 0) == 0) return line.substr(8) + " ";
  }
  return "";
}

bool KernelHasThp() { return access("/sys/kernel/mm/transparent_hugepage/enabled", F_OK) == 0; }

class HugePagesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // 8 MiB mapped; `base_` is its first 2 MiB boundary, so the tests know
    // which whole huge pages a range contains.
    raw_ = mmap(nullptr, kMapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(raw_, MAP_FAILED);
    const auto r = reinterpret_cast<uintptr_t>(raw_);
    base_ = reinterpret_cast<uint8_t*>((r + kHugePageBytes - 1) & ~(uintptr_t{kHugePageBytes} - 1));
  }
  void TearDown() override { munmap(raw_, kMapped); }

  static constexpr size_t kMapped = 8 << 20;
  void* raw_ = nullptr;
  uint8_t* base_ = nullptr;
};

TEST_F(HugePagesTest, AdvisesTheAlignedInteriorOnly) {
  if (!KernelHasThp()) GTEST_SKIP() << "this kernel has no transparent huge pages (no /sys/kernel/mm/transparent_hugepage)";
  // From 4 KiB past a boundary to 4 KiB past the next-but-one: the interior
  // is exactly the one whole huge page [base + 2 MiB, base + 4 MiB).
  AdviseHugePages(base_ + 4096, 2 * kHugePageBytes);
  EXPECT_NE(VmFlagsAt(base_ + kHugePageBytes).find(" hg "), std::string::npos) << VmFlagsAt(base_ + kHugePageBytes);
  EXPECT_EQ(VmFlagsAt(base_ + 4096).find(" hg "), std::string::npos) << "the partial page before the interior";
  EXPECT_EQ(VmFlagsAt(base_ + 2 * kHugePageBytes).find(" hg "), std::string::npos)
      << "the partial page after the interior";
}

TEST_F(HugePagesTest, RangesWithoutAWholeHugePageAreLeftAlone) {
  AdviseHugePages(base_ + 4096, kHugePageBytes);  // straddles one boundary, contains no whole page
  AdviseHugePages(base_, kHugePageBytes - 1);
  AdviseHugePages(nullptr, kHugePageBytes * 2);
  AdviseHugePages(base_, 0);
  EXPECT_EQ(VmFlagsAt(base_).find(" hg "), std::string::npos);
  EXPECT_EQ(VmFlagsAt(base_ + kHugePageBytes).find(" hg "), std::string::npos);
}

TEST_F(HugePagesTest, AdvisedMemoryKeepsItsBytes) {
  // Advice on memory already written must not change what it holds.
  for (size_t i = 0; i < 3 * kHugePageBytes; ++i) base_[i] = static_cast<uint8_t>(i * 7 + 1);
  AdviseHugePages(base_, 3 * kHugePageBytes);
  for (size_t i = 0; i < 3 * kHugePageBytes; ++i) {
    ASSERT_EQ(base_[i], static_cast<uint8_t>(i * 7 + 1)) << "byte " << i;
  }
}

// Prefaulted pages are resident before anything is written to them (where
// the kernel has MADV_POPULATE_WRITE; before 5.14 the call does nothing).
TEST(PrefaultPagesTest, PagesAreResidentAfterward) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE)), n = 64;
  void* p = mmap(nullptr, n * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  // From the middle of the first page: whole pages only, so it is left alone.
  PrefaultPages(static_cast<char*>(p) + 100, n * page - 100);
  std::vector<unsigned char> resident(n);
  ASSERT_EQ(mincore(p, n * page, resident.data()), 0);
  if ((resident[1] & 1) == 0) {
    munmap(p, n * page);
    GTEST_SKIP() << "MADV_POPULATE_WRITE not supported by this kernel";
  }
  EXPECT_EQ(resident[0] & 1, 0);
  for (size_t i = 1; i < n; ++i) EXPECT_EQ(resident[i] & 1, 1) << "page " << i;
  PrefaultPages(nullptr, 10);  // nothing to do
  munmap(p, n * page);
}

}  // namespace
}  // namespace kernelserve
