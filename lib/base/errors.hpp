// lib/base/errors.hpp - building errors with a sentence for explain().
#pragma once

#include <string>
#include <system_error>

#include "shmbox/error.hpp"

namespace shmbox::detail {

// Returns make_error_code(e) and remembers `sentence` for explain() in this
// thread. Library code never logs; this is how a detail reaches the caller.
std::error_code fail(errc e, std::string sentence);

// The errno of a failed system call as an errc (ENOENT -> not_found, EACCES ->
// permission_denied, ENOSPC -> no_space, ...), with a sentence.
std::error_code fail_errno(int err, const std::string& what);

}  // namespace shmbox::detail
