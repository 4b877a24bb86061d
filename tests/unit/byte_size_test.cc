// base/byte_size.h: the one size formatter (plan, setup and make-model messages) and the one size
// parser (--mem-limit, --expert-cache) agree on binary units, so a printed size reads back.
#include "base/byte_size.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>

namespace deltafin {
namespace {

TEST(ByteSize, FormatsBinaryUnits) {
  EXPECT_EQ(HumanBytes(0), "0 B");
  EXPECT_EQ(HumanBytes(1023), "1023 B");
  EXPECT_EQ(HumanBytes(1024), "1.00 KiB");
  EXPECT_EQ(HumanBytes(3ull << 29), "1.50 GiB");
  EXPECT_EQ(HumanBytes(120ull << 20), "120.00 MiB");
  EXPECT_EQ(HumanBytes(5ull << 40), "5.00 TiB");
  EXPECT_EQ(HumanBytes(5ull << 50), "5120.00 TiB");  // TiB is the largest unit
}

TEST(ByteSize, PrintedSizesReadBack) {
  for (const uint64_t bytes : {uint64_t{4096}, uint64_t{3} << 29, uint64_t{120} << 20,
                               uint64_t{17550000}, uint64_t{2} << 40}) {
    std::string text = HumanBytes(bytes);
    text.erase(text.find(' '), 1);  // "1.50 GiB" -> "1.50GiB"
    auto parsed = ParseByteSize(text);
    ASSERT_TRUE(parsed.ok()) << text << ": " << parsed.status().message();
    // Two decimals: within half a hundredth of the unit.
    EXPECT_LE(std::fabs(static_cast<double>(*parsed) - static_cast<double>(bytes)),
              0.005 * static_cast<double>(bytes))
        << text;
  }
}

TEST(ByteSize, ParseRejectsJunk) {
  EXPECT_EQ(*ParseByteSize("24G"), 24ull << 30);
  EXPECT_EQ(*ParseByteSize("1.5GiB"), 3ull << 29);
  for (const char* bad : {"", "G", "-1G", "0", "12X", "1e30T", "abc"}) {
    EXPECT_FALSE(ParseByteSize(bad).ok()) << bad;
  }
}

// serve --cache-bytes 0 means "no disk tier": zero passes only where the caller allows it.
TEST(ByteSize, ZeroOnlyWhereAllowed) {
  EXPECT_FALSE(ParseByteSize("0").ok());
  for (const char* zero : {"0", "0G", "0MiB", "0.0"}) {
    auto parsed = ParseByteSize(zero, /*allow_zero=*/true);
    ASSERT_TRUE(parsed.ok()) << zero << ": " << parsed.status().message();
    EXPECT_EQ(*parsed, 0u) << zero;
  }
  EXPECT_EQ(*ParseByteSize("2G", /*allow_zero=*/true), 2ull << 30);
  for (const char* bad : {"-1", "-0.5G", "x", "1e30T"}) {
    EXPECT_FALSE(ParseByteSize(bad, /*allow_zero=*/true).ok()) << bad;
  }
}

}  // namespace
}  // namespace deltafin
