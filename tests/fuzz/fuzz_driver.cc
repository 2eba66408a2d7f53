// Plain driver for request_fuzzer.cc where libFuzzer is not available (the
// project's Bazel toolchain is gcc): replays the built-in seed corpus and any
// files given, then runs a bounded number of random mutations (byte-level and
// protobuf-aware) for a bounded time. Under clang, build_libfuzzer.sh links
// the same target with -fsanitize=fuzzer instead (README.md).
//
//   fuzz_requests_test [FILE...]            replay FILEs (e.g. a libFuzzer crash) and the seeds
//   KS_FUZZ_ITERATIONS=N KS_FUZZ_SECONDS=S KS_FUZZ_SEED=X   bounds and seed (defaults 3000, 20, random)
//   fuzz_requests_test --write_corpus=DIR   write the seeds as files for libFuzzer
#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "tests/fuzz/request_fuzzer.h"

namespace {

uint64_t EnvOr(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::strtoull(v, nullptr, 10) : fallback;
}

void Run(const std::string& input) {
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()), input.size());
}

std::string Mutate(const std::vector<std::string>& pool, std::mt19937_64& rng) {
  std::string s = pool[rng() % pool.size()];
  if (rng() % 2 == 0) return kernelserve::fuzz::MutateStructured(s, rng());
  static const uint8_t kInteresting[] = {0, 1, 0x7f, 0x80, 0xff, 0x08, 0x10, 0x12, 0x1a, 0x22};
  for (int n = 1 + static_cast<int>(rng() % 6); n > 0; --n) {
    const size_t size = s.size();
    switch (rng() % 8) {
      case 0:  // flip a bit (not the method byte, mostly)
        if (size > 2) s[2 + rng() % (size - 2)] ^= static_cast<char>(1u << (rng() % 8));
        break;
      case 1:
        if (size > 2) s[2 + rng() % (size - 2)] = static_cast<char>(kInteresting[rng() % 10]);
        break;
      case 2:
        if (size > 0) s[rng() % size] = static_cast<char>(rng());
        break;
      case 3: {  // insert random bytes
        const size_t at = size > 0 ? rng() % size : 0;
        s.insert(at, std::string(1 + rng() % 16, static_cast<char>(rng())));
        break;
      }
      case 4:  // erase a range
        if (size > 3) {
          const size_t at = 2 + rng() % (size - 2);
          s.erase(at, 1 + rng() % std::min<size_t>(64, size - at));
        }
        break;
      case 5:  // duplicate a range
        if (size > 3) {
          const size_t at = 2 + rng() % (size - 2);
          s.insert(at, s.substr(at, 1 + rng() % 32));
        }
        break;
      case 6: {  // splice with another input
        const std::string& o = pool[rng() % pool.size()];
        if (size > 2 && o.size() > 2) s = s.substr(0, 2 + rng() % (size - 2)) + o.substr(2 + rng() % (o.size() - 2));
        break;
      }
      case 7:  // truncate
        if (size > 2) s.resize(2 + rng() % (size - 2));
        break;
    }
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  LLVMFuzzerInitialize(&argc, &argv);
  const std::vector<std::string> seeds = kernelserve::fuzz::SeedInputs();
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--write_corpus=", 0) == 0) {
      const std::string dir = a.substr(15);
      mkdir(dir.c_str(), 0755);
      for (size_t k = 0; k < seeds.size(); ++k) {
        std::ofstream(dir + "/seed_" + std::to_string(k), std::ios::binary) << seeds[k];
      }
      std::printf("wrote %zu seeds to %s\n", seeds.size(), dir.c_str());
      return 0;
    }
    std::ifstream in(a, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "cannot read %s\n", a.c_str());
      return 2;
    }
    std::stringstream ss;
    ss << in.rdbuf();
    files.push_back(ss.str());
  }
  for (const std::string& f : files) Run(f);
  for (const std::string& s : seeds) Run(s);
  std::printf("replayed %zu files and %zu seeds: %s\n", files.size(), seeds.size(),
              kernelserve::fuzz::CodeSummary().c_str());

  const uint64_t iterations = EnvOr("KS_FUZZ_ITERATIONS", 3000);
  const uint64_t seconds = EnvOr("KS_FUZZ_SECONDS", 20);
  const uint64_t seed = EnvOr("KS_FUZZ_SEED", std::random_device{}());
  std::printf("mutating: up to %llu inputs or %llu s, KS_FUZZ_SEED=%llu\n",
              static_cast<unsigned long long>(iterations), static_cast<unsigned long long>(seconds),
              static_cast<unsigned long long>(seed));
  std::fflush(stdout);
  std::mt19937_64 rng(seed);
  std::vector<std::string> pool = seeds;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  uint64_t done = 0;
  for (; done < iterations && std::chrono::steady_clock::now() < deadline; ++done) {
    std::string input = Mutate(pool, rng);
    Run(input);
    // Keep some mutants as parents so changes compound (no coverage feedback here).
    if (rng() % 8 == 0) pool[seeds.size() / 2 + rng() % (seeds.size() - seeds.size() / 2)] = input;
    if (rng() % 64 == 0) pool = seeds;
  }
  std::printf("ran %llu mutated inputs: %s\n", static_cast<unsigned long long>(done),
              kernelserve::fuzz::CodeSummary().c_str());
  return 0;
}
