// `replayalloc viz TRACE|PLAN -o plan.html`: the plan as a picture.
//
// One self-contained HTML file (no network, no external script or font): an SVG with
// one rectangle per slab allocation, offset in the slab (y, 0 at the bottom) against
// time on the event counter (x), coloured by op (the ops covering the most bytes x time
// get their own colour, the rest share grey), the lower bound as a dashed red line and
// the slab's top as a grey one. Hovering a block shows its op, size, lifetime and
// offset: a small inline script reads them from one compact array (a <title> per
// block would double the file for large traces). The picture itself is plain SVG and
// renders without the script.
//
// Size: about 100 bytes per block (rect + data), so 20k blocks make a 2 MB page.
//
// --torch-snapshot FILE also (or only) writes the plan as PyTorch's memory snapshot, for
// pytorch.org/memory_viz: Note [Torch snapshot] (cli/torch_snapshot.h).
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "cli/analysis.h"
#include "cli/cli.h"
#include "cli/commands.h"
#include "cli/torch_snapshot.h"

namespace replayalloc::cli {
namespace {

std::string usage() {
  return absl::StrCat(
      "usage: replayalloc viz TRACE|PLAN -o PLAN.html [--torch-snapshot FILE] [--algo NAME] [--title TEXT]\n"
      "\n"
      "Draws the plan as a self-contained HTML page (inline SVG, no network): each\n"
      "allocation placed in the slab is a block at its offset (y) over its lifetime on\n"
      "the event counter (x), coloured by op; hovering shows its op, size and lifetime;\n"
      "the dashed red line is the lower bound. A trace is planned first (--algo).\n"
      "\n"
      "  -o, --output FILE   the page to write (\"-\" for stdout)\n"
      "  --torch-snapshot FILE\n"
      "                      also write the plan as torch.cuda.memory._snapshot()'s pickle\n"
      "                      (segments: the slab at the peak; device_traces: each alloc and\n"
      "                      free in order, the op as its frame), for pytorch.org/memory_viz\n"
      "                      and torch.cuda._memory_viz; -o may then be left out\n"
      "  --algo NAME         planner for a trace: ",
      absl::StrJoin(algorithm_names(), ", "),
      " (default best)\n"
      "  --title TEXT        the page's heading (default: the trace's key or file name)\n");
}

// Tableau 10 and two more; ops past these share `other_colour`.
constexpr const char* palette[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948",
                                   "#b07aa1", "#ff9da7", "#9c755f", "#86bcb6", "#d37295", "#a0cbe8"};
constexpr int palette_size = sizeof palette / sizeof palette[0];
constexpr const char* other_colour = "#c7c7c7";

// The drawing area, in SVG user units.
constexpr double view_w = 1200, view_h = 600;
constexpr double left = 78, right = 24, top = 26, bottom = 46;
constexpr double plot_w = view_w - left - right, plot_h = view_h - top - bottom;

std::string html_escape(std::string_view s) {
  return absl::StrReplaceAll(std::string(s), {{"&", "&amp;"}, {"<", "&lt;"}, {">", "&gt;"}, {"\"", "&quot;"}});
}

// A JSON string that is also safe inside <script> (no "</script>", no "<!--").
std::string js_string(std::string_view s) { return absl::StrReplaceAll(json_quote(s), {{"<", "\\u003c"}}); }

// Coordinates with one decimal, "12" rather than "12.0".
std::string num(double v) {
  std::string s = absl::StrFormat("%.1f", v);
  if (s.size() > 2 && s.compare(s.size() - 2, 2, ".0") == 0) s.resize(s.size() - 2);
  return s == "-0" ? "0" : s;
}

// A step of 1, 2 or 5 times a power of ten (of `unit`) giving about `ticks` ticks.
double nice_step(double span, double ticks) {
  if (span <= 0) return 1;
  const double raw = span / ticks;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (const double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * p >= raw) return m * p;
  }
  return 10 * p;
}

std::string tick_bytes(double bytes, double unit, const char* unit_name) {
  return absl::StrCat(num(bytes / unit), " ", unit_name);
}

}  // namespace

int run_viz(const std::vector<std::string>& args) {
  absl::StatusOr<parsed_args> a =
      parse_args(args, {{"--output", "-o"}, {"--torch-snapshot", ""}, {"--algo", ""}, {"--title", ""},
                        {"--help", "-h", false}});
  if (!a.ok()) return usage_error("viz", usage(), a.status());
  if (a->has("--help")) return print_help(usage());
  if (a->positional.size() != 1) return usage_error("viz", usage(), "expected one TRACE or PLAN");
  const std::optional<std::string> out = a->get("--output");
  const std::optional<std::string> snapshot = a->get("--torch-snapshot");
  if (snapshot && snapshot->empty()) return usage_error("viz", usage(), "--torch-snapshot needs a FILE");
  if (!snapshot && (!out || out->empty())) {
    return usage_error("viz", usage(), "missing -o PLAN.html (or --torch-snapshot FILE)");
  }
  if (out && snapshot && *out == "-" && *snapshot == "-") {
    return usage_error("viz", usage(), "-o and --torch-snapshot are both stdout (\"-\"); give one a file");
  }
  const std::string& path = a->positional[0];
  absl::StatusOr<planned_input> in = load_planned(path, a->get("--algo").value_or("best"));
  if (!in.ok()) return fail("viz", in.status());
  const trace& t = in->tr;
  const placement& p = in->p;
  const trace_analysis r = analyze(t, in->o);

  if (snapshot) {
    const std::string pickle = torch_snapshot_pickle(t, p, r, in->o);
    if (absl::Status s = write_output(*snapshot, pickle); !s.ok()) return fail("viz", s);
    if (*snapshot != "-") {
      std::fprintf(stderr, "%s: PyTorch memory snapshot (pickle), slab %s (%zu bytes)\n", snapshot->c_str(),
                   format_bytes(p.slab_bytes).c_str(), pickle.size());
    }
    if (!out || out->empty()) return exit_ok;
  }

  // Colours: the ops that cover the most bytes x time first.
  std::vector<std::pair<double, std::uint32_t>> area(t.ops.size());
  for (std::uint32_t i = 0; i < t.ops.size(); ++i) area[i] = {0, i};
  std::size_t drawn = 0;
  for (std::size_t i = 0; i < t.allocations.size(); ++i) {
    const trace_allocation& x = t.allocations[i];
    if (p.offsets[i] == not_in_slab) continue;
    area[x.op].first += static_cast<double>(x.size) * static_cast<double>(x.free_at - x.alloc_at);
    ++drawn;
  }
  std::sort(area.begin(), area.end(), [](const auto& x, const auto& y) {
    return x.first != y.first ? x.first > y.first : x.second < y.second;
  });
  std::vector<int> colour(t.ops.size(), palette_size);  // palette_size: "other"
  std::vector<std::string> legend;
  int used = 0;
  double other_area = 0;
  for (const auto& [bytes_time, op] : area) {
    if (bytes_time == 0) continue;
    if (used < palette_size) {
      colour[op] = used;
      legend.push_back(absl::StrCat("<span><i style=\"background:", palette[used], "\"></i>",
                                    html_escape(t.ops[op]), "</span>"));
      ++used;
    } else {
      other_area += bytes_time;
    }
  }
  if (other_area > 0) {
    legend.push_back(absl::StrCat("<span><i style=\"background:", other_colour, "\"></i>other ops</span>"));
  }

  const double t_end = static_cast<double>(std::max<std::uint64_t>(r.events, 1));
  const double y_max = std::max(1.0, 1.06 * static_cast<double>(std::max(p.slab_bytes, r.lower_bound_bytes)));
  const auto sx = [&](double at) { return left + plot_w * at / t_end; };
  const auto sy = [&](double offset) { return top + plot_h * (1 - offset / y_max); };

  std::string svg = absl::StrCat("<svg id=\"plan\" xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 ",
                                 num(view_w), " ", num(view_h), "\">\n");
  // Axes and grid.
  double unit = 1;
  const char* unit_name = "B";
  for (const auto& [u, name] : {std::pair{1024.0 * 1024 * 1024, "GiB"}, {1024.0 * 1024, "MiB"}, {1024.0, "KiB"}}) {
    if (y_max >= 2 * u) {
      unit = u, unit_name = name;
      break;
    }
  }
  const double y_step = nice_step(y_max / unit, 6) * unit;
  absl::StrAppend(&svg, "<g class=\"axis\">");
  for (double v = 0; v <= y_max; v += y_step) {
    absl::StrAppend(&svg, "<line class=\"grid\" x1=\"", num(left), "\" x2=\"", num(left + plot_w), "\" y1=\"",
                    num(sy(v)), "\" y2=\"", num(sy(v)), "\"/><text x=\"", num(left - 6), "\" y=\"",
                    num(sy(v) + 4), "\" text-anchor=\"end\">", tick_bytes(v, unit, unit_name), "</text>");
  }
  const double x_step = nice_step(t_end, 8);
  for (double v = 0; v <= t_end; v += x_step) {
    absl::StrAppend(&svg, "<line class=\"tick\" x1=\"", num(sx(v)), "\" x2=\"", num(sx(v)), "\" y1=\"",
                    num(top + plot_h), "\" y2=\"", num(top + plot_h + 5), "\"/><text x=\"", num(sx(v)),
                    "\" y=\"", num(top + plot_h + 18), "\" text-anchor=\"middle\">", num(v), "</text>");
  }
  absl::StrAppend(&svg, "<rect class=\"frame\" x=\"", num(left), "\" y=\"", num(top), "\" width=\"", num(plot_w),
                  "\" height=\"", num(plot_h), "\"/>");
  absl::StrAppend(&svg, "<text x=\"", num(left + plot_w / 2), "\" y=\"", num(view_h - 8),
                  "\" text-anchor=\"middle\">time (allocation and free events)</text>");
  absl::StrAppend(&svg, "<text transform=\"translate(16 ", num(top + plot_h / 2),
                  ") rotate(-90)\" text-anchor=\"middle\">offset in the slab</text></g>\n");

  // The blocks, in trace order; `data` holds what the hover shows, same order.
  std::string blocks = "<g id=\"blocks\">";
  std::string data;
  blocks.reserve(drawn * 64);
  data.reserve(drawn * 40);
  for (std::size_t i = 0; i < t.allocations.size(); ++i) {
    const trace_allocation& x = t.allocations[i];
    const std::uint64_t off = p.offsets[i];
    if (off == not_in_slab) continue;
    const double x0 = sx(static_cast<double>(x.alloc_at)), x1 = sx(static_cast<double>(x.free_at));
    const double y0 = sy(static_cast<double>(off + x.size)), y1 = sy(static_cast<double>(off));
    // Tiny blocks stay visible (and hoverable): at least half a unit each way.
    absl::StrAppend(&blocks, "<rect class=\"c", colour[x.op], "\" x=\"", num(x0), "\" y=\"", num(y0),
                    "\" width=\"", num(std::max(0.5, x1 - x0)), "\" height=\"", num(std::max(0.5, y1 - y0)),
                    "\"/>");
    if (!data.empty()) data.push_back(',');
    absl::StrAppend(&data, "[", x.op, ",", x.size, ",", x.alloc_at, ",", x.free_at, ",", off, ",", x.id, ",",
                    static_cast<int>(r.kinds[i]), "]");
  }
  absl::StrAppend(&svg, blocks, "</g>\n");

  // The slab's top and the lower bound, labelled at opposite ends so they never collide.
  const double y_lb = sy(static_cast<double>(r.lower_bound_bytes));
  const double y_slab = sy(static_cast<double>(p.slab_bytes));
  absl::StrAppend(&svg, "<line id=\"slab-top\" x1=\"", num(left), "\" x2=\"", num(left + plot_w), "\" y1=\"",
                  num(y_slab), "\" y2=\"", num(y_slab), "\"/><text class=\"slab-label\" x=\"", num(left + 6),
                  "\" y=\"", num(y_slab - 5), "\">slab ", format_bytes(p.slab_bytes), "</text>\n");
  absl::StrAppend(&svg, "<line id=\"lower-bound\" x1=\"", num(left), "\" x2=\"", num(left + plot_w), "\" y1=\"",
                  num(y_lb), "\" y2=\"", num(y_lb), "\"/><text class=\"lb-label\" x=\"", num(left + plot_w - 6),
                  "\" y=\"", num(y_lb - 5), "\" text-anchor=\"end\">lower bound ",
                  format_bytes(r.lower_bound_bytes), "</text>\n</svg>\n");

  const std::string title = a->get("--title").value_or(t.key.empty() ? path : t.key);
  std::vector<std::string> op_names;
  for (const std::string& op : t.ops) op_names.push_back(js_string(op));
  const std::size_t outliving = t.allocations.size() - drawn;

  // White edges separate neighbouring blocks; with thousands they would wash the picture out.
  const char* block_stroke = drawn > 3000 ? "0" : drawn > 400 ? ".25" : ".4";
  std::string css = absl::StrCat(
      "body{font:13px/1.4 -apple-system,'Segoe UI',Roboto,'DejaVu Sans',sans-serif;margin:18px 24px;color:#222;background:#fff}"
      "h1{font-size:17px;margin:0 0 2px;font-weight:600}"
      ".sub{color:#555;margin:0 0 8px}.sub b{color:#222}"
      ".legend{margin:4px 0 6px;max-width:1200px}.legend span{display:inline-block;margin:1px 14px 1px 0;white-space:nowrap}"
      ".legend i{display:inline-block;width:11px;height:11px;margin-right:5px;vertical-align:-1px;border-radius:2px}"
      "#plan{width:100%;max-width:1200px;height:auto;display:block}"
      "#plan text{font-size:11px;fill:#444}.grid{stroke:#eee}.tick{stroke:#999}.frame{fill:none;stroke:#bbb}"
      "#blocks rect{stroke:#fff;stroke-width:", block_stroke, "}#blocks rect:hover{stroke:#000;stroke-width:1.5}"
      "#lower-bound{stroke:#d62728;stroke-width:1.6;stroke-dasharray:7 4}#plan .lb-label{fill:#d62728;font-weight:600}"
      "#slab-top{stroke:#555;stroke-width:1}#plan .slab-label{fill:#333}"
      "#tip{position:fixed;pointer-events:none;background:rgba(25,25,25,.93);color:#fff;padding:6px 9px;"
      "border-radius:4px;font-size:12px;white-space:pre;display:none;z-index:2}"
      ".foot{color:#666;font-size:12px;margin-top:6px}");
  for (int i = 0; i < palette_size; ++i) absl::StrAppend(&css, ".c", i, "{fill:", palette[i], "}");
  absl::StrAppend(&css, ".c", palette_size, "{fill:", other_colour, "}");

  std::string html = absl::StrCat(
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>replayalloc plan: ",
      html_escape(title), "</title>\n<style>", css, "</style></head>\n<body>\n<h1>", html_escape(title),
      "</h1>\n<p class=\"sub\">slab <b>", format_bytes(p.slab_bytes), "</b> &middot; lower bound <b>",
      format_bytes(r.lower_bound_bytes), "</b> &middot; efficiency <b>",
      absl::StrFormat("%.2f%%", 100 * efficiency(r.lower_bound_bytes, p.slab_bytes)), "</b> &middot; ", drawn,
      " blocks in the slab &middot; ", html_escape(p.algorithm), "</p>\n<div class=\"legend\">",
      absl::StrJoin(legend, ""), "</div>\n", svg, "<div id=\"tip\"></div>\n<p class=\"foot\">",
      outliving == 0 ? std::string("Every allocation of the trace is in the slab.")
                     : absl::StrCat(outliving, outliving == 1 ? " allocation outlives" : " allocations outlive",
                                    " the iteration (", format_bytes(r.persistent_bytes),
                                    "), served outside the slab: not drawn."),
      " Hover a block for its op, size and lifetime. Made by replayalloc ", REPLAYALLOC_VERSION_STRING,
      ".</p>\n<script>\n\"use strict\";\n"
      "window.addEventListener('error',e=>document.body.setAttribute('data-error',String(e.message)));\n"
      "const OPS=[", absl::StrJoin(op_names, ","), "];\nconst KINDS=['persistent','activation','workspace'];\n"
      "const B=[", data, "];\n",
      R"JS(function fmt(b){const u=['B','KiB','MiB','GiB','TiB'];let i=0;while(b>=1024&&i<4){b/=1024;i++}return (i?b.toFixed(b<10?2:1):b)+' '+u[i]}
const rects=document.querySelectorAll('#blocks rect');rects.forEach((r,i)=>{r.dataset.i=i});
const tip=document.getElementById('tip');
document.getElementById('blocks').addEventListener('mousemove',e=>{const i=e.target.dataset.i;if(i===undefined)return;
const b=B[i];tip.textContent=OPS[b[0]]+'\nsize '+fmt(b[1])+' ('+b[1]+' bytes), '+KINDS[b[6]]+'\nlive from event '+b[2]+' to '+b[3]+' ('+(b[3]-b[2])+' events)\noffset '+fmt(b[4])+' ('+b[4]+'), id '+b[5];
tip.style.display='block';const x=Math.min(e.clientX+14,window.innerWidth-tip.offsetWidth-4);tip.style.left=x+'px';tip.style.top=(e.clientY+14)+'px'});
document.getElementById('blocks').addEventListener('mouseleave',()=>{tip.style.display='none'});
document.body.setAttribute('data-rendered',String(rects.length===B.length?rects.length:-1));
</script>
</body></html>
)JS");
  if (absl::Status s = write_output(*out, html); !s.ok()) return fail("viz", s);
  if (*out != "-") {
    std::fprintf(stderr, "%s: %zu blocks, slab %s, lower bound %s (%zu bytes)\n", out->c_str(), drawn,
                 format_bytes(p.slab_bytes).c_str(), format_bytes(r.lower_bound_bytes).c_str(), html.size());
  }
  return exit_ok;
}

}  // namespace replayalloc::cli
