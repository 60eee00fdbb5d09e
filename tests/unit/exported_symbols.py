#!/usr/bin/env python3
"""tests/unit/exported_symbols.py LIBSHMBOX_SO INCLUDE_DIR

The installed library exports the public API and nothing else (issue 14,
item 5). Reads `nm -D --defined-only` of LIBSHMBOX_SO (demangled with
c++filt, as nm -DC shows them) and fails when a symbol is not one of:

  * a member of a class that include/shmbox marks `class SHMBOX_API X`
    (Box, Owner, Heir, Producer, slot_loan), not of a class nested in it
    (their private `state`), or its typeinfo / vtable;
  * a free function that include/shmbox declares `SHMBOX_API ... f(`
    (to_string, parse_policy, category, explain);
  * a C function that include/shmbox/shmbox.h declares
    `SHMBOX_C_API ... shmbox_name(` (the C API); every one of them must be
    exported, with the symbol version SHMBOX_0.1, or the later one whose
    node in lib/shmbox.map names it (SHMBOX_0.2: added after the first release);
  * what g++ must emit for the standard library templates and inline
    functions the library uses: weak (W, V) or unique (u) symbols in std::
    (std::string members, shared_ptr's control block, bad_variant_access's
    typeinfo, ...), as long as the only shmbox types they name are public
    ones (an instantiation over a shmbox::detail type or a private nested
    class is a leak).

So anything in shmbox::detail, the crash points (fault_point,
g_fault_armed), a strong std:: symbol or any other C symbol fails it. It also
fails when an expected public symbol is missing, and when the library
contains a crash-point name (the production build has none).
"""
import re
import subprocess
import sys

so, include_dir = sys.argv[1], sys.argv[2]

headers = ""
import glob
for h in sorted(glob.glob(include_dir + "/shmbox/*.hpp")):
    with open(h) as f:
        headers += f.read()
api_classes = set(re.findall(r"\bclass\s+SHMBOX_API\s+(\w+)", headers))
api_functions = set(re.findall(r"^SHMBOX_API\s[^(;]*?(\w+)\(", headers, re.M))
# Public types: every class, struct and enum declared at namespace level in
# the public headers outside namespace detail (templates may name them).
public_types = set(re.findall(r"^(?:class|struct|enum class)\s+(?:SHMBOX_API\s+|\[\[nodiscard\]\]\s+)?(\w+)", headers, re.M))
public_types.discard("mapped_box")
public_types.discard("owner_sink")
public_types.discard("role_lock")
public_types.discard("producer_ctx")

with open(include_dir + "/shmbox/shmbox.h") as f:
    c_header = f.read()
c_functions = set(re.findall(r"^SHMBOX_C_API\s[^(;]*?\b(shmbox_\w+)\(", c_header, re.M))

if not api_classes or not api_functions or len(c_functions) < 50:
    sys.exit(f"FAIL: found no SHMBOX_API classes or functions in {include_dir}/shmbox")

nm = subprocess.run(["nm", "-D", "--defined-only", "--format=posix", so], check=True,
                    capture_output=True, text=True).stdout.splitlines()
entries = [line.split()[:2] for line in nm if line.strip()]
# nm's posix format names a versioned symbol NAME@@VERSION (the default
# version); the version is checked below, the name here.
versions = {}
for e in entries:
    name, _, version = e[0].partition("@")
    versions[name] = version.lstrip("@")
    e[0] = name
mangled = [e[0] for e in entries]
demangled = subprocess.run(["c++filt"], input="\n".join(mangled) + "\n", check=True,
                           capture_output=True, text=True).stdout.splitlines()
assert len(demangled) == len(mangled)

# Toolchain symbols that are never ours: the version node of the library.
ignored_types = {"A"}  # absolute symbols (version definitions)


def shmbox_names(d):
    """Every shmbox::A::B... qualified name mentioned in a demangled symbol."""
    return re.findall(r"shmbox::((?:\w+::)*\w+)", d)


def names_only_public(d):
    for q in shmbox_names(d):
        parts = q.split("::")
        if parts[0] == "detail":
            return False
        if parts[0] not in public_types:
            return False
        if len(parts) > 1 and parts[0] in api_classes and parts[1] == "state":
            return False
    return True


def allowed(kind, d):
    body = d
    for prefix in ("typeinfo name for ", "typeinfo for ", "vtable for "):
        if body.startswith(prefix):
            body = body[len(prefix):]
            break
    if d in c_functions and kind == "T":
        return True
    if body.startswith("shmbox::"):
        # shmbox::Class::member(...) or shmbox::function(...): the symbol's own
        # name is what comes before the parameter list.
        own = re.match(r"shmbox::((?:\w+(?:\[abi:\w+\])?::)*~?\w+(?:\[abi:\w+\])?|(?:\w+::)*operator\S+?)(?:\(|$)", body)
        if not own:
            return False
        parts = [re.sub(r"\[abi:\w+\]", "", p) for p in own.group(1).split("::")]
        if parts[0] in api_classes:
            # a member of the class itself, not of a class nested in it
            return len(parts) == 2 or (len(parts) == 1 and body != d)
        if parts[0] in api_functions and len(parts) == 1:
            return True
        return False
    # Templates and inline functions of the standard library that g++ emits
    # with vague linkage (weak or unique); their template arguments must not
    # be private types of ours.
    if kind in ("W", "V", "u"):
        # (after its return type, if the name shows one: a type or decltype(auto))
        starts_std = re.match(r"(?:decltype\(auto\)\s|[\w:<>,\s\*&]+\s)?std::", body) is not None
        return starts_std and names_only_public(d)
    return False


bad = [f"{k} {d}" for (m, k), d in zip(entries, demangled)
       if k not in ignored_types and not allowed(k, d)]

expected = ["shmbox::Producer::attach(", "shmbox::Owner::acquire(", "shmbox::Box::create(",
            "shmbox::Heir::enlist(", "shmbox::slot_loan::commit(", "shmbox::category()",
            "shmbox::to_string(shmbox::policy)"]
missing = [e for e in expected if not any(d.startswith(e) for d in demangled)]
missing += sorted(c_functions - set(mangled))
# The version each C function must carry: SHMBOX_0.1, or the later node of
# lib/shmbox.map that names it (functions added after the first release).
with open(include_dir + "/../lib/shmbox.map") as f:
    version_script = re.sub(r"/\*.*?\*/", "", f.read(), flags=re.S)
later = {}
for node, body in re.findall(r"(SHMBOX_[0-9.]+)\s*\{([^{}]*)\}\s*SHMBOX_[0-9.]+\s*;", version_script, re.S):
    for name in re.findall(r"\b(shmbox_\w+)\s*;", body):
        later[name] = node
stray = sorted(set(later) - c_functions)
unversioned = sorted(f"{f} ({versions.get(f)}, not {later.get(f, 'SHMBOX_0.1')})" for f in c_functions & set(mangled)
                     if versions.get(f) != later.get(f, "SHMBOX_0.1"))

with open(so, "rb") as f:
    image = f.read()
crash_names = [n for n in (b"producer.after_claim", b"owner.after_take", b"takeover.after_cas",
                           b"SHMBOX_FAULT", b"fault_point", b"g_fault_armed") if n in image]

print(f"{so}: {len(entries)} exported symbols; API classes {sorted(api_classes)}, "
      f"functions {sorted(api_functions)}, {len(c_functions)} C functions")
ok = True
if bad:
    ok = False
    print(f"FAIL: {len(bad)} exported symbol(s) outside the public API:")
    for b in bad:
        print("  " + b)
if missing:
    ok = False
    print("FAIL: public symbols not exported: " + ", ".join(missing))
if unversioned:
    ok = False
    print("FAIL: C functions with another symbol version than lib/shmbox.map gives them: " + ", ".join(unversioned))
if stray:
    ok = False
    print("FAIL: lib/shmbox.map names functions shmbox.h does not declare: " + ", ".join(stray))
if not later:
    ok = False
    print("FAIL: found no later version node in lib/shmbox.map (SHMBOX_0.2 lists the functions added after 0.1)")
if crash_names:
    ok = False
    print("FAIL: the library contains crash-point names: " + ", ".join(n.decode() for n in crash_names))
if ok:
    print("ok: only the public API is exported, and no crash points")
sys.exit(0 if ok else 1)
