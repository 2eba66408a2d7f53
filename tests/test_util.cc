#include "tests/test_util.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <random>
#include <string>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "gtest/gtest.h"
#include "kernels/numerics/numerics.h"

namespace kernelserve {
namespace testutil {

std::string ScrapeMetrics(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string out;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    const std::string req = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
    (void)!write(fd, req.data(), req.size());
    char buf[4096];
    ssize_t n;
    while ((n = read(fd, buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return out;
}

uint64_t FreshSeed() {
  // KERNELSERVE_TEST_SEED replays a failure: the seed its SCOPED_TRACE printed.
  if (const char* replay = std::getenv("KERNELSERVE_TEST_SEED"); replay != nullptr && *replay != '\0') {
    return std::strtoull(replay, nullptr, 10);
  }
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

void ExpectBf16MatchesOracle(const HostTensor& out, const std::vector<double>& ref, Rounding mode,
                             double abs_slack, double min_exact) {
  ASSERT_EQ(out.dtype(), DType::kBf16);
  ASSERT_EQ(static_cast<size_t>(out.num_elements()), ref.size());
  double max_ref = 0;
  for (double r : ref) max_ref = std::max(max_ref, std::fabs(r));
  const uint16_t* o = out.data<uint16_t>();
  int64_t exact = 0, bad = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const uint16_t want_bits = numerics::DoubleToBf16(ref[i], mode);
    const double want = numerics::Bf16ToFloat(want_bits);
    const double got = numerics::Bf16ToFloat(o[i]);
    if (!std::isfinite(got)) {
      if (bad++ < 5) ADD_FAILURE() << "element " << i << " is " << got << ", oracle " << ref[i];
      continue;
    }
    if (o[i] == want_bits) {
      ++exact;
      continue;
    }
    int e = 0;
    std::frexp(std::fabs(ref[i]), &e);
    const double ulp = std::ldexp(1.0, std::max(e - 1, -126) - 7);
    if (std::fabs(got - want) > ulp + abs_slack * max_ref) {
      if (bad++ < 5) {
        ADD_FAILURE() << "element " << i << ": got " << got << ", oracle " << ref[i] << " (bf16 " << want << ")";
      }
    }
  }
  EXPECT_EQ(bad, 0) << "elements off by more than one bf16 ulp";
  EXPECT_GE(static_cast<double>(exact), min_exact * static_cast<double>(ref.size()))
      << exact << " of " << ref.size() << " elements match the oracle exactly";
}

void ExpectFp8AttentionMatchesOracle(const HostTensor& out, const std::vector<double>& ref, int64_t row_len) {
  ASSERT_EQ(out.dtype(), DType::kBf16);
  ASSERT_EQ(static_cast<size_t>(out.num_elements()), ref.size());
  const int64_t rows = static_cast<int64_t>(ref.size()) / row_len;
  const uint16_t* o = out.data<uint16_t>();
  int64_t flipped = 0;
  for (int64_t row = 0; row < rows; ++row) {
    double err2 = 0, ref2 = 0;
    bool matches = true;
    for (int64_t c = 0; c < row_len; ++c) {
      const double want = ref[row * row_len + c], got = numerics::Bf16ToFloat(o[row * row_len + c]);
      ASSERT_TRUE(std::isfinite(got)) << "row " << row << " column " << c;
      err2 += (got - want) * (got - want);
      ref2 += want * want;
      int e = 0;
      std::frexp(std::fabs(want), &e);
      if (std::fabs(got - want) > std::ldexp(1.0, std::max(e - 1, -126) - 7) + 2e-3) matches = false;
    }
    if (matches) continue;
    ++flipped;
    EXPECT_LT(std::sqrt(err2 / std::max(ref2, 1e-300)), 0.1) << "row " << row;
  }
  EXPECT_LE(flipped, rows / 20) << "rows off by more than one bf16 ulp";
}

double RelRms(const HostTensor& out, const std::vector<double>& ref) {
  double num = 0, den = 0;
  const uint16_t* o = out.data<uint16_t>();
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = numerics::Bf16ToFloat(o[i]) - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

}  // namespace testutil
}  // namespace kernelserve
