// report/document.cpp: Markdown and HTML rendering of a report Document (see document.h).
// Tests: tests/report/document_test.cpp (report_tests).
#include "report/document.h"

#include <fmt/format.h>

namespace ablate::report {
namespace {

// Overload set for std::visit over the block kinds.
template <typename... Fs>
struct Visitor : Fs... {
  using Fs::operator()...;
};

// Markdown text: characters that could start markup, raw HTML or an entity are escaped so a run named
// "<b>x</b>", "&lt;" or "*x*" reads literally in any renderer ('>' only matters at the start of a
// line, where this renderer never puts user text). In table cells a pipe would end the cell and a
// newline the row, so both are neutralised too.
std::string markdown_text(std::string_view text, bool in_table) {
  std::string out;
  for (const char c : text) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '\\':
      case '*':
      case '_':
      case '`':
      case '[':
      case ']':
        out += '\\';
        out += c;
        break;
      case '|':
        out += in_table ? "\\|" : "|";
        break;
      case '\n':
      case '\r':
        out += in_table ? ' ' : c;
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string markdown_row(const std::vector<std::string>& cells) {
  std::string out = "|";
  for (const auto& cell : cells) out += fmt::format(" {} |", markdown_text(cell, true));
  return out + "\n";
}

std::string markdown_block(const Block& block) {
  return std::visit(
      Visitor{[](const Paragraph& p) { return (p.warning ? "> **Note:** " : "") + markdown_text(p.text, false) + "\n\n"; },
              [](const Table& t) {
                std::string out = markdown_row(t.header) + "|";
                for (std::size_t i = 0; i < t.header.size(); ++i) out += " --- |";
                out += "\n";
                for (const auto& row : t.rows) out += markdown_row(row);
                return out + "\n";
              },
              [](const Plot& p) { return fmt::format("![{}]({})\n\n", markdown_text(p.title, false), p.file); }},
      block);
}

std::string html_block(const Block& block) {
  return std::visit(
      Visitor{[](const Paragraph& p) {
                return fmt::format("<p{}>{}</p>\n", p.warning ? " class=\"note\"" : "", html_escape(p.text));
              },
              [](const Table& t) {
                std::string out = "<table>\n<thead><tr>";
                for (const auto& h : t.header) out += "<th>" + html_escape(h) + "</th>";
                out += "</tr></thead>\n<tbody>\n";
                for (const auto& row : t.rows) {
                  out += "<tr>";
                  for (const auto& cell : row) out += "<td>" + html_escape(cell) + "</td>";
                  out += "</tr>\n";
                }
                return out + "</tbody>\n</table>\n";
              },
              [](const Plot& p) {
                return fmt::format("<figure>\n{}\n<figcaption>{}</figcaption>\n</figure>\n", p.svg, html_escape(p.title));
              }},
      block);
}

constexpr const char* kStyle = R"(body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 72em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
p.note { background: #fff6d5; border-left: 4px solid #e0a800; padding: 0.5em 0.8em; }
figure { margin: 1em 0; }
figure svg { max-width: 100%; height: auto; }
)";

}  // namespace

std::string html_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string render_markdown(const Document& document) {
  std::string out = "# " + markdown_text(document.title, false) + "\n\n";
  for (const auto& section : document.sections) {
    out += "## " + markdown_text(section.heading, false) + "\n\n";
    for (const auto& block : section.blocks) out += markdown_block(block);
  }
  return out;
}

std::string render_html(const Document& document) {
  std::string out = fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{0}</title>\n<style>\n{1}</style>\n"
      "</head>\n<body>\n<h1>{0}</h1>\n",
      html_escape(document.title), kStyle);
  for (const auto& section : document.sections) {
    out += "<section>\n<h2>" + html_escape(section.heading) + "</h2>\n";
    for (const auto& block : section.blocks) out += html_block(block);
    out += "</section>\n";
  }
  return out + "</body>\n</html>\n";
}

}  // namespace ablate::report
