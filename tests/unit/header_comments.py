#!/usr/bin/env python3
"""Every public function in the public headers has a comment.

    header_comments.py INCLUDE_DIR      checks INCLUDE_DIR/shmbox/*.hpp and *.h
    header_comments.py --self-test      checks the checker on the samples below
    header_comments.py --list INCLUDE_DIR   every function seen, and the verdict

Fails (exit 1) naming file:line and the function for each public function
declaration without a comment. What counts:

* Declarations checked: free functions at namespace scope (and in extern "C"
  blocks), and member functions (static factories included) in the public
  sections of classes and structs; inline definitions count like
  declarations (the body is not looked at).
* Documented means either
  - a trailing comment (// or /* */) on a line of the declaration (up to its
    ';' or '{'), other than a bare tool marker (NOLINT..., IWYU pragma), or
  - a comment in the paragraph above it: going up from the declaration
    through lines of the same scope, a comment line is met before
      - a blank line (or a preprocessor line),
      - an access label (public:/private:/protected:) or the line that
        opens the enclosing class/namespace,
      - a declaration with its own trailing comment (that comment is its
        own, not the group's), or an exempt special member (below).
    So one comment block covers a group of consecutive declarations written
    without a blank line between them: the overloads of Owner::acquire
    under one comment, or a run of accessors under one line. Lines inside
    inline function bodies are skipped (a comment in a body documents
    nothing outside it).
* Exempt (nothing to say that the signature does not):
  - private and protected sections (and everything nested in them),
    namespace detail, anonymous namespaces;
  - declarations marked = default or = delete;
  - copy/move constructors and copy/move assignment operators;
  - destructors (what one releases belongs in the class comment; a
    destructor that does something surprising should still say so);
  - conversion operators (explicit operator bool);
  - friend declarations, using/typedef aliases, data members, enums.
* Not understood on purpose: preprocessor lines are skipped (so a function
  declared by a macro is not seen); templates' arguments are skipped by
  bracket matching, which assumes no '<' or '>' comparisons before the
  function's name.
"""

import pathlib
import re
import sys
import tempfile

KEYWORD_SCOPES = ("namespace", "class", "struct", "union", "enum")
TOOL_MARKER = re.compile(r"^\s*(NOLINT|IWYU pragma:|clang-format (on|off)\b)")  # a note for a tool, not a reader


def says_something(comment):
    """A trailing comment that documents: not empty, not only a tool's marker."""
    return comment is not None and comment.strip(" */") != "" and not TOOL_MARKER.match(comment)


ACCESS = re.compile(r"^(public|private|protected)\s*$")


def scan(text):
    """Returns (code, line_info): the text with comments, strings and
    preprocessor lines blanked out (same length, newlines kept), and per line
    (is_comment_line, trailing_comment_text or None)."""
    out = []
    n = len(text)
    i = 0
    lines = text.split("\n")
    comment_only = [False] * (len(lines) + 1)
    trailing = [None] * (len(lines) + 1)
    has_code = [False] * (len(lines) + 1)
    line = 0
    at_line_start = True
    in_pp = False
    while i < n:
        c = text[i]
        if c == "\n":
            out.append(c)
            if not (in_pp and i > 0 and text[i - 1] == "\\"):
                in_pp = False
            line += 1
            at_line_start = True
            i += 1
            continue
        if in_pp:
            out.append(" ")
            i += 1
            continue
        if at_line_start and c == "#":
            in_pp = True
            out.append(" ")
            i += 1
            continue
        if c in " \t\r":
            out.append(c)
            i += 1
            continue
        at_line_start = False
        if text.startswith("//", i):
            end = text.find("\n", i)
            end = n if end < 0 else end
            body = text[i + 2:end]
            if has_code[line]:
                trailing[line] = (trailing[line] or "") + body
            else:
                comment_only[line] = True
            out.append(" " * (end - i))
            i = end
            continue
        if text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            body = text[i + 2:end - 2]
            first = line
            for k, part in enumerate(body.split("\n")):
                ln = first + k
                if k == 0 and has_code[ln]:
                    trailing[ln] = (trailing[ln] or "") + part
                else:
                    comment_only[ln] = True
            out.append("".join(ch if ch == "\n" else " " for ch in text[i:end]))
            line += text.count("\n", i, end)
            i = end
            continue
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + " " * (j - i - 1) + c)
            has_code[line] = True
            i = j + 1
            continue
        out.append(c)
        has_code[line] = True
        i += 1
    # A line with code and a comment after it: the comment is trailing.
    # A /* */ comment that ends a line that had code before it was recorded as trailing above.
    for ln in range(len(lines)):
        if has_code[ln] and comment_only[ln]:
            # /* comment */ then code on one line: counts as the code's comment.
            comment_only[ln] = False
            trailing[ln] = trailing[ln] or "leading block comment"
    return "".join(out), comment_only, trailing, has_code


def strip_template_prefix(s):
    """Removes a leading `template <...>` (balanced)."""
    m = re.match(r"^template\s*<", s)
    if m is None:
        return s
    depth = 0
    for j in range(m.end() - 1, len(s)):
        depth += {"<": 1, ">": -1}.get(s[j], 0)
        if depth == 0:
            return s[j + 1:].lstrip()
    return ""


def strip_templates(s):
    """Removes <...> template argument lists (after operator names are protected)."""
    out = []
    depth = 0
    prev_word = ""
    i = 0
    while i < len(s):
        c = s[i]
        if c == "<" and (depth > 0 or (prev_word and (prev_word[0].isalpha() or prev_word[0] == "_"))) \
                and not s.startswith("<<", i) and not (i > 0 and s[i - 1] == "<"):
            depth += 1
        elif c == ">" and depth > 0:
            depth -= 1
            if depth == 0:
                out.append(" ")
        elif depth == 0:
            out.append(c)
        if c.isalnum() or c == "_":
            prev_word = prev_word + c if (i > 0 and (s[i - 1].isalnum() or s[i - 1] == "_")) else c
        elif not c.isspace():
            prev_word = ""
        i += 1
    return "".join(out)


OPERATOR = re.compile(r"\boperator\s*(\(\)|\[\]|->\*?|<=>|<<=?|>>=?|&&|\|\||\+\+|--|[-+*/%^&|~!=<>,]=?"
                      r"|new\s*(\[\])?|delete\s*(\[\])?|\"\"\s*\w+)")
CONVERSION = re.compile(r"\boperator\s+[\w:<>*&\s]+?(?=\s*\()")


def analyse(stmt):
    """For a statement (without its ';' or body): None if it declares no
    function, else (name, params)."""
    s = " ".join(stmt.split())
    if not s or re.match(r"^(friend|using|typedef|static_assert|template\s*<[^>]*>\s*(class|struct|union)\b)\b", s):
        return None
    s = re.sub(r"\[\[.*?\]\]", " ", s)
    s = re.sub(r"\b(alignas|__attribute__|__declspec)\s*\(\(?.*?\)\)?", " ", s)
    s = strip_template_prefix(s)
    s = OPERATOR.sub(lambda m: "operator_" + "".join(f"{ord(ch):02x}" for ch in m.group(1).replace(" ", "")), s)
    s = CONVERSION.sub("operator_conversion", s)
    s = s.replace("->", " _arrow_ ")
    s = strip_templates(s)
    paren = s.find("(")
    if paren < 0:
        return None
    for stop in ("=", "{"):
        k = s.find(stop)
        if 0 <= k < paren:
            return None  # a variable with an initializer
    m = re.search(r"(~?[A-Za-z_]\w*)\s*$", s[:paren])
    if m is None:
        return None
    name = m.group(1)
    if name in ("alignas", "decltype", "sizeof", "noexcept", "static_assert", "requires", "return"):
        return None
    # The parameter list: to its matching ')'.
    depth = 0
    for j in range(paren, len(s)):
        depth += {"(": 1, ")": -1}.get(s[j], 0)
        if depth == 0:
            break
    params = s[paren + 1:j].strip()
    if params.startswith(("*", "&", "^")):
        return None  # a pointer to function (a data member or variable)
    rest = s[j + 1:]
    return name, params, rest


def exempt(name, params, rest, cls):
    if re.search(r"=\s*(default|delete)\b", rest):
        return "= default/delete"
    if name.startswith("~"):
        return "destructor"
    if name == "operator_conversion":
        return "conversion operator"
    if cls is not None:
        copy_or_move = re.fullmatch(rf"(const\s+)?{re.escape(cls)}\s*(&&|&)\s*\w*", params)
        if copy_or_move and name in (cls, "operator_" + "".join(f"{ord(ch):02x}" for ch in "=")):
            return "copy/move"
    return None


def pretty_name(name):
    """operator_5b5d -> operator[] (analyse() spells operators in hex)."""
    if name == "operator_conversion":
        return "operator (conversion)"
    return re.sub(r"operator_([0-9a-f]+)", lambda m: "operator" + bytes.fromhex(m.group(1)).decode(), name)


class Scope:
    def __init__(self, kind, name, public):
        self.kind = kind      # namespace, class, struct, enum, block
        self.name = name
        self.public = public  # the current access of this scope
        self.exempt = False   # namespace detail, anonymous namespace


def check(path, display=None, listing=None):
    """Returns the problems of one header, one string each. `listing` (a
    list), if given, gets one line per function seen and what was decided."""
    display = display or str(path)
    text = pathlib.Path(path).read_text()
    code, comment_only, trailing, has_code = scan(text)
    line_of = []  # line number (0-based) of every character of code
    ln = 0
    for ch in code:
        line_of.append(ln)
        if ch == "\n":
            ln += 1
    depth_at_line = {}  # brace depth at the start of each line
    barriers = set()  # lines of exempt special members: a comment group does not reach past them
    problems = []
    scopes = [Scope("namespace", "", True)]
    stmt = []
    stmt_start = None
    paren = 0
    i = 0
    n = len(code)

    def visible():
        return all(s.public and not s.exempt for s in scopes)

    def documented(first, last, depth):
        for ln in range(first, last + 1):
            if says_something(trailing[ln]):
                return True
        ln = first - 1
        while ln >= 0:
            d = depth_at_line.get(ln, depth)
            if d < depth:
                return False  # the line that opened this scope
            if comment_only[ln] and d == depth:
                return True
            if d == depth and (ln in barriers or says_something(trailing[ln])):
                return False  # a special member, or another declaration's own comment: the group ends
            if d == depth and not has_code[ln] and not comment_only[ln]:
                return False  # a blank line
            if d == depth and ACCESS.match(code_lines[ln].strip().rstrip(":").strip()) and \
                    code_lines[ln].strip().endswith(":"):
                return False
            ln -= 1
        return False

    code_lines = code.split("\n")

    def finish_statement(end_pos):
        nonlocal stmt, stmt_start
        s = "".join(stmt)
        first = stmt_start
        stmt, stmt_start = [], None
        if first is None or not visible() or scopes[-1].kind in ("enum", "block"):
            return
        found = analyse(s)
        if found is None:
            return
        name, params, rest = found
        cls = scopes[-1].name if scopes[-1].kind in ("class", "struct", "union") else None
        last = line_of[end_pos] if end_pos < n else line_of[-1]
        why = exempt(name, params, rest, cls)
        where = f"{cls}::" if cls else ""
        if listing is not None:
            ok = why or ("documented" if documented(line_of[first], last, len(scopes)) else "NO COMMENT")
            listing.append(f"{display}:{line_of[first] + 1}: {where}{pretty_name(name)}: {ok}")
        if why:
            if name != "operator_conversion":
                barriers.update(range(line_of[first], last + 1))
            return
        if not documented(line_of[first], last, len(scopes)):
            problems.append(f"{display}:{line_of[first] + 1}: {where}{pretty_name(name)}() has no comment")

    def skip_braces(pos):
        """pos at '{': returns the index after its matching '}'."""
        depth = 0
        while pos < n:
            if code[pos] == "{":
                depth += 1
            elif code[pos] == "}":
                depth -= 1
                if depth == 0:
                    return pos + 1
            pos += 1
        return n

    line_seen = -1
    while i < n:
        c = code[i]
        ln = line_of[i]
        if ln != line_seen:
            for k in range(line_seen + 1, ln + 1):
                depth_at_line[k] = len(scopes)
            line_seen = ln
        if c == "(":
            paren += 1
        elif c == ")":
            paren -= 1
        if paren > 0 or c in "()":
            if stmt_start is None and not c.isspace():
                stmt_start = i
            stmt.append(c)
            i += 1
            continue
        if c == ";":
            finish_statement(i)
            i += 1
            continue
        if c == ":" and not code.startswith("::", i) and not (i > 0 and code[i - 1] == ":"):
            label = "".join(stmt).strip()
            if ACCESS.match(label) and scopes[-1].kind in ("class", "struct", "union"):
                scopes[-1].public = label == "public"
                stmt, stmt_start = [], None
                i += 1
                continue
        if c == "{":
            s = " ".join("".join(stmt).split())
            head = strip_template_prefix(s)
            head = re.sub(r"\[\[.*?\]\]", " ", head).strip()
            word = head.split(" ", 1)[0] if head else ""
            if word in KEYWORD_SCOPES or re.match(r'^extern\s*"\s*"$', head) or head.startswith('extern "'):
                kind = "namespace" if word in ("namespace", "") or head.startswith("extern") else word
                if word == "enum":
                    kind = "enum"
                names = re.split(r"(?<!:):(?!:)", head)[0].split()
                names = [w for w in names[1:] if w not in ("class", "struct", "final") and not w.isupper()]
                name = strip_templates(names[-1]).strip().split("::")[-1] if names else ""
                scope = Scope(kind, name, kind != "class")
                if kind == "namespace" and (name in ("", "detail") and not head.startswith("extern")):
                    scope.exempt = True
                scopes.append(scope)
                stmt, stmt_start = [], None
                i += 1
                continue
            end = skip_braces(i)
            # Lines inside the braces are deeper than this scope (a comment in a
            # body documents nothing outside it).
            for k in range(line_of[i] + 1, line_of[end - 1] + 1):
                depth_at_line[k] = len(scopes) + 1
            line_seen = max(line_seen, line_of[end - 1])
            if analyse("".join(stmt)) is not None:
                # A function's body: the declaration ends here.
                finish_statement(i)
            else:
                # A brace initializer: part of the statement.
                stmt.append(" {} ")
            i = end
            continue
        if c == "}":
            if len(scopes) > 1:
                scopes.pop()
            stmt, stmt_start = [], None
            i += 1
            continue
        if stmt_start is None and not c.isspace():
            stmt_start = i
        stmt.append(c)
        i += 1
    return problems


SELF_TEST_HEADER = """\
// sample.hpp
#pragma once
namespace sample {

namespace detail {
void hidden();
}

// Documented above.
int documented();
int trailing();  // documented on its line

int undocumented_free(int a,
                      int b);

// A group: one comment for both.
int group_a();
int group_b();

int after_blank();
/* A block comment. */
void block_commented();

using fn = int (*)(int);
inline constexpr int kLimit = 1 << 4;

class SAMPLE_API Widget {
 public:
  // Makes one.
  static Widget make();
  Widget(Widget&&) noexcept;
  Widget& operator=(const Widget&) = delete;
  ~Widget();
  explicit operator bool() const noexcept { return true; }
  int size() const noexcept { return 0; }
  int marked() const;  // NOLINT
  std::function<int(int)> member{};
  int (*callback)(int) = nullptr;
  // Indexes.
  int operator[](int i) const;
  int in_group(int i) const;

  template <class F>
  void each(F&& f) {
    f();
  }

 private:
  void secret();
  struct inner {
    void also_secret();
  };
};

struct options {
  int x = 0;  // a field
  bool ok() const { return x == 0; }
};

}  // namespace sample

extern "C" {
/* Posts. */
SHMBOX_C_API int shmbox_post(shmbox_producer* p, const void* data, size_t size);

SHMBOX_C_API void shmbox_free(void* p);
// Closes.
SHMBOX_C_API void shmbox_close(shmbox_producer* p);
}
"""

SELF_TEST_EXPECTED = [
    "13: undocumented_free()",
    "20: after_blank()",
    "35: Widget::size()",
    "36: Widget::marked()",
    "43: Widget::each()",
    "57: options::ok()",
    "66: shmbox_free()",
]


def self_test():
    with tempfile.TemporaryDirectory() as d:
        p = pathlib.Path(d) / "sample.hpp"
        p.write_text(SELF_TEST_HEADER)
        got = [x.split(":", 1)[1].replace(" has no comment", "") for x in check(p, "sample.hpp")]
    if got != SELF_TEST_EXPECTED:
        print("header_comments.py self-test FAILED", file=sys.stderr)
        print("  expected: " + "; ".join(SELF_TEST_EXPECTED), file=sys.stderr)
        print("  got:      " + "; ".join(got), file=sys.stderr)
        return 1
    print(f"self-test ok: the {len(got)} undocumented functions of the sample were found, nothing else")
    return 0


def main(argv):
    if len(argv) == 2 and argv[1] == "--self-test":
        return self_test()
    if len(argv) == 3 and argv[1] == "--list":
        # Every function seen and the verdict: to see what the checker understood.
        for h in sorted(pathlib.Path(argv[2]).glob("shmbox/*.h*")):
            listing = []
            check(h, h.name, listing)
            print("\n".join(listing))
        return 0
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    root = pathlib.Path(argv[1]) / "shmbox"
    headers = sorted(root.glob("*.hpp")) + sorted(root.glob("*.h"))
    if not headers:
        print(f"header_comments.py: no headers in {root}", file=sys.stderr)
        return 1
    if self_test() != 0:
        return 1
    problems = []
    for h in headers:
        problems += check(h, str(h.relative_to(root.parent.parent) if root.parent.parent in h.parents else h))
    for p in problems:
        print(p)
    print(f"{len(headers)} headers, {len(problems)} public functions without a comment")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
