#include "client/kernelctl_flags.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/match.h"

namespace kernelserve {
namespace kernelctl {

void FlagSet::String(const std::string& name, std::string* out, const std::string& value_name,
                     const std::string& help, bool required) {
  flags_.push_back({name, Kind::kString, out, value_name, help, required});
}
void FlagSet::Bool(const std::string& name, bool* out, const std::string& help) {
  flags_.push_back({name, Kind::kBool, out, "", help, false});
}
void FlagSet::Double(const std::string& name, std::optional<double>* out, const std::string& help) {
  flags_.push_back({name, Kind::kDouble, out, "F", help, false});
}
void FlagSet::Int(const std::string& name, int64_t* out, const std::string& help, bool required) {
  flags_.push_back({name, Kind::kInt, out, "N", help, required});
}

FlagSet::Flag* FlagSet::Find(const std::string& name) {
  for (Flag& f : flags_) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

absl::Status FlagSet::Assign(Flag& f, const std::string& value) {
  switch (f.kind) {
    case Kind::kString:
      *static_cast<std::string*>(f.out) = value;
      break;
    case Kind::kBool: {
      bool b = false;
      if (!absl::SimpleAtob(value, &b)) {
        return absl::InvalidArgumentError(
            absl::StrCat(command_, ": --", f.name, " takes true or false, not \"", value, "\""));
      }
      *static_cast<bool*>(f.out) = b;
      break;
    }
    case Kind::kDouble: {
      double d = 0;
      if (!absl::SimpleAtod(value, &d)) {
        return absl::InvalidArgumentError(
            absl::StrCat(command_, ": --", f.name, " takes a number, not \"", value, "\""));
      }
      *static_cast<std::optional<double>*>(f.out) = d;
      break;
    }
    case Kind::kInt: {
      int64_t i = 0;
      if (!absl::SimpleAtoi(value, &i)) {
        return absl::InvalidArgumentError(
            absl::StrCat(command_, ": --", f.name, " takes an integer, not \"", value, "\""));
      }
      *static_cast<int64_t*>(f.out) = i;
      break;
    }
  }
  set_.insert(f.name);
  return absl::OkStatus();
}

absl::Status FlagSet::Parse(const std::vector<std::string>& args, std::vector<std::string>* positional) {
  bool flags_done = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (flags_done || a.empty() || a[0] != '-' || a == "-") {
      if (positional == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat(command_, ": unexpected argument \"", a,
                                                       "\"; flags look like --name=value"));
      }
      positional->push_back(a);
      continue;
    }
    if (a == "--") {
      flags_done = true;
      continue;
    }
    if (!absl::StartsWith(a, "--")) {
      return absl::InvalidArgumentError(
          absl::StrCat(command_, ": unknown flag ", a, " (flags take two dashes: --name=value)"));
    }
    std::string name = a.substr(2);
    std::optional<std::string> value;
    const size_t eq = name.find('=');
    if (eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    Flag* f = Find(name);
    if (f == nullptr && !value && absl::StartsWith(name, "no-")) {
      Flag* neg = Find(name.substr(3));
      if (neg != nullptr && neg->kind == Kind::kBool) {
        *static_cast<bool*>(neg->out) = false;
        set_.insert(neg->name);
        continue;
      }
    }
    if (f == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(command_, ": unknown flag --", name,
                                                     "; see 'kernelctl help ", command_.substr(0, command_.find(' ')),
                                                     "'"));
    }
    if (!value) {
      if (f->kind == Kind::kBool) {
        value = "true";
      } else if (i + 1 < args.size()) {
        value = args[++i];
      } else {
        return absl::InvalidArgumentError(absl::StrCat(command_, ": flag --", name, " needs a value"));
      }
    }
    if (absl::Status st = Assign(*f, *value); !st.ok()) return st;
  }
  for (const Flag& f : flags_) {
    if (f.required && !IsSet(f.name)) {
      return absl::InvalidArgumentError(absl::StrCat(command_, ": missing required flag --", f.name));
    }
  }
  return absl::OkStatus();
}

std::string FlagSet::Usage() const {
  std::vector<std::pair<std::string, std::string>> rows;
  size_t width = 0;
  for (const Flag& f : flags_) {
    std::string left = absl::StrCat("  --", f.name, f.value_name.empty() ? "" : "=", f.value_name);
    width = std::max(width, left.size());
    rows.push_back({left, absl::StrCat(f.help, f.required ? " (required)" : "")});
  }
  std::string out;
  for (const auto& [left, help] : rows) {
    absl::StrAppendFormat(&out, "%-*s  %s\n", static_cast<int>(width), left, help);
  }
  return out;
}

}  // namespace kernelctl
}  // namespace kernelserve
