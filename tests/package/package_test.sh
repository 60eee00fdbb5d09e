#!/usr/bin/env bash
# tests/package/package_test.sh SOURCE_ROOT BUILD_ROOT PREFIX LIBDIR VERSION MESON SANITIZE
# (suite 'package'; tests/meson.build passes the arguments)
#
# shmbox as a user gets it, by the docs' own lines and programs. `meson
# install --destdir` puts this build into a temporary stage; then the
# producer/owner pair of the docs (README.md's <!-- hello-example --> in C++,
# docs/c-api.md's <!-- c-hello-example --> in C, extracted by
# tests/unit/extract_example.py) is built each way the docs give and run as
# two processes by tests/unit/run_hello.py (`hello own BOX`, then once it
# says ready `hello produce BOX`; hello 0..2, both exit 0, the box gone):
#   1. CMake: a CMakeLists.txt of the README's two lines (<!-- install-cmake
#      -->: find_package(shmbox CONFIG REQUIRED), target_link_libraries(app
#      PRIVATE shmbox::shmbox)) around add_executable(app hello.cpp), with
#      CMAKE_PREFIX_PATH at the stage, as the README's staged-install note
#      says; also examples/cmake-consumer (main.cpp: one process creates a
#      box, posts five messages, receives and checks them, removes the box).
#      The package must be the staged one, answer find_package's version
#      checks, and the programs load the staged libshmbox.so.<soversion>;
#   2. pkg-config: the README's line `c++ -std=c++20 hello.cpp -o hello
#      $(pkg-config --cflags --libs shmbox)` as written, with the staged
#      PKG_CONFIG_PATH and PKG_CONFIG_SYSROOT_DIR (the .pc file holds the
#      real prefix) and LD_LIBRARY_PATH of the note;
#   2b. pkg-config, C: docs/c-api.md's line `cc -std=c99 hello.c -o hello
#      $(pkg-config ...)` as written; also examples/c-consumer/main.c (the
#      one-process program through the C API) by cc -std=c99 -pedantic -Werror;
#   3. meson: examples/meson-consumer (its meson.build holds the README's
#      dependency() lines, <!-- install-meson -->, word for word) with the
#      README's hello.cpp beside main.cpp and one executable('hello') more,
#      this source tree as subprojects/shmbox (--wrap-mode=forcefallback:
#      never an installed shmbox), building only the library of shmbox.
# Boxes are named as the tests name theirs (t-<SHMBOX_TEST_RUN>-...,
# tests/support/support.hpp); they and the temporary directory go also on failure.
# cmake and pkg-config are build dependencies (scripts/setup.sh installs
# them): their absence fails the test, saying what to install. A build with
# sanitizers skips it (77): its libshmbox.so needs the sanitizer runtime in
# every program that links it; the plain build (scripts/test.sh build) runs it.
set -euo pipefail

if [ $# -ne 7 ]; then
  echo "usage: $0 SOURCE_ROOT BUILD_ROOT PREFIX LIBDIR VERSION MESON SANITIZE" >&2
  exit 2
fi
src=$1 build=$2 prefix=$3 libdir=$4 version=$5 meson=$6 sanitize=$7

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

if [ "$sanitize" != none ]; then
  echo "skipped: this build's libshmbox.so is built with -fsanitize=$sanitize; the package test runs in a build without sanitizers"
  exit 77
fi
command -v cmake >/dev/null || fail "cmake is not installed: apt-get install -y cmake (scripts/setup.sh installs it)"
command -v pkg-config >/dev/null || fail "pkg-config is not installed: apt-get install -y pkg-config (scripts/setup.sh installs it)"
read -ra cxx <<<"${CXX:-c++}"
command -v "${cxx[0]}" >/dev/null || fail "no C++ compiler '${cxx[0]}' (CXX): apt-get install -y g++"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/shmbox-package.XXXXXX")
box="t-${SHMBOX_TEST_RUN:+$SHMBOX_TEST_RUN-}package-$$"  # the tests' prefix (tests/support/support.hpp test_prefix)
cleanup() {
  rm -f "/dev/shm/shmbox.$box-"*  # every way's box ($$ makes the prefix this run's)
  rm -rf "$tmp"
}
trap cleanup EXIT

# step NAME COMMAND...: runs COMMAND with its output in $tmp/NAME.log; on
# failure prints the end of the log and fails.
step() {
  local name=$1
  shift
  if ! "$@" >"$tmp/$name.log" 2>&1; then
    tail -n 40 "$tmp/$name.log" >&2
    fail "$name: $* (exit status above)"
  fi
}

# check_links WAY BINARY LIBDIR: BINARY needs libshmbox.so.<soversion> and
# the loader takes it from LIBDIR (with the LD_LIBRARY_PATH in force).
soname="libshmbox.so.${version%%.*}"
check_links() {
  local way=$1 binary=$2 dir=$3 needed resolved
  needed=$(readelf -d "$binary" | sed -n 's/.*(NEEDED).*\[\(libshmbox[^]]*\)\].*/\1/p')
  [ "$needed" = "$soname" ] || fail "$way: $binary needs '$needed', not $soname"
  resolved=$(ldd "$binary" | awk '$1 == "'"$soname"'" { print $3 }')
  [ "$resolved" -ef "$dir/$soname" ] || fail "$way: $binary loads $soname from '$resolved', not from $dir"
}

# check_program WAY BINARY LIBDIR: check_links, then the one-process example
# program runs through a box of its own.
check_program() {
  local way=$1 binary=$2 dir=$3
  check_links "$way" "$binary" "$dir"
  step "$way-run" "$binary" "$box-$way"
  grep -q "^ok: 5 messages" "$tmp/$way-run.log" || fail "$way: unexpected output: $(cat "$tmp/$way-run.log")"
  [ ! -e "/dev/shm/shmbox.$box-$way" ] || fail "$way: the program left its box /dev/shm/shmbox.$box-$way"
  echo "$way: $(cat "$tmp/$way-run.log")"
}

# check_pair WAY BINARY LIBDIR: check_links, then the docs' hello as the
# docs run it: the owner and a producer, two processes (run_hello.py bounds
# every wait, kills what outlives it and removes the box however it ends).
check_pair() {
  local way=$1 binary=$2 dir=$3
  check_links "$way" "$binary" "$dir"
  step "$way-pair" python3 "$src/tests/unit/run_hello.py" --box "$box-$way" "$binary"
  grep -q "^ok: owner and producer in two processes" "$tmp/$way-pair.log" ||
    fail "$way: unexpected output: $(cat "$tmp/$way-pair.log")"
  [ ! -e "/dev/shm/shmbox.$box-$way" ] || fail "$way: the pair left its box /dev/shm/shmbox.$box-$way"
  echo "$way: $(tail -n 1 "$tmp/$way-pair.log")"
}

# The docs' programs and lines: each block after its marker, and the
# commands (`...` spans) the docs give to build a hello.
docs="$tmp/docs"
mkdir "$docs"
extract() { step "extract-$3" python3 "$src/tests/unit/extract_example.py" "$@"; }
extract "$src/README.md" "$docs/hello.cpp" hello-example
extract "$src/README.md" "$docs/install.cmake" install-cmake cmake
extract "$src/README.md" "$docs/install.meson" install-meson meson
extract "$src/docs/c-api.md" "$docs/hello.c" c-hello-example c
# doc_line FILE START: the first `...` span of FILE that begins with START.
# shellcheck disable=SC2016  # the backquotes are the docs' own
doc_line() {
  local line
  line=$(grep -o '`'"$2"'[^`]*`' "$1" | head -n 1 | tr -d '`')
  [ -n "$line" ] || fail "$1 has no \`$2...\` line"
  echo "$line"
}
cxx_line=$(doc_line "$src/README.md" 'c++ -std=c++20 hello.cpp ')
c_line=$(doc_line "$src/docs/c-api.md" 'cc -std=c99 hello.c ')

# The stage. meson test has just built everything (--no-rebuild keeps this
# test from building in the build directory while other tests run).
stage="$tmp/stage"
step install "$meson" install -C "$build" --destdir "$stage" --no-rebuild --quiet
sprefix="$stage$prefix"
case "$libdir" in
  /*) slibdir="$stage$libdir" ;;
  *) slibdir="$sprefix/$libdir" ;;
esac
config_dir="$slibdir/cmake/shmbox"
for f in shmboxConfig.cmake shmboxConfigVersion.cmake; do
  [ -f "$config_dir/$f" ] || fail "meson install did not install $config_dir/$f (cmake missing when the build was configured? apt-get install -y cmake, then meson setup --reconfigure $build)"
done
[ -f "$slibdir/pkgconfig/shmbox.pc" ] || fail "meson install did not install $slibdir/pkgconfig/shmbox.pc"
[ -f "$slibdir/libshmbox.so.$version" ] || fail "meson install did not install $slibdir/libshmbox.so.$version"
echo "staged: $(cd "$stage" && find . -path '*shmbox*' \( -name '*.cmake' -o -name '*.pc' -o -name 'libshmbox.so*' \) | sort | tr '\n' ' ')"

# 1. CMake
step cmake-configure cmake -S "$src/examples/cmake-consumer" -B "$tmp/cmake" \
  -DCMAKE_PREFIX_PATH="$sprefix" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF -DCMAKE_BUILD_TYPE=Release
found_dir=$(sed -n 's/^shmbox_DIR:PATH=//p' "$tmp/cmake/CMakeCache.txt")
[ "$found_dir" -ef "$config_dir" ] || fail "cmake: find_package(shmbox) found '$found_dir', not the staged $config_dir"
step cmake-build cmake --build "$tmp/cmake" -j 2
LD_LIBRARY_PATH="$slibdir" check_program cmake "$tmp/cmake/shmbox-consumer" "$slibdir"
# The README's two lines, the README's hello.
mkdir "$tmp/cmake-readme"
cp "$docs/hello.cpp" "$tmp/cmake-readme/"
{
  echo "cmake_minimum_required(VERSION 3.16)"
  echo "project(app LANGUAGES CXX)"
  grep '^find_package' "$docs/install.cmake"
  echo "add_executable(app hello.cpp)"
  grep -v -e '^#' -e '^find_package' "$docs/install.cmake"
} >"$tmp/cmake-readme/CMakeLists.txt"
grep -q '^target_link_libraries(app ' "$tmp/cmake-readme/CMakeLists.txt" ||
  fail "cmake-readme: README.md's <!-- install-cmake --> block links no target 'app': $(cat "$docs/install.cmake")"
step cmake-readme-configure cmake -S "$tmp/cmake-readme" -B "$tmp/cmake-readme/build" \
  -DCMAKE_PREFIX_PATH="$sprefix" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF
found_dir=$(sed -n 's/^shmbox_DIR:PATH=//p' "$tmp/cmake-readme/build/CMakeCache.txt")
[ "$found_dir" -ef "$config_dir" ] || fail "cmake-readme: find_package(shmbox) found '$found_dir', not the staged $config_dir"
step cmake-readme-build cmake --build "$tmp/cmake-readme/build" -j 2
LD_LIBRARY_PATH="$slibdir" check_pair cmake-readme "$tmp/cmake-readme/build/app" "$slibdir"

# find_package(shmbox X.Y): this major.minor is accepted, the next major is
# not; while 0.x, an earlier minor is not either (cmake/meson.build).
IFS=. read -r major minor _ <<<"$version"
mkdir "$tmp/version"
cat >"$tmp/version/CMakeLists.txt" <<'EOF'
cmake_minimum_required(VERSION 3.16)
project(shmbox-version LANGUAGES CXX)
foreach(want IN LISTS ACCEPT REFUSE)
  unset(shmbox_DIR CACHE)
  find_package(shmbox ${want} CONFIG QUIET)
  if(want IN_LIST ACCEPT AND NOT shmbox_FOUND)
    message(FATAL_ERROR "find_package(shmbox ${want}) refused shmbox ${shmbox_VERSION}")
  elseif(want IN_LIST REFUSE AND shmbox_FOUND)
    message(FATAL_ERROR "find_package(shmbox ${want}) accepted shmbox ${shmbox_VERSION}")
  endif()
  message(STATUS "find_package(shmbox ${want}): found=${shmbox_FOUND}")
endforeach()
EOF
refuse="$((major + 1)).0"
if [ "$major" = 0 ] && [ "$minor" -gt 0 ]; then refuse="$refuse;0.$((minor - 1))"; fi
step cmake-version cmake -S "$tmp/version" -B "$tmp/version/build" -DCMAKE_PREFIX_PATH="$sprefix" \
  -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF "-DACCEPT=$major.$minor;$version" "-DREFUSE=$refuse"
echo "cmake: find_package(shmbox X) accepts $major.$minor and $version, refuses ${refuse//;/ and }"

# 2. pkg-config
flags=$(PKG_CONFIG_PATH="$slibdir/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$stage" pkg-config --cflags --libs shmbox) ||
  fail "pkg-config --cflags --libs shmbox failed with PKG_CONFIG_PATH=$slibdir/pkgconfig"
pc_version=$(PKG_CONFIG_PATH="$slibdir/pkgconfig" pkg-config --modversion shmbox)
[ "$pc_version" = "$version" ] || fail "pkg-config: shmbox.pc says version '$pc_version', not $version"
case " $flags " in
  *" -L$slibdir "*) ;;
  *) fail "pkg-config: '$flags' has no -L$slibdir" ;;
esac
# The README's line, as written, in a directory with the README's hello.cpp
# (the flags are the stage's: checked above).
mkdir "$tmp/pkg-config"
cp "$docs/hello.cpp" "$tmp/pkg-config/"
step pkg-config-build env -C "$tmp/pkg-config" PKG_CONFIG_PATH="$slibdir/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$stage" \
  bash -c "$cxx_line"
LD_LIBRARY_PATH="$slibdir" check_pair pkg-config "$tmp/pkg-config/hello" "$slibdir"
# 2b. the C API from C: docs/c-api.md's line, as written, with its hello.c;
# and examples/c-consumer with every warning an error.
read -ra cc <<<"${CC:-cc}"
command -v "${cc[0]}" >/dev/null || fail "no C compiler '${cc[0]}' (CC): apt-get install -y gcc"
mkdir "$tmp/pkg-config-c"
cp "$docs/hello.c" "$tmp/pkg-config-c/"
step pkg-config-c-build env -C "$tmp/pkg-config-c" PKG_CONFIG_PATH="$slibdir/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$stage" \
  bash -c "$c_line"
LD_LIBRARY_PATH="$slibdir" check_pair pkg-config-c "$tmp/pkg-config-c/hello" "$slibdir"
# shellcheck disable=SC2086  # the flags are words
step c-consumer-build "${cc[@]}" -std=c99 -Wall -Wextra -pedantic -Werror "$src/examples/c-consumer/main.c" \
  -o "$tmp/c-consumer" $flags
LD_LIBRARY_PATH="$slibdir" check_program c-consumer "$tmp/c-consumer" "$slibdir"

# 3. meson, shmbox as a subproject
proj="$tmp/meson-consumer"
mkdir -p "$proj/subprojects"
cp "$src/examples/meson-consumer/meson.build" "$proj/"
cp -L "$src/examples/meson-consumer/main.cpp" "$proj/"
# The example's dependency() is the README's, word for word (every line of
# the block but comments); the README's hello is built beside main.cpp, in
# the same project (one build of the subproject).
while IFS= read -r line; do
  case "$line" in '' | '#'*) continue ;; esac
  grep -qxF "$line" "$proj/meson.build" ||
    fail "meson: examples/meson-consumer/meson.build has not README.md's <!-- install-meson --> line '$line'"
done <"$docs/install.meson"
cp "$docs/hello.cpp" "$proj/"
echo "executable('hello', 'hello.cpp', dependencies : shmbox_dep)" >>"$proj/meson.build"
ln -s "$src" "$proj/subprojects/shmbox"
step meson-setup "$meson" setup "$proj/build" "$proj" --wrap-mode=forcefallback -Dshmbox:cmake_package=disabled
if ! grep -q "^Executing subproject shmbox" "$tmp/meson-setup.log" ||
  ! grep -q "^Dependency shmbox found: YES" "$tmp/meson-setup.log"; then
  fail "meson: dependency('shmbox') did not come from the subproject: $(grep -i 'shmbox' "$tmp/meson-setup.log" | head -5)"
fi
step meson-build ninja -C "$proj/build" -j 2
(unset LD_LIBRARY_PATH; check_program meson "$proj/build/shmbox-consumer" "$proj/build/subprojects/shmbox/lib")
(unset LD_LIBRARY_PATH; check_pair meson-hello "$proj/build/hello" "$proj/build/subprojects/shmbox/lib")
# The whole build (ninja's default target) made the library alone: no CLI,
# test, benchmark, demo, bridge or Python module of shmbox.
extra=$(cd "$proj/build/subprojects/shmbox" && find . -type f \( -perm -u+x -o -name '*.so' -o -name '*.so.*' -o -name '*.a' \) \
  ! -path './lib/libshmbox.so*' ! -path '*/CMakeFiles/*' ! -path '*.p/*' | sort)
[ -z "$extra" ] || fail "meson: the subproject built more than the library (examples/meson-consumer asks for it alone): $(echo $extra | head -c 400)"
[ -e "$proj/build/subprojects/shmbox/lib/libshmbox.so.$version" ] || fail "meson: the subproject's build has no lib/libshmbox.so.$version"
echo "meson: the subproject built the library alone"

echo "package: the docs' hello pair built with CMake, pkg-config (C++ and C) and meson (a subproject), each run as two processes; the examples' consumers too"
