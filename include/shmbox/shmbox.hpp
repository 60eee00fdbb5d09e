// shmbox/shmbox.hpp - everything a user includes.
#pragma once

#include "shmbox/box.hpp"       // IWYU pragma: export
#include "shmbox/error.hpp"     // IWYU pragma: export
#include "shmbox/owner.hpp"     // IWYU pragma: export
#include "shmbox/producer.hpp"  // IWYU pragma: export
