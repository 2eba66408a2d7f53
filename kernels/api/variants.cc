#include "kernels/api/variants.h"

#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kernelserve {
namespace {

float Bf16Bits2Float(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

uint16_t FloatToBf16Rtne(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fff;
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// Copies the bf16 output to the host, applies `edit`, and copies it back, so
// the test variants work on any backend's memory.
absl::Status EditOutput(Backend& backend, int device, TensorView& out,
                        const std::function<void(uint16_t*, int64_t)>& edit) {
  if (out.desc.dtype != DType::kBf16) {
    return absl::InternalError("test variants expect a bf16 output");
  }
  const int64_t n = out.desc.num_elements();
  std::vector<uint16_t> host(static_cast<size_t>(n));
  const size_t bytes = static_cast<size_t>(n) * sizeof(uint16_t);
  KS_RETURN_IF_ERROR(backend.CopyToHost(device, host.data(), out.data, bytes));
  edit(host.data(), n);
  return backend.CopyToDevice(device, out.data, host.data(), bytes);
}

}  // namespace

absl::Status RunOnBackend(Backend& backend, int device, const OpCall& call, TensorView& out) {
  switch (call.op) {
    case BenchOp::kAttention:
      return backend.Attention(device, call.attention, call.q, call.k, call.v, out);
    case BenchOp::kFp8Attention:
      return backend.Fp8Attention(device, call.fp8, call.fp8_in, out);
    case BenchOp::kMlaDecode:
      return backend.MlaDecode(device, call.mla, call.mla_in, out);
    case BenchOp::kMoeGateUp:
    case BenchOp::kMoeDown:
    case BenchOp::kMoeLayer:
      return backend.Moe(device, call.moe, call.moe_in, out);
  }
  return absl::InvalidArgumentError("unknown op");
}

absl::Status VariantRegistry::Register(Variant variant) {
  if (variant.name.empty() || !variant.run) {
    return absl::InvalidArgumentError("a variant needs a name and a run function");
  }
  auto key = std::make_pair(static_cast<int>(variant.op), variant.name);
  if (variants_.count(key)) {
    return absl::AlreadyExistsError(absl::StrCat("variant \"", variant.name, "\" of ",
                                                 BenchOpName(variant.op), " already registered"));
  }
  variants_.emplace(std::move(key), std::move(variant));
  return absl::OkStatus();
}

absl::StatusOr<const Variant*> VariantRegistry::Find(BenchOp op, absl::string_view name) const {
  auto it = variants_.find(std::make_pair(static_cast<int>(op), std::string(name)));
  if (it != variants_.end()) return &it->second;
  std::vector<std::string> names;
  for (const Variant* v : List(op)) names.push_back(v->name);
  return absl::NotFoundError(absl::StrCat("no variant \"", name, "\" for ", BenchOpName(op),
                                          "; this server has: ", absl::StrJoin(names, ", ")));
}

std::vector<const Variant*> VariantRegistry::List(BenchOp op) const {
  std::vector<const Variant*> out;
  for (const auto& [key, v] : variants_) {
    if (key.first == static_cast<int>(op)) out.push_back(&v);
  }
  return out;
}

std::vector<const Variant*> VariantRegistry::ListAll() const {
  std::vector<const Variant*> out;
  for (const auto& [key, v] : variants_) out.push_back(&v);
  return out;
}

const Variant* VariantRegistry::Default(BenchOp op) const {
  for (const auto& [key, v] : variants_) {
    if (key.first == static_cast<int>(op) && v.is_default) return &v;
  }
  return nullptr;
}

absl::Status RegisterBackendVariants(const Backend& backend, const VariantOptions& options,
                                     VariantRegistry* registry) {
  const std::string b = backend.Name();
  for (BenchOp op : kAllBenchOps) {
    Variant v;
    v.op = op;
    v.name = b;
    v.backend = b;
    v.description = absl::StrCat(b, " backend's ", BenchOpName(op), " kernel");
    v.is_default = true;
    v.run = RunOnBackend;
    KS_RETURN_IF_ERROR(registry->Register(std::move(v)));
  }
  for (const KernelVariantInfo& k : backend.KernelVariants()) {
    Variant v;
    v.op = k.op;
    v.name = absl::StrCat(b, ".", k.name);
    v.backend = b;
    v.description = absl::StrCat(k.description, " (serves ", k.serves, ")");
    const std::string kernel = k.name;
    v.run = [kernel](Backend& be, int device, const OpCall& call, TensorView& out) {
      return be.RunKernelVariant(device, kernel, call, out);
    };
    KS_RETURN_IF_ERROR(registry->Register(std::move(v)));
  }
  const std::pair<const char*, PMode> modes[] = {
      {"exact", PMode::kExact}, {"lean", PMode::kLean}, {"naive", PMode::kNaive}};
  for (const auto& [suffix, mode] : modes) {
    Variant v;
    v.op = BenchOp::kFp8Attention;
    v.name = absl::StrCat(b, ".", suffix);
    v.backend = b;
    v.description = absl::StrCat(b, " FP8 attention with ", suffix, " P");
    const PMode m = mode;
    v.run = [m](Backend& be, int device, const OpCall& call, TensorView& out) {
      OpCall c = call;
      c.fp8.p_mode = m;
      return RunOnBackend(be, device, c, out);
    };
    KS_RETURN_IF_ERROR(registry->Register(std::move(v)));
  }
  if (options.test_variants) {
    for (BenchOp op : kAllBenchOps) {
      Variant wrong;
      wrong.op = op;
      wrong.name = "test.wrong";
      wrong.backend = b;
      wrong.test_only = true;
      wrong.description = "test only: the backend's kernel with its output scaled by 1.5";
      wrong.run = [](Backend& be, int device, const OpCall& call, TensorView& out) {
        KS_RETURN_IF_ERROR(RunOnBackend(be, device, call, out));
        return EditOutput(be, device, out, [](uint16_t* x, int64_t n) {
          for (int64_t i = 0; i < n; ++i) x[i] = FloatToBf16Rtne(1.5f * Bf16Bits2Float(x[i]));
        });
      };
      KS_RETURN_IF_ERROR(registry->Register(std::move(wrong)));

      Variant nan;
      nan.op = op;
      nan.name = "test.nan";
      nan.backend = b;
      nan.test_only = true;
      nan.description = "test only: the backend's kernel with its last output set to NaN";
      nan.run = [](Backend& be, int device, const OpCall& call, TensorView& out) {
        KS_RETURN_IF_ERROR(RunOnBackend(be, device, call, out));
        return EditOutput(be, device, out, [](uint16_t* x, int64_t n) {
          if (n > 0) x[n - 1] = 0x7fc0;
        });
      };
      KS_RETURN_IF_ERROR(registry->Register(std::move(nan)));
    }
  }
  return absl::OkStatus();
}

}  // namespace kernelserve
