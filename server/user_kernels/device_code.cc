// Prebuilt device code (a cubin or PTX for cuda, an AMD GPU code object for
// hip), checked at submit on any machine, without CUDA or ROCm: what the
// worker's driver would refuse later, or load and then run wrongly, is named
// now with its field.
#include <elf.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "kernels/api/user_kernel_abi.h"
#include "server/user_kernels/builder.h"

namespace kernelserve {
namespace user_kernels {
namespace {

// CUDA's ELF conventions (LLVM's BinaryFormat/ELF.h; nvcc 12 and 13 output).
constexpr uint16_t kEmCuda = 190;
// EI_ABIVERSION 8 and later (CUDA 12.8+/13) keep the SM in e_flags bits
// 8..15; earlier ones (7) in bits 0..7.
constexpr uint8_t kCudaAbiV2 = 8;
constexpr uint8_t kStoCudaEntry = 0x10;  // st_other of a __global__ function
constexpr int kDeviceSm = 90;            // the H200 (sm_90; sm_90a code runs there only)
constexpr uint32_t kMaxSharedOptin = 232448;

// AMD GPU code objects (LLVM's BinaryFormat/ELF.h, AMDGPUUsage): e_machine,
// EI_OSABI of the HSA runtime, and the processor in e_flags bits 0..7.
constexpr uint16_t kEmAmdgpu = 224;
constexpr uint8_t kOsAbiAmdgpuHsa = 64;
constexpr uint32_t kAmdgpuMachMask = 0xff;
constexpr uint32_t kMaxLdsGfx942 = 65536;  // LDS per workgroup
struct GfxMach {
  const char* name;
  uint32_t mach;
};
constexpr GfxMach kGfxMachs[] = {
    {"gfx906", 0x2f}, {"gfx908", 0x30},  {"gfx90a", 0x3f},  {"gfx940", 0x40},  {"gfx941", 0x4b},
    {"gfx942", 0x4c}, {"gfx950", 0x4f},  {"gfx1030", 0x36}, {"gfx1100", 0x41}, {"gfx1101", 0x46},
    {"gfx1102", 0x47}, {"gfx1200", 0x48}, {"gfx1201", 0x4e},
};

const UserAbiEntry kEntries[] = {
    {pb::OP_ATTENTION, KS_USER_ATTENTION_V1, KS_USER_ATTENTION_V1_KERNEL, "ks_attention_args_v1",
     sizeof(ks_attention_args_v1)},
    {pb::OP_FP8_ATTENTION, KS_USER_FP8_ATTENTION_V1, KS_USER_FP8_ATTENTION_V1_KERNEL, "ks_fp8_attention_args_v1",
     sizeof(ks_fp8_attention_args_v1)},
    {pb::OP_MLA_DECODE, KS_USER_MLA_DECODE_V1, KS_USER_MLA_DECODE_V1_KERNEL, "ks_mla_decode_args_v1",
     sizeof(ks_mla_decode_args_v1)},
    {pb::OP_MOE_GATEUP, KS_USER_MOE_GATEUP_V1, KS_USER_MOE_GATEUP_V1_KERNEL, "ks_moe_gateup_args_v1",
     sizeof(ks_moe_gateup_args_v1)},
    {pb::OP_MOE_DOWN, KS_USER_MOE_DOWN_V1, KS_USER_MOE_DOWN_V1_KERNEL, "ks_moe_down_args_v1",
     sizeof(ks_moe_down_args_v1)},
    {pb::OP_MOE_LAYER, KS_USER_MOE_LAYER_V1, KS_USER_MOE_LAYER_V1_KERNEL, "ks_moe_layer_args_v1",
     sizeof(ks_moe_layer_args_v1)},
};

absl::Status Bad(const std::string& field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what));
}

std::string Declaration(const UserAbiEntry& e) {
  return absl::StrCat("extern \"C\" __global__ void ", e.device_kernel, "(", e.args,
                      " args) (kernels/api/user_kernel_abi.h)");
}

// The section headers of an ELF image, bounds-checked.
absl::StatusOr<std::vector<Elf64_Shdr>> Sections(const std::string& b, const Elf64_Ehdr& h,
                                                  const std::string& field) {
  if (h.e_shentsize != sizeof(Elf64_Shdr) || h.e_shoff > b.size() ||
      static_cast<uint64_t>(h.e_shnum) * sizeof(Elf64_Shdr) > b.size() - h.e_shoff) {
    return Bad(field, "a malformed ELF object (its section headers lie outside the file)");
  }
  std::vector<Elf64_Shdr> s(h.e_shnum);
  if (h.e_shnum > 0) std::memcpy(s.data(), b.data() + h.e_shoff, h.e_shnum * sizeof(Elf64_Shdr));
  for (const Elf64_Shdr& sec : s) {
    if (sec.sh_type != SHT_NOBITS && (sec.sh_offset > b.size() || sec.sh_size > b.size() - sec.sh_offset)) {
      return Bad(field, "a malformed ELF object (a section lies outside the file)");
    }
  }
  return s;
}

// Calls fn(name, symbol) for every defined symbol of the image's symbol
// tables (.symtab and .dynsym), bounds-checked.
template <typename Fn>
void ForEachDefinedSymbol(const std::string& b, const std::vector<Elf64_Shdr>& sections, Fn fn) {
  for (const Elf64_Shdr& symtab : sections) {
    if ((symtab.sh_type != SHT_SYMTAB && symtab.sh_type != SHT_DYNSYM) || symtab.sh_link >= sections.size() ||
        symtab.sh_entsize != sizeof(Elf64_Sym)) {
      continue;
    }
    const Elf64_Shdr& strtab = sections[symtab.sh_link];
    const absl::string_view strings(b.data() + strtab.sh_offset, strtab.sh_size);
    for (uint64_t i = 0; i < symtab.sh_size / sizeof(Elf64_Sym); ++i) {
      Elf64_Sym sym;
      std::memcpy(&sym, b.data() + symtab.sh_offset + i * sizeof(Elf64_Sym), sizeof(sym));
      if (sym.st_name >= strings.size() || sym.st_shndx == SHN_UNDEF) continue;
      const absl::string_view rest = strings.substr(sym.st_name);
      fn(rest.substr(0, rest.find('\0')), sym);
    }
  }
}

// What the symbol tables say about `name`: "" when it is an exported
// __global__ kernel, else why not.
std::string FindKernel(const std::string& b, const std::vector<Elf64_Shdr>& sections, const UserAbiEntry& e) {
  std::string mangled, device_fn, local;
  bool found = false;
  ForEachDefinedSymbol(b, sections, [&](absl::string_view name, const Elf64_Sym& sym) {
    if (found || ELF64_ST_TYPE(sym.st_info) != STT_FUNC) return;
    if (name == e.device_kernel) {
      if (ELF64_ST_BIND(sym.st_info) == STB_LOCAL) {
        local = absl::StrCat(e.device_kernel, " is not exported (static)");
      } else if ((sym.st_other & kStoCudaEntry) == 0) {
        device_fn = absl::StrCat(e.device_kernel, " is a __device__ function, not a __global__ kernel");
      } else {
        found = true;
      }
    } else if (mangled.empty() && name.find(e.device_kernel) != absl::string_view::npos) {
      mangled = std::string(name);
    }
  });
  if (found) return "";
  if (!local.empty()) return local;
  if (!device_fn.empty()) return device_fn;
  return absl::StrCat("exports no kernel ", e.device_kernel,
                      mangled.empty() ? "" : absl::StrCat(" (only the C++-mangled ", mangled, ": declare it extern \"C\")"),
                      "; expected ", Declaration(e));
}

// An AMD code object's kernel is its descriptor, the STT_OBJECT symbol
// "<kernel>.kd" that hipModuleGetFunction looks up: "" when it is exported,
// else why not.
std::string FindAmdKernel(const std::string& b, const std::vector<Elf64_Shdr>& sections, const UserAbiEntry& e) {
  const std::string kd = absl::StrCat(e.device_kernel, ".kd");
  std::string mangled, local;
  bool found = false;
  ForEachDefinedSymbol(b, sections, [&](absl::string_view name, const Elf64_Sym& sym) {
    if (found || ELF64_ST_TYPE(sym.st_info) != STT_OBJECT || !absl::EndsWith(name, ".kd")) return;
    if (name == kd) {
      if (ELF64_ST_BIND(sym.st_info) == STB_LOCAL) {
        local = absl::StrCat(kd, " is not exported (a static kernel)");
      } else {
        found = true;
      }
    } else if (mangled.empty() && name.find(e.device_kernel) != absl::string_view::npos) {
      mangled = std::string(name.substr(0, name.size() - 3));
    }
  });
  if (found) return "";
  if (!local.empty()) return local;
  return absl::StrCat("has no kernel descriptor ", kd, " (no kernel ", e.device_kernel, ")",
                      mangled.empty() ? "" : absl::StrCat(" (only the C++-mangled ", mangled, ": declare it extern \"C\")"),
                      "; expected ", Declaration(e));
}

// PTX tokens with comments skipped: directives and identifiers, numbers,
// and one-character punctuation.
class PtxLexer {
 public:
  explicit PtxLexer(absl::string_view text) : t_(text) {}
  bool Next(absl::string_view* tok) {
    while (pos_ < t_.size()) {
      const char c = t_[pos_];
      if (isspace(static_cast<unsigned char>(c))) {
        ++pos_;
      } else if (t_.substr(pos_, 2) == "//") {
        const size_t nl = t_.find('\n', pos_);
        pos_ = nl == absl::string_view::npos ? t_.size() : nl + 1;
      } else if (t_.substr(pos_, 2) == "/*") {
        const size_t end = t_.find("*/", pos_ + 2);
        pos_ = end == absl::string_view::npos ? t_.size() : end + 2;
      } else {
        break;
      }
    }
    if (pos_ >= t_.size()) return false;
    const size_t start = pos_;
    if (IsWord(t_[pos_])) {
      while (pos_ < t_.size() && IsWord(t_[pos_])) ++pos_;
    } else {
      ++pos_;
    }
    *tok = t_.substr(start, pos_ - start);
    return true;
  }

 private:
  static bool IsWord(char c) {
    return isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '$' || c == '%';
  }
  absl::string_view t_;
  size_t pos_ = 0;
};

// "sm_90a" -> 90 with *suffix 'a'; -1 when it is not an sm_ target.
int SmOf(absl::string_view target, char* suffix) {
  *suffix = 0;
  if (target.substr(0, 3) != "sm_") return -1;
  absl::string_view digits = target.substr(3);
  if (!digits.empty() && isalpha(static_cast<unsigned char>(digits.back()))) {
    *suffix = digits.back();
    digits.remove_suffix(1);
  }
  int sm = 0;
  return absl::SimpleAtoi(digits, &sm) ? sm : -1;
}

// The parameters of an .entry, from after its "(": each a token list.
std::vector<std::vector<std::string>> EntryParams(PtxLexer* lex) {
  std::vector<std::vector<std::string>> params(1);
  absl::string_view tok;
  while (lex->Next(&tok) && tok != ")") {
    if (tok == ",") {
      params.emplace_back();
    } else {
      params.back().emplace_back(tok);
    }
  }
  if (params.back().empty()) params.pop_back();
  return params;
}

// A param's size in bytes: `.param .align A .b8 NAME [N]` is N; a scalar
// `.param .u64 NAME` its type's width; 0 when unknown.
size_t ParamBytes(const std::vector<std::string>& p) {
  for (size_t i = 0; i + 3 < p.size(); ++i) {
    size_t n = 0;
    if (p[i] == ".b8" && p[i + 2] == "[" && absl::SimpleAtoi(p[i + 3], &n)) return n;
  }
  for (const std::string& t : p) {
    if (t.size() >= 3 && t[0] == '.' && (t[1] == 'u' || t[1] == 's' || t[1] == 'b' || t[1] == 'f')) {
      size_t bits = 0;
      if (absl::SimpleAtoi(t.substr(2), &bits) && bits >= 8) return bits / 8;
    }
  }
  return 0;
}

}  // namespace

const UserAbiEntry* FindUserAbiEntry(pb::BenchOp op) {
  for (const UserAbiEntry& e : kEntries) {
    if (e.op == op) return &e;
  }
  return nullptr;
}

absl::Status CheckCubin(const std::string& b, const UserAbiEntry& e, const std::string& field) {
  if (b.size() < sizeof(Elf64_Ehdr) || b.compare(0, 4, "\x7f" "ELF") != 0) {
    return Bad(field, "not a cubin (no ELF header); build one with nvcc -cubin -arch=sm_90a (PTX text goes in ptx)");
  }
  Elf64_Ehdr h;
  std::memcpy(&h, b.data(), sizeof(h));
  if (h.e_ident[EI_CLASS] != ELFCLASS64 || h.e_ident[EI_DATA] != ELFDATA2LSB) {
    return Bad(field, "a 32-bit or big-endian ELF object, not a cubin (64-bit little-endian, EM_CUDA = 190)");
  }
  if (h.e_machine != kEmCuda) {
    return Bad(field, absl::StrCat("built for ELF machine ", h.e_machine, h.e_machine == EM_X86_64 ? " (x86-64)" : "",
                                   ", not a cubin (EM_CUDA = 190); build with nvcc -cubin -arch=sm_90a, or send a "
                                   "host shared object as shared_object"));
  }
  if (h.e_type != ET_EXEC) {
    return Bad(field, absl::StrCat("ELF type ", h.e_type,
                                   h.e_type == ET_REL ? " (a relocatable device object: nvcc -dc / -rdc)" : "",
                                   ", not a linked cubin (ET_EXEC = 2); build with nvcc -cubin without -rdc, "
                                   "or link it with nvlink"));
  }
  const int sm = static_cast<int>(h.e_ident[EI_ABIVERSION] >= kCudaAbiV2 ? (h.e_flags >> 8) & 0xff : h.e_flags & 0xff);
  if (sm != kDeviceSm) {
    return Bad(field, absl::StrCat("built for sm_", sm, "; this server's devices run sm_90 code (an sm_90a or "
                                   "sm_90 cubin; PTX for an older target is JIT-compiled, send it as ptx)"));
  }
  absl::StatusOr<std::vector<Elf64_Shdr>> sections = Sections(b, h, field);
  if (!sections.ok()) return sections.status();
  const std::string missing = FindKernel(b, *sections, e);
  if (!missing.empty()) return Bad(field, missing);
  return absl::OkStatus();
}

std::string GfxName(uint32_t mach) {
  for (const GfxMach& g : kGfxMachs) {
    if (g.mach == mach) return g.name;
  }
  return absl::StrCat("an AMD GPU of EF_AMDGPU_MACH 0x", absl::Hex(mach));
}

absl::Status CheckCodeObject(const std::string& b, const UserAbiEntry& e, const std::string& device_arch,
                             const std::string& field) {
  const std::string build = absl::StrCat("build one with clang -x hip --offload-arch=", device_arch,
                                         " --cuda-device-only --no-gpu-bundle-output -c (or send the HIP source)");
  if (b.size() < sizeof(Elf64_Ehdr) || b.compare(0, 4, "\x7f" "ELF") != 0) {
    return Bad(field, absl::StrCat("not an AMD GPU code object (no ELF header", absl::StartsWith(b, "BC") ? "; LLVM bitcode: drop -fgpu-rdc" : "",
                                   "); ", build));
  }
  Elf64_Ehdr h;
  std::memcpy(&h, b.data(), sizeof(h));
  if (h.e_ident[EI_CLASS] != ELFCLASS64 || h.e_ident[EI_DATA] != ELFDATA2LSB) {
    return Bad(field, "a 32-bit or big-endian ELF object, not an AMD GPU code object (64-bit little-endian, EM_AMDGPU = 224)");
  }
  if (h.e_machine != kEmAmdgpu) {
    return Bad(field, absl::StrCat("built for ELF machine ", h.e_machine,
                                   h.e_machine == EM_X86_64 ? " (x86-64)" : h.e_machine == kEmCuda ? " (a cubin)" : "",
                                   ", not an AMD GPU code object (EM_AMDGPU = 224); ", build));
  }
  if (h.e_ident[EI_OSABI] != kOsAbiAmdgpuHsa) {
    return Bad(field, absl::StrCat("ELF OS/ABI ", static_cast<int>(h.e_ident[EI_OSABI]),
                                   "; the HIP runtime loads HSA code objects (ELFOSABI_AMDGPU_HSA = 64, amdgcn-amd-amdhsa)"));
  }
  if (h.e_type != ET_DYN) {
    return Bad(field, absl::StrCat("ELF type ", h.e_type, h.e_type == ET_REL ? " (a relocatable object)" : "",
                                   ", not a linked code object (ET_DYN = 3); ", build));
  }
  const std::string arch = GfxName(h.e_flags & kAmdgpuMachMask);
  if (arch != device_arch) {
    return Bad(field, absl::StrCat("built for ", arch, "; this server's devices are ", device_arch,
                                   " (the code object's e_flags name its processor; rebuild with --offload-arch=",
                                   device_arch, ")"));
  }
  absl::StatusOr<std::vector<Elf64_Shdr>> sections = Sections(b, h, field);
  if (!sections.ok()) return sections.status();
  const std::string missing = FindAmdKernel(b, *sections, e);
  if (!missing.empty()) return Bad(field, missing);
  return absl::OkStatus();
}

absl::Status CheckPtx(const std::string& text, const UserAbiEntry& e, const std::string& field) {
  if (const size_t nul = text.find('\0'); nul != std::string::npos) {
    return Bad(field, absl::StrCat("not PTX text (a NUL byte at offset ", nul, "); a cubin goes in cubin"));
  }
  PtxLexer lex(text);
  absl::string_view tok;
  std::string version, target, address_size;
  std::vector<std::string> entries;
  std::vector<std::vector<std::string>> params;
  bool found = false;
  while (lex.Next(&tok)) {
    if (tok == ".version" && version.empty() && lex.Next(&tok)) {
      version = std::string(tok);
    } else if (tok == ".target" && target.empty() && lex.Next(&tok)) {
      target = std::string(tok);
    } else if (tok == ".address_size" && address_size.empty() && lex.Next(&tok)) {
      address_size = std::string(tok);
    } else if (tok == ".entry" && lex.Next(&tok)) {
      entries.emplace_back(tok);
      if (tok == e.device_kernel && !found) {
        found = true;
        if (lex.Next(&tok) && tok == "(") params = EntryParams(&lex);
      }
    }
  }
  if (version.empty() || target.empty()) {
    return Bad(field, "not PTX (no .version and .target directives); generate it with nvcc -ptx -arch=sm_90a");
  }
  char suffix = 0;
  const int sm = SmOf(target, &suffix);
  if (sm < 0 || sm > kDeviceSm || (suffix != 0 && sm != kDeviceSm)) {
    return Bad(field, absl::StrCat(".target ", target, ": this server's devices (sm_90) JIT-compile PTX for sm_90a or ",
                                   "any sm_NN up to sm_90"));
  }
  if (address_size != "64") {
    return Bad(field, absl::StrCat(address_size.empty() ? "no .address_size" : ".address_size " + address_size,
                                   "; the ABI's pointers are 64-bit: declare .address_size 64"));
  }
  if (!found) {
    return Bad(field, absl::StrCat("has no .entry ", e.device_kernel,
                                   entries.empty() ? "" : absl::StrCat(" (entries: ", absl::StrJoin(entries, ", "), ")"),
                                   "; expected ", Declaration(e)));
  }
  if (params.size() != 1 || ParamBytes(params[0]) != e.args_bytes) {
    return Bad(field, absl::StrCat(".entry ", e.device_kernel, " takes ", params.size(), " parameter(s)",
                                   params.size() == 1 ? absl::StrCat(" of ", ParamBytes(params[0]), " bytes") : "",
                                   "; the ABI passes one, ", e.args, " by value (.param .align 8 .b8 NAME[",
                                   e.args_bytes, "])"));
  }
  return absl::OkStatus();
}

absl::Status CheckLaunch(const pb::CudaLaunch& l, const std::string& backend, const std::string& field) {
  auto dim = [](uint32_t v) { return v == 0 ? 1u : v; };
  if (l.grid_x() < 1 || l.grid_x() > 0x7fffffffu) {
    return Bad(field + ".grid_x", absl::StrCat("expected 1 to 2147483647 blocks, got ", l.grid_x()));
  }
  if (l.grid_y() > 65535 || l.grid_z() > 65535) {
    return Bad(field + (l.grid_y() > 65535 ? ".grid_y" : ".grid_z"),
               absl::StrCat("expected 0 (1) to 65535, got ", std::max(l.grid_y(), l.grid_z())));
  }
  if (l.block_x() < 1 || l.block_x() > 1024) {
    return Bad(field + ".block_x", absl::StrCat("expected 1 to 1024 threads, got ", l.block_x()));
  }
  if (l.block_y() > 1024) return Bad(field + ".block_y", absl::StrCat("expected 0 (1) to 1024, got ", l.block_y()));
  if (l.block_z() > 64) return Bad(field + ".block_z", absl::StrCat("expected 0 (1) to 64, got ", l.block_z()));
  const uint64_t threads = uint64_t{l.block_x()} * dim(l.block_y()) * dim(l.block_z());
  if (threads > 1024) {
    return Bad(field + ".block_x", absl::StrCat("block_x * block_y * block_z is ", threads,
                                                 " threads; a block has at most 1024"));
  }
  const bool hip = backend == "hip";
  if (l.dynamic_shared_bytes() > (hip ? kMaxLdsGfx942 : kMaxSharedOptin)) {
    return Bad(field + ".dynamic_shared_bytes",
               absl::StrCat("expected at most ", hip ? kMaxLdsGfx942 : kMaxSharedOptin,
                            hip ? " (64 KiB, gfx942's LDS per workgroup)" : " (227 KiB, sm_90's limit per block)",
                            ", got ", l.dynamic_shared_bytes()));
  }
  return absl::OkStatus();
}

}  // namespace user_kernels
}  // namespace kernelserve
