#!/usr/bin/env bash
# tests/scripts/site_browser_test.sh: `ablate site` in a real browser. Builds a site from
# tests/report/site_fixture.h's store with the real binary, then loads every page from disk (file://)
# in headless Chromium: each must render (its <h1> in the DOM Chromium dumps), log no console message
# (a failed load, a blocked resource, a script error all log one), and every href/src in the rendered
# DOM must name a file of the site (or a part of the page itself): no external URL. Exit 0 passed, 1 a check failed, 77 skipped
# (Chromium missing: scripts/bootstrap.sh installs it, so CI runs this).
#   ABLATE=build/ablate FIXTURE=build/tests/site_fixture_store OUT=/tmp/site-browser \
#     bash tests/scripts/site_browser_test.sh                     (ctest: site_browser)
source "$(dirname "$0")/checks.sh"
: "${ABLATE:?the ablate binary}" "${FIXTURE:?the site_fixture_store binary}" "${OUT:?a folder for the site}"

browser=${CHROMIUM:-}
if [ -z "$browser" ]; then
  for candidate in chromium chromium-browser google-chrome; do
    if command -v "$candidate" > /dev/null; then browser=$candidate; break; fi
  done
fi
if [ -z "$browser" ]; then
  echo "SKIP: no Chromium on PATH (Debian: apt-get install chromium; scripts/bootstrap.sh installs it)"
  exit 77
fi

"$FIXTURE" "$work/receipts.db" || { echo "FAIL: the fixture store could not be written"; exit 1; }
site_output=$("$ABLATE" site "$OUT" --db "$work/receipts.db" 2>&1)
check "ablate site exits 0" "0" "$?"
contains "ablate site names the index" "$OUT/index.html" "$site_output"

profile=$work/profile
pages=0
while IFS= read -r page; do
  pages=$((pages + 1))
  name=${page#"$OUT"/}
  # A fresh profile folder per page keeps one page's state from another; the virtual time budget lets
  # the page finish loading (inline SVG, no scripts) before the DOM is dumped.
  "$browser" --headless --disable-gpu --no-sandbox --no-first-run --disable-extensions \
    --user-data-dir="$profile" --enable-logging=stderr --v=0 --virtual-time-budget=2000 \
    --dump-dom "file://$page" > "$work/dom.html" 2> "$work/log.txt"
  status=$?
  if [ "$status" != 0 ]; then
    echo "FAIL $name: $browser exited $status"; tail -5 "$work/log.txt"; failures=$((failures + 1)); continue
  fi
  if ! grep -q "<h1>" "$work/dom.html"; then
    echo "FAIL $name: no <h1> in the rendered DOM"; failures=$((failures + 1))
  fi
  if grep -q "CONSOLE" "$work/log.txt"; then
    echo "FAIL $name: console messages:"; grep "CONSOLE" "$work/log.txt" | head -5; failures=$((failures + 1))
  fi
  # Every link of the rendered page: relative, and naming a file of the site.
  bad_links=$(python3 - "$work/dom.html" "$page" "$OUT" <<'EOF'
import html.parser, os, sys
dom, page, root = sys.argv[1], sys.argv[2], os.path.realpath(sys.argv[3])
class Links(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.targets = []
    def handle_starttag(self, tag, attrs):
        self.targets += [v for k, v in attrs if k in ("href", "src", "xlink:href") and v is not None]
parser = Links()
parser.feed(open(dom, encoding="utf-8").read())
for target in parser.targets:
    if target.startswith("#"):  # a reference inside the page (the SVGs' shared point shapes)
        continue
    path = os.path.realpath(os.path.join(os.path.dirname(page), target))
    if ":" in target or target.startswith("/") or not path.startswith(root + os.sep) or not os.path.isfile(path):
        print(target)
EOF
)
  if [ -n "$bad_links" ]; then
    echo "FAIL $name: links that do not resolve to a file of the site:"; echo "$bad_links" | head -5
    failures=$((failures + 1))
  fi
done < <(find "$OUT" -name '*.html' | sort)

expected_pages=$(find "$OUT" -name '*.html' | wc -l)
check "every page loaded" "$expected_pages" "$pages"
[ "$pages" -gt 20 ] && echo "ok   $pages pages" || { echo "FAIL only $pages pages"; failures=$((failures + 1)); }
finish "site in $browser"
