// Tests for client/text_table.cc: display widths and the aligned rendering that every mpsctl
// table goes through (the other renderings are pinned in tables_test.cc).
#include "client/text_table.h"

#include <clocale>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_split.h"

namespace mpsd::client {
namespace {

// The terminal column where the text after `marker` starts, on each line of `text` that holds it.
std::vector<size_t> ColumnsOf(const std::string& text, const std::string& marker) {
  std::vector<size_t> columns;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    const size_t at = line.find(marker);
    if (at != absl::string_view::npos) columns.push_back(DisplayWidth(line.substr(0, at)));
  }
  return columns;
}

TEST(TextTableTest, DisplayWidthCountsTerminalColumns) {
  EXPECT_EQ(DisplayWidth(""), 0u);
  EXPECT_EQ(DisplayWidth("convnet"), 7u);
  EXPECT_EQ(DisplayWidth("a\tb"), 3u);  // ASCII is one column a byte, as before
  EXPECT_EQ(DisplayWidth("3×224×224"), 9u);
  EXPECT_EQ(DisplayWidth("数据集"), 6u);               // CJK: 2 each
  EXPECT_EQ(DisplayWidth("モデル-v2"), 9u);            // katakana 2 each, ASCII 1
  EXPECT_EQ(DisplayWidth("\xF0\x9F\x9A\x80"), 2u);     // U+1F680 rocket
  EXPECT_EQ(DisplayWidth("run\xF0\x9F\x94\xA5"), 5u);  // "run" + U+1F525 fire
  EXPECT_EQ(DisplayWidth("e\xCC\x81"), 1u);            // e + U+0301 combining acute
  EXPECT_EQ(DisplayWidth("a\xE2\x80\x8D"
                         "b"),
            2u);                                            // U+200D zero-width joiner
  EXPECT_EQ(DisplayWidth("\xE2\x9C\x88\xEF\xB8\x8F"), 1u);  // U+2708 + U+FE0F selector: 0
  EXPECT_EQ(DisplayWidth("ab\xFF"
                         "c"),
            4u);                              // not UTF-8: a column a byte
  EXPECT_EQ(DisplayWidth("ab\xE6\x95"), 4u);  // cut short: a column a byte
}

TEST(TextTableTest, DisplayWidthLeavesTheProcessLocaleAlone) {
  const std::string before = std::setlocale(LC_CTYPE, nullptr);
  EXPECT_EQ(DisplayWidth("数据"), 4u);
  EXPECT_EQ(std::setlocale(LC_CTYPE, nullptr), before);
}

TEST(TextTableTest, PadToColumnsNotBytes) {
  EXPECT_EQ(PadRight("ab", 4), "ab  ");
  EXPECT_EQ(PadLeft("ab", 4), "  ab");
  EXPECT_EQ(PadRight("数据", 6), "数据  ");
  EXPECT_EQ(PadLeft("数据", 6), "  数据");
  EXPECT_EQ(PadRight("toolong", 3), "toolong");
  EXPECT_EQ(PadLeft("toolong", 3), "toolong");
}

TEST(TextTableTest, AlignedAsciiIsPaddedByTwoSpacesAndTheLastColumnIsNot) {
  TextTable table;
  table.header = {"ID", "NAME", "STATE"};
  table.rows = {{"7", "mnist", "RUNNING"}, {"12", "x", "-"}};
  EXPECT_EQ(RenderAligned(table),
            "ID  NAME   STATE\n"
            "7   mnist  RUNNING\n"
            "12  x      -\n");
  AlignOptions right;
  right.right_aligned = {true, false, true};
  EXPECT_EQ(RenderAligned(table, right),
            "ID  NAME     STATE\n"
            " 7  mnist  RUNNING\n"
            "12  x            -\n");
}

TEST(TextTableTest, TrimLineEndsDropsTheGapOfAnEmptyLastCell) {
  TextTable table;
  table.header = {"A", "B"};
  table.rows = {{"x", ""}, {"long", "y"}};
  EXPECT_EQ(RenderAligned(table), "A     B\nx     \nlong  y\n");
  AlignOptions trim;
  trim.trim_line_ends = true;
  EXPECT_EQ(RenderAligned(table, trim), "A     B\nx\nlong  y\n");
}

// The tester's `mpsctl list`: names with CJK characters and emoji pushed the later columns out
// of line, as each counted its UTF-8 bytes.
TEST(TextTableTest, CjkAndEmojiCellsLineUp) {
  TextTable table;
  table.header = {"ID", "NAME", "STATE", "SIZE"};
  table.rows = {{"1", "ascii-name", "RUNNING", "1"},
                {"2", "数据集训练", "QUEUED", "22"},
                {"3", "rocket\xF0\x9F\x9A\x80", "SUCCEEDED", "333"},
                {"4", "cafe\xCC\x81", "FAILED", "4444"}};
  AlignOptions align;
  align.right_aligned = {false, false, false, true};
  const std::string text = RenderAligned(table, align);
  for (const char* state : {"STATE", "RUNNING", "QUEUED", "SUCCEEDED", "FAILED"}) {
    EXPECT_THAT(ColumnsOf(text, state), ::testing::ElementsAre(16)) << state << "\n" << text;
  }
  // Right-aligned: every line ends at the same column.
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    EXPECT_EQ(DisplayWidth(line), 16u + 9 + 2 + 4) << line;
  }
  EXPECT_EQ(text,
            "ID  NAME        STATE      SIZE\n"
            "1   ascii-name  RUNNING       1\n"
            "2   数据集训练  QUEUED       22\n"
            "3   rocket\xF0\x9F\x9A\x80    SUCCEEDED   333\n"
            "4   cafe\xCC\x81        FAILED     4444\n");
}

}  // namespace
}  // namespace mpsd::client
