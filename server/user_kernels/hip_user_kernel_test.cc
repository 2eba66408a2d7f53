// User kernels on hip, on a machine without an AMD GPU: the examples built
// by the server's own clang command into gfx942 code objects, the submit
// checks of a code object on good and broken ones, the allow-list and
// launch limits, and the hip worker started where there is no HIP device.
// The cases that build need the clang that builds our own gfx942 code
// (clang++-19 here; CI has it) and skip saying so without it. Nothing here
// runs a kernel on an AMD GPU.
#include <elf.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/user_kernels/builder.h"
#include "server/user_kernels/worker_client.h"

namespace kernelserve {
namespace user_kernels {
namespace {

using ::testing::HasSubstr;

const char* const kOps[] = {"attention", "fp8_attention", "mla_decode", "moe_gateup", "moe_down", "moe_layer"};

pb::BenchOp OpOf(const std::string& op) {
  pb::BenchOp out = pb::OP_ATTENTION;
  pb::BenchOp_Parse("OP_" + absl::AsciiStrToUpper(op), &out);
  return out;
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

pb::UserKernel HipSource(const std::string& op, const std::string& source) {
  pb::UserKernel k;
  k.set_name(op);
  k.set_filename(op + ".hip");
  k.set_backend("hip");
  k.set_source(source);
  k.mutable_launch()->set_grid_x(4);
  k.mutable_launch()->set_block_x(256);
  return k;
}

pb::UserKernel CodeObject(const std::string& bytes) {
  pb::UserKernel k;
  k.set_name("obj");
  k.set_code_object(bytes);
  k.mutable_launch()->set_grid_x(4);
  k.mutable_launch()->set_block_x(256);
  return k;
}

class HipUserKernelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    UserKernelOptions o;
    o.cache_dir = absl::StrCat(::testing::TempDir(), "/hip_cache_", getpid(), "_", counter_++);
    o.work_dir = ::testing::TempDir();
    o.worker_hip = "server/user_kernels/kernel_worker_hip";
    o.launch_deadline_s = 5;
    b_ = KernelBuilder::Create(o, "");
  }
  bool HaveClang() const { return !b_->toolchain("hip").path.empty(); }
  // The example's code object, built by the server's command (and cached).
  std::string Built(const std::string& op) {
    absl::StatusOr<BuiltKernel> built =
        b_->Build(HipSource(op, ReadFile("kernels/api/examples/hip/" + op + ".hip")), "hip", nullptr);
    EXPECT_TRUE(built.ok()) << op << ": " << built.status();
    return built.ok() ? ReadFile(built->object_path) : "";
  }
  absl::Status Check(const pb::UserKernel& k, pb::BenchOp op = pb::OP_ATTENTION, const std::string& server = "hip",
                     const std::string& arch = "") {
    return b_->Check(k, op, server, "spec.user_kernels[0]", arch);
  }
  static int counter_;
  std::unique_ptr<KernelBuilder> b_;
};
int HipUserKernelTest::counter_ = 0;

#define SKIP_WITHOUT_CLANG()                                                                              \
  if (!HaveClang()) {                                                                                     \
    GTEST_SKIP() << "no HIP compiler on this machine (" << b_->toolchain("hip").why_missing                \
                 << "): the builds of HIP sources are not tested here; install clang-19 and lld-19 (CI has them)"; \
  }

TEST_F(HipUserKernelTest, TheToolchainIsFoundAtStartUpAndDescribed) {
  EXPECT_THAT(b_->Describe(), HasSubstr("hip: "));
  if (HaveClang()) {
    EXPECT_THAT(b_->toolchain("hip").identity, HasSubstr("clang"));
  }
}

TEST_F(HipUserKernelTest, EveryExampleBuildsIntoAGfx942CodeObjectThatPassesTheSubmitChecks) {
  SKIP_WITHOUT_CLANG();
  for (const char* op : kOps) {
    SCOPED_TRACE(op);
    const pb::UserKernel source = HipSource(op, ReadFile(absl::StrCat("kernels/api/examples/hip/", op, ".hip")));
    EXPECT_TRUE(Check(source, OpOf(op)).ok()) << Check(source, OpOf(op));
    absl::StatusOr<BuiltKernel> built = b_->Build(source, "hip", nullptr);
    ASSERT_TRUE(built.ok()) << built.status();
    EXPECT_EQ(built->format, "hsaco");
    EXPECT_EQ(built->launch.block_x(), 256u);
    EXPECT_THAT(built->log, HasSubstr("--offload-arch=gfx942"));
    EXPECT_THAT(built->log, HasSubstr("--cuda-device-only"));
    const std::string object = ReadFile(built->object_path);
    EXPECT_TRUE(Check(CodeObject(object), OpOf(op)).ok()) << Check(CodeObject(object), OpOf(op));
    // Another op's kernel descriptor is not this op's.
    const pb::BenchOp other = OpOf(op) == pb::OP_MOE_DOWN ? pb::OP_ATTENTION : pb::OP_MOE_DOWN;
    EXPECT_THAT(Check(CodeObject(object), other).message(), HasSubstr("has no kernel descriptor"));
    // The second build is a cache hit.
    absl::StatusOr<BuiltKernel> again = b_->Build(source, "hip", nullptr);
    ASSERT_TRUE(again.ok());
    EXPECT_TRUE(again->cached);
    EXPECT_EQ(again->format, "hsaco");
  }
}

TEST_F(HipUserKernelTest, ASourceThatDoesNotCompileReturnsClangsLog) {
  SKIP_WITHOUT_CLANG();
  absl::StatusOr<BuiltKernel> built = b_->Build(HipSource("attention", "KS_USER_DEVICE_KERNEL(attention)(int x) { y; }"),
                                                "hip", nullptr);
  ASSERT_FALSE(built.ok());
  EXPECT_EQ(built.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(built.status().message(), HasSubstr("attention.hip does not compile"));
  EXPECT_THAT(built.status().message(), HasSubstr("error:"));
}

// Crafted from a real code object: each defect is named with its field.
TEST_F(HipUserKernelTest, BrokenCodeObjectsAreRefusedNamingWhatIsWrong) {
  SKIP_WITHOUT_CLANG();
  const std::string good = Built("attention");
  ASSERT_GT(good.size(), sizeof(Elf64_Ehdr));
  ASSERT_TRUE(Check(CodeObject(good)).ok()) << Check(CodeObject(good));
  auto patched = [&](size_t offset, const void* value, size_t n) {
    std::string b = good;
    std::memcpy(&b[offset], value, n);
    return b;
  };
  const std::string field = "spec.user_kernels[0].code_object: ";
  // Wrong architecture: gfx90a (EF_AMDGPU_MACH 0x3f) in e_flags.
  Elf64_Ehdr h;
  std::memcpy(&h, good.data(), sizeof(h));
  const uint32_t gfx90a = (h.e_flags & ~0xffu) | 0x3f;
  absl::Status st = Check(CodeObject(patched(offsetof(Elf64_Ehdr, e_flags), &gfx90a, 4)));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr(field + "built for gfx90a; this server's devices are gfx942"));
  // The device's architecture is what the backend reports, when it does.
  EXPECT_TRUE(Check(CodeObject(patched(offsetof(Elf64_Ehdr, e_flags), &gfx90a, 4)), pb::OP_ATTENTION, "hip",
                    "gfx90a")
                  .ok());
  EXPECT_THAT(Check(CodeObject(good), pb::OP_ATTENTION, "hip", "gfx90a").message(),
              HasSubstr("built for gfx942; this server's devices are gfx90a"));
  // Wrong machine: a cubin's, and x86-64.
  const uint16_t cuda = 190, x86 = EM_X86_64;
  EXPECT_THAT(Check(CodeObject(patched(offsetof(Elf64_Ehdr, e_machine), &cuda, 2))).message(),
              HasSubstr(field + "built for ELF machine 190 (a cubin), not an AMD GPU code object (EM_AMDGPU = 224)"));
  EXPECT_THAT(Check(CodeObject(patched(offsetof(Elf64_Ehdr, e_machine), &x86, 2))).message(),
              HasSubstr("built for ELF machine 62 (x86-64)"));
  // Not linked.
  const uint16_t rel = ET_REL;
  EXPECT_THAT(Check(CodeObject(patched(offsetof(Elf64_Ehdr, e_type), &rel, 2))).message(),
              HasSubstr("ELF type 1 (a relocatable object), not a linked code object (ET_DYN = 3)"));
  // Another OS/ABI than the HSA runtime's.
  const uint8_t linux_abi = ELFOSABI_LINUX;
  EXPECT_THAT(Check(CodeObject(patched(EI_OSABI, &linux_abi, 1))).message(), HasSubstr("ELF OS/ABI 3"));
  // 32-bit.
  const uint8_t elf32 = ELFCLASS32;
  EXPECT_THAT(Check(CodeObject(patched(EI_CLASS, &elf32, 1))).message(), HasSubstr("a 32-bit or big-endian"));
  // Truncated: the header promises section headers past the end.
  EXPECT_THAT(Check(CodeObject(good.substr(0, good.size() / 2))).message(),
              HasSubstr(field + "a malformed ELF object"));
  EXPECT_THAT(Check(CodeObject(good.substr(0, 10))).message(), HasSubstr("not an AMD GPU code object (no ELF header"));
  // A kernel of another name: the descriptor the worker would look up is missing.
  std::string renamed = good;
  for (size_t at = renamed.find("ks_user_attention_v1_kernel"); at != std::string::npos;
       at = renamed.find("ks_user_attention_v1_kernel", at + 1)) {
    renamed[at + 3] = 'X';
  }
  EXPECT_THAT(Check(CodeObject(renamed)).message(),
              HasSubstr(field + "has no kernel descriptor ks_user_attention_v1_kernel.kd"));
  // A C++-mangled kernel is named with the fix.
  const absl::StatusOr<BuiltKernel> mangled = b_->Build(
      HipSource("attention",
                "#include \"kernels/api/user_kernel_util.h\"\n"
                "__global__ void ks_user_attention_v1_kernel(ks_attention_args_v1 a) { a.out[threadIdx.x] = 0; }\n"),
      "hip", nullptr);
  ASSERT_TRUE(mangled.ok()) << mangled.status();
  EXPECT_THAT(Check(CodeObject(ReadFile(mangled->object_path))).message(), HasSubstr("declare it extern \"C\""));
}

TEST_F(HipUserKernelTest, SizeFlagsLaunchAndBackendAreCheckedBeforeAnythingIsBuilt) {
  // A 100 MB object: refused by its size before it is read.
  const absl::Status huge = Check(CodeObject(std::string(100 << 20, '\0')));
  EXPECT_EQ(huge.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(huge.message(), HasSubstr("spec.user_kernels[0].code_object: 104857600 bytes, larger than the limit of "
                                        "67108864 bytes (--user_kernel_max_object_mb)"));
  pb::UserKernel k = HipSource("attention", "int x;");
  for (const char* ok : {"-O2", "-ffast-math", "-ffp-contract=fast", "-munsafe-fp-atomics", "-DTILE=64", "-std=c++20"}) {
    k.clear_flags();
    k.add_flags(ok);
    EXPECT_TRUE(Check(k).ok()) << ok << ": " << Check(k);
  }
  for (const char* bad : {"-mllvm", "-Xclang", "--offload-arch=gfx90a", "-fplugin=x.so", "-o", "-I/etc", "-march=native",
                          "-fgpu-rdc"}) {
    k.clear_flags();
    k.add_flags(bad);
    const absl::Status st = Check(k);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(st.message(), HasSubstr(absl::StrCat("spec.user_kernels[0].flags[0]: \"", bad,
                                                     "\" is not an allowed hip compile flag; allowed: ")));
  }
  k.clear_flags();
  // A HIP source is device code: it needs its launch, within gfx942's limits.
  pb::UserKernel no_launch = k;
  no_launch.clear_launch();
  EXPECT_THAT(Check(no_launch).message(), HasSubstr("spec.user_kernels[0].launch: a HIP source has no host code"));
  pb::UserKernel lds = k;
  lds.mutable_launch()->set_dynamic_shared_bytes(65537);
  EXPECT_THAT(Check(lds).message(), HasSubstr("launch.dynamic_shared_bytes: expected at most 65536 (64 KiB, gfx942's "
                                              "LDS per workgroup), got 65537"));
  lds.mutable_launch()->set_dynamic_shared_bytes(65536);
  EXPECT_TRUE(Check(lds).ok());
  pb::UserKernel big = k;
  big.mutable_launch()->set_block_x(2048);
  EXPECT_THAT(Check(big).message(), HasSubstr("launch.block_x: expected 1 to 1024 threads"));
  // A code object takes no flags; hip takes no shared object, and no cubin.
  pb::UserKernel flagged = CodeObject("\x7f" "ELF");
  flagged.add_flags("-O3");
  EXPECT_FALSE(Check(flagged).ok());
  pb::UserKernel so;
  so.set_name("so");
  so.set_shared_object("x");
  EXPECT_THAT(Check(so).message(), HasSubstr("a hip kernel is device code"));
  pb::UserKernel on_cuda = CodeObject("x");
  on_cuda.set_backend("cuda");
  EXPECT_THAT(Check(on_cuda).message(), HasSubstr(".backend: a code_object is device code for the hip backend"));
  // A server without HIP devices: FAILED_PRECONDITION naming the backend.
  const absl::Status cpu = Check(k, pb::OP_ATTENTION, "cpu");
  EXPECT_EQ(cpu.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(cpu.message(), HasSubstr("a hip kernel, but this server runs the cpu backend and has no HIP (AMD) device"));
  const absl::Status obj_on_cpu = Check(CodeObject("x"), pb::OP_ATTENTION, "cpu");
  EXPECT_EQ(obj_on_cpu.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(obj_on_cpu.message(),
              HasSubstr("code_object: device code for the hip backend, but this server runs the cpu backend"));
}

TEST_F(HipUserKernelTest, TheArchitectureComesFromWhatTheBackendReports) {
  EXPECT_EQ(HipArchFromDriver("HIP runtime 60032830, driver 60032830 (libamdhip64.so); code objects gfx942"), "gfx942");
  EXPECT_EQ(HipArchFromDriver("HIP runtime 1, driver 1 (libamdhip64.so)"), "");
  EXPECT_EQ(HipArchFromDriver("code objects gfx90a; more"), "gfx90a");
}

// No AMD device here: the hip worker starts, finds no device (or no runtime)
// and the job would fail with that, FAILED_PRECONDITION, not a fault.
TEST_F(HipUserKernelTest, TheHipWorkerSaysWhyItCannotRunWithoutADevice) {
  SKIP_WITHOUT_CLANG();
  pb::UserKernel k = HipSource("moe_down", ReadFile("kernels/api/examples/hip/moe_down.hip"));
  absl::StatusOr<BuiltKernel> built = b_->Build(k, "hip", nullptr);
  ASSERT_TRUE(built.ok()) << built.status();
  pb::BenchJobSpec spec;
  spec.set_op(pb::OP_MOE_DOWN);
  auto* m = spec.mutable_moe();
  m->set_tokens(4), m->set_experts(4), m->set_top_k(2), m->set_hidden(64), m->set_inter(64), m->set_weighted_sum(true);
  spec.set_device(0);
  absl::StatusOr<std::unique_ptr<KernelWorker>> w =
      KernelWorker::Start(b_->options(), "hip", *built, spec, 12345, "user:moe_down", nullptr);
  if (w.ok()) {
    GTEST_SKIP() << "this machine has a HIP device: " << (*w)->description();
  }
  EXPECT_EQ(w.status().code(), absl::StatusCode::kFailedPrecondition) << w.status();
  EXPECT_THAT(w.status().message(), HasSubstr("user:moe_down: "));
  EXPECT_THAT(w.status().message(), ::testing::AnyOf(HasSubstr("no HIP device"), HasSubstr("no HIP runtime")));
  EXPECT_EQ(WorkerFault(w.status()), "");  // not a device fault: nothing to probe
}

}  // namespace
}  // namespace user_kernels
}  // namespace kernelserve
