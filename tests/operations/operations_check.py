#!/usr/bin/env python3
"""The alert rules and the dashboard of docs/operations/ against promtool and
against what `shmbox metrics` really writes (docs/operations.md).

    operations_check.py rules SOURCE_ROOT   promtool check rules on the alert rules, and on every
                                            dashboard expression (wrapped as recording rules, the
                                            Grafana variables replaced), so each one parses
    operations_check.py unit SOURCE_ROOT    promtool test rules docs/operations/shmbox-alerts.test.yml
    operations_check.py drift SOURCE_ROOT   the dashboard is JSON with unique panel ids; every
                                            shmbox_* name in a rule's expr or a panel's / variable's
                                            query is one the real CLI ($SHMBOX_CLI) writes, and the
                                            labels they match on exist on it; so is every
                                            shmbox_* name in docs/operations.md

rules and unit exit 77 (skipped) when promtool is not installed; drift needs
no promtool. drift makes a box with two lanes (posted into until it refuses,
and a message too large for it) and a pool without a supervisor, named
t-<SHMBOX_TEST_RUN>-ops-... (tests/support/support.hpp test_prefix), runs
`shmbox metrics`, and removes both even when a check fails.

The bridge families (shmbox_bridge_*) appear only while a bridge status
segment exists, which needs a NATS bridge: their names are taken from the
source instead, tools/metrics.cpp (the literal names) and
bridge/bridge_status.cpp (shmbox_bridge_<counter>_total for each counter,
the values of the state label).
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

SKIP = 77
NAME_RE = re.compile(r"\bshmbox_[a-z0-9_]+")
# A selector with matchers: name{label op "value", ...}
SELECTOR_RE = re.compile(r"\b(shmbox_[a-z0-9_]+)\s*\{([^}]*)\}")
MATCHER_RE = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"')
GROUPING_RE = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")

failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL: " + msg, file=sys.stderr)


def paths(root):
    ops = os.path.join(root, "docs", "operations")
    return (os.path.join(ops, "shmbox-alerts.yml"), os.path.join(ops, "shmbox-alerts.test.yml"),
            os.path.join(ops, "shmbox-dashboard.json"))


def rule_exprs(rules_path):
    """The expr of every rule: `expr: |` blocks and one-line `expr: ...` (no YAML module needed)."""
    exprs = []
    lines = open(rules_path, encoding="utf-8").read().splitlines()
    i = 0
    while i < len(lines):
        m = re.match(r"^(\s*)(?:-\s+)?expr:\s*(.*)$", lines[i])
        if not m:
            i += 1
            continue
        indent, rest = len(m.group(1)), m.group(2).strip()
        if rest in ("|", ">", "|-", ">-"):
            block = []
            i += 1
            while i < len(lines) and (not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > indent):
                block.append(lines[i].strip())
                i += 1
            exprs.append(" ".join(block))
        else:
            exprs.append(rest.strip("'\""))
            i += 1
    return exprs


def dashboard_exprs(dash):
    """Every panel's targets' expr (rows' nested panels too) and every query variable's query."""
    exprs = []

    def walk(panels):
        for p in panels:
            for t in p.get("targets", []):
                if t.get("expr"):
                    exprs.append((p.get("title", "?"), t["expr"]))
            walk(p.get("panels", []))

    walk(dash.get("panels", []))
    for v in dash.get("templating", {}).get("list", []):
        if v.get("type") == "query":
            q = v.get("query")
            q = q.get("query", "") if isinstance(q, dict) else (q or "")
            exprs.append(("variable " + v.get("name", "?"), q))
    return exprs


def find_promtool():
    return shutil.which("promtool")


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, **kw)


# ---- rules -----------------------------------------------------------------------

def grafana_to_promql(expr):
    """A panel expression as Prometheus sees it once Grafana replaced its variables."""
    e = expr.replace("$__rate_interval", "5m").replace("$__interval", "1m").replace("$__range", "1h")
    return re.sub(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?", ".*", e)


def cmd_rules(root):
    promtool = find_promtool()
    if not promtool:
        print("promtool is not installed (Debian: apt-get install prometheus): skipped")
        return SKIP
    rules, _, dash_path = paths(root)
    r = run([promtool, "check", "rules", rules])
    print(r.stdout + r.stderr)
    if r.returncode != 0:
        fail(f"promtool check rules {rules}: exit {r.returncode}")
    # The dashboard's expressions, each a recording rule, so promtool parses them.
    dash = json.load(open(dash_path, encoding="utf-8"))
    exprs = [e for title, e in dashboard_exprs(dash) if not e.startswith("label_values(")]
    with tempfile.TemporaryDirectory(prefix="shmbox-ops-") as tmp:
        f = os.path.join(tmp, "dashboard-exprs.yml")
        with open(f, "w", encoding="utf-8") as out:
            out.write("groups:\n  - name: dashboard\n    rules:\n")
            for n, e in enumerate(exprs):
                out.write(f"      - record: dashboard:expr{n}\n        expr: {json.dumps(grafana_to_promql(e))}\n")
        r = run([promtool, "check", "rules", f])
        if r.returncode != 0:
            print(open(f, encoding="utf-8").read(), file=sys.stderr)
            fail(f"a dashboard expression does not parse: {r.stdout}{r.stderr}")
        else:
            print(f"ok: the dashboard's {len(exprs)} expressions parse")
    return 1 if failures else 0


def cmd_unit(root):
    promtool = find_promtool()
    if not promtool:
        print("promtool is not installed (Debian: apt-get install prometheus): skipped")
        return SKIP
    _, tests, _ = paths(root)
    r = run([promtool, "test", "rules", tests])
    print(r.stdout + r.stderr)
    if r.returncode != 0:
        fail(f"promtool test rules {tests}: exit {r.returncode}")
    return 1 if failures else 0


# ---- drift -----------------------------------------------------------------------

def parse_exposition(text):
    """{family or sample name: set of label names}, {(name, label): set of values}."""
    labels, values = {}, {}
    for line in text.splitlines():
        # A family named by HELP/TYPE without samples (the pool's member
        # families of a pool with no members yet) is written too.
        m = re.match(r"^# (?:HELP|TYPE) ([a-zA-Z_:][a-zA-Z0-9_:]*)\b", line)
        if m:
            labels.setdefault(m.group(1), set())
        if not line or line.startswith("#"):
            continue
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+\S+$", line)
        if not m:
            continue
        name = m.group(1)
        labels.setdefault(name, set())
        for lm in MATCHER_RE.finditer(m.group(2) or ""):
            labels[name].add(lm.group(1))
            values.setdefault((name, lm.group(1)), set()).add(lm.group(3))
    return labels, values


def bridge_names_from_source(root):
    """The bridge families' names and the state label's values, from the source."""
    metrics_cpp = open(os.path.join(root, "tools", "metrics.cpp"), encoding="utf-8").read()
    status_cpp = open(os.path.join(root, "bridge", "bridge_status.cpp"), encoding="utf-8").read()
    names = set(re.findall(r'"(shmbox_bridge_[a-z0-9_]+)"', metrics_cpp))
    if '"shmbox_bridge_" + std::string(to_string(which)) + "_total"' not in metrics_cpp:
        fail("tools/metrics.cpp no longer names the bridge counters shmbox_bridge_<counter>_total: update this check")
    for counter in re.findall(r'case bridge_counter::\w+:\s*return "([a-z0-9_]+)";', status_cpp):
        names.add(f"shmbox_bridge_{counter}_total")
    states = set(re.findall(r'case bridge_state::\w+:\s*return "([a-z0-9_]+)";', status_cpp))
    if not states or len(names) < 10:
        fail(f"could not read the bridge families from the source (names {sorted(names)}, states {sorted(states)})")
    return names, states


# The bridge families' labels (tools/metrics.cpp write_bridges: box and role on
# each, state on shmbox_bridge_state, the settings on shmbox_bridge_info).
BRIDGE_LABELS = {"box", "role"}
BRIDGE_EXTRA_LABELS = {"shmbox_bridge_state": {"state"},
                       "shmbox_bridge_info": {"stream", "subject", "durable", "nats"}}


def cli_run(cli, *args, check=True):
    r = run([cli, *args])
    if check and r.returncode != 0:
        raise RuntimeError(f"{cli} {' '.join(args)}: exit {r.returncode}: {r.stdout}{r.stderr}")
    return r


def live_exposition(cli):
    run_id = os.environ.get("SHMBOX_TEST_RUN")
    prefix = f"t-{run_id}-" if run_id else "t-"
    box = f"{prefix}ops-{os.getpid()}-box"
    pool = f"{prefix}ops-{os.getpid()}-pool"
    created = []
    try:
        cli_run(cli, "create", box, "--capacity", "2", "--lanes", "2", "--slot-size", "16")
        created.append("box")
        # Post until the default lane refuses (policy reject), then one too large.
        refused = False
        for n in range(10):
            r = cli_run(cli, "post", box, f"m{n}", check=False)
            if r.returncode == 3:
                refused = True
                break
            if r.returncode != 0:
                raise RuntimeError(f"post: exit {r.returncode}: {r.stderr}")
        if not refused:
            fail(f"box {box} of capacity 2 never refused a post")
        cli_run(cli, "post", box, "--lane", "0", "control")
        if cli_run(cli, "post", box, "x" * 40, check=False).returncode == 0:
            fail("a message of 40 bytes went into a box of slot size 16")
        cli_run(cli, "pool", "create", pool, "--command", "exec sleep 1000", "--init", "0", "--max", "2")
        created.append("pool")
        r = cli_run(cli, "metrics")
        return r.stdout, box, pool
    finally:
        # Removed even when a check failed; the unlink is the last resort.
        if "pool" in created:
            cli_run(cli, "pool", "rm", pool, "--now", "--timeout", "5s", check=False)
        if "box" in created:
            cli_run(cli, "rm", box, check=False)
        for seg in (f"/dev/shm/shmbox.{box}", f"/dev/shm/shmbox-pool.{pool}"):
            if os.path.exists(seg):
                print(f"warning: {seg} was left; unlinking it", file=sys.stderr)
                os.unlink(seg)


def check_expr(where, expr, labels, values, bridge_names, bridge_states):
    names = set(NAME_RE.findall(expr))
    for name in sorted(names):
        if name not in labels and name not in bridge_names:
            fail(f"{where}: {name} is not a metric `shmbox metrics` writes (expression: {expr})")

    def labels_of(name):
        if name in labels:
            return labels[name]
        if name in bridge_names:
            return BRIDGE_LABELS | BRIDGE_EXTRA_LABELS.get(name, set())
        return set()

    for sel in SELECTOR_RE.finditer(expr):
        name = sel.group(1)
        if name not in labels and name not in bridge_names:
            continue
        for m in MATCHER_RE.finditer(sel.group(2)):
            label, op, value = m.groups()
            if label not in labels_of(name):
                fail(f"{where}: {name} has no label {label!r} (it has {sorted(labels_of(name))})")
            elif op == "=" and "$" not in value:
                known = bridge_states if (name, label) == ("shmbox_bridge_state", "state") else values.get((name, label), set())
                if value not in known:
                    fail(f"{where}: {name}{{{label}=\"{value}\"}}: no such value (seen: {sorted(known)})")
    # by/on/... (label lists): each label is one of the expression's metrics'.
    all_labels = set().union(*(labels_of(n) for n in names)) if names else set()
    for g in GROUPING_RE.finditer(expr):
        for label in filter(None, (s.strip() for s in g.group(1).split(","))):
            if label not in all_labels:
                fail(f"{where}: groups by {label!r}, a label none of {sorted(names)} has")
    return names


def cmd_drift(root):
    rules_path, _, dash_path = paths(root)
    cli = os.environ.get("SHMBOX_CLI")
    if not cli or not os.access(cli, os.X_OK):
        fail(f"SHMBOX_CLI={cli!r} is not an executable (meson test sets it)")
        return 1

    # The dashboard: valid JSON, unique panel ids.
    try:
        dash = json.load(open(dash_path, encoding="utf-8"))
    except (OSError, ValueError) as e:
        fail(f"{dash_path} is not valid JSON: {e}")
        return 1
    ids = []

    def walk(panels):
        for p in panels:
            ids.append(p.get("id"))
            walk(p.get("panels", []))

    walk(dash.get("panels", []))
    if None in ids:
        fail("a dashboard panel has no id")
    dup = sorted({i for i in ids if ids.count(i) > 1 and i is not None})
    if dup:
        fail(f"dashboard panel ids used more than once: {dup}")
    print(f"ok: the dashboard is JSON, {len(ids)} panels with unique ids")

    text, box, pool = live_exposition(cli)
    labels, values = parse_exposition(text)
    for want in (f'box="{box}"', f'pool="{pool}"', 'shmbox_rejected_total', 'shmbox_too_large_total'):
        if want not in text:
            fail(f"`shmbox metrics` does not show {want}: the box or pool is missing from it")
    bridge_names, bridge_states = bridge_names_from_source(root)
    live_bridge = {n for n in labels if n.startswith("shmbox_bridge_")}
    if live_bridge - bridge_names:
        fail(f"bridge families in the output that the source check does not know: {sorted(live_bridge - bridge_names)}")

    used = set()
    rule_list = rule_exprs(rules_path)
    if len(rule_list) < 6:
        fail(f"{rules_path}: only {len(rule_list)} rule expressions found")
    for n, e in enumerate(rule_list):
        used |= check_expr(f"{os.path.basename(rules_path)} rule {n}", e, labels, values, bridge_names, bridge_states)
    dash_list = dashboard_exprs(dash)
    # label_values(METRIC, LABEL) of the template variables: LABEL is METRIC's.
    for title, e in dash_list:
        m = re.match(r"^label_values\(\s*(shmbox_[a-z0-9_]+)\s*,\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)$", e)
        if m and m.group(1) in labels and m.group(2) not in labels[m.group(1)]:
            fail(f"dashboard {title}: {m.group(1)} has no label {m.group(2)!r}")
    for title, e in dash_list:
        used |= check_expr(f"dashboard panel {title!r}", e, labels, values, bridge_names, bridge_states)
    # docs/operations.md names no metric that does not exist either.
    doc = os.path.join(root, "docs", "operations.md")
    for name in sorted(set(NAME_RE.findall(open(doc, encoding="utf-8").read()))):
        if name not in labels and name not in bridge_names:
            fail(f"docs/operations.md names {name}, which `shmbox metrics` does not write")
    print(f"ok: checked {len(rule_list)} rule and {len(dash_list)} dashboard expressions, "
          f"{len(used)} metric names ({len([u for u in used if u.startswith('shmbox_bridge_')])} bridge names "
          f"against the source, the rest against `shmbox metrics`)")
    return 1 if failures else 0


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("rules", "unit", "drift"):
        print(__doc__, file=sys.stderr)
        return 2
    rc = {"rules": cmd_rules, "unit": cmd_unit, "drift": cmd_drift}[sys.argv[1]](sys.argv[2])
    if rc == 0 and failures:
        rc = 1
    return rc


if __name__ == "__main__":
    sys.exit(main())
