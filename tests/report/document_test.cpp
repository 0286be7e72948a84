// tests/report/document_test.cpp: the document blocks the site adds (links, linked table cells,
// preformatted text, navigation) in both renderings, with untrusted text escaped in each.
// Build and run: cmake --build build --target report_tests && build/tests/report_tests --gtest_filter='Document*'
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "report/document.h"

namespace ablate::report {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

Document sample() {
  Document doc{"T", {{"index", "../index.html"}}, {}};
  Table table{{"run", "name"}, {{"7", "<b>x</b>"}, {"8", "y"}}, {{"../runs/run-7.html", ""}}};
  doc.sections.push_back({"S",
                          {table, LinkList{{{"run <1>", "runs/run-1.html"}, {"odd", "a b\".html"}}},
                           Preformatted{"col  <a>\n  *b*"}}});
  return doc;
}

TEST(Document, HtmlLinksCellsListsAndNavigationAndEscapesEverything) {
  const std::string html = render_html(sample());
  EXPECT_THAT(html, HasSubstr("<nav><a href=\"../index.html\">index</a></nav>\n<h1>T</h1>"));
  EXPECT_THAT(html, HasSubstr("<td><a href=\"../runs/run-7.html\">7</a></td><td>&lt;b&gt;x&lt;/b&gt;</td>"));
  EXPECT_THAT(html, HasSubstr("<td>8</td><td>y</td>"));  // a row past the links is plain text
  EXPECT_THAT(html, HasSubstr("<a href=\"runs/run-1.html\">run &lt;1&gt;</a> · <a href=\"a b&quot;.html\">odd</a>"));
  EXPECT_THAT(html, HasSubstr("<pre>col  &lt;a&gt;\n  *b*</pre>"));
  EXPECT_THAT(html, Not(HasSubstr("<b>x")));
}

TEST(Document, MarkdownLinksCellsListsAndIndentsPreformattedText) {
  const std::string md = render_markdown(sample());
  EXPECT_THAT(md, ::testing::StartsWith("[index](../index.html)\n\n# T\n"));
  EXPECT_THAT(md, HasSubstr("| [7](../runs/run-7.html) | &lt;b>x&lt;/b> |"));
  EXPECT_THAT(md, HasSubstr("[run &lt;1>](runs/run-1.html) · [odd](a%20b\".html)"));
  EXPECT_THAT(md, HasSubstr("\n    col  <a>\n      *b*\n"));
}

}  // namespace
}  // namespace ablate::report
