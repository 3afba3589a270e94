// The one key=value parser (src/util/key_value.h) behind policy strings, FP8 recipe options and
// --layer-precision: splitting, the spec's base, and errors that name the key and what it takes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <limits>

#include "common/error_of.h"
#include "util/key_value.h"

namespace mixp::detail {
namespace {

using ::testing::HasSubstr;

constexpr auto error_of = [](auto&& f) { return ::mixp::test::error_of<KeyValueError>(f); };

const std::vector<std::string> kKeys = {"params", "compute"};
const KeyValueSyntax kPolicy{.list = "policy string",
                             .entry = "key=value",
                             .example = "'bf16:params=fp32'",
                             .noun = "policy key",
                             .keys = kKeys,
                             .lower_keys = true};
const KeyValueSyntax kLayers{
    .list = "--layer-precision", .entry = "layer=dtype", .example = "embed=fp32,head=fp32"};

TEST(KeyValue, SplitsTrimsAndKeepsOrder) {
  const auto kv = split_key_values(" head = fp32,embed=bf16 ,", kLayers);
  ASSERT_EQ(kv.size(), 2u);
  EXPECT_EQ(kv[0].key, "head");
  EXPECT_EQ(kv[0].value, "fp32");
  EXPECT_EQ(kv[1].key, "embed");
  EXPECT_EQ(kv[1].value, "bf16");
  EXPECT_TRUE(split_key_values("  ", kLayers).empty());
  // Free keys keep their case and may repeat (the last rule wins, layer_precision.h).
  EXPECT_EQ(split_key_values("Fc1=fp32,fc1=bf16", kLayers).size(), 2u);
  EXPECT_EQ(split_key_values("Params=fp32", kPolicy)[0].key, "params");
}

TEST(KeyValue, MalformedListsSayWhereAndShowAnExample) {
  EXPECT_EQ(error_of([] { split_key_values("a=1,,b=2", kLayers); }),
            "--layer-precision 'a=1,,b=2' has an empty entry between commas");
  EXPECT_EQ(error_of([] { split_key_values("mlp", kLayers); }),
            "--layer-precision entry 'mlp' is not layer=dtype (e.g. embed=fp32,head=fp32)");
  EXPECT_THAT(error_of([] { split_key_values("=fp32", kLayers); }),
              HasSubstr("is not layer=dtype"));
  EXPECT_EQ(error_of([] { split_key_values("params", kPolicy); }),
            "policy string entry 'params' is not key=value (e.g. 'bf16:params=fp32'); keys: "
            "params, compute");
}

TEST(KeyValue, KnownKeysOnlyAndOnce) {
  EXPECT_EQ(error_of([] { split_key_values("speed=max", kPolicy); }),
            "unknown policy key 'speed'; keys: params, compute");
  EXPECT_EQ(error_of([] { split_key_values("params=fp32,PARAMS=bf16", kPolicy); }),
            "policy key 'params' is given twice (params=fp32 and PARAMS=bf16)");
  // A list that takes any key refuses a key given twice too (issue 28: --layer-precision
  // fc1=bf16,fc1=fp16 used to keep one of them silently).
  EXPECT_EQ(error_of([] { split_key_values("fc1=bf16, head=fp32, fc1=fp16", kLayers); }),
            "--layer-precision key 'fc1' is given twice (fc1=bf16 and fc1=fp16)");
}

TEST(KeyValue, SpecBase) {
  auto parts = split_spec(" bf16 : compute=fp16 ");
  EXPECT_EQ(parts.base, "bf16");
  EXPECT_EQ(parts.options, "compute=fp16");
  EXPECT_TRUE(parts.has_colon);
  parts = split_spec("compute=fp16");  // keys alone
  EXPECT_EQ(parts.base, "");
  EXPECT_EQ(parts.options, "compute=fp16");
  EXPECT_FALSE(parts.has_colon);
  parts = split_spec("fp8");
  EXPECT_EQ(parts.base, "fp8");
  EXPECT_EQ(parts.options, "");
  parts = split_spec("loss_scale=2:x");  // '=' before ':': no base
  EXPECT_EQ(parts.base, "");
}

TEST(KeyValue, ValuesNameTheKeyAndWhatItTakes) {
  EXPECT_TRUE(parse_on_off("policy key", "master", "YES"));
  EXPECT_FALSE(parse_on_off("policy key", "master", "off"));
  EXPECT_EQ(error_of([] { parse_on_off("policy key", "master", "maybe"); }),
            "policy key 'master' takes on or off, got 'maybe'");
  EXPECT_EQ(
      parse_choice("fp8 option", "amax_algo", "most-recent", {"max", "most_recent|most-recent"}),
      1u);
  EXPECT_EQ(error_of([] {
              parse_choice("policy key", "norm", "x", {"fp32|f32", "params", "auto"});
            }),
            "policy key 'norm' takes fp32, params or auto, got 'x'");
  EXPECT_EQ(error_of([] {
              parse_choice("fp8 option", "format", "e5m2", {"hybrid", "e4m3"}, " (why)");
            }),
            "fp8 option 'format' takes hybrid or e4m3, got 'e5m2' (why)");
  EXPECT_EQ(parse_integer("fp8 option", "margin", "3", 0, 64), 3);
  EXPECT_EQ(error_of([] { parse_integer("fp8 option", "margin", "65", 0, 64); }),
            "fp8 option 'margin' takes an integer in [0, 64], got '65'");
  EXPECT_EQ(error_of([] { parse_integer("fp8 option", "margin", "1.5", 0, 64); }),
            "fp8 option 'margin' takes an integer in [0, 64], got '1.5'");
  EXPECT_EQ(error_of([] {
              parse_integer("policy key", "collapse_after", "-1", 0,
                            std::numeric_limits<int64_t>::max());
            }),
            "policy key 'collapse_after' takes an integer >= 0, got '-1'");
  EXPECT_EQ(parse_positive("policy key", "loss_scale", "1024"), 1024.0);
  EXPECT_EQ(error_of([] { parse_positive("policy key", "loss_scale", "1e40"); }),
            "policy key 'loss_scale' takes a positive number that is finite in fp32, got '1e40'");
  EXPECT_THAT(error_of([] { parse_positive("policy key", "loss_scale", "0"); }),
              HasSubstr("positive number"));
}

}  // namespace
}  // namespace mixp::detail
