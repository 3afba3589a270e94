// inspect.html in a real browser: headless Chromium loads the page `mixp inspect report` writes
// and the DOM it builds has the heatmaps (one cell per module, role, format and step) and the
// range tables; and the study report of `mixp compare --inspect` has, per precision, the heatmaps
// in the run's own format and the profiler's top ops. Skipped when no Chromium is installed (scripts/bootstrap.sh installs Debian's
// `chromium`); MIXP_CHROMIUM names another binary. As tests/study/test_report_chromium.cpp.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/cli_runner.h"

namespace mixp::test {
namespace {

namespace fs = std::filesystem;

std::string find_chromium() {
  if (const char* env = std::getenv("MIXP_CHROMIUM"); env && *env) return env;
  for (const char* p : {"/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome"})
    if (::access(p, X_OK) == 0) return p;
  return "";
}

size_t count(const std::string& s, const std::string& part) {
  size_t n = 0;
  for (size_t p = s.find(part); p != std::string::npos; p = s.find(part, p + part.size())) ++n;
  return n;
}

// The DOM headless Chromium builds from `page`.
std::string dom_of(const std::string& chromium, const fs::path& page, const fs::path& dom) {
  const TempDir profile;
  const std::string cmd =
      "timeout 180 '" + chromium +
      "' --headless --no-sandbox --disable-gpu --disable-quic --no-first-run "
      "--disable-background-networking --disable-component-update --disable-sync "
      "--user-data-dir='" + profile.path().string() + "' --dump-dom 'file://" +
      fs::absolute(page).string() + "' > '" + dom.string() + "' 2>/dev/null";
  const int rc = std::system(cmd.c_str());
  EXPECT_TRUE(WIFEXITED(rc) && WEXITSTATUS(rc) == 0) << cmd;
  return read_text(dom);
}

TEST(InspectReportInChromium, CompareReportHasHeatmapsAndTopOpsPerPrecision) {
  const std::string chromium = find_chromium();
  if (chromium.empty()) GTEST_SKIP() << "chromium not installed (apt-get install chromium)";
  const TempDir dir;
  const CliResult run = run_cli(
      "compare --model mlp --data synthetic --train-limit 256 --test-limit 128 --batch 64 "
      "--threads 1 --steps 4 --precisions fp32,bf16,fp8 --inspect "
      "'every=2,roles=activation+activation-grad' --out '" + (dir / "s").string() + "'");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  std::ifstream in(dir / "s" / "results.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  size_t cells = 0;
  for (const auto& r : j.at("runs")) cells += r.at("inspect").at("cells").size();
  EXPECT_GT(cells, 0u);
  const std::string d = dom_of(chromium, dir / "s" / "report.html", dir / "dom.html");
  EXPECT_EQ(count(d, "<td class=\"heat-cell num\""), cells) << d.substr(0, 2000);
  EXPECT_EQ(count(d, "<h3 class=\"inside-run\">"), 3u);
  EXPECT_EQ(count(d, "<table class=\"top-ops\">"), 3u);
  // Each run in its own format: bf16; FP8 E4M3 forward and E5M2 gradients; fp32 has none.
  EXPECT_NE(d.find("bf16 \u00b7 activation-grad"), std::string::npos);
  EXPECT_NE(d.find("fp8_e4m3 \u00b7 activation"), std::string::npos);
  EXPECT_NE(d.find("fp8_e5m2 \u00b7 activation-grad"), std::string::npos);
  EXPECT_NE(d.find("No narrower format than fp32"), std::string::npos);
  EXPECT_NE(d.find("convert"), std::string::npos) << "the casts are among the top ops";
  // A bad spec fails before any run, as a usage error.
  EXPECT_EQ(run_cli("compare --steps 2 --inspect every=0 --out '" + (dir / "t").string() + "'")
                .exit_code,
            2);
}

TEST(InspectReportInChromium, DomHasTheHeatmaps) {
  const std::string chromium = find_chromium();
  if (chromium.empty()) GTEST_SKIP() << "chromium not installed (apt-get install chromium)";
  const TempDir dir;
  const std::string jsonl = (dir / "s.jsonl").string();
  const CliResult run = run_cli(
      "train --model mlp --width 32 --data synthetic --train-limit 256 --batch 64 --no-eval "
      "--threads 1 --steps 2 --inspect 'formats=fp16+bf16+mxfp8,roles=activation+weight-grad,"
      "out=" + jsonl + "'");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const fs::path page = dir / "inspect.html";
  ASSERT_EQ(run_cli("inspect report '" + jsonl + "' -o '" + page.string() + "'").exit_code, 0);

  const std::string d = dom_of(chromium, page, dir / "dom.html");
  // mlp (ReLU fused into the linears): flatten, fc1, fc2, head = 4 activations; fc1, fc2, head x
  // weight and bias = 6 weight gradients: 10 rows x 2 steps x 3 formats.
  EXPECT_EQ(count(d, "<td class=\"cell\""), 10u * 2 * 3) << d.substr(0, 2000);
  EXPECT_EQ(count(d, "<table class=\"heat\""), 6u);
  EXPECT_EQ(count(d, "<table class=\"ranges\""), 2u);
  EXPECT_NE(d.find("Tensor statistics"), std::string::npos);
}

}  // namespace
}  // namespace mixp::test
