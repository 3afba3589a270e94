// report.html in a real browser: headless Chromium renders it; the DOM it builds has the
// headings, table rows and charts, and the screenshot is a real picture (many colours, mostly
// not background), not a blank page. Skipped when no Chromium is installed (scripts/bootstrap.sh
// installs Debian's `chromium`); MIXP_CHROMIUM names another binary.
//
// The rendered sample is kept in <build>/study_report_sample/ (report.html, report.png) for
// people to look at.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <set>

#include "common/temp_dir.h"
#include "mixp/study/report.h"
#include "png_reader.h"
#include "study_fixtures.h"
#include "common/test_paths.h"

namespace mixp::study {
namespace {

namespace fs = std::filesystem;

std::string find_chromium() {
  if (const char* env = std::getenv("MIXP_CHROMIUM"); env && *env) return env;
  const char* path = std::getenv("PATH");
  std::string p = path ? path : "/usr/bin:/bin";
  for (const char* name : {"chromium", "chromium-browser", "google-chrome", "chrome"}) {
    size_t start = 0;
    while (start <= p.size()) {
      size_t end = p.find(':', start);
      if (end == std::string::npos) end = p.size();
      fs::path cand = fs::path(p.substr(start, end - start)) / name;
      if (!cand.empty() && ::access(cand.c_str(), X_OK) == 0) return cand.string();
      start = end + 1;
    }
  }
  return "";
}

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// Runs Chromium headless on `page` with `args`; stdout to `out_file`. Returns the exit status.
int run_chromium(const std::string& chromium, const fs::path& page, const std::string& args,
                 const fs::path& out_file) {
  mixp::test::TempDir profile;  // a fresh profile every run
  std::string cmd = "timeout 180 " + shell_quote(chromium) +
                    " --headless --no-sandbox --disable-gpu --disable-quic --no-first-run"
                    " --disable-background-networking --disable-component-update --disable-sync"
                    " --hide-scrollbars --user-data-dir=" +
                    shell_quote(profile.path().string()) + " " + args + " " +
                    shell_quote("file://" + fs::absolute(page).string()) + " > " +
                    shell_quote(out_file.string()) + " 2> " +
                    shell_quote(out_file.string() + ".stderr");
  int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

size_t count(const std::string& s, const std::string& part) {
  size_t n = 0;
  for (size_t p = s.find(part); p != std::string::npos; p = s.find(part, p + part.size())) ++n;
  return n;
}

// Each test renders into its own folder (ctest may run them in parallel): the DOM test into a
// temporary one, the screenshot test into <build>/study_report_sample, which is kept.
class ReportInChromium : public ::testing::Test {
 protected:
  void SetUp() override {
    chromium_ = find_chromium();
    if (chromium_.empty()) GTEST_SKIP() << "chromium not installed (apt-get install chromium)";
  }
  void render_into(const fs::path& dir) {
    dir_ = dir;
    std::error_code ec;
    fs::remove_all(dir_, ec);
    write_study_report(dir_, test::crafted_study());
  }
  std::string chromium_;
  fs::path dir_;
};

TEST_F(ReportInChromium, DomHasHeadingsTablesAndCharts) {
  mixp::test::TempDir tmp;
  render_into(tmp.path() / "report");
  const fs::path dom_file = dir_ / "dom.html";
  ASSERT_EQ(run_chromium(chromium_, dir_ / "report.html", "--dump-dom", dom_file), 0)
      << mixp::test::read_text(dom_file.string() + ".stderr");
  const std::string dom = mixp::test::read_text(dom_file);
  ASSERT_FALSE(dom.empty());
  EXPECT_NE(dom.find("<h1>mlp on Test CPU 9000</h1>"), std::string::npos);
  for (const char* h : {"Verdict against the criteria", "Training loss",
                        "Cost and accuracy relative to fp32", "Loss scale", "All results"}) {
    EXPECT_NE(dom.find(h), std::string::npos) << h;
  }
  for (const char* p : {"fp32", "bf16", "fp16", "fp8"}) {
    EXPECT_EQ(count(dom, std::string("</span>") + p + "</th>"), 2u) << p;  // one row per table
  }
  EXPECT_EQ(count(dom, "<table"), 2u);
  EXPECT_GE(count(dom, "<th scope=\"col\""), 18u);
  // Loss (whole run and its second half, zoomed), 4 relative bars, loss scale.
  EXPECT_EQ(count(dom, "<svg"), 7u);
  EXPECT_NE(dom.find("id=\"loss-curves-zoom\""), std::string::npos);
  EXPECT_GE(count(dom, "<path class=\"series\""), 10u);  // 2 x 4 loss curves + 2 scale traces
  EXPECT_GE(count(dom, "<rect"), 15u);                   // the bars
  EXPECT_NE(dom.find("diverged at step 120"), std::string::npos);
  EXPECT_NE(dom.find("class=\"rec-precision\">bf16<"), std::string::npos);
}

TEST_F(ReportInChromium, ScreenshotIsARealPicture) {
  render_into(fs::path(MIXP_BINARY_DIR) / "study_report_sample");
  const fs::path png_file = dir_ / "report.png";
  const std::string args =
      "--screenshot=" + shell_quote(png_file.string()) + " --window-size=1280,2400";
  ASSERT_EQ(run_chromium(chromium_, dir_ / "report.html", args, dir_ / "screenshot.log"), 0)
      << mixp::test::read_text((dir_ / "screenshot.log").string() + ".stderr");
  ASSERT_TRUE(fs::exists(png_file));
  EXPECT_GT(fs::file_size(png_file), 50'000u);  // a blank 1280x2400 PNG is a few KB

  test::Png png = test::read_png(png_file.string());
  EXPECT_EQ(png.width, 1280u);
  EXPECT_EQ(png.height, 2400u);
  // Count colours (quantized to 4 bits per channel) and pixels that are not the page background.
  std::set<uint32_t> colours;
  const uint8_t* bg = png.at(png.width - 1, png.height - 1);
  size_t not_bg = 0, total = 0, dark = 0;
  for (uint32_t y = 0; y < png.height; y += 2) {
    for (uint32_t x = 0; x < png.width; x += 2) {
      const uint8_t* px = png.at(x, y);
      const int ch = png.channels >= 3 ? 3 : 1;
      uint32_t key = 0;
      bool same = true;
      int sum = 0;
      for (int c = 0; c < ch; ++c) {
        key = key * 16 + (px[c] >> 4);
        same &= px[c] == bg[c];
        sum += px[c];
      }
      colours.insert(key);
      not_bg += !same;
      dark += sum / ch < 90;
      ++total;
    }
  }
  EXPECT_GT(colours.size(), 100u) << "the screenshot has almost no colours: blank page?";
  EXPECT_GT(double(not_bg) / total, 0.3) << "mostly background";
  EXPECT_GT(dark, 2000u) << "no dark text or header";
  // The header band at the top is dark; the cards below are white.
  const uint8_t* header = png.at(20, 20);
  EXPECT_LT(int(header[0]) + header[1] + header[2], 200);
  const uint8_t* card = png.at(640, 250);
  EXPECT_GT(int(card[0]) + card[1] + card[2], 700);
}

}  // namespace
}  // namespace mixp::study
