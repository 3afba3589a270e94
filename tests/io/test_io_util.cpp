// The internal helpers behind io/ error messages: UTF-8 validation and one-line quoting.
#include <gtest/gtest.h>

#include <string>

#include "io/io_util.h"

namespace mixp::io_detail {
namespace {

TEST(IoUtil, Utf8Validation) {
  EXPECT_TRUE(is_valid_utf8(""));
  EXPECT_TRUE(is_valid_utf8("plain ascii"));
  EXPECT_TRUE(is_valid_utf8("\xc3\xbc \xe2\x9c\x93 \xf0\x9f\x98\x80"));  // 2, 3 and 4 bytes
  EXPECT_TRUE(is_valid_utf8("\xf4\x8f\xbf\xbf"));                        // U+10FFFF
  EXPECT_FALSE(is_valid_utf8("\xff"));
  EXPECT_FALSE(is_valid_utf8("\x80"));              // lone continuation byte
  EXPECT_FALSE(is_valid_utf8("\xc0\xaf"));          // overlong '/'
  EXPECT_FALSE(is_valid_utf8("\xe0\x80\xaf"));      // overlong, 3 bytes
  EXPECT_FALSE(is_valid_utf8("\xed\xa0\x80"));      // surrogate U+D800
  EXPECT_FALSE(is_valid_utf8("\xf4\x90\x80\x80"));  // above U+10FFFF
  EXPECT_FALSE(is_valid_utf8("\xe2\x9c"));          // truncated
  EXPECT_FALSE(is_valid_utf8(std::string("\xc3", 1)));
}

TEST(IoUtil, QuoteKeepsMessagesOnOneCleanLine) {
  EXPECT_EQ(quote("w"), "'w'");
  EXPECT_EQ(quote("a'b\\c"), "'a\\'b\\\\c'");
  EXPECT_EQ(quote("line\nbreak\x7f"), "'line\\x0abreak\\x7f'");
  EXPECT_EQ(quote("\xc3\xbc"), "'\xc3\xbc'");  // valid UTF-8 is kept
  EXPECT_EQ(quote("bad\xff"), "'bad\\xff'");   // invalid UTF-8 is escaped
  EXPECT_EQ(quote("abcdef", 3), "'abc...'");
  EXPECT_EQ(quote("ab\xc3\xbc"
                  "cd",
                  3),
            "'ab\xc3\xbc...'");  // never cuts inside a character
}

}  // namespace
}  // namespace mixp::io_detail
