#include "server/user_kernels/builder.h"

#include <elf.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <regex>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "kernels/api/user_kernel_abi.h"
#include "server/input_checks.h"
#include "server/security/tokens.h"
#include "server/user_kernels/sandbox.h"

namespace kernelserve {
namespace user_kernels {
namespace {

// The machine this server loads objects for.
#if defined(__x86_64__)
constexpr uint16_t kHostMachine = EM_X86_64;
constexpr char kHostMachineName[] = "x86-64 (EM_X86_64 = 62)";
#elif defined(__aarch64__)
constexpr uint16_t kHostMachine = EM_AARCH64;
constexpr char kHostMachineName[] = "aarch64 (EM_AARCH64 = 183)";
#else
constexpr uint16_t kHostMachine = EM_NONE;
constexpr char kHostMachineName[] = "an unknown machine";
#endif

// A prebuilt object must be what the worker can dlopen: a 64-bit
// little-endian ELF shared object for this machine. Checked at submit so
// that a wrong object is named before any job is made.
absl::Status CheckSharedObject(const std::string& bytes, const std::string& field) {
  if (bytes.size() < sizeof(Elf64_Ehdr) || !absl::StartsWith(bytes, "\x7f" "ELF")) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": not an ELF shared object (no ELF header); build one with -shared -fPIC"));
  }
  Elf64_Ehdr h;
  std::memcpy(&h, bytes.data(), sizeof(h));
  if (h.e_ident[EI_CLASS] != ELFCLASS64) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": a 32-bit ELF object; this server loads 64-bit ones"));
  }
  if (h.e_ident[EI_DATA] != ELFDATA2LSB) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": a big-endian ELF object; this server loads little-endian ones"));
  }
  if (h.e_type != ET_DYN) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": ELF type ", h.e_type,
                                                   h.e_type == ET_EXEC  ? " (an executable)"
                                                   : h.e_type == ET_REL ? " (a relocatable .o)"
                                                                        : "",
                                                   ", not a shared object (ET_DYN = 3); build with -shared -fPIC"));
  }
  if (h.e_machine != kHostMachine) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": built for ELF machine ", h.e_machine,
                                                   "; this server runs on ", kHostMachineName));
  }
  return absl::OkStatus();
}

bool IsExecutable(const std::string& path) { return !path.empty() && access(path.c_str(), X_OK) == 0; }

std::string FindOnPath(const std::vector<std::string>& names) {
  const char* path = getenv("PATH");
  for (const std::string& name : names) {
    for (absl::string_view dir : absl::StrSplit(path != nullptr ? path : "/usr/bin:/bin", ':')) {
      const std::string p = absl::StrCat(dir, "/", name);
      if (!dir.empty() && IsExecutable(p)) return p;
    }
  }
  return "";
}

// The first line `tool --version` prints, run like a build (sandboxed).
std::string VersionLine(const std::string& tool) {
  absl::StatusOr<TempDir> dir = TempDir::Create("/tmp", "ks-uk-version-");
  if (!dir.ok()) return "unknown version";
  const std::string log = dir->path() + "/version.txt";
  WriteFile(log, "").IgnoreError();
  SpawnSpec s;
  s.argv = {tool, "--version"};
  s.env = {"PATH=/usr/bin:/bin", "LANG=C", absl::StrCat("HOME=", dir->path())};
  s.cwd = dir->path();
  s.limits.isolate_network = false;
  FILE* f = fopen(log.c_str(), "w");
  if (f == nullptr) return "unknown version";
  s.stdout_fd = fileno(f);
  s.stderr_fd = fileno(f);
  absl::StatusOr<Spawned> p = Spawn(s);
  fclose(f);
  if (!p.ok()) return "unknown version";
  Reap(p->pid, 20);
  const std::string out = ReadTail(log, 4096);
  const std::vector<std::string> lines = absl::StrSplit(out, '\n');
  std::string line = lines.empty() ? "" : lines[0];
  // nvcc's first lines are a banner; its release line names the version.
  for (const std::string& l : lines) {
    if (absl::StrContains(l, "release")) line = l;
  }
  return line.empty() ? "unknown version" : line;
}

Toolchain Find(const std::string& configured, const std::vector<std::string>& names,
               const std::vector<std::string>& fallbacks, const std::string& flag) {
  Toolchain t;
  std::string path = configured;
  if (path.empty()) path = FindOnPath(names);
  for (const std::string& f : fallbacks) {
    if (path.empty() && IsExecutable(f)) path = f;
  }
  if (!IsExecutable(path)) {
    t.why_missing = configured.empty()
                        ? absl::StrCat("none of ", absl::StrJoin(names, ", "), " found on PATH; set ", flag)
                        : absl::StrCat(flag, "=", configured, " is not an executable");
    return t;
  }
  char resolved[PATH_MAX];
  t.path = realpath(path.c_str(), resolved) != nullptr ? std::string(resolved) : path;
  t.identity = absl::StrCat(t.path, ": ", VersionLine(t.path));
  return t;
}

// One allowed flag: exact, or a prefix with what may follow it.
struct FlagRule {
  const char* prefix;
  const char* rest;  // regex of what follows; nullptr: the flag is exact
};

const std::vector<FlagRule>& Rules(const std::string& backend) {
  static const std::vector<FlagRule> kCommon = {
      {"-O0", nullptr},
      {"-O1", nullptr},
      {"-O2", nullptr},
      {"-O3", nullptr},
      {"-D", "[A-Za-z_][A-Za-z0-9_]*(=[A-Za-z0-9_.+-]*)?"},
      {"-U", "[A-Za-z_][A-Za-z0-9_]*"},
      {"-std=", "(c|gnu)\\+\\+(11|14|17|20)"},
      {"-g", nullptr},
      {"-w", nullptr},
  };
  static const std::vector<FlagRule> kCpu = [] {
    std::vector<FlagRule> r = kCommon;
    r.insert(r.end(), {{"-Os", nullptr},
                       {"-Ofast", nullptr},
                       {"-march=", "[a-z0-9_.-]{1,32}"},
                       {"-mtune=", "[a-z0-9_.-]{1,32}"},
                       {"-m", "(avx|avx2|fma|f16c|bmi2|avx512f|avx512bw|avx512vl|avx512dq|avx512bf16|avx512fp16)"},
                       {"-ffast-math", nullptr},
                       {"-funroll-loops", nullptr},
                       {"-fno-math-errno", nullptr},
                       {"-fopenmp", nullptr},
                       {"-Wall", nullptr},
                       {"-Wextra", nullptr}});
    return r;
  }();
  static const std::vector<FlagRule> kCuda = [] {
    std::vector<FlagRule> r = kCommon;
    r.insert(r.end(), {{"-lineinfo", nullptr},
                       {"--use_fast_math", nullptr},
                       {"-use_fast_math", nullptr},
                       {"--ftz=", "(true|false)"},
                       {"--prec-div=", "(true|false)"},
                       {"--prec-sqrt=", "(true|false)"},
                       {"--fmad=", "(true|false)"},
                       {"--maxrregcount=", "[0-9]{1,3}"},
                       {"--expt-relaxed-constexpr", nullptr},
                       {"--extended-lambda", nullptr}});
    return r;
  }();
  static const std::vector<FlagRule> kHip = [] {
    std::vector<FlagRule> r = kCommon;
    r.insert(r.end(), {{"-ffast-math", nullptr},
                       {"-fno-math-errno", nullptr},
                       {"-funroll-loops", nullptr},
                       {"-ffp-contract=", "(fast|on|off)"},
                       {"-munsafe-fp-atomics", nullptr},
                       {"-fgpu-flush-denormals-to-zero", nullptr},
                       {"-fno-gpu-flush-denormals-to-zero", nullptr},
                       {"-Wall", nullptr},
                       {"-Wextra", nullptr}});
    return r;
  }();
  return backend == "cuda" ? kCuda : backend == "hip" ? kHip : kCpu;
}

bool Allowed(const std::string& backend, const std::string& flag) {
  for (const FlagRule& r : Rules(backend)) {
    if (r.rest == nullptr) {
      if (flag == r.prefix) return true;
    } else if (absl::StartsWith(flag, r.prefix) &&
               std::regex_match(flag.substr(strlen(r.prefix)), std::regex(r.rest))) {
      return true;
    }
  }
  return false;
}

bool ValidName(const std::string& name) {
  return !name.empty() && name.size() <= 64 && std::regex_match(name, std::regex("[A-Za-z0-9_.-]+"));
}

std::string BackendOf(const pb::UserKernel& k, const std::string& server_backend) {
  return k.backend().empty() ? server_backend : k.backend();
}

}  // namespace

std::string HipArchFromDriver(const std::string& driver) {
  static constexpr char kTag[] = "code objects ";
  const size_t at = driver.rfind(kTag);
  if (at == std::string::npos) return "";
  const std::string rest = driver.substr(at + strlen(kTag));
  std::smatch m;
  return std::regex_search(rest, m, std::regex("^gfx[0-9a-f]+")) ? m.str(0) : "";
}

std::string UserVariantName(const pb::UserKernel& kernel) { return absl::StrCat("user:", kernel.name()); }
bool IsUserVariantName(const std::string& name) { return absl::StartsWith(name, "user:"); }

std::unique_ptr<KernelBuilder> KernelBuilder::Create(UserKernelOptions options, const std::string& data_dir) {
  std::string cache = options.cache_dir;
  if (cache.empty() && !data_dir.empty()) cache = data_dir + "/user_kernels";
  if (cache.empty()) {
    std::string templ = absl::StrCat(options.work_dir, "/ks-uk-cache-XXXXXX");
    if (mkdtemp(templ.data()) != nullptr) cache = templ;
  }
  mkdir(cache.c_str(), 0700);
  auto b = std::unique_ptr<KernelBuilder>(new KernelBuilder(std::move(options), cache));
  b->toolchains_["cpu"] = Find(b->options_.cxx, {"g++", "c++", "clang++"}, {}, "--user_kernel_cxx");
  b->toolchains_["cuda"] = Find(b->options_.nvcc, {"nvcc"}, {"/usr/local/cuda/bin/nvcc"}, "--user_kernel_nvcc");
  // The clang that builds our own gfx942 code (bazel/hip.bzl): Debian's
  // clang-19 first, a ROCm install's last.
  b->toolchains_["hip"] =
      Find(b->options_.hipcc, {"clang++-19", "clang++"}, {"/opt/rocm/llvm/bin/clang++"}, "--user_kernel_hipcc");
  return b;
}

KernelBuilder::KernelBuilder(UserKernelOptions options, std::string cache_dir)
    : options_(std::move(options)), cache_dir_(std::move(cache_dir)) {}

const Toolchain& KernelBuilder::toolchain(const std::string& backend) const {
  static const Toolchain kNone{"", "", "no toolchain for this backend"};
  auto it = toolchains_.find(backend);
  return it == toolchains_.end() ? kNone : it->second;
}

std::string KernelBuilder::Describe() const {
  std::vector<std::string> parts;
  for (const auto& [backend, t] : toolchains_) {
    parts.push_back(absl::StrCat(backend, ": ", t.path.empty() ? absl::StrCat("none (", t.why_missing, ")") : t.identity));
  }
  return absl::StrCat(absl::StrJoin(parts, "; "), "; cache ", cache_dir_);
}

std::string KernelBuilder::AllowedFlags(const std::string& backend) {
  std::vector<std::string> out;
  for (const FlagRule& r : Rules(backend)) out.push_back(r.rest == nullptr ? r.prefix : absl::StrCat(r.prefix, "..."));
  return absl::StrJoin(out, " ");
}

absl::Status KernelBuilder::Check(const pb::UserKernel& k, pb::BenchOp op, const std::string& server_backend,
                                  const std::string& field, const std::string& device_arch) const {
  if (!options_.enabled) {
    return absl::FailedPreconditionError(
        absl::StrCat(field, ": user kernels are off on this server (--user_kernels=false)"));
  }
  if (!ValidName(k.name())) {
    return absl::InvalidArgumentError(absl::StrCat(field, ".name: expected 1 to 64 of [A-Za-z0-9_.-], got ",
                                                   QuoteClientText(k.name())));
  }
  KS_RETURN_IF_ERROR(CheckLength(absl::StrCat(field, ".filename"), k.filename(), 256));
  const bool device_code = k.code_case() == pb::UserKernel::kCubin || k.code_case() == pb::UserKernel::kPtx ||
                           k.code_case() == pb::UserKernel::kCodeObject;
  const char* const device_field = k.code_case() == pb::UserKernel::kCubin ? "cubin"
                                   : k.code_case() == pb::UserKernel::kPtx ? "ptx"
                                                                           : "code_object";
  const char* const device_backend = k.code_case() == pb::UserKernel::kCodeObject ? "hip" : "cuda";
  if (device_code && !k.backend().empty() && k.backend() != device_backend) {
    return absl::InvalidArgumentError(absl::StrCat(field, ".backend: a ", device_field, " is device code for the ",
                                                   device_backend, " backend, not ", QuoteClientText(k.backend())));
  }
  const std::string backend = BackendOf(k, server_backend);
  if (backend != "cpu" && backend != "cuda" && backend != "hip") {
    return absl::InvalidArgumentError(absl::StrCat(field, ".backend: expected \"cpu\", \"cuda\" or \"hip\", got ",
                                                   QuoteClientText(k.backend())));
  }
  if (device_code && backend != device_backend) {
    return absl::FailedPreconditionError(absl::StrCat(field, ".", device_field, ": device code for the ",
                                                      device_backend, " backend, but this server runs the ",
                                                      server_backend, " backend"));
  }
  if (backend != server_backend) {
    return absl::FailedPreconditionError(absl::StrCat(
        field, ".backend: a ", backend, " kernel, but this server runs the ", server_backend, " backend",
        backend == "hip" ? " and has no HIP (AMD) device; submit it to a server started with --backend=hip" : ""));
  }
  if (backend == "hip" && k.code_case() == pb::UserKernel::kSharedObject) {
    return absl::InvalidArgumentError(absl::StrCat(field, ".shared_object: a hip kernel is device code: send its "
                                                   "HIP source or a code_object (with launch)"));
  }
  // A HIP source builds into device code only: the worker launches it.
  const bool launched = device_code || (backend == "hip" && k.code_case() == pb::UserKernel::kSource);
  const UserAbiEntry* entry = FindUserAbiEntry(op);
  if (entry == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": op ", pb::BenchOp_Name(op), " has no user kernel"));
  }
  switch (k.code_case()) {
    case pb::UserKernel::kSource:
      if (static_cast<int64_t>(k.source().size()) > options_.max_source_bytes) {
        return absl::InvalidArgumentError(absl::StrCat(field, ".source: ", k.source().size(),
                                                       " bytes, larger than the limit of ", options_.max_source_bytes,
                                                       " bytes (--user_kernel_max_source_kb); not compiled"));
      }
      if (k.source().empty()) return absl::InvalidArgumentError(absl::StrCat(field, ".source: empty"));
      break;
    case pb::UserKernel::kSharedObject:
      if (static_cast<int64_t>(k.shared_object().size()) > options_.max_object_bytes) {
        return absl::InvalidArgumentError(absl::StrCat(field, ".shared_object: ", k.shared_object().size(),
                                                       " bytes, larger than the limit of ", options_.max_object_bytes,
                                                       " bytes (--user_kernel_max_object_mb)"));
      }
      KS_RETURN_IF_ERROR(CheckSharedObject(k.shared_object(), absl::StrCat(field, ".shared_object")));
      if (!k.flags().empty()) {
        return absl::InvalidArgumentError(absl::StrCat(field, ".flags: a prebuilt object takes no compile flags"));
      }
      break;
    case pb::UserKernel::kCubin:
    case pb::UserKernel::kPtx:
    case pb::UserKernel::kCodeObject: {
      const std::string& code = k.code_case() == pb::UserKernel::kCubin ? k.cubin()
                                : k.code_case() == pb::UserKernel::kPtx ? k.ptx()
                                                                        : k.code_object();
      const std::string code_field = absl::StrCat(field, ".", device_field);
      if (static_cast<int64_t>(code.size()) > options_.max_object_bytes) {
        return absl::InvalidArgumentError(absl::StrCat(code_field, ": ", code.size(), " bytes, larger than the limit of ",
                                                       options_.max_object_bytes, " bytes (--user_kernel_max_object_mb)"));
      }
      KS_RETURN_IF_ERROR(k.code_case() == pb::UserKernel::kCubin ? CheckCubin(code, *entry, code_field)
                         : k.code_case() == pb::UserKernel::kPtx
                             ? CheckPtx(code, *entry, code_field)
                             : CheckCodeObject(code, *entry, device_arch.empty() ? options_.hip_arch : device_arch,
                                               code_field));
      if (!k.flags().empty()) {
        return absl::InvalidArgumentError(absl::StrCat(field, ".flags: a prebuilt ", device_field, " takes no compile flags"));
      }
      break;
    }
    default:
      return absl::InvalidArgumentError(absl::StrCat(field, ": expected source, shared_object, cubin, ptx or code_object"));
  }
  if (launched) {
    const char* what = device_code ? device_field : "HIP source";
    if (!k.has_launch()) {
      return absl::InvalidArgumentError(absl::StrCat(field, ".launch: a ", what,
                                                     " has no host code to launch it: give its grid_x, block_x "
                                                     "(and grid_y/z, block_y/z, dynamic_shared_bytes)"));
    }
    KS_RETURN_IF_ERROR(CheckLaunch(k.launch(), backend, absl::StrCat(field, ".launch")));
  } else if (k.has_launch()) {
    return absl::InvalidArgumentError(absl::StrCat(field, ".launch: only for device code, a cubin, ptx, code_object "
                                                   "or HIP source (a ",
                                                   k.code_case() == pb::UserKernel::kSource ? "source" : "shared object",
                                                   "'s host entry point launches its own kernels)"));
  }
  if (k.flags_size() > 64) return absl::InvalidArgumentError(absl::StrCat(field, ".flags: at most 64 flags"));
  for (int i = 0; i < k.flags_size(); ++i) {
    if (k.flags(i).size() > 128 || !Allowed(backend, k.flags(i))) {
      return absl::InvalidArgumentError(absl::StrCat(field, ".flags[", i, "]: ", QuoteClientText(k.flags(i)),
                                                     " is not an allowed ", backend,
                                                     " compile flag; allowed: ", AllowedFlags(backend)));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<BuiltKernel> KernelBuilder::Build(const pb::UserKernel& k, const std::string& backend,
                                                 const std::function<bool()>& stop) const {
  if (cache_dir_.empty()) return absl::InternalError("no user kernel cache directory");
  BuiltKernel built;
  if (k.code_case() != pb::UserKernel::kSource) {
    const std::string& bytes = k.code_case() == pb::UserKernel::kSharedObject ? k.shared_object()
                               : k.code_case() == pb::UserKernel::kCubin      ? k.cubin()
                               : k.code_case() == pb::UserKernel::kPtx        ? k.ptx()
                                                                              : k.code_object();
    built.format = k.code_case() == pb::UserKernel::kSharedObject ? "so"
                   : k.code_case() == pb::UserKernel::kCubin      ? "cubin"
                   : k.code_case() == pb::UserKernel::kPtx        ? "ptx"
                                                                  : "hsaco";
    built.launch = k.launch();
    built.source_sha256 = security::Sha256Hex(bytes);
    built.build_key = security::Sha256Hex(absl::StrCat("prebuilt\n", backend, "\n",
                                                       built.format == "so" ? "" : built.format + "\n", bytes));
    built.object_path = absl::StrCat(cache_dir_, "/", built.build_key, ".", built.format);
    built.cached = access(built.object_path.c_str(), R_OK) == 0;
    if (!built.cached) {
      const std::string tmp = absl::StrCat(built.object_path, ".tmp", getpid());
      KS_RETURN_IF_ERROR(WriteFile(tmp, bytes));
      if (rename(tmp.c_str(), built.object_path.c_str()) != 0) return absl::InternalError("cannot store the object");
    }
    built.log = built.format == "so"      ? "prebuilt shared object"
                : built.format == "cubin" ? "prebuilt cubin (sm_90), launched with the submission's geometry"
                : built.format == "ptx"   ? "PTX, JIT-compiled by the driver when the worker loads it"
                                          : "prebuilt AMD GPU code object, launched with the submission's geometry";
    return built;
  }
  const Toolchain& tc = toolchain(backend);
  if (tc.path.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("no ", backend == "cuda" ? "CUDA compiler" : backend == "hip" ? "HIP compiler (clang)" : "C++ compiler",
                     " on this node to build ",
                     UserVariantName(k), ": ", tc.why_missing));
  }
  const bool hip = backend == "hip";
  const std::string key = security::Sha256Hex(absl::StrCat(backend, "\n", tc.identity, "\nabi ", KS_USER_ABI_VERSION,
                                                           hip ? absl::StrCat("\n", options_.hip_arch) : "", "\n",
                                                           absl::StrJoin(k.flags(), "\x1f"), "\n", k.source()));
  const std::string object = absl::StrCat(cache_dir_, "/", key, hip ? ".hsaco" : ".so");
  if (access(object.c_str(), R_OK) == 0) {
    built.object_path = object;
    if (hip) {
      built.format = "hsaco";
      built.launch = k.launch();
    }
    built.build_key = key;
    built.source_sha256 = security::Sha256Hex(k.source());
    built.cached = true;
    built.log = ReadTail(absl::StrCat(cache_dir_, "/", key, ".log"), options_.max_log_bytes);
    return built;
  }
  return Compile(k, backend, key, stop);
}

absl::StatusOr<BuiltKernel> KernelBuilder::Compile(const pb::UserKernel& k, const std::string& backend,
                                                   const std::string& key, const std::function<bool()>& stop) const {
  const Toolchain& tc = toolchain(backend);
  KS_ASSIGN_OR_RETURN(TempDir dir, TempDir::Create(options_.work_dir, "ks-uk-build-"));
  for (const auto& [path, text] : AbiHeaders()) {
    const std::string full = absl::StrCat(dir.path(), "/include/", path);
    for (size_t p = full.find('/', dir.path().size() + 1); p != std::string::npos; p = full.find('/', p + 1)) {
      mkdir(full.substr(0, p).c_str(), 0700);
    }
    KS_RETURN_IF_ERROR(WriteFile(full, text));
  }
  const bool hip = backend == "hip";
  const std::string src = absl::StrCat(dir.path(), backend == "cuda" ? "/kernel.cu" : hip ? "/kernel.hip" : "/kernel.cc");
  const std::string out = absl::StrCat(dir.path(), hip ? "/kernel.hsaco" : "/kernel.so");
  KS_RETURN_IF_ERROR(WriteFile(src, k.source()));
  SpawnSpec s;
  s.argv = {tc.path};
  if (hip) {
    // Device code only, as bazel/hip.bzl builds our own: one linked code
    // object for the device's architecture, without ROCm's device libraries
    // (user_kernel_util.h defines the few entry points HIP's headers need).
    s.argv.insert(s.argv.end(), {"-x", "hip", absl::StrCat("--offload-arch=", options_.hip_arch), "--cuda-device-only",
                                 "--no-gpu-bundle-output", "-nogpulib", "-DKS_HIP_NO_DEVICE_LIBS", "-c", "-std=c++17",
                                 "-O3"});
  } else if (backend == "cuda") {
    s.argv.insert(s.argv.end(), {"-shared", "-Xcompiler", "-fPIC", "-gencode=arch=compute_90a,code=sm_90a",
                                 "-std=c++17", "-O3"});
  } else {
    s.argv.insert(s.argv.end(), {"-shared", "-fPIC", "-std=c++17", "-O2"});
  }
  for (const std::string& f : k.flags()) s.argv.push_back(f);  // later flags win (-O3 over -O2)
  s.argv.insert(s.argv.end(), {"-I", dir.path() + "/include", "-o", out, src});
  const std::string tool_dir = tc.path.substr(0, tc.path.rfind('/'));
  s.env = {absl::StrCat("PATH=", tool_dir, ":/usr/bin:/bin"), "LANG=C", absl::StrCat("HOME=", dir.path()),
           absl::StrCat("TMPDIR=", dir.path())};
  s.cwd = dir.path();
  s.limits.cpu_s = options_.compile_timeout_s;
  s.limits.memory_bytes = backend == "cuda" ? 0 : options_.compile_memory_bytes;
  s.limits.file_bytes = options_.max_object_bytes;
  s.limits.max_processes = options_.compile_max_processes;
  s.limits.isolate_network = options_.isolate_network;
  const std::string log = dir.path() + "/compile.log";
  FILE* f = fopen(log.c_str(), "w");
  if (f == nullptr) return absl::InternalError("cannot create the compile log");
  s.stdout_fd = fileno(f);
  s.stderr_fd = fileno(f);
  absl::StatusOr<Spawned> p = Spawn(s);
  fclose(f);
  if (!p.ok()) return p.status();
  const Exit e = WaitFor(p->pid, options_.compile_timeout_s, stop);
  const std::string name = k.filename().empty() ? UserVariantName(k) : k.filename();
  BuiltKernel built;
  built.build_key = key;
  built.source_sha256 = security::Sha256Hex(k.source());
  built.log = absl::StrCat("$ ", absl::StrJoin(s.argv, " "), "\n", ReadTail(log, options_.max_log_bytes), p->network,
                           "\n", p->processes, "\n");
  if (e.stopped) return absl::CancelledError(absl::StrCat("the build of ", name, " was stopped"));
  if (e.timed_out) {
    return absl::DeadlineExceededError(absl::StrCat(name, ": the compiler ran past ", options_.compile_timeout_s,
                                                    " s (--user_kernel_compile_timeout_s) and was killed; log:\n",
                                                    built.log));
  }
  if (!e.exited || e.exit_code != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " does not compile (", tc.path.substr(tc.path.rfind('/') + 1), " ", e.Describe(),
                     "); compile log:\n", built.log));
  }
  if (hip) {
    built.format = "hsaco";
    built.launch = k.launch();
  }
  built.object_path = absl::StrCat(cache_dir_, "/", key, hip ? ".hsaco" : ".so");
  KS_RETURN_IF_ERROR(WriteFile(absl::StrCat(cache_dir_, "/", key, ".log"), built.log));
  // The cache may be on another file system than the build dir: copy, then
  // rename within the cache, so that a reader never sees half an object.
  KS_ASSIGN_OR_RETURN(const std::string object, ReadFileBytes(out));
  const std::string tmp = absl::StrCat(built.object_path, ".tmp", getpid());
  KS_RETURN_IF_ERROR(WriteFile(tmp, object));
  if (rename(tmp.c_str(), built.object_path.c_str()) != 0) {
    return absl::InternalError(absl::StrCat("cannot move the build into the cache ", cache_dir_));
  }
  return built;
}

}  // namespace user_kernels
}  // namespace kernelserve
