#include "actors/overload.hpp"

namespace kiln::actors {

admission_verdict decide(const load_picture& p, engine::priority tier) {
  if (p.capacity <= 0) return admission_verdict::run;
  const double cap = static_cast<double>(p.capacity);
  const double load = static_cast<double>(p.in_flight + p.charge) / cap;
  const auto wait_or_shed = [&] { return p.queue_full ? admission_verdict::shed : admission_verdict::wait; };
  if (load <= kBusy) return admission_verdict::run;
  if (tier == engine::priority::batch) return wait_or_shed();  // batch pauses first
  if (load <= 1.0) return admission_verdict::run;
  const bool within_share =
      p.team_share > 0 && static_cast<double>(p.team_in_flight + p.charge) <= p.team_share * cap + 1e-9;
  if (!within_share) return admission_verdict::over_share;
  switch (tier) {
    case engine::priority::interactive: return admission_verdict::run;  // never shed inside a guarantee
    case engine::priority::standard: return wait_or_shed();
    case engine::priority::batch: return wait_or_shed();
  }
  return wait_or_shed();
}

}  // namespace kiln::actors
