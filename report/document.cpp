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

// A link's target in Markdown: characters that would end the target or break the table are
// percent-encoded (the site's targets are plain relative file names; this keeps any other inert).
std::string markdown_href(std::string_view href) {
  std::string out;
  for (const char c : href) {
    if (c == ' ' || c == '(' || c == ')' || c == '|' || c == '<' || c == '>' || c == '\n' || c == '\r')
      out += fmt::format("%{:02X}", static_cast<unsigned char>(c));
    else
      out += c;
  }
  return out;
}

std::string markdown_link(const Link& link, bool in_table) {
  return fmt::format("[{}]({})", markdown_text(link.text, in_table), markdown_href(link.href));
}

std::string markdown_row(const std::vector<std::string>& cells, const std::vector<std::string>* links) {
  std::string out = "|";
  for (std::size_t i = 0; i < cells.size(); ++i) {
    const bool linked = links && i < links->size() && !(*links)[i].empty();
    out += fmt::format(" {} |", linked ? markdown_link({cells[i], (*links)[i]}, true) : markdown_text(cells[i], true));
  }
  return out + "\n";
}

std::string html_link(const Link& link) {
  return fmt::format("<a href=\"{}\">{}</a>", html_escape(link.href), html_escape(link.text));
}

// Row i's links, when the table has them.
const std::vector<std::string>* row_links(const Table& t, std::size_t i) {
  return i < t.links.size() ? &t.links[i] : nullptr;
}

std::string markdown_block(const Block& block) {
  return std::visit(
      Visitor{[](const Paragraph& p) { return (p.warning ? "> **Note:** " : "") + markdown_text(p.text, false) + "\n\n"; },
              [](const Table& t) {
                std::string out = markdown_row(t.header, nullptr) + "|";
                for (std::size_t i = 0; i < t.header.size(); ++i) out += " --- |";
                out += "\n";
                for (std::size_t i = 0; i < t.rows.size(); ++i) out += markdown_row(t.rows[i], row_links(t, i));
                return out + "\n";
              },
              [](const Plot& p) { return fmt::format("![{}]({})\n\n", markdown_text(p.title, false), p.file); },
              [](const LinkList& l) {
                std::string out;
                for (const auto& link : l.links) out += (out.empty() ? "" : " · ") + markdown_link(link, false);
                return out + "\n\n";
              },
              // An indented code block: nothing inside it is markup, so the text needs no escaping.
              [](const Preformatted& p) {
                std::string out = "    ";
                for (const char c : p.text) {
                  out += c;
                  if (c == '\n') out += "    ";
                }
                while (!out.empty() && (out.back() == ' ' || out.back() == '\n')) out.pop_back();
                return out + "\n\n";
              }},
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
                for (std::size_t i = 0; i < t.rows.size(); ++i) {
                  const auto* links = row_links(t, i);
                  out += "<tr>";
                  for (std::size_t c = 0; c < t.rows[i].size(); ++c) {
                    const bool linked = links && c < links->size() && !(*links)[c].empty();
                    out += "<td>" + (linked ? html_link({t.rows[i][c], (*links)[c]}) : html_escape(t.rows[i][c])) + "</td>";
                  }
                  out += "</tr>\n";
                }
                return out + "</tbody>\n</table>\n";
              },
              [](const Plot& p) {
                return fmt::format("<figure>\n{}\n<figcaption>{}</figcaption>\n</figure>\n", p.svg, html_escape(p.title));
              },
              [](const LinkList& l) {
                std::string out = "<p class=\"links\">";
                for (std::size_t i = 0; i < l.links.size(); ++i) out += (i ? " · " : "") + html_link(l.links[i]);
                return out + "</p>\n";
              },
              [](const Preformatted& p) { return "<pre>" + html_escape(p.text) + "</pre>\n"; }},
      block);
}

constexpr const char* kStyle = R"(body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 72em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
p.note { background: #fff6d5; border-left: 4px solid #e0a800; padding: 0.5em 0.8em; }
figure { margin: 1em 0; }
figure svg { max-width: 100%; height: auto; }
nav { font-size: 0.9em; }
pre { background: #f7f7f7; padding: 0.6em; overflow-x: auto; font-size: 0.85em; }
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
  std::string out;
  if (!document.navigation.empty()) out = markdown_block(LinkList{document.navigation});
  out += "# " + markdown_text(document.title, false) + "\n\n";
  for (const auto& section : document.sections) {
    out += "## " + markdown_text(section.heading, false) + "\n\n";
    for (const auto& block : section.blocks) out += markdown_block(block);
  }
  return out;
}

std::string render_html(const Document& document) {
  std::string out = fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{0}</title>\n<style>\n{1}</style>\n"
      "</head>\n<body>\n",
      html_escape(document.title), kStyle);
  if (!document.navigation.empty()) {
    out += "<nav>";
    for (std::size_t i = 0; i < document.navigation.size(); ++i)
      out += (i ? " · " : "") + html_link(document.navigation[i]);
    out += "</nav>\n";
  }
  out += "<h1>" + html_escape(document.title) + "</h1>\n";
  for (const auto& section : document.sections) {
    out += "<section>\n<h2>" + html_escape(section.heading) + "</h2>\n";
    for (const auto& block : section.blocks) out += html_block(block);
    out += "</section>\n";
  }
  return out + "</body>\n</html>\n";
}

}  // namespace ablate::report
