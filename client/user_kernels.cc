#include "client/user_kernels.h"

#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "google/protobuf/util/json_util.h"

namespace kernelserve {

absl::StatusOr<pb::UserKernel> UserKernelFromFile(const std::string& path, const std::string& name,
                                                  const std::vector<std::string>& flags, const std::string& backend) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return absl::NotFoundError(absl::StrCat("--kernel: cannot read ", path));
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string bytes = ss.str();
  pb::UserKernel k;
  const size_t slash = path.rfind('/');
  const std::string file = slash == std::string::npos ? path : path.substr(slash + 1);
  k.set_filename(file);
  k.set_name(name.empty() ? file.substr(0, file.find('.')) : name);
  k.set_backend(backend);
  // A cubin is an ELF image for EM_CUDA (190), an AMD GPU code object one
  // for EM_AMDGPU (224): e_machine at offset 18.
  const bool elf = absl::StartsWith(bytes, "\x7f" "ELF") && bytes.size() > 19 && bytes[19] == 0;
  const uint8_t machine = elf ? static_cast<uint8_t>(bytes[18]) : 0;
  if (machine == 190) {
    k.set_cubin(bytes);
  } else if (machine == 224) {
    k.set_code_object(bytes);
  } else if (absl::StartsWith(bytes, "\x7f" "ELF")) {
    k.set_shared_object(bytes);
  } else if (absl::EndsWith(path, ".ptx")) {
    k.set_ptx(bytes);
  } else {
    k.set_source(bytes);
    // HIP C++ is only ever built for the hip backend: say so, so that a
    // server of another backend refuses it by name instead of compiling it.
    if (backend.empty() && absl::EndsWith(path, ".hip")) k.set_backend("hip");
  }
  for (const std::string& fl : flags) k.add_flags(fl);
  return k;
}

std::string LeaderboardMarkdown(const pb::LeaderboardResponse& board) {
  if (board.entries().empty()) return "no passing results\n";
  std::string out, section;
  for (const pb::LeaderboardEntry& e : board.entries()) {
    const std::string here = absl::StrCat(e.shape_desc(), " on ", e.device_name(), " (", e.backend(), ")");
    if (here != section || out.empty()) {
      section = here;
      absl::StrAppend(&out, out.empty() ? "" : "\n", "### ", here, "\n\n",
                      "| rank | variant | source sha256 | tenant | ms | TFLOP/s | TB/s | runs | date (UTC) | job |\n",
                      "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
    }
    const std::string date =
        absl::FormatTime("%Y-%m-%d %H:%M", absl::FromUnixMillis(e.finished_unix_ms()), absl::UTCTimeZone());
    absl::StrAppend(&out, absl::StrFormat("| %d | %s | %s | %s | %.4f | %.3g | %.3g | %d | %s | %s |\n", e.rank(),
                                          e.variant(), e.source_sha256().empty() ? "-" : e.source_sha256().substr(0, 12),
                                          e.tenant(), e.time_ms(), e.tflops(), e.tbps(), e.runs(), date, e.job_id()));
  }
  return out;
}

std::string LeaderboardJson(const pb::LeaderboardResponse& board) {
  google::protobuf::util::JsonPrintOptions opts;
  opts.add_whitespace = true;
  opts.preserve_proto_field_names = true;
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(board, &out, opts);
  return out;
}

}  // namespace kernelserve
