// shmbox/export.hpp - SHMBOX_API marks what libshmbox.so exports.
//
// The library is compiled with -fvisibility=hidden: only classes and
// functions marked SHMBOX_API are in its dynamic symbol table (nm -D);
// everything else (shmbox::detail, lib/) stays inside it. A test checks the
// list (tests/unit/exported_symbols.py).
#pragma once

#if defined(__GNUC__) || defined(__clang__)
#define SHMBOX_API __attribute__((visibility("default")))
// Private members of an exported class that only the library calls.
#define SHMBOX_LOCAL __attribute__((visibility("hidden")))
#else
#define SHMBOX_API
#define SHMBOX_LOCAL
#endif
