#pragma once
// A delayed message that its sender may no longer want when it comes (a coast's wakeup, once
// a message has cut the coast short) carries a ticket: the count it was sent with beside the
// sender's current count, which the sender moves on to void it. The receiver ignores a void
// ticket; on virtual time the driver drops one before delivery instead of waking an actor for
// nothing (a delayed message cannot be taken back from CAF's clock).
#include <cstdint>
#include <memory>

#include <caf/allowed_unsafe_message_type.hpp>

namespace kiln::actors {

struct wake_ticket {
  std::shared_ptr<const std::uint64_t> current;  ///< the sender's count, kept alive by the ticket
  std::uint64_t issued = 0;
  bool void_now() const { return !current || *current != issued; }
};

}  // namespace kiln::actors

// Only ever sent by an actor to itself: never serialized.
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kiln::actors::wake_ticket)
