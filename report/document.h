// report/document.h: a small document model (sections of paragraphs, tables, plots, links and
// preformatted text) that `ablate report` fills once and renders twice: as Markdown and as one
// self-contained HTML page, and that every page of `ablate site` (report/site.h) is rendered from. Keeping
// one model means the two outputs cannot drift apart, and escaping lives in exactly one place per format:
// every string handed to the model is treated as untrusted text (run names, tags and environment values
// are user-controlled); only Plot::svg is embedded as markup, and the plot code sanitizes what it feeds
// gnuplot (report/plots.h). Link targets are escaped too; the site only makes relative ones.
// Tests: tests/report/document_test.cpp, report_test.cpp (report_tests).
#pragma once

#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace ablate::report {

struct Paragraph {
  std::string text;
  bool warning = false;  // rendered prominently: missing or unreliable data
};

struct Table {
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;  // each as long as the header
  // Empty, or shaped like `rows`: the target each cell links to ("" for none).
  std::vector<std::vector<std::string>> links = {};
};

struct Link {
  std::string text;
  std::string href;
};

// Links on one line (a page's navigation, the runs of a segment).
struct LinkList {
  std::vector<Link> links;
};

// Text shown as is, in a fixed-width font: column-aligned listings such as `ablate show`'s.
struct Preformatted {
  std::string text;
};

// An SVG plot: Markdown links the file (written next to the report), HTML embeds the markup inline.
struct Plot {
  std::string file;  // e.g. step_time.svg
  std::string title;
  std::string svg;   // the <svg>...</svg> element, without an XML prolog
};

using Block = std::variant<Paragraph, Table, Plot, LinkList, Preformatted>;

struct Section {
  std::string heading;
  std::vector<Block> blocks;
};

struct Document {
  std::string title;
  std::vector<Link> navigation;  // shown above the title (the site's way back to its index)
  std::vector<Section> sections;
};

// &, <, >, " and ' as entities: safe in element text and in quoted attribute values.
std::string html_escape(std::string_view text);

std::string render_markdown(const Document& document);
std::string render_html(const Document& document);

}  // namespace ablate::report
