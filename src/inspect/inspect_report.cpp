// inspect.html (inspect_report.h): ranges and per-format overflow/underflow heatmaps.
#include "mixp/inspect/inspect_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "mixp/io/atomic_file.h"

namespace mixp::inspect {
namespace {

std::string esc(std::string_view s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

double num_or_nan(const nlohmann::json& j) {
  return j.is_number() ? j.get<double>() : std::nan("");
}

std::string pct(double f) {
  if (f <= 0) return "0";
  if (f < 0.0001) return "&lt;0.01%";
  return fmt::format("{:.2f}%", 100 * f);
}

std::string num(double v) {
  return std::isfinite(v) ? fmt::format("{:.4g}", v) : "n/a";
}

// A row key: module and tensor ("fc1 weight", "blocks.0.attn output").
std::string row_name(const StatRecord& r) {
  return (r.module.empty() ? std::string("(model)") : r.module) + " " + r.tensor +
         (r.call > 0 ? fmt::format(" #{}", r.call) : "");
}

constexpr const char* kStyle = R"(
body{font-family:system-ui,sans-serif;margin:24px;color:#1d232a;max-width:1400px}
h1{font-size:22px} h2{font-size:18px;margin-top:28px} h3{font-size:15px;margin:18px 0 6px}
p.note{color:#555;font-size:13px;max-width:900px}
table{border-collapse:collapse;font-size:12px;margin-bottom:10px}
th,td{border:1px solid #d5d9de;padding:2px 6px;text-align:right}
th{background:#f1f3f5} td.name,th.name{text-align:left;font-family:monospace}
td.cell{min-width:64px}
.legend span{display:inline-block;padding:2px 8px;margin-right:6px;font-size:12px}
)";

// Overflow in red, underflow in blue; the colour's strength grows with the fraction (square root,
// so 1% is already visible).
std::string heat_style(double ov, double un) {
  if (ov > 0) return fmt::format("background:rgba(214,39,40,{:.3f})", 0.15 + 0.85 * std::sqrt(ov));
  if (un > 0) return fmt::format("background:rgba(31,119,180,{:.3f})", 0.1 + 0.9 * std::sqrt(un));
  return "";
}

}  // namespace

std::vector<StatRecord> read_inspect_jsonl(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw InspectError("mixp inspect report: cannot read " + path.string());
  std::vector<StatRecord> out;
  int64_t line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    if (line.empty()) continue;
    try {
      const nlohmann::json j = nlohmann::json::parse(line);
      StatRecord r;
      r.step = j.at("step").get<int64_t>();
      r.module = j.at("module").get<std::string>();
      r.kind = j.value("kind", "");
      const std::string role = j.at("role").get<std::string>();
      bool known = false;
      for (Role x : all_roles()) {
        if (role == to_string(x)) r.role = x, known = true;
      }
      if (!known) throw std::invalid_argument("unknown role '" + role + "'");
      r.tensor = j.value("tensor", "");
      r.call = j.value("call", int64_t(0));
      r.loss_scale = j.value("loss_scale", 1.0);
      TensorStats& s = r.stats;
      s.numel = j.at("numel").get<int64_t>();
      s.amax = num_or_nan(j.at("amax"));
      s.amin_nz = num_or_nan(j.at("amin_nz"));
      s.dynamic_range = num_or_nan(j.at("dynamic_range"));
      s.rms = num_or_nan(j.at("rms"));
      s.nan = j.at("nan").get<int64_t>();
      s.inf = j.at("inf").get<int64_t>();
      s.zeros = j.value("zeros", int64_t(0));
      for (const auto& [name, f] : j.at("formats").items()) {
        const auto fmt = parse_stat_format(name);
        if (!fmt) throw std::invalid_argument("unknown format '" + name + "'");
        s.formats.push_back(FormatStats{*fmt, f.at("overflow_count").get<int64_t>(),
                                        f.at("underflow_count").get<int64_t>(),
                                        f.at("subnormal_count").get<int64_t>(),
                                        num_or_nan(f.at("mse"))});
      }
      out.push_back(std::move(r));
    } catch (const std::exception& e) {
      throw InspectError(
          fmt::format("mixp inspect report: {} line {} is not an --inspect record: {}",
                      path.string(), line_no, e.what()));
    }
  }
  if (out.empty()) {
    throw InspectError("mixp inspect report: " + path.string() +
                       " holds no records (was the run's --inspect filter empty?)");
  }
  return out;
}

std::string inspect_report_html(const std::vector<StatRecord>& records, const std::string& source) {
  std::set<int64_t> steps;
  std::map<int, std::vector<std::string>> rows_of_role;  // role -> row names, first-seen order
  std::map<std::pair<int, std::string>, std::map<int64_t, const StatRecord*>> cell;
  std::set<int> formats;
  for (const StatRecord& r : records) {
    steps.insert(r.step);
    auto& names = rows_of_role[int(r.role)];
    const std::string n = row_name(r);
    if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
    cell[{int(r.role), n}][r.step] = &r;
    for (const FormatStats& f : r.stats.formats) formats.insert(int(f.format));
  }
  std::string h = "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>mixp tensor "
                  "statistics</title><style>";
  h += kStyle;
  h += "</style></head><body>\n<h1>Tensor statistics</h1>\n";
  h += fmt::format(
      "<p class=\"note\">{} records from <code>{}</code>, steps {}..{} ({} inspected). Fractions "
      "count the values a cast to the format (nearest-even) overflows or flushes to zero; "
      "gradients are at the run's loss scale. docs/inspect.md explains each column.</p>\n",
      records.size(), esc(source), *steps.begin(), *steps.rbegin(), steps.size());

  h += "<h2 id=\"ranges\">Ranges at the last inspected step</h2>\n";
  for (const auto& [role, names] : rows_of_role) {
    h += fmt::format("<h3>{}</h3>\n<table class=\"ranges\"><tr><th class=\"name\">module "
                     "tensor</th><th>step</th><th>amax</th><th>amin_nz</th><th>dynamic range "
                     "(binades)</th><th>rms</th><th>nan</th><th>inf</th><th>loss scale</th></tr>\n",
                     to_string(Role(role)));
    for (const std::string& n : names) {
      const StatRecord& r = *cell[{role, n}].rbegin()->second;
      h += fmt::format(
          "<tr><td class=\"name\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
          "<td>{}</td><td>{}</td><td>{}</td></tr>\n",
          esc(n), r.step, num(r.stats.amax), num(r.stats.amin_nz), num(r.stats.dynamic_range),
          num(r.stats.rms), r.stats.nan, r.stats.inf, num(r.loss_scale));
    }
    h += "</table>\n";
  }

  h += "<h2 id=\"heatmaps\">Overflow and underflow by module and step</h2>\n";
  h += "<p class=\"legend\"><span style=\"background:rgba(214,39,40,0.6)\">overflow</span>"
       "<span style=\"background:rgba(31,119,180,0.5)\">underflow (flushed to zero)</span> "
       "each cell: overflow / underflow; the colour shows the larger problem</p>\n";
  for (int f : formats) {
    h += fmt::format("<h2 class=\"format\">{}</h2>\n", to_string(StatFormat(f)));
    for (const auto& [role, names] : rows_of_role) {
      h += fmt::format("<h3>{} &middot; {}</h3>\n<table class=\"heat\"><tr><th class=\"name\">"
                       "module tensor</th>",
                       to_string(StatFormat(f)), to_string(Role(role)));
      for (int64_t s : steps) h += fmt::format("<th>step {}</th>", s);
      h += "</tr>\n";
      for (const std::string& n : names) {
        h += fmt::format("<tr><td class=\"name\">{}</td>", esc(n));
        const auto& by_step = cell[{role, n}];
        for (int64_t s : steps) {
          const auto it = by_step.find(s);
          const FormatStats* fs = nullptr;
          if (it != by_step.end()) {
            for (const FormatStats& x : it->second->stats.formats)
              if (int(x.format) == f) fs = &x;
          }
          if (!fs) {
            h += "<td class=\"cell empty\"></td>";
            continue;
          }
          const TensorStats& st = it->second->stats;
          const double ov = st.fraction(fs->overflow), un = st.fraction(fs->underflow);
          h += fmt::format(
              "<td class=\"cell\" style=\"{}\" title=\"subnormal {} mse {}\">{} / {}</td>",
              heat_style(ov, un), pct(st.fraction(fs->subnormal)), num(fs->mse), pct(ov), pct(un));
        }
        h += "</tr>\n";
      }
      h += "</table>\n";
    }
  }
  h += "</body></html>\n";
  return h;
}

void write_inspect_report(const std::filesystem::path& jsonl, const std::filesystem::path& html) {
  const std::vector<StatRecord> records = read_inspect_jsonl(jsonl);
  write_text_atomic(html, inspect_report_html(records, jsonl.string()));
}

}  // namespace mixp::inspect
