#include "actors/admission.hpp"

#include <caf/all.hpp>

namespace kiln::actors {

std::optional<stream_error> admission_state::admit(chat_job& job) const {
  const config::team_config* team = cfg->team_by_key(job.api_key);
  if (!team) {
    const char* msg = job.api_key.empty()
                          ? "You didn't provide an API key. Send it as 'Authorization: Bearer KEY'."
                          : "Incorrect API key provided.";
    return stream_error{job.id, 401, "invalid_request_error", msg, "", "invalid_api_key", ""};
  }
  job.team = team->name;
  auto route = models.find(job.model);
  if (route == models.end()) {
    return stream_error{job.id, 404, "invalid_request_error",
                        "The model '" + job.model + "' does not exist.", "model",
                        "model_not_found", job.team};
  }
  const pool_runtime& rt = *route->second.runtime;
  const config::pool_config* pool = rt.cfg.get();
  if (!rt.failure.empty()) {
    return stream_error{job.id, 503, "server_error", "The model '" + job.model + "' is unavailable: " + rt.failure,
                        "", "model_unavailable", job.team};
  }
  auto prompt = rt.prompt_for(job.messages);
  if (auto* e = std::get_if<std::string>(&prompt)) {
    return stream_error{job.id, 400, "invalid_request_error", "The chat template rejected the messages: " + *e,
                        "messages", "invalid_messages", job.team};
  }
  job.prompt = std::move(std::get<std::vector<std::int32_t>>(prompt));
  if (job.max_tokens <= 0) job.max_tokens = pool->default_max_tokens;
  const auto total = static_cast<std::int64_t>(job.prompt.size()) + job.max_tokens;
  if (total > pool->max_context) {
    return stream_error{job.id, 400, "invalid_request_error",
                        "This model's maximum context length is " +
                            std::to_string(pool->max_context) + " tokens; the request asks for " +
                            std::to_string(job.prompt.size()) + " prompt + " +
                            std::to_string(job.max_tokens) + " completion tokens.",
                        "messages", "context_length_exceeded", job.team};
  }
  return std::nullopt;
}

caf::behavior admission(caf::stateful_actor<admission_state>* self,
                        std::shared_ptr<const config::kiln_config> cfg,
                        std::map<std::string, model_route, std::less<>> models) {
  self->state.cfg = std::move(cfg);
  self->state.models = std::move(models);
  return {
      [self](chat_job& job) {
        if (auto err = self->state.admit(job)) {
          self->send(job.sink, std::move(*err));
          return;
        }
        const caf::actor router = self->state.models.find(job.model)->second.router;
        self->send(router, std::move(job));
      },
  };
}

}  // namespace kiln::actors
