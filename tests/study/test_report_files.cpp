// The four files of `compare --out DIR`: results.json and results.csv schemas, report.md and a
// self-contained report.html, diverged runs reported rather than dropped, estimates labelled.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <regex>

#include "common/temp_dir.h"
#include "mixp/io/atomic_file.h"
#include "mixp/study/report.h"
#include "mixp/study/verdict.h"
#include "study/report_detail.h"
#include "study/text_format.h"
#include "study_fixtures.h"
#include "common/test_paths.h"

namespace mixp::study {
namespace {

using mixp::test::read_text;
using mixp::test::TempDir;
using nlohmann::json;

size_t count(const std::string& s, const std::string& part) {
  size_t n = 0;
  for (size_t p = s.find(part); p != std::string::npos; p = s.find(part, p + part.size())) ++n;
  return n;
}

// RFC 4180 rows (quoted cells may hold commas, quotes and newlines).
std::vector<std::vector<std::string>> parse_csv(const std::string& text) {
  std::vector<std::vector<std::string>> rows(1);
  std::string cell;
  bool quoted = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') {
        cell += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        cell += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      rows.back().push_back(cell);
      cell.clear();
    } else if (c == '\n') {
      rows.back().push_back(cell);
      cell.clear();
      rows.emplace_back();
    } else {
      cell += c;
    }
  }
  if (rows.back().empty()) rows.pop_back();
  return rows;
}

TEST(Report, WritesTheFourFiles) {
  TempDir t;
  const auto out = t.path() / "study" / "out";  // parents are created
  write_study_report(out, test::crafted_study());
  EXPECT_EQ(t.entries("study/out"),
            (std::set<std::string>{"report.html", "report.md", "results.csv", "results.json"}));
}

TEST(Report, ResultsJsonSchema) {
  StudyResults s = test::crafted_study();
  json j = json::parse(render_results_json(s));
  for (const char* k : {"model", "machine", "baseline", "criteria", "runs", "verdicts",
                        "recommendation", "summary", "energy_note"}) {
    EXPECT_TRUE(j.contains(k)) << k;
  }
  EXPECT_EQ(j["model"], "mlp");
  EXPECT_EQ(j["machine"]["cpu_model"], "Test CPU 9000");
  EXPECT_EQ(j["machine"]["threads"], 2);
  EXPECT_EQ(j["machine"]["cpu_features"].size(), 3u);
  EXPECT_EQ(j["criteria"]["min_speedup"], 2.0);
  EXPECT_EQ(j["criteria"]["min_memory_saving"], 0.3);
  EXPECT_EQ(j["criteria"]["max_accuracy_loss_points"], 0.5);
  ASSERT_EQ(j["runs"].size(), 4u);
  for (const json& r : j["runs"]) {
    // The train --json fields docs/architecture.md 4.3 relies on, plus the study's.
    for (const char* k :
         {"model", "precision", "steps", "skipped_steps", "ms_per_step", "samples_per_s",
          "test_accuracy", "final_loss", "peak_memory_bytes", "peak_rss_bytes", "train_time_s",
          "energy_joules", "energy_source", "seed", "diverged", "loss_curve", "loss_scale_trace"}) {
      EXPECT_TRUE(r.contains(k)) << r["precision"] << " lacks " << k;
    }
    // Every entry reads back as a RunRecord.
    EXPECT_NO_THROW(run_record_from_json(r.dump()));
  }
  const json& fp16 = j["runs"][2];
  EXPECT_EQ(fp16["precision"], "fp16");
  EXPECT_TRUE(fp16["diverged"].get<bool>());
  EXPECT_EQ(fp16["diverged_at_step"], 120);
  EXPECT_TRUE(fp16["final_loss"].is_null());
  ASSERT_EQ(j["verdicts"].size(), 4u);
  EXPECT_EQ(j["verdicts"][1]["checks"]["speedup"], "fail");
  EXPECT_EQ(j["verdicts"][1]["checks"]["memory_saving"], "pass");
  EXPECT_EQ(j["verdicts"][2]["checks"]["no_nan"], "fail");
  EXPECT_EQ(j["verdicts"][3]["checks"]["accuracy"], "fail");
  EXPECT_EQ(j["recommendation"]["precision"], "bf16");
  EXPECT_FALSE(j["recommendation"]["reason"].get<std::string>().empty());
  EXPECT_FALSE(j.contains("seed_runs"));
  // Round trip of a whole run through results.json.
  RunRecord back = run_record_from_json(j["runs"][1].dump());
  EXPECT_EQ(back.precision, "bf16");
  EXPECT_EQ(back.loss_curve.size(), s.runs[1].loss_curve.size());
  EXPECT_EQ(back.test_accuracy, s.runs[1].test_accuracy);
}

TEST(Report, ResultsCsvSchema) {
  StudyResults s = test::crafted_study();
  s.runs[3].error = "note: \"quoted\", with a comma";
  auto rows = parse_csv(render_results_csv(s));
  ASSERT_EQ(rows.size(), 5u);  // header + one row per run
  EXPECT_EQ(rows[0], results_csv_columns());
  const std::vector<std::string> first = {"model",         "precision",         "steps",
                                          "skipped_steps", "ms_per_step",       "samples_per_s",
                                          "tokens_per_s",  "test_accuracy",     "val_loss",
                                          "final_loss",    "peak_memory_bytes", "peak_rss_bytes",
                                          "train_time_s",  "energy_joules",     "energy_source",
                                          "seed",          "diverged",          "diverged_at_step",
                                          "error",         "num_seeds"};
  ASSERT_GE(rows[0].size(), first.size());
  EXPECT_EQ(std::vector<std::string>(rows[0].begin(), rows[0].begin() + first.size()), first);
  auto col = [&](const std::string& name) {
    return size_t(std::find(rows[0].begin(), rows[0].end(), name) - rows[0].begin());
  };
  for (size_t r = 1; r < rows.size(); ++r) {
    ASSERT_EQ(rows[r].size(), rows[0].size()) << "row " << r;
    EXPECT_EQ(rows[r][col("precision")], s.runs[r - 1].precision);
    EXPECT_EQ(rows[r][col("energy_source")], "estimate");
  }
  EXPECT_EQ(rows[3][col("diverged")], "true");
  EXPECT_EQ(rows[3][col("diverged_at_step")], "120");
  EXPECT_EQ(rows[3][col("final_loss")], "");  // NaN: empty cell
  EXPECT_EQ(rows[2][col("diverged")], "false");
  EXPECT_EQ(std::stod(rows[1][col("ms_per_step")]), 10.0);
  EXPECT_EQ(rows[4][col("error")], "note: \"quoted\", with a comma");
  EXPECT_EQ(rows[2][col("acceptable")], "true");
  // The study runner's fields come last; empty where a record lacks them.
  const std::vector<std::string> last = {"energy_estimate_joules", "estimate_compute_dtype",
                                         "evaluated_model"};
  EXPECT_EQ(std::vector<std::string>(rows[0].end() - 3, rows[0].end()), last);
  EXPECT_EQ(rows[1][col("evaluated_model")], "");
}

TEST(Report, MarkdownHasEveryRunAndTheVerdict) {
  std::string md = render_report_markdown(test::crafted_study());
  EXPECT_EQ(md.rfind("# Precision study: mlp on Test CPU 9000", 0), 0u);
  for (const char* p : {"| fp32", "| bf16", "| fp16", "| fp8"}) EXPECT_GE(count(md, p), 2u) << p;
  EXPECT_NE(md.find("diverged at step 120"), std::string::npos);
  EXPECT_NE(md.find("**Use bf16.**"), std::string::npos);
  EXPECT_NE(md.find("bf16 was 1.8x faster than fp32"), std::string::npos);
  EXPECT_GE(count(md, "(estimate)"), 4u);
}

TEST(Report, HtmlIsSelfContained) {
  std::string html = render_report_html(test::crafted_study());
  EXPECT_EQ(html.find("http://"), std::string::npos);
  EXPECT_EQ(html.find("https://"), std::string::npos);
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("<link"), std::string::npos);
  EXPECT_EQ(html.find("<img"), std::string::npos);
  EXPECT_EQ(html.find("url("), std::string::npos);
  EXPECT_EQ(html.find("@import"), std::string::npos);
  EXPECT_EQ(std::regex_search(html, std::regex(R"((src|href)\s*=)")), false);
  EXPECT_EQ(html.rfind("<!doctype html>", 0), 0u);
  EXPECT_NE(html.find("<html lang=\"en\">"), std::string::npos);
  EXPECT_NE(html.find("<meta charset=\"utf-8\">"), std::string::npos);
}

TEST(Report, HtmlShowsEveryRunDivergenceAndEstimates) {
  StudyResults s = test::crafted_study();
  std::string html = render_report_html(s);
  for (const RunRecord& r : s.runs) {
    EXPECT_NE(html.find("<th scope=\"row\"><span class=\"swatch\" style=\"--accent: "),
              std::string::npos);
    EXPECT_GE(count(html, ">" + r.precision + "</th>"), 2u) << r.precision;  // both tables
  }
  EXPECT_GE(count(html, "diverged at step 120"), 3u);  // tile, verdict, chart, results
  EXPECT_NE(html.find("class=\"diverged-mark\""), std::string::npos);
  // Every energy number is marked as an estimate: tiles, results table, chart subtitle.
  EXPECT_GE(count(html, "(estimate)"), 2 * s.runs.size() + 1);
  EXPECT_EQ(count(html, "<svg"), 7u);  // loss and its zoom, 4 relative bars, loss scale
  EXPECT_NE(html.find("id=\"loss-curves-zoom\""), std::string::npos);
  EXPECT_NE(html.find("smoothed: each point is the mean of 3 logged steps"), std::string::npos);
  EXPECT_NE(html.find("id=\"loss-scale\""), std::string::npos);
  EXPECT_NE(html.find("<title id=\"loss-curves-title\">"), std::string::npos);
  EXPECT_NE(html.find("bf16 was 1.8x faster than fp32 with 0.10 points less accuracy and 42% "
                      "less memory."),
            std::string::npos);
  EXPECT_NE(html.find("<div class=\"rec-precision\">bf16</div>"), std::string::npos);
}

TEST(Report, TextIsEscaped) {
  StudyResults s = test::crafted_study();
  s.model = "<b>mlp</b> & \"friends\"";
  for (RunRecord& r : s.runs) r.model = s.model;
  s.runs[3].error = "<script>alert(1)</script>";
  s.runs[3].diverged = false;
  std::string html = render_report_html(s);
  EXPECT_EQ(html.find("<b>mlp"), std::string::npos);
  EXPECT_EQ(html.find("<script>"), std::string::npos);
  EXPECT_NE(html.find("&lt;b&gt;mlp&lt;/b&gt; &amp; &quot;friends&quot;"), std::string::npos);
  std::string md = render_report_markdown(s);
  EXPECT_NE(md.find("failed: <script>"), std::string::npos);  // Markdown keeps text as is
}

TEST(Report, SeedsAreAggregatedWithSpread) {
  StudyResults s = test::crafted_study();
  std::vector<RunRecord> runs;
  for (const RunRecord& r : s.runs) {
    for (int k = 0; k < 3; ++k) {
      RunRecord c = r;
      c.seed = uint64_t(k);
      c.ms_per_step = r.ms_per_step * (1.0 + 0.05 * k);
      runs.push_back(c);
    }
  }
  s.runs = runs;
  json j = json::parse(render_results_json(s));
  ASSERT_EQ(j["runs"].size(), 4u);
  ASSERT_EQ(j["seed_runs"].size(), 12u);
  EXPECT_EQ(j["runs"][0]["num_seeds"], 3);
  EXPECT_NEAR(j["runs"][0]["ms_per_step"].get<double>(), 10.5, 1e-12);
  EXPECT_NEAR(j["runs"][0]["std"]["ms_per_step"].get<double>(), 0.5, 1e-12);
  EXPECT_EQ(j["runs"][2]["diverged_seeds"], 3);
  std::string html = render_report_html(s);
  EXPECT_NE(html.find("10.5<small>± 0.50</small>"), std::string::npos);
  EXPECT_NE(html.find("3 of 3 seeds"), std::string::npos);
  EXPECT_EQ(parse_csv(render_results_csv(s)).size(), 5u);
}

TEST(Report, DivergedBaselineOrEveryRunDivergedStillWritesTheReport) {
  TempDir t;
  StudyResults s = test::crafted_study();
  for (RunRecord& r : s.runs) {
    r.diverged = true;
    r.diverged_at_step = 3;
    r.final_loss = std::numeric_limits<double>::quiet_NaN();
  }
  ASSERT_NO_THROW(write_study_report(t.path(), s));
  std::string html = read_text(t.path() / "report.html");
  EXPECT_GE(count(html, "diverged at step 3"), 4u);
  EXPECT_NE(html.find("Every run diverged or failed"), std::string::npos);
  json j = json::parse(read_text(t.path() / "results.json"));
  EXPECT_EQ(j["recommendation"]["precision"], "");
}

TEST(Report, LanguageModelReportUsesValidationLoss) {
  StudyResults s = test::crafted_study();
  s.model = "gpt";
  for (RunRecord& r : s.runs) {
    r.model = "gpt";
    r.test_accuracy.reset();
    r.val_loss = 1.5;
    r.tokens_per_s = r.samples_per_s * 128;
  }
  s.runs[3].val_loss = 1.6;
  std::string html = render_report_html(s);
  EXPECT_NE(html.find("Validation loss change"), std::string::npos);
  EXPECT_NE(html.find("tokens/s"), std::string::npos);
  json j = json::parse(render_results_json(s));
  EXPECT_EQ(j["verdicts"][3]["quality_metric"], "val_loss");
  EXPECT_EQ(j["verdicts"][3]["checks"]["accuracy"], "fail");
  EXPECT_TRUE(j["runs"][0].contains("val_loss"));
}

TEST(Report, OtherFilesInTheFolderAreKeptAndRewritesReplace) {
  TempDir t;
  mixp::test::write_text(t.path() / "fp32.log.jsonl", "{}\n");
  write_study_report(t.path(), test::crafted_study());
  StudyResults s = test::crafted_study();
  s.model = "cnn";
  write_study_report(t.path(), s);
  EXPECT_TRUE(std::filesystem::exists(t.path() / "fp32.log.jsonl"));
  EXPECT_EQ(json::parse(read_text(t.path() / "results.json"))["model"], "cnn");
  EXPECT_EQ(t.entries().size(), 5u);  // no temporaries left behind
}

TEST(Report, DescribesThisMachine) {
  MachineInfo m = describe_this_machine(3);
  EXPECT_EQ(m.threads, 3);
  EXPECT_FALSE(m.cpu_model.empty());
  EXPECT_FALSE(m.os.empty());
  EXPECT_GT(describe_this_machine().threads, 0);
}

TEST(Report, UnwritableFolderThrows) {
  TempDir t;
  mixp::test::write_text(t.path() / "file", "x");
  EXPECT_THROW(write_study_report(t.path() / "file" / "out", test::crafted_study()), IoError);
}

StudyResults timed_study() {
  StudyResults s = test::crafted_study();
  s.timing = {3, 10, {{"fp32", {10, 11, 9}}, {"bf16", {4, 6.5, 4.2}}, {"fp8", {5.5, 6, 5}}}, ""};
  return s;
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + to.size())) {
    s.replace(p, from.size(), to);
  }
  return s;
}

// The text a reader sees: no <style>, no tags (their attributes hold SVG coordinates), entities
// for quotes decoded.
std::string visible_text(const std::string& html) {
  std::string t = std::regex_replace(html, std::regex(R"(<style>[\s\S]*?</style>)"), " ");
  t = std::regex_replace(t, std::regex(R"(<[^>]*>)"), " ");
  return replace_all(replace_all(t, "&quot;", "\""), "&#39;", "'");
}

TEST(Report, ResultsCarryTheTimingRoundsSpread) {
  const StudyResults s = timed_study();
  const json j = json::parse(render_results_json(s));
  ASSERT_TRUE(j.contains("timing"));
  EXPECT_EQ(j["timing"]["rounds"], 3);
  EXPECT_EQ(j["timing"]["steps_per_round"], 10);
  EXPECT_EQ(j["timing"]["order"], "rotating");
  ASSERT_EQ(j["timing"]["precisions"].size(), 3u);
  const json& bf16 = j["timing"]["precisions"][1];
  EXPECT_EQ(bf16["precision"], "bf16");
  EXPECT_DOUBLE_EQ(bf16["median_ms"].get<double>(), 4.2);
  EXPECT_DOUBLE_EQ(bf16["min_ms"].get<double>(), 4.0);
  EXPECT_DOUBLE_EQ(bf16["max_ms"].get<double>(), 6.5);
  EXPECT_EQ(bf16["round_ms"].size(), 3u);
  const json& v = j["verdicts"][1];
  EXPECT_EQ(v["checks"]["speedup"], "inconclusive");
  EXPECT_NEAR(v["speedup_min"].get<double>(), 11 / 6.5, 1e-12);
  EXPECT_NEAR(v["speedup_max"].get<double>(), 2.5, 1e-12);
  EXPECT_EQ(v["speed_rounds"], 3);
  EXPECT_DOUBLE_EQ(v["step_ms_median"].get<double>(), 4.2);
  EXPECT_NE(v["speed_reason"].get<std::string>().find("inconclusive"), std::string::npos);
  EXPECT_EQ(j["verdicts"][3]["checks"]["speedup"], "fail");

  auto rows = parse_csv(render_results_csv(s));
  auto col = [&](const std::string& name) {
    return size_t(std::find(rows[0].begin(), rows[0].end(), name) - rows[0].begin());
  };
  ASSERT_LT(col("speedup_check"), rows[0].size());
  EXPECT_EQ(rows[2][col("speedup_check")], "inconclusive");
  EXPECT_EQ(rows[2][col("timed_ms_per_step_median")], "4.2");
  EXPECT_EQ(rows[2][col("timed_ms_per_step_min")], "4");
  EXPECT_EQ(rows[2][col("timed_ms_per_step_max")], "6.5");
  EXPECT_EQ(rows[2][col("timing_rounds")], "3");

  const std::string md = render_report_markdown(s);
  EXPECT_NE(md.find("❔ inconclusive 2.1x (1.69–2.50x)"), std::string::npos) << md;
  EXPECT_NE(md.find("3 interleaved rounds of 10 steps"), std::string::npos);
  EXPECT_NE(md.find("bf16 4.20 ms/step (4.00 to 6.50)"), std::string::npos);
  const std::string html = render_report_html(s);
  EXPECT_NE(html.find("2.1x (1.69–2.50x)<span class=\"visually-hidden\"> (inconclusive)"),
            std::string::npos);
  EXPECT_NE(html.find("3 interleaved rounds of 10 steps"), std::string::npos);
}

// Every citation in the reports names a docs/*.md file of this repository, and a quoted section
// after it ("docs/report.md, \"Verdicts\"") one of that file's headings; nothing cites the seed
// documents, which are not in the repository.
TEST(Report, CitationsPointToDocsSectionsThatExist) {
  const StudyResults s = timed_study();
  const std::filesystem::path docs = std::filesystem::path(MIXP_SOURCE_DIR) / "docs";
  for (const std::string& text :
       {render_report_markdown(s), visible_text(render_report_html(s))}) {
    EXPECT_FALSE(std::regex_search(text, std::regex(R"(seed 0\d\d|seed document|seeds')")));
    EXPECT_EQ(text.find("section 8"), std::string::npos);
    const std::regex cite(R"(docs/([A-Za-z0-9_.-]+\.md)(, \"([^\"]+)\")?)");
    int files = 0, sections = 0;
    for (auto it = std::sregex_iterator(text.begin(), text.end(), cite);
         it != std::sregex_iterator(); ++it) {
      const std::filesystem::path f = docs / (*it)[1].str();
      ++files;
      ASSERT_TRUE(std::filesystem::exists(f)) << it->str();
      if (!(*it)[3].matched) continue;
      ++sections;
      const std::string doc = read_text(f);
      const std::regex heading("(^|\n)#+ " + std::regex_replace((*it)[3].str(),
                                                               std::regex(R"([.^$|()\[\]{}*+?\\])"),
                                                               R"(\$&)"));
      EXPECT_TRUE(std::regex_search(doc, heading)) << it->str() << " names no heading of " << f;
    }
    EXPECT_GE(files, 3);
    EXPECT_GE(sections, 2);
  }
}

// One minus sign in the reports a reader sees: U+2212, never an ASCII hyphen before a number
// (results.json and results.csv keep ASCII numbers for programs).
TEST(Report, OneMinusSignInTheReports) {
  StudyResults s = timed_study();
  s.runs[1].peak_memory_bytes = 108'000'000;  // bf16 8% more memory than fp32: a negative saving
  s.runs[1].test_accuracy = 0.8847;           // -0.03 points
  const std::string md = render_report_markdown(s);
  const std::string html = visible_text(render_report_html(s));
  for (const std::string* t : {&md, &html}) {
    std::smatch m;
    EXPECT_FALSE(std::regex_search(*t, m, std::regex(R"((^|[^\w.\-])-[0-9])")))
        << "ASCII minus in: ..."
        << m.prefix().str().substr(m.prefix().length() > 80 ? m.prefix().length() - 80 : 0)
        << m.str();
    EXPECT_NE(t->find("\u22128%"), std::string::npos);
    EXPECT_NE(t->find("\u22120.03 points"), std::string::npos);
  }
}

}  // namespace
}  // namespace mixp::study

namespace mixp::study {
namespace {

// A LoRA study (`mixp compare --lora`): every report says what each run trained. report.md's
// LoRA table and the HTML results table both carry the same "N of M (x%)" text; a study without
// adapters has no such column.
TEST(Report, LoraStudiesShowTheTrainableParameters) {
  StudyResults s = test::crafted_study();
  EXPECT_EQ(render_report_html(s).find("Trainable<small>parameters"), std::string::npos);
  for (RunRecord& r : s.runs) r.extra_json = R"({"trainable_parameters": 3680, "parameters": 97824})";
  const std::string t = detail::trainable_text(s.runs[0]);
  ASSERT_FALSE(t.empty());
  const std::string html = render_report_html(s);
  EXPECT_NE(html.find("Trainable<small>parameters"), std::string::npos);
  size_t cells = 0;
  for (size_t at = html.find(detail::html_escape(t)); at != std::string::npos;
       at = html.find(detail::html_escape(t), at + 1))
    ++cells;
  EXPECT_EQ(cells, s.runs.size()) << t;
  EXPECT_NE(render_report_markdown(s).find("| " + t + " |"), std::string::npos) << t;
}

}  // namespace
}  // namespace mixp::study
