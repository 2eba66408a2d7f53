#include "client/kernelctl_flags.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kernelserve {
namespace kernelctl {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

struct Flags {
  std::string path;
  bool causal = false;
  std::optional<double> scale;
  int64_t n = 7;
};

FlagSet Define(Flags* f) {
  FlagSet s("attention");
  s.String("q", &f->path, "FILE", "query", /*required=*/true);
  s.Bool("causal", &f->causal, "mask");
  s.Double("scale", &f->scale, "scale");
  s.Int("splits", &f->n, "splits");
  return s;
}

TEST(FlagSetTest, ParsesEveryForm) {
  Flags f;
  FlagSet s = Define(&f);
  std::vector<std::string> pos;
  ASSERT_TRUE(s.Parse({"--q", "a.npy", "list", "--causal", "--scale=0.5", "--splits=3"}, &pos).ok());
  EXPECT_EQ(f.path, "a.npy");
  EXPECT_TRUE(f.causal);
  EXPECT_EQ(f.scale, 0.5);
  EXPECT_EQ(f.n, 3);
  EXPECT_THAT(pos, ElementsAre("list"));
  EXPECT_TRUE(s.IsSet("scale"));

  Flags g;
  g.causal = true;
  FlagSet t = Define(&g);
  ASSERT_TRUE(t.Parse({"--q=b.npy", "--no-causal"}).ok());
  EXPECT_FALSE(g.causal);
  EXPECT_FALSE(g.scale.has_value());
  EXPECT_EQ(g.n, 7);
  FlagSet u = Define(&g);
  ASSERT_TRUE(u.Parse({"--q=b.npy", "--causal=true", "--", "--not-a-flag"}, &pos).ok());
  EXPECT_TRUE(g.causal);
  EXPECT_EQ(pos.back(), "--not-a-flag");
}

TEST(FlagSetTest, ErrorsNameTheFlag) {
  struct Case {
    std::vector<std::string> args;
    std::string expect;
  };
  const Case cases[] = {
      {{"--q=a", "--bogus=1"}, "unknown flag --bogus"},
      {{"--q=a", "-x"}, "unknown flag -x"},
      {{"--causal"}, "missing required flag --q"},
      {{"--q"}, "flag --q needs a value"},
      {{"--q=a", "--scale=fast"}, "--scale takes a number"},
      {{"--q=a", "--splits=1.5"}, "--splits takes an integer"},
      {{"--q=a", "--causal=maybe"}, "--causal takes true or false"},
      {{"--q=a", "stray"}, "unexpected argument \"stray\""},
  };
  for (const Case& c : cases) {
    Flags f;
    FlagSet s = Define(&f);
    absl::Status st = s.Parse(c.args);
    ASSERT_FALSE(st.ok()) << c.expect;
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(st.message()), HasSubstr(c.expect));
    EXPECT_THAT(std::string(st.message()), HasSubstr("attention"));
  }
}

TEST(FlagSetTest, UsageListsFlags) {
  Flags f;
  FlagSet s = Define(&f);
  const std::string u = s.Usage();
  EXPECT_THAT(u, HasSubstr("--q=FILE"));
  EXPECT_THAT(u, HasSubstr("(required)"));
  EXPECT_THAT(u, HasSubstr("--causal "));
  EXPECT_THAT(u, HasSubstr("--scale=F"));
}

}  // namespace
}  // namespace kernelctl
}  // namespace kernelserve
