// Status propagation macros for every package (kernels, server, client):
// Abseil 20220623 has none of its own.
#ifndef KERNELSERVE_COMMON_STATUS_MACROS_H_
#define KERNELSERVE_COMMON_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define KS_CONCAT_INNER_(a, b) a##b
#define KS_CONCAT_(a, b) KS_CONCAT_INNER_(a, b)

// Returns from the enclosing function if `expr` is not OK.
#define KS_RETURN_IF_ERROR(expr)                  \
  do {                                            \
    ::absl::Status ks_status_ = (expr);           \
    if (!ks_status_.ok()) return ks_status_;      \
  } while (0)

// `lhs = value of expr`, or returns its error.
#define KS_ASSIGN_OR_RETURN(lhs, expr) \
  KS_ASSIGN_OR_RETURN_IMPL_(KS_CONCAT_(ks_statusor_, __LINE__), lhs, expr)

#define KS_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(tmp).value()

#endif  // KERNELSERVE_COMMON_STATUS_MACROS_H_
