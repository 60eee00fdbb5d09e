#!/usr/bin/env bash
# scripts/docs.sh [SITE_DIR]   (default build/site)
# Builds the documentation site (mkdocs.yml, docs/) into SITE_DIR with
# `mkdocs build --strict`, installing Debian's mkdocs first if it is missing;
# open SITE_DIR/index.html in a browser, or serve it while editing with
# `mkdocs serve`. The test docs-site (tests/unit/docs_site.py) builds the
# same site in CI.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=packages.sh
source scripts/packages.sh
install_missing docs mkdocs
site="${1:-build/site}"
mkdocs build --strict --site-dir "$site"
echo "docs: the site is in $site (open $site/index.html)"
