#include <gtest/gtest.h>

#include "mixp/study/report.h"
#include "study_fixtures.h"

TEST(StudySmoke, Renders) {
  auto s = mixp::study::test::crafted_study();
  EXPECT_FALSE(mixp::study::render_report_html(s).empty());
}
