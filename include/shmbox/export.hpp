// shmbox/export.hpp - SHMBOX_API marks what libshmbox exports. The library is
// built with hidden visibility (lib/meson.build): everything not marked is
// internal and absent from the shared object's dynamic symbol table.
#pragma once

#if defined(__GNUC__) || defined(__clang__)
#define SHMBOX_API __attribute__((visibility("default")))
#else
#define SHMBOX_API
#endif
