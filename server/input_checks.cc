#include "server/input_checks.h"

#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"

namespace kernelserve {

using google::protobuf::EnumDescriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

std::string QuoteClientText(absl::string_view text) {
  if (text.size() <= kMaxQuotedBytes) return absl::StrCat("\"", absl::CHexEscape(text), "\"");
  return absl::StrCat("\"", absl::CHexEscape(text.substr(0, kMaxQuotedBytes)), "...\" (", text.size(),
                      " bytes)");
}

absl::Status CheckLength(absl::string_view field, absl::string_view value, size_t max) {
  if (value.size() <= max) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(field, ": expected at most ", max, " bytes, got ", value.size()));
}

namespace {

absl::Status UnknownValue(const std::string& path, const EnumDescriptor& type, int value) {
  std::vector<std::string> names;
  for (int i = 0; i < type.value_count(); ++i) names.push_back(type.value(i)->name());
  return absl::InvalidArgumentError(
      absl::StrCat(path, ": expected one of ", absl::StrJoin(names, ", "), ", got ", value));
}

std::string Join(absl::string_view prefix, absl::string_view name) {
  return prefix.empty() ? std::string(name) : absl::StrCat(prefix, ".", name);
}

}  // namespace

absl::Status CheckEnumFields(const Message& message, absl::string_view prefix) {
  const Reflection* r = message.GetReflection();
  std::vector<const FieldDescriptor*> fields;
  r->ListFields(message, &fields);  // only the fields that are set
  for (const FieldDescriptor* f : fields) {
    const std::string path = Join(prefix, f->name());
    if (f->cpp_type() == FieldDescriptor::CPPTYPE_ENUM) {
      const EnumDescriptor& type = *f->enum_type();
      if (f->is_repeated()) {
        for (int i = 0; i < r->FieldSize(message, f); ++i) {
          const int v = r->GetRepeatedEnumValue(message, f, i);
          if (type.FindValueByNumber(v) == nullptr) return UnknownValue(absl::StrCat(path, "[", i, "]"), type, v);
        }
      } else {
        const int v = r->GetEnumValue(message, f);
        if (type.FindValueByNumber(v) == nullptr) return UnknownValue(path, type, v);
      }
    } else if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE && !f->is_map()) {
      if (f->is_repeated()) {
        for (int i = 0; i < r->FieldSize(message, f); ++i) {
          absl::Status s = CheckEnumFields(r->GetRepeatedMessage(message, f, i), absl::StrCat(path, "[", i, "]"));
          if (!s.ok()) return s;
        }
      } else {
        absl::Status s = CheckEnumFields(r->GetMessage(message, f), path);
        if (!s.ok()) return s;
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace kernelserve
