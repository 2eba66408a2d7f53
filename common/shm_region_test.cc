#include "common/shm_region.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace kernelserve {
namespace {

absl::Status AnyOwner(uint32_t) { return absl::OkStatus(); }

TEST(ShmRegionTest, CreatedRegionReadsAndWritesThroughOpen) {
  auto created = ShmRegion::Create(10000);
  ASSERT_TRUE(created.ok()) << created.status();
  for (int i = 0; i < 10000; ++i) created->data()[i] = static_cast<uint8_t>(i * 7);
  auto opened = ShmRegion::Open("shm", created->name(), 4097, 5000, /*writable=*/true, AnyOwner);
  ASSERT_TRUE(opened.ok()) << opened.status();
  EXPECT_EQ(opened->owner_uid(), getuid());
  std::vector<uint8_t> got(5000);
  ASSERT_TRUE(opened->Read(0, got.data(), 5000).ok());
  EXPECT_EQ(std::memcmp(got.data(), created->data() + 4097, 5000), 0);
  const uint8_t ones[3] = {1, 1, 1};
  ASSERT_TRUE(opened->Write(10, ones, 3).ok());
  EXPECT_EQ(created->data()[4097 + 11], 1);
}

TEST(ShmRegionTest, NameGoesWithTheCreatedRegion) {
  std::string name;
  {
    auto created = ShmRegion::Create(0);
    ASSERT_TRUE(created.ok()) << created.status();
    name = created->name();
    EXPECT_TRUE(ShmRegion::Open("shm", name, 0, 0, false, AnyOwner).ok());
  }
  auto gone = ShmRegion::Open("shm", name, 0, 0, false, AnyOwner);
  EXPECT_EQ(gone.status().code(), absl::StatusCode::kNotFound) << gone.status();
  EXPECT_TRUE(absl::StartsWith(gone.status().message(), "shm.shm_name: ")) << gone.status();
}

TEST(ShmRegionTest, ObjectsOfGoneProcessesAreRemoved) {
  // A child that creates a region and dies without removing it (as if killed).
  const pid_t child = fork();
  if (child == 0) {
    auto r = ShmRegion::Create(4096);
    if (!r.ok()) _exit(1);
    const int fd = open("/tmp/shm_region_test_orphan", O_CREAT | O_TRUNC | O_WRONLY, 0600);
    if (fd < 0 || write(fd, r->name().data(), r->name().size()) < 0) _exit(1);
    close(fd);
    _exit(0);  // no destructors: the name stays
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  char name[256] = {};
  const int fd = open("/tmp/shm_region_test_orphan", O_RDONLY);
  ASSERT_GE(fd, 0);
  ASSERT_GT(read(fd, name, sizeof name - 1), 0);
  close(fd);
  unlink("/tmp/shm_region_test_orphan");
  EXPECT_TRUE(ShmRegion::Open("shm", name, 0, 0, false, AnyOwner).ok()) << name;
  ShmRegion::RemoveOrphans();
  auto gone = ShmRegion::Open("shm", name, 0, 0, false, AnyOwner);
  EXPECT_EQ(gone.status().code(), absl::StatusCode::kNotFound) << name;
}

TEST(ShmRegionTest, BadInputNamesTheField) {
  auto created = ShmRegion::Create(4096);
  ASSERT_TRUE(created.ok()) << created.status();
  auto small = ShmRegion::Open("header.shm", created->name(), 1, 4096, false, AnyOwner);
  EXPECT_EQ(small.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(small.status().message(), "header.shm: expected an object of at least offset + "
                                                          "the buffer's bytes = 1 + 4096 bytes"))
      << small.status();
  EXPECT_TRUE(absl::StrContains(small.status().message(), "has 4096")) << small.status();
  auto negative = ShmRegion::Open("shm", created->name(), -1, 0, false, AnyOwner);
  EXPECT_EQ(negative.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StartsWith(negative.status().message(), "shm.offset: expected >= 0, got -1"));
  for (const char* bad : {"", "x", "/", "/a/b", "/.."}) {
    auto r = ShmRegion::Open("shm", bad, 0, 0, false, AnyOwner);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_TRUE(absl::StartsWith(r.status().message(), "shm.shm_name: expected \"/NAME\"")) << r.status();
  }
  auto refused = ShmRegion::Open("shm", created->name(), 0, 1, false,
                                 [](uint32_t) { return absl::PermissionDeniedError("not yours"); });
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kPermissionDenied);
}

TEST(ShmRegionTest, FifoIsRefusedWithoutWaitingForAWriter) {
  const std::string name = "/kernelserve-test-fifo-" + std::to_string(getpid());
  ASSERT_EQ(mkfifo(("/dev/shm" + name).c_str(), 0600), 0) << std::strerror(errno);
  auto r = ShmRegion::Open("header.shm", name, 0, 0, /*writable=*/false, AnyOwner);
  unlink(("/dev/shm" + name).c_str());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  EXPECT_TRUE(absl::StrContains(r.status().message(), "expected a regular shared-memory object")) << r.status();
}

TEST(ShmRegionTest, ShrunkObjectIsAShortReadNotACrash) {
  auto created = ShmRegion::Create(8192);
  ASSERT_TRUE(created.ok()) << created.status();
  auto opened = ShmRegion::Open("shm", created->name(), 0, 8192, false, AnyOwner);
  ASSERT_TRUE(opened.ok()) << opened.status();
  const int fd = shm_open(created->name().c_str(), O_RDWR, 0);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 100), 0);
  close(fd);
  std::vector<uint8_t> got(8192);
  const absl::Status s = opened->Read(0, got.data(), 8192);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "shrank")) << s;
}

}  // namespace
}  // namespace kernelserve
