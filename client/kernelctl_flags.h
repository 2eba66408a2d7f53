// A small per-subcommand flag parser for kernelctl: "--name=value",
// "--name value", boolean "--name" / "--name=true|false" / "--no-name".
// Unknown flags and malformed values are errors that name the flag.
#ifndef KERNELSERVE_CLIENT_KERNELCTL_FLAGS_H_
#define KERNELSERVE_CLIENT_KERNELCTL_FLAGS_H_

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace kernelserve {
namespace kernelctl {

class FlagSet {
 public:
  // `command` names the subcommand in errors ("attention", "pool write").
  explicit FlagSet(std::string command) : command_(std::move(command)) {}

  void String(const std::string& name, std::string* out, const std::string& value_name,
              const std::string& help, bool required = false);
  void Bool(const std::string& name, bool* out, const std::string& help);
  void Double(const std::string& name, std::optional<double>* out, const std::string& help);
  void Int(const std::string& name, int64_t* out, const std::string& help, bool required = false);

  // Parses `args`; non-flag words go to `positional` (an error when null).
  absl::Status Parse(const std::vector<std::string>& args, std::vector<std::string>* positional = nullptr);
  bool IsSet(const std::string& name) const { return set_.count(name) > 0; }
  // One line per flag: "  --name=VALUE  help".
  std::string Usage() const;

 private:
  enum class Kind { kString, kBool, kDouble, kInt };
  struct Flag {
    std::string name;
    Kind kind;
    void* out;
    std::string value_name;
    std::string help;
    bool required;
  };
  Flag* Find(const std::string& name);
  absl::Status Assign(Flag& f, const std::string& value);

  std::string command_;
  std::vector<Flag> flags_;
  std::set<std::string> set_;
};

}  // namespace kernelctl
}  // namespace kernelserve

#endif  // KERNELSERVE_CLIENT_KERNELCTL_FLAGS_H_
