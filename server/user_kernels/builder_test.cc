// The builder on this machine's real compiler: the allow-list, the size
// limit, a compile error's log, the content-addressed cache and its key.
#include "server/user_kernels/builder.h"

#include <elf.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kernelserve {
namespace user_kernels {
namespace {

using ::testing::HasSubstr;

std::string Example() {
  std::ifstream f("kernels/api/examples/cpu/attention.cc");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::unique_ptr<KernelBuilder> Builder() {
  UserKernelOptions o;
  o.cache_dir = absl::StrCat(::testing::TempDir(), "/cache_", getpid(), "_", rand());
  o.work_dir = ::testing::TempDir();
  return KernelBuilder::Create(o, "");
}

pb::UserKernel Kernel(const std::string& source) {
  pb::UserKernel k;
  k.set_name("k");
  k.set_filename("k.cc");
  k.set_source(source);
  return k;
}

// A prebuilt object is checked at submit: a 64-bit little-endian ELF shared
// object for this machine, named by its field otherwise.
TEST(BuilderTest, PrebuiltObjectsMustBeSharedObjectsForThisMachine) {
  std::ifstream f("kernels/api/examples/cpu_attention.so", std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string good = ss.str();
  ASSERT_GT(good.size(), sizeof(Elf64_Ehdr));
  auto b = Builder();
  auto check = [&](std::string bytes) {
    pb::UserKernel k;
    k.set_name("k");
    k.set_shared_object(std::move(bytes));
    return b->Check(k, "cpu", "spec.user_kernels[0]");
  };
  EXPECT_TRUE(check(good).ok()) << check(good);
  auto edited = [&](size_t offset, const void* value, size_t n) {
    std::string bytes = good;
    std::memcpy(&bytes[offset], value, n);
    return check(bytes);
  };
  const uint16_t exec = ET_EXEC, rel = ET_REL, other = EM_S390;
  const uint8_t class32 = ELFCLASS32, msb = ELFDATA2MSB;
  absl::Status st = edited(offsetof(Elf64_Ehdr, e_type), &exec, 2);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("spec.user_kernels[0].shared_object: ELF type 2 (an executable), not a shared object"));
  EXPECT_THAT(edited(offsetof(Elf64_Ehdr, e_type), &rel, 2).message(), HasSubstr("(a relocatable .o)"));
  st = edited(offsetof(Elf64_Ehdr, e_machine), &other, 2);
  EXPECT_THAT(st.message(), HasSubstr("built for ELF machine 22; this server runs on"));
  EXPECT_THAT(edited(EI_CLASS, &class32, 1).message(), HasSubstr("a 32-bit ELF object"));
  EXPECT_THAT(edited(EI_DATA, &msb, 1).message(), HasSubstr("a big-endian ELF object"));
  st = check(good.substr(0, 20));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("not an ELF shared object (no ELF header)"));
}

TEST(BuilderTest, ChecksNameSizeBackendAndFlags) {
  auto b = Builder();
  EXPECT_TRUE(b->Check(Kernel("x"), "cpu", "f").ok());
  pb::UserKernel k = Kernel("x");
  k.add_flags("-O3");
  k.add_flags("-DN=4");
  k.add_flags("-march=znver4");
  k.add_flags("-mavx2");
  EXPECT_TRUE(b->Check(k, "cpu", "f").ok());
  k.add_flags("-lineinfo");  // a cuda flag
  absl::Status st = b->Check(k, "cpu", "f");
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("f.flags[4]: \"-lineinfo\" is not an allowed cpu compile flag"));
  pb::UserKernel c = Kernel("x");
  c.add_flags("-lineinfo");
  c.add_flags("--use_fast_math");
  c.set_backend("cuda");
  EXPECT_TRUE(b->Check(c, "cuda", "f").ok());
  c.add_flags("-Xcompiler=-fplugin=x");
  EXPECT_THAT(b->Check(c, "cuda", "f").message(), HasSubstr("f.flags[2]"));
  EXPECT_EQ(b->Check(Kernel(std::string(2 << 20, 'x')), "cpu", "f").code(), absl::StatusCode::kInvalidArgument);
  pb::UserKernel cpu = Kernel("x");
  cpu.set_backend("cpu");
  EXPECT_EQ(b->Check(cpu, "cuda", "f").code(), absl::StatusCode::kFailedPrecondition);  // another backend's
  pb::UserKernel so = Kernel("");
  so.set_shared_object("not elf");
  EXPECT_THAT(b->Check(so, "cpu", "f").message(), HasSubstr("not an ELF shared object"));
}

TEST(BuilderTest, CompileErrorReturnsTheLog) {
  auto b = Builder();
  ASSERT_FALSE(b->toolchain("cpu").path.empty()) << b->Describe();
  auto built = b->Build(Kernel("int f() { return nope; }"), "cpu", nullptr);
  ASSERT_FALSE(built.ok());
  EXPECT_EQ(built.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(built.status().message(), HasSubstr("k.cc does not compile"));
  EXPECT_THAT(built.status().message(), HasSubstr("'nope' was not declared"));
}

TEST(BuilderTest, CacheIsKeyedBySourceAndFlags) {
  auto b = Builder();
  auto first = b->Build(Kernel(Example()), "cpu", nullptr);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_FALSE(first->cached);
  EXPECT_EQ(access(first->so_path.c_str(), R_OK), 0);
  auto again = b->Build(Kernel(Example()), "cpu", nullptr);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->cached);
  EXPECT_EQ(again->so_path, first->so_path);
  EXPECT_EQ(again->source_sha256, first->source_sha256);
  pb::UserKernel flagged = Kernel(Example());
  flagged.add_flags("-O3");
  auto other = b->Build(flagged, "cpu", nullptr);
  ASSERT_TRUE(other.ok());
  EXPECT_FALSE(other->cached);
  EXPECT_NE(other->build_key, first->build_key);
  EXPECT_EQ(other->source_sha256, first->source_sha256);  // the same source
}

TEST(BuilderTest, HeadersAreTheRealOnes) {
  const auto& h = AbiHeaders();
  ASSERT_EQ(h.count("kernels/api/user_kernel_abi.h"), 1u);
  EXPECT_THAT(h.at("kernels/api/user_kernel_abi.h"), HasSubstr("#define KS_USER_ABI_VERSION 1"));
  EXPECT_THAT(h.at("kernels/api/user_kernel_util.h"), HasSubstr("ks_float_to_bf16"));
}

}  // namespace
}  // namespace user_kernels
}  // namespace kernelserve
