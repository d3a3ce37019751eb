#pragma once
// What a handler of a one-way message (one sent with send(), never with request()) returns.
// A handler declared void makes CAF 0.17 build a response promise for every message it
// handles (a reference to the sender taken and dropped) only to find that no one waits for an
// answer; a handler that returns `one_way` with `handled` takes CAF's "handled, nothing to
// answer" path instead. A request() to such a handler would get no answer, so keep it to
// messages that are only ever sent.
#include <caf/none.hpp>
#include <caf/optional.hpp>
#include <caf/skip.hpp>

namespace kiln::actors {

/// None: the message was handled. (A skip_t here would leave it in the mailbox.)
using one_way = caf::optional<caf::skip_t>;
inline constexpr caf::none_t handled{};

}  // namespace kiln::actors
