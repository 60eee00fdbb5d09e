#!/usr/bin/env python3
"""docs_site.py headings SOURCE_ROOT | docs_site.py site SOURCE_ROOT

headings: nothing of the README that issue 33 split into docs/ was dropped.
  MOVED below lists every ##/###/#### heading of the README before the split
  (2,199 lines, `grep '^##' README.md` at 3607d0f), with the file that holds
  that section now and its heading there. Each old heading must still be a
  heading in README.md or in a docs/*.md page, and each new place must exist
  as a heading of its file. Also: README.md stays a front door (at most
  README_MAX_LINES lines), and every docs/*.md page is in mkdocs.yml's nav.
  Needs nothing but python3.

site: `mkdocs build --strict` from SOURCE_ROOT into a temporary directory
  (strict: a broken link to a page or file, or a page missing from the nav,
  fails), then every link with a #fragment, in docs/*.md to another page and
  in README.md to docs/PAGE.md#fragment, must name an id of that page's HTML
  (mkdocs 1.4 does not check fragments), and every README link into docs/
  must name a file that exists. Exit 77 (skipped) when mkdocs is not
  installed (Debian's `mkdocs`; .ci/run installs it).
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

README_MAX_LINES = 300

# old heading -> (file that holds it now, its heading there)
MOVED = [
    ("Quick start", "README.md", "Quick start"),
    ("The CLI", "docs/cli.md", "The CLI"),
    ("Pool commands", "docs/cli.md", "Pool commands"),
    ("The API", "docs/cpp-api.md", "The API"),
    ("Linking", "docs/cpp-api.md", "Linking"),
    ("Using shmbox from CMake / pkg-config / meson", "docs/cpp-api.md", "Using shmbox from CMake / pkg-config / meson"),
    ("The C API", "docs/c-api.md", "The C API"),
    ("Python", "docs/python.md", "The package in short"),
    ("Examples", "docs/examples.md", "Examples"),
    ("Policies", "docs/policies.md", "Policies"),
    ("Resizing", "docs/policies.md", "Resizing"),
    ("Lanes, priorities and the control lane", "docs/policies.md", "Lanes, priorities and the control lane"),
    ("Priority boxes (actor-ts's PriorityMailbox)", "docs/policies.md", "Priority boxes (actor-ts's PriorityMailbox)"),
    ("Custom buffers (pobox's `pobox_buf`)", "docs/policies.md", "Custom buffers (pobox's `pobox_buf`)"),
    ("The stash (actor-ts's stash / unstashAll)", "docs/policies.md", "The stash (actor-ts's stash / unstashAll)"),
    ("Owner states, filters and event loops (pobox)", "docs/owner-states.md",
     "Owner states, filters and event loops (pobox)"),
    ("Dead letters", "docs/policies.md", "Dead letters"),
    ("Pools (pooler)", "docs/pools.md", "Pools (pooler)"),
    ("Ownership: the lease, heirs, give-away", "docs/ownership.md", "Ownership: the lease, heirs, give-away"),
    ("Guarantees", "docs/guarantees.md", "Guarantees"),
    ("Reliability", "docs/guarantees.md", "Reliability"),
    ("What is guaranteed", "docs/guarantees.md", "What is guaranteed"),
    ("Failure model", "docs/guarantees.md", "Failure model"),
    ("How it is tested", "docs/guarantees.md", "How it is tested"),
    ("Checking and cleaning up", "docs/guarantees.md", "Checking and cleaning up"),
    ("Permissions", "docs/containers.md", "Permissions"),
    ("Containers", "docs/containers.md", "Containers"),
    ("Across hosts: the NATS JetStream bridge", "docs/across-hosts.md", "Across hosts: the NATS JetStream bridge"),
    ("Design", "docs/design.md", "Design"),
    ("Limits", "docs/status.md", "Limits"),
    ("Tests", "docs/tests.md", "Tests"),
    ("Benchmarks", "docs/benchmarks.md", "Benchmarks"),
    ("The NATS bridge", "docs/benchmarks.md", "The NATS bridge"),
    ("How cost grows", "docs/cost-curves.md", "How cost grows"),
    ("Status", "docs/status.md", "Status"),
]

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def headings(path):
    """The heading texts of a Markdown file, outside fenced code blocks."""
    found, fence = [], False
    for line in open(path, encoding="utf-8"):
        if line.startswith("```"):
            fence = not fence
        elif not fence:
            m = re.match(r"#{1,6} (.*?)\s*#*\s*$", line)
            if m:
                found.append(m.group(1))
    return found


def prose(path):
    """The file's text without its fenced code blocks."""
    out, fence = [], False
    for line in open(path, encoding="utf-8"):
        if line.startswith("```"):
            fence = not fence
        elif not fence:
            out.append(line)
    return "".join(out)


def pages(root):
    docs = os.path.join(root, "docs")
    return sorted(os.path.relpath(os.path.join(d, f), docs)
                  for d, _, files in os.walk(docs) for f in files if f.endswith(".md"))


def check_headings(root):
    errors = []
    files = ["README.md"] + ["docs/" + p for p in pages(root)]
    by_file = {f: headings(os.path.join(root, f)) for f in files}
    everywhere = {h for hs in by_file.values() for h in hs}
    for old, where, new in MOVED:
        if old not in everywhere:
            errors.append(f"the old README heading '{old}' is a heading nowhere (README.md, docs/*.md)")
        if new not in by_file.get(where, []):
            errors.append(f"'{old}' moved to {where}, which has no heading '{new}'")
    n = sum(1 for _ in open(os.path.join(root, "README.md"), encoding="utf-8"))
    if n > README_MAX_LINES:
        errors.append(f"README.md has {n} lines; it is the front door (at most {README_MAX_LINES}): move the "
                      "detail into a docs/ page and link it")
    nav = open(os.path.join(root, "mkdocs.yml"), encoding="utf-8").read()
    for p in pages(root):
        if not re.search(r":\s*" + re.escape(p) + r"\s*$", nav, re.M):
            errors.append(f"docs/{p} is not in mkdocs.yml's nav")
    return errors, f"{len(MOVED)} old headings found in their new places; README.md {n} lines"


def page_html(site, page):
    """The HTML file mkdocs writes for docs/PAGE (use_directory_urls)."""
    stem = page[:-3]
    if stem == "index" or stem.endswith("/index"):
        return os.path.join(site, stem + ".html")
    return os.path.join(site, stem, "index.html")


def check_site(root):
    mkdocs = shutil.which("mkdocs")
    if not mkdocs:
        print("skipped: mkdocs is not installed (apt-get install mkdocs; .ci/run installs it)")
        sys.exit(77)
    errors = []
    with tempfile.TemporaryDirectory(prefix="shmbox-site-") as site:
        r = subprocess.run([mkdocs, "build", "--strict", "--site-dir", site], cwd=root,
                           capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            return [f"mkdocs build --strict failed (exit {r.returncode}):\n{r.stdout}{r.stderr}"], ""
        ids = {}

        def has_id(page, frag):
            if page not in ids:
                html = page_html(site, page)
                text = open(html, encoding="utf-8").read() if os.path.exists(html) else ""
                ids[page] = set(re.findall(r'\bid="([^"]+)"', text))
            return frag in ids[page]

        links = 0
        for p in pages(root):
            for target in LINK.findall(prose(os.path.join(root, "docs", p))):
                if target.startswith(("http:", "https:", "mailto:")):
                    continue
                path, _, frag = target.partition("#")
                dest = os.path.normpath(os.path.join(os.path.dirname(p), path)) if path else p
                if frag and dest.endswith(".md"):
                    links += 1
                    if not has_id(dest, frag):
                        errors.append(f"docs/{p}: link {target}: docs/{dest} has no heading with id '{frag}'")
        for target in LINK.findall(prose(os.path.join(root, "README.md"))):
            if not target.startswith("docs/"):
                continue
            path, _, frag = target.partition("#")
            links += 1
            if not os.path.exists(os.path.join(root, path)):
                errors.append(f"README.md: link {target}: {path} does not exist")
            elif frag and not has_id(path[len("docs/"):], frag):
                errors.append(f"README.md: link {target}: {path} has no heading with id '{frag}'")
    return errors, f"mkdocs build --strict passed; {links} links with fragments or into docs/ checked"


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("headings", "site"):
        sys.exit("usage: docs_site.py headings|site SOURCE_ROOT")
    errors, summary = (check_headings if sys.argv[1] == "headings" else check_site)(sys.argv[2])
    for e in errors:
        print("FAIL: " + e, file=sys.stderr)
    if errors:
        sys.exit(1)
    print("ok: " + summary)


if __name__ == "__main__":
    main()
