#!/usr/bin/env bash
# tests/package/package_test.sh SOURCE_ROOT BUILD_ROOT PREFIX LIBDIR VERSION MESON SANITIZE
# (suite 'package'; tests/meson.build passes the arguments)
#
# shmbox as a user gets it. `meson install --destdir` puts this build into a
# temporary stage; then examples/cmake-consumer/main.cpp (a program that
# creates a box, posts five messages, receives and checks them, removes the
# box) is built three ways and run:
#   1. CMake: examples/cmake-consumer, find_package(shmbox CONFIG) with
#      CMAKE_PREFIX_PATH at the stage; the package must be the staged one,
#      answer find_package's version checks, and the program must load the
#      staged libshmbox.so.<soversion>;
#   2. pkg-config: `pkg-config --cflags --libs shmbox` with the stage as
#      PKG_CONFIG_SYSROOT_DIR (the .pc file holds the real prefix);
#   2b. pkg-config, C: examples/c-consumer/main.c (the same through the C
#      API, compiled as C99 by cc);
#   3. meson: examples/meson-consumer with this source tree as
#      subprojects/shmbox (--wrap-mode=forcefallback: never an installed
#      shmbox), building only what the program needs.
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
  local way
  for way in cmake pkg-config pkg-config-c meson; do rm -f "/dev/shm/shmbox.$box-$way"; done
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

# check_program WAY BINARY LIBDIR: BINARY needs libshmbox.so.<soversion>, the
# loader takes it from LIBDIR (with the LD_LIBRARY_PATH in force), and it
# runs through a box of its own.
soname="libshmbox.so.${version%%.*}"
check_program() {
  local way=$1 binary=$2 dir=$3 needed resolved
  needed=$(readelf -d "$binary" | sed -n 's/.*(NEEDED).*\[\(libshmbox[^]]*\)\].*/\1/p')
  [ "$needed" = "$soname" ] || fail "$way: $binary needs '$needed', not $soname"
  resolved=$(ldd "$binary" | awk '$1 == "'"$soname"'" { print $3 }')
  [ "$resolved" -ef "$dir/$soname" ] || fail "$way: $binary loads $soname from '$resolved', not from $dir"
  step "$way-run" "$binary" "$box-$way"
  grep -q "^ok: 5 messages" "$tmp/$way-run.log" || fail "$way: unexpected output: $(cat "$tmp/$way-run.log")"
  [ ! -e "/dev/shm/shmbox.$box-$way" ] || fail "$way: the program left its box /dev/shm/shmbox.$box-$way"
  echo "$way: $(cat "$tmp/$way-run.log")"
}

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
# shellcheck disable=SC2086  # the flags are words
step pkg-config-build "${cxx[@]}" -std=c++20 "$src/examples/cmake-consumer/main.cpp" -o "$tmp/pkg-config-consumer" $flags
LD_LIBRARY_PATH="$slibdir" check_program pkg-config "$tmp/pkg-config-consumer" "$slibdir"
# 2b. the C API from C: the same flags, a C compiler
read -ra cc <<<"${CC:-cc}"
command -v "${cc[0]}" >/dev/null || fail "no C compiler '${cc[0]}' (CC): apt-get install -y gcc"
# shellcheck disable=SC2086  # the flags are words
step pkg-config-c-build "${cc[@]}" -std=c99 -Wall -Wextra -pedantic -Werror "$src/examples/c-consumer/main.c" \
  -o "$tmp/pkg-config-c-consumer" $flags
LD_LIBRARY_PATH="$slibdir" check_program pkg-config-c "$tmp/pkg-config-c-consumer" "$slibdir"

# 3. meson, shmbox as a subproject
proj="$tmp/meson-consumer"
mkdir -p "$proj/subprojects"
cp "$src/examples/meson-consumer/meson.build" "$proj/"
cp -L "$src/examples/meson-consumer/main.cpp" "$proj/"
ln -s "$src" "$proj/subprojects/shmbox"
step meson-setup "$meson" setup "$proj/build" "$proj" --wrap-mode=forcefallback -Dshmbox:cmake_package=disabled
if ! grep -q "^Executing subproject shmbox" "$tmp/meson-setup.log" ||
  ! grep -q "^Dependency shmbox found: YES" "$tmp/meson-setup.log"; then
  fail "meson: dependency('shmbox') did not come from the subproject: $(grep -i 'shmbox' "$tmp/meson-setup.log" | head -5)"
fi
step meson-build ninja -C "$proj/build" -j 2
(unset LD_LIBRARY_PATH; check_program meson "$proj/build/shmbox-consumer" "$proj/build/subprojects/shmbox/lib")
# The whole build (ninja's default target) made the library alone: no CLI,
# test, benchmark, demo, bridge or Python module of shmbox.
extra=$(cd "$proj/build/subprojects/shmbox" && find . -type f \( -perm -u+x -o -name '*.so' -o -name '*.so.*' -o -name '*.a' \) \
  ! -path './lib/libshmbox.so*' ! -path '*/CMakeFiles/*' ! -path '*.p/*' | sort)
[ -z "$extra" ] || fail "meson: the subproject built more than the library (examples/meson-consumer asks for it alone): $(echo $extra | head -c 400)"
[ -e "$proj/build/subprojects/shmbox/lib/libshmbox.so.$version" ] || fail "meson: the subproject's build has no lib/libshmbox.so.$version"
echo "meson: the subproject built the library alone"

echo "package: CMake, pkg-config (C++ and C) and meson consumers built and ran"
