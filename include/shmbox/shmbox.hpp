// shmbox/shmbox.hpp - everything a user includes.
#pragma once

#include "shmbox/box.hpp"       // IWYU pragma: export
#include "shmbox/buffer.hpp"    // IWYU pragma: export
#include "shmbox/error.hpp"     // IWYU pragma: export
#include "shmbox/heir.hpp"      // IWYU pragma: export
#include "shmbox/inspect.hpp"   // IWYU pragma: export
#include "shmbox/owner.hpp"     // IWYU pragma: export
#include "shmbox/pool.hpp"      // IWYU pragma: export
#include "shmbox/producer.hpp"  // IWYU pragma: export
#include "shmbox/request.hpp"   // IWYU pragma: export
#include "shmbox/types.hpp"     // IWYU pragma: export
