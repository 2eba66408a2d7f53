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
#include "kernels/api/user_kernel_abi.h"

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
    return b->Check(k, pb::OP_ATTENTION, "cpu", "spec.user_kernels[0]");
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
  EXPECT_TRUE(b->Check(Kernel("x"), pb::OP_ATTENTION, "cpu", "f").ok());
  pb::UserKernel k = Kernel("x");
  k.add_flags("-O3");
  k.add_flags("-DN=4");
  k.add_flags("-march=znver4");
  k.add_flags("-mavx2");
  EXPECT_TRUE(b->Check(k, pb::OP_ATTENTION, "cpu", "f").ok());
  k.add_flags("-lineinfo");  // a cuda flag
  absl::Status st = b->Check(k, pb::OP_ATTENTION, "cpu", "f");
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("f.flags[4]: \"-lineinfo\" is not an allowed cpu compile flag"));
  pb::UserKernel c = Kernel("x");
  c.add_flags("-lineinfo");
  c.add_flags("--use_fast_math");
  c.set_backend("cuda");
  EXPECT_TRUE(b->Check(c, pb::OP_ATTENTION, "cuda", "f").ok());
  c.add_flags("-Xcompiler=-fplugin=x");
  EXPECT_THAT(b->Check(c, pb::OP_ATTENTION, "cuda", "f").message(), HasSubstr("f.flags[2]"));
  EXPECT_EQ(b->Check(Kernel(std::string(2 << 20, 'x')), pb::OP_ATTENTION, "cpu", "f").code(), absl::StatusCode::kInvalidArgument);
  pb::UserKernel cpu = Kernel("x");
  cpu.set_backend("cpu");
  EXPECT_EQ(b->Check(cpu, pb::OP_ATTENTION, "cuda", "f").code(), absl::StatusCode::kFailedPrecondition);  // another backend's
  pb::UserKernel so = Kernel("");
  so.set_shared_object("not elf");
  EXPECT_THAT(b->Check(so, pb::OP_ATTENTION, "cpu", "f").message(), HasSubstr("not an ELF shared object"));
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
  EXPECT_EQ(access(first->object_path.c_str(), R_OK), 0);
  auto again = b->Build(Kernel(Example()), "cpu", nullptr);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->cached);
  EXPECT_EQ(again->object_path, first->object_path);
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


// ------------------------------------------------ cubin and PTX, no CUDA

// A small cubin-shaped ELF image: the header nvcc 13 writes (EM_CUDA,
// EI_ABIVERSION 8, e_flags 0x6005a04 = sm_90) and one symbol table.
struct CubinSpec {
  uint16_t machine = 190;
  uint16_t type = ET_EXEC;
  uint8_t abi_version = 8;
  uint32_t flags = 0x6005a04;
  std::string symbol = "ks_user_attention_v1_kernel";
  uint8_t other = 0x10;  // STO_CUDA_ENTRY: a __global__ function
  uint8_t bind = STB_GLOBAL;
};

std::string Cubin(const CubinSpec& c) {
  const std::string shstr = std::string("\0.shstrtab\0.strtab\0.symtab\0.text\0", 33);
  const std::string str = std::string(1, '\0') + c.symbol + std::string(1, '\0');
  Elf64_Sym syms[2] = {};
  syms[1].st_name = 1;
  syms[1].st_info = static_cast<unsigned char>(ELF64_ST_INFO(c.bind, STT_FUNC));
  syms[1].st_other = c.other;
  syms[1].st_shndx = 4;
  std::string out(sizeof(Elf64_Ehdr), '\0');
  const size_t shstr_at = out.size();
  out += shstr;
  const size_t str_at = out.size();
  out += str;
  while (out.size() % 8 != 0) out.push_back('\0');
  const size_t sym_at = out.size();
  out.append(reinterpret_cast<const char*>(syms), sizeof(syms));
  const size_t text_at = out.size();
  out.append(16, '\0');
  Elf64_Shdr sh[5] = {};
  sh[1] = {1, SHT_STRTAB, 0, 0, shstr_at, shstr.size(), 0, 0, 1, 0};
  sh[2] = {11, SHT_STRTAB, 0, 0, str_at, str.size(), 0, 0, 1, 0};
  sh[3] = {19, SHT_SYMTAB, 0, 0, sym_at, sizeof(syms), 2, 1, 8, sizeof(Elf64_Sym)};
  sh[4] = {27, SHT_PROGBITS, SHF_ALLOC | SHF_EXECINSTR, 0, text_at, 16, 0, 0, 128, 0};
  Elf64_Ehdr h = {};
  std::memcpy(h.e_ident, ELFMAG, SELFMAG);
  h.e_ident[EI_CLASS] = ELFCLASS64;
  h.e_ident[EI_DATA] = ELFDATA2LSB;
  h.e_ident[EI_VERSION] = EV_CURRENT;
  h.e_ident[EI_OSABI] = c.abi_version >= 8 ? 0x41 : 51;
  h.e_ident[EI_ABIVERSION] = c.abi_version;
  h.e_type = c.type;
  h.e_machine = c.machine;
  h.e_version = EV_CURRENT;
  h.e_flags = c.flags;
  h.e_ehsize = sizeof(Elf64_Ehdr);
  h.e_shentsize = sizeof(Elf64_Shdr);
  h.e_shnum = 5;
  h.e_shstrndx = 1;
  h.e_shoff = out.size();
  out.append(reinterpret_cast<const char*>(sh), sizeof(sh));
  std::memcpy(&out[0], &h, sizeof(h));
  return out;
}

std::string Ptx(const std::string& target = "sm_90a", const std::string& entry = "ks_user_attention_v1_kernel",
                const std::string& params = "", const std::string& address = ".address_size 64") {
  const std::string p = params.empty() ? absl::StrCat(".param .align 8 .b8 ", entry, "_param_0[",
                                                      sizeof(ks_attention_args_v1), "]")
                                       : params;
  return absl::StrCat("//\n// Generated by NVIDIA NVVM Compiler\n.version 9.0\n.target ", target, "\n", address,
                      "\n\n\t// .globl\t", entry, "\n.visible .entry ", entry, "(\n\t", p,
                      "\n)\n{\n\tret;\n}\n");
}

pb::UserKernel Device(bool cubin, const std::string& code) {
  pb::UserKernel k;
  k.set_name("dev");
  if (cubin) {
    k.set_cubin(code);
  } else {
    k.set_ptx(code);
  }
  k.mutable_launch()->set_grid_x(4);
  k.mutable_launch()->set_block_x(128);
  return k;
}

class DeviceCodeTest : public ::testing::Test {
 protected:
  absl::Status Check(const pb::UserKernel& k, pb::BenchOp op = pb::OP_ATTENTION, const std::string& server = "cuda") {
    return b_->Check(k, op, server, "spec.user_kernels[0]");
  }
  absl::Status Cub(const CubinSpec& c, pb::BenchOp op = pb::OP_ATTENTION) { return Check(Device(true, Cubin(c)), op); }
  absl::Status PtxOf(const std::string& text) { return Check(Device(false, text)); }
  std::unique_ptr<KernelBuilder> b_ = Builder();
};

TEST_F(DeviceCodeTest, ACubinIsACudaElfForSm90ExportingTheOpsKernel) {
  EXPECT_TRUE(Cub({}).ok()) << Cub({});
  CubinSpec v7;  // CUDA 12's ELF ABI: the SM in e_flags' low byte
  v7.abi_version = 7;
  v7.flags = 0x5a055a;
  EXPECT_TRUE(Cub(v7).ok()) << Cub(v7);
  auto fails = [&](const CubinSpec& c, const std::string& part, pb::BenchOp op = pb::OP_ATTENTION) {
    const absl::Status st = Cub(c, op);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << part;
    EXPECT_THAT(st.message(), HasSubstr("spec.user_kernels[0].cubin: "));
    EXPECT_THAT(st.message(), HasSubstr(part));
  };
  CubinSpec host;
  host.machine = EM_X86_64;
  fails(host, "built for ELF machine 62 (x86-64), not a cubin (EM_CUDA = 190)");
  CubinSpec rel;
  rel.type = ET_REL;
  fails(rel, "ELF type 1 (a relocatable device object: nvcc -dc / -rdc), not a linked cubin");
  CubinSpec sm80;
  sm80.flags = 0x6005004;
  fails(sm80, "built for sm_80; this server's devices run sm_90 code");
  CubinSpec sm100;
  sm100.flags = 0x6006402;
  fails(sm100, "built for sm_100");
  CubinSpec v7_sm80 = v7;
  v7_sm80.flags = 0x500550;
  fails(v7_sm80, "built for sm_80");
  CubinSpec other;
  other.symbol = "my_kernel";
  fails(other, "exports no kernel ks_user_attention_v1_kernel; expected extern \"C\" __global__ void "
               "ks_user_attention_v1_kernel(ks_attention_args_v1 args)");
  CubinSpec mangled;
  mangled.symbol = "_Z27ks_user_attention_v1_kernel20ks_attention_args_v1";
  fails(mangled, "only the C++-mangled _Z27ks_user_attention_v1_kernel20ks_attention_args_v1: declare it extern");
  CubinSpec device_fn;
  device_fn.other = 0;
  fails(device_fn, "is a __device__ function, not a __global__ kernel");
  CubinSpec local;
  local.bind = STB_LOCAL;
  fails(local, "is not exported");
  fails({}, "exports no kernel ks_user_moe_down_v1_kernel", pb::OP_MOE_DOWN);  // another op's kernel

  auto bytes = [&](std::string b, const std::string& part) {
    const absl::Status st = Check(Device(true, std::move(b)));
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(st.message(), HasSubstr(part));
  };
  bytes("not an elf at all", "spec.user_kernels[0].cubin: not a cubin (no ELF header)");
  std::string cut = Cubin({});
  bytes(cut.substr(0, cut.size() - 100), "a malformed ELF object");
  std::string big = Cubin({});
  big[EI_CLASS] = ELFCLASS32;
  bytes(big, "a 32-bit or big-endian ELF object");
}

TEST_F(DeviceCodeTest, PtxNeedsItsDirectivesATargetThisDeviceCompilesAndTheEntry) {
  EXPECT_TRUE(PtxOf(Ptx()).ok()) << PtxOf(Ptx());
  EXPECT_TRUE(PtxOf(Ptx("sm_80")).ok());  // older targets are JIT-compiled for sm_90
  EXPECT_TRUE(PtxOf(Ptx("sm_90, texmode_independent")).ok());
  auto fails = [&](const std::string& text, const std::string& part) {
    const absl::Status st = PtxOf(text);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << part;
    EXPECT_THAT(st.message(), HasSubstr("spec.user_kernels[0].ptx: "));
    EXPECT_THAT(st.message(), HasSubstr(part));
  };
  fails(Ptx("sm_100a"), ".target sm_100a: this server's devices (sm_90) JIT-compile PTX for sm_90a or any sm_NN up to");
  fails(Ptx("sm_120"), ".target sm_120");
  fails(Ptx("sm_80a"), ".target sm_80a");
  fails(Ptx("compute_90"), ".target compute_90");
  fails("int main() { return 0; }", "not PTX (no .version and .target directives)");
  fails(Ptx("sm_90a", "ks_user_attention_v1_kernel", "", ".address_size 32"), ".address_size 32; the ABI's pointers");
  fails(Ptx("sm_90a", "ks_user_attention_v1_kernel", "", ""), "no .address_size");
  fails(Ptx("sm_90a", "my_kernel"), "has no .entry ks_user_attention_v1_kernel (entries: my_kernel)");
  // An entry in a comment is no entry.
  fails(absl::StrCat("/* .entry ks_user_attention_v1_kernel( */\n", Ptx("sm_90a", "other")), "(entries: other)");
  fails(Ptx("sm_90a", "ks_user_attention_v1_kernel", ".param .u64 q,\n\t.param .u64 k"),
        ".entry ks_user_attention_v1_kernel takes 2 parameter(s); the ABI passes one, ks_attention_args_v1 by value");
  fails(Ptx("sm_90a", "ks_user_attention_v1_kernel", ".param .u64 args"), "takes 1 parameter(s) of 8 bytes");
  fails(Ptx("sm_90a", "ks_user_attention_v1_kernel", ".param .align 8 .b8 p[24]"), "takes 1 parameter(s) of 24 bytes");
  fails(std::string("PTX\0binary", 10), "not PTX text (a NUL byte at offset 3)");
}

TEST_F(DeviceCodeTest, LaunchGeometrySizeBackendAndFlagsAreChecked) {
  auto launch = [&](auto edit, const std::string& part) {
    pb::UserKernel k = Device(false, Ptx());
    edit(k.mutable_launch());
    const absl::Status st = Check(k);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << part;
    EXPECT_THAT(st.message(), HasSubstr(part));
  };
  launch([](pb::CudaLaunch* l) { l->set_grid_x(0); },
         "spec.user_kernels[0].launch.grid_x: expected 1 to 2147483647 blocks, got 0");
  launch([](pb::CudaLaunch* l) { l->set_grid_y(70000); }, "launch.grid_y: expected 0 (1) to 65535, got 70000");
  launch([](pb::CudaLaunch* l) { l->set_block_x(0); }, "launch.block_x: expected 1 to 1024 threads, got 0");
  launch([](pb::CudaLaunch* l) { l->set_block_x(2048); }, "launch.block_x: expected 1 to 1024 threads, got 2048");
  launch([](pb::CudaLaunch* l) { l->set_block_z(65); }, "launch.block_z: expected 0 (1) to 64, got 65");
  launch([](pb::CudaLaunch* l) { l->set_block_y(16); }, "block_x * block_y * block_z is 2048 threads");
  launch([](pb::CudaLaunch* l) { l->set_dynamic_shared_bytes(232449); },
         "launch.dynamic_shared_bytes: expected at most 232448");
  pb::UserKernel ok = Device(false, Ptx());
  ok.mutable_launch()->set_dynamic_shared_bytes(232448);
  ok.mutable_launch()->set_block_y(8);
  EXPECT_TRUE(Check(ok).ok()) << Check(ok);

  pb::UserKernel none = Device(true, Cubin({}));
  none.clear_launch();
  EXPECT_THAT(Check(none).message(), HasSubstr("spec.user_kernels[0].launch: a cubin has no host code to launch it"));
  pb::UserKernel source = Kernel("x");
  source.mutable_launch()->set_grid_x(1);
  EXPECT_THAT(Check(source).message(), HasSubstr("spec.user_kernels[0].launch: only for device code, a cubin, ptx, code_object or HIP source"));
  pb::UserKernel flagged = Device(false, Ptx());
  flagged.add_flags("-O3");
  EXPECT_THAT(Check(flagged).message(), HasSubstr("spec.user_kernels[0].flags: a prebuilt ptx takes no compile flags"));

  UserKernelOptions o;
  o.cache_dir = absl::StrCat(::testing::TempDir(), "/cache_small_", getpid());
  o.work_dir = ::testing::TempDir();
  o.max_object_bytes = 64;
  auto small = KernelBuilder::Create(o, "");
  const absl::Status st = small->Check(Device(true, Cubin({})), pb::OP_ATTENTION, "cuda", "spec.user_kernels[2]");
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("spec.user_kernels[2].cubin: "));
  EXPECT_THAT(st.message(), HasSubstr("bytes, larger than the limit of 64 bytes (--user_kernel_max_object_mb)"));

  // Device code is the cuda backend's.
  pb::UserKernel cpu = Device(true, Cubin({}));
  cpu.set_backend("cpu");
  EXPECT_THAT(Check(cpu).message(), HasSubstr("spec.user_kernels[0].backend: a cubin is device code for the cuda"));
  EXPECT_EQ(Check(Device(false, Ptx()), pb::OP_ATTENTION, "cpu").code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(DeviceCodeTest, ACubinIsStoredByItsHashWithItsLaunch) {
  pb::UserKernel k = Device(true, Cubin({}));
  auto built = b_->Build(k, "cuda", nullptr);
  ASSERT_TRUE(built.ok()) << built.status();
  EXPECT_EQ(built->format, "cubin");
  EXPECT_EQ(built->launch.block_x(), 128u);
  EXPECT_THAT(built->object_path, ::testing::EndsWith(".cubin"));
  EXPECT_EQ(access(built->object_path.c_str(), R_OK), 0);
  EXPECT_EQ(built->source_sha256.size(), 64u);
  auto ptx = b_->Build(Device(false, Ptx()), "cuda", nullptr);
  ASSERT_TRUE(ptx.ok());
  EXPECT_EQ(ptx->format, "ptx");
  EXPECT_THAT(ptx->log, HasSubstr("JIT-compiled by the driver"));
}

}  // namespace
}  // namespace user_kernels
}  // namespace kernelserve
