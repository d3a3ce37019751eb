// The OpenAI routes: POST /v1/chat/completions (one chat_call per request, bridging its sink
// actor's events onto the connection) and GET /v1/models.
#include <chrono>
#include <cstdio>
#include <memory>

#include "actors/stream_sink.hpp"
#include "engine/types.hpp"
#include "net/errors.hpp"
#include "net/front.hpp"
#include "net/logprobs_json.hpp"
#include "net/prefetch.hpp"
#include "net/scratch.hpp"
#include "net/sse.hpp"
#include "net/stream_hub.hpp"

namespace kiln::net {

std::int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

namespace {


// One chat completion in flight: its sink's events arrive here on the connection's strand
// and become SSE chunks or one JSON answer. Whatever ends it stops the sink, which tells
// the engine (if any still holds the request) that nobody listens any more.
class chat_call final : public actors::stream_target, public std::enable_shared_from_this<chat_call> {
 public:
  chat_call(front& f, std::shared_ptr<exchange> ex, bool stream, bool include_usage, completion_meta meta, tool_format tools)
      : f_(f), ex_(std::move(ex)), stream_(stream), include_usage_(include_usage), meta_(std::move(meta)), format_(tools),
        lp_(meta_.text_completion) {
    if (format_ != tool_format::none) tools_.emplace(format_, meta_.id);
  }
  ~chat_call() override { release(); }

  void start(actors::request r);
  /// /v1/completions' echo: the answer begins with the prompt's text.
  void echo(std::string prompt) { echo_ = std::move(prompt); }
  /// The answer carries its tokens' log-probabilities (and the echoed prompt's, when asked).
  void want_logprobs() { want_lp_ = true; }

  // The hub's events, on the connection's strand (or the one I/O thread).
  void on_tokens(actors::stream_tokens ev) override {
    if (done_ || ev.id != id_) return;
    auto& log = ex_->log();
    if (ev.prompt_tokens >= 0) {
      log.prompt_tokens = ev.prompt_tokens;
      usage_.prompt_tokens = ev.prompt_tokens;
    }
    if (ev.tokens > 0) {
      if (log.completion_tokens == 0) {
        first_token_ = std::chrono::steady_clock::now();
        log.ttft_ms = std::chrono::duration<double, std::milli>(first_token_ - started_).count();
      }
      log.completion_tokens += ev.tokens;
      last_token_ = std::chrono::steady_clock::now();
      f_.deps.metrics->tokens_streamed += static_cast<std::uint64_t>(ev.tokens);
    }
    if (!stream_) {
      if (text_.empty() && !echo_.empty()) text_ = std::exchange(echo_, {});
      text_ += ev.text;
      if (want_lp_) {
        lp_all_.insert(lp_all_.end(), std::make_move_iterator(ev.prompt_logprobs.begin()), std::make_move_iterator(ev.prompt_logprobs.end()));
        lp_all_.insert(lp_all_.end(), std::make_move_iterator(ev.logprobs.begin()), std::make_move_iterator(ev.logprobs.end()));
      }
      return;
    }
    scratch sse;
    open_stream(sse.str(), ev.prompt_logprobs);
    const std::string safe = tools_ ? tools_->feed(ev.text) : std::string();
    const std::string& text = tools_ ? safe : ev.text;
    if (!text.empty() || (want_lp_ && !ev.logprobs.empty()))
      content_event(sse.str(), text, want_lp_, ev.logprobs);
    ex_->stream(sse.str());
  }

  void warm(int depth) const override {
    if (depth > 1) return ex_->warm(depth - 1);
    prefetch_object(this);
    prefetch_bytes(content_prefix_.data(), content_prefix_.size());
    prefetch_bytes(ex_.get(), 64);  // its vtable, for the next depth
  }

  void on_end(actors::stream_end ev) override {
    if (done_ || ev.id != id_) return;
    auto& log = ex_->log();
    log.version = ev.model_version;
    log.replica = ev.replica_id;
    log.prompt_tokens = ev.prompt_tokens;
    log.engine_ttft_ms = ev.engine_ttft_ms;
    const completion_usage u{ev.prompt_tokens, ev.completion_tokens, ev.cached_tokens, ev.model_version,
                             ev.region, ev.replica_id, ev.engine_ttft_ms, ev.attempts};
    if (log.completion_tokens > 0) {
      const double after_first = std::chrono::duration<double>(last_token_ - first_token_).count();
      f_.deps.metrics->observe_latency(meta_.model, log.ttft_ms / 1000,
                                       log.completion_tokens > 1 ? after_first / (log.completion_tokens - 1) : -1);
    }
    finish();
    // Tool calls end the answer with finish_reason tool_calls, as OpenAI's do.
    parsed_output parsed;
    if (tools_) parsed = stream_ ? tools_->finish() : parse_tool_calls(text_, format_, meta_.id);
    const std::string finish_reason = parsed.calls.empty() ? ev.finish_reason : std::string("tool_calls");
    if (stream_) {
      scratch sse;
      std::string& out = sse.str();
      open_stream(out);
      if (!parsed.content.empty()) append_content_event(out, content_prefix_, parsed.content, content_suffix(meta_));
      if (!parsed.calls.empty()) append_sse_event(out, chunk_tool_calls_json(meta_, parsed.calls));
      append_sse_event(out, chunk_finish_json(meta_, finish_reason));
      if (include_usage_) append_sse_event(out, chunk_usage_json(meta_, u));
      append_sse_event(out, kSseDone);
      ex_->end_stream(200, out);
    } else {
      if (text_.empty() && !echo_.empty()) text_ = std::exchange(echo_, {});  // nothing generated
      const std::string& text = tools_ ? parsed.content : text_;
      ex_->respond(200, completion_json(meta_, text, finish_reason, u, parsed.calls, want_lp_ ? lp_.object(lp_all_) : std::string()),
                   "application/json", rate_headers_);
    }
  }

  void on_error(actors::stream_error ev) override {
    if (done_ || ev.id != id_) return;
    fail(to_api_error(ev.code, std::move(ev.message), std::move(ev.param), ev.retry_after_s));
  }

  // OpenAI's x-ratelimit-*-tokens headers, on the answer whatever it is.
  void on_rate_limit(actors::rate_limit_info ev) override {
    if (done_ || ev.id != id_ || ev.limit_tokens <= 0) return;
    char reset[32];
    std::snprintf(reset, sizeof reset, "%.3gs", ev.reset_s);
    rate_headers_ = {{"x-ratelimit-limit-tokens", std::to_string(ev.limit_tokens)},
                     {"x-ratelimit-remaining-tokens", std::to_string(ev.remaining_tokens)},
                     {"x-ratelimit-reset-tokens", reset}};
  }

  void on_interrupt(interruption why) {
    switch (why) {
      case interruption::client_gone:
        finish();  // stopping the sink cancels the request wherever it runs
        break;
      case interruption::shutdown:
        fail(to_api_error(actors::errc::shutting_down, "kiln is shutting down; retry on another node"));
        break;
    }
  }

  void fail(const api_error& e) {
    if (done_) return;
    finish();
    if (!opened_) {
      header_list headers = error_headers(e);
      headers.insert(headers.end(), rate_headers_.begin(), rate_headers_.end());
      return ex_->respond(e.status, error_json(e), "application/json", headers);
    }
    // Mid-stream: exactly one error event, then [DONE].
    scratch sse;
    append_sse_event(sse.str(), error_json(e));
    append_sse_event(sse.str(), kSseDone);
    ex_->end_stream(e.status, sse.str());
  }

 private:
  /// The stream's head, role chunk and echo (with the prompt's log-probabilities when asked).
  /// Its events go into `out`.
  void open_stream(std::string& out, const std::vector<engine::token_logprob>& prompt_logprobs = {}) {
    if (opened_) return;
    opened_ = true;
    ex_->begin_stream(rate_headers_);
    content_prefix_ = content_event_prefix(meta_);
    if (!meta_.text_completion) append_sse_event(out, chunk_role_json(meta_));
    if (!echo_.empty())
      content_event(out, std::exchange(echo_, {}), want_lp_ && !prompt_logprobs.empty(), prompt_logprobs);
  }
  // One content event; with `with_lp` its chunk carries these log-probabilities. (Two calls,
  // not one with a ?: whose std::string result would copy the constant suffix: an
  // allocation per token.)
  void content_event(std::string& out, std::string_view text, bool with_lp, const std::vector<engine::token_logprob>& lps) {
    if (with_lp) append_content_event(out, content_prefix_, text, lp_.chunk_suffix(lps));
    else append_content_event(out, content_prefix_, text, content_suffix(meta_));
  }
  void finish() {
    done_ = true;
    release();
  }
  // The request's client handle ends (engines holding it cancel it) and the hub forgets it.
  void release() {
    if (!client_) return;
    end_client_handle(client_);
    client_ = nullptr;
    hub_detach(f_.hub, id_);
  }

  front& f_;
  std::shared_ptr<exchange> ex_;
  bool stream_;
  bool include_usage_;  ///< the usage chunk before [DONE] (stream_options.include_usage)
  completion_meta meta_;
  tool_format format_;                       ///< none: the answer is text, whatever it holds
  std::optional<tool_call_stream> tools_;    ///< watches the answer for tool calls
  actors::request_id id_;
  caf::actor client_;  ///< ends when this call does: the request's cancellation
  bool done_ = false;
  bool opened_ = false;  ///< the stream's head and role chunk have gone out
  header_list rate_headers_;
  std::string text_;  ///< the whole answer (not streamed)
  std::string content_prefix_;  ///< "data: " and the chunk up to its content, rendered once
  std::string echo_;            ///< the prompt, until the answer's first bytes carry it
  completion_usage usage_;
  bool want_lp_ = false;
  logprobs_writer lp_;
  std::vector<engine::token_logprob> lp_all_;  ///< a whole answer's (not streamed)
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point first_token_, last_token_;
};

void chat_call::start(actors::request r) {
  id_ = r.id;
  // The hub holds this call until its end or error, or until it detaches (finish); the
  // exchange's interrupt and timer reach it only while it lives.
  client_ = spawn_client_handle(*f_.deps.sys);
  hub_attach(f_.hub, id_, shared_from_this(), [ex = ex_](std::function<void()> fn) { ex->post(std::move(fn)); });
  r.sink = f_.hub;
  r.client = client_;
  ex_->on_interrupt([w = weak_from_this()](interruption why) {
    if (auto c = w.lock()) c->on_interrupt(why);
  });
  // Owners end every request within their pool's deadlines; this is the last resort for a
  // request lost with an actor that was killed.
  ex_->after(f_.deps.cfg->longest_request_ms() + 10000, [w = weak_from_this()] {
    if (auto c = w.lock()) c->fail(to_api_error(actors::errc::timed_out, "The request was lost inside kiln."));
  });
  if (actors::submit(*f_.deps.sys, std::move(r))) return;
  const auto& cl = f_.deps.cfg->cluster;
  if (cl.has(config::node_role::worker) && !cl.has(config::node_role::router) && !cl.has(config::node_role::front))
    return fail(to_api_error(actors::errc::unavailable, "Node " + cl.node +
                                                            " is a worker node: it hosts replicas for its region's router "
                                                            "node, which serves requests; send them there."));
  fail(to_api_error(actors::errc::shutting_down, "kiln is shutting down; retry on another node"));
}

// How the requested model writes tool calls, when the request offers tools and allows them.
tool_format tools_format_for(const config::kiln_config& cfg, const chat_params& p) {
  if (!p.has_tools || p.tool_choice_none) return tool_format::none;
  auto [model, version] = config::split_model_ref(p.model);
  if (version.empty()) version = cfg.live_version(model);
  const config::pool_config* pool = cfg.pool_for(model, version);
  return pool ? tool_format_named(pool->tool_call_format).value_or(tool_format::none) : tool_format::none;
}

// What chat and text completions share: priority, ids, team, sampling. False: answered (400).
bool common_request(front& f, const std::shared_ptr<exchange>& ex, chat_params& p, actors::request& r) {
  const std::string prio = ex->request().header("x-priority");
  if (!prio.empty()) {
    auto tier = engine::parse_priority(prio);
    if (!tier) {
      ex->respond(400, error_json({400, "invalid_request_error", "x-priority must be interactive, standard or batch.",
                                   "x-priority", ""}));
      return false;
    }
    r.priority = *tier;
  } else if (p.tier) {
    r.priority = *p.tier;
  }
  r.id = ex->who().id_origin ? actors::request_id{ex->who().id_origin, ex->who().id_seq} : f.deps.ids->next();
  r.team = ex->who().team;
  r.model = p.model;
  r.conversation_id = ex->request().header("x-conversation-id");
  r.created_unix = unix_now();
  r.sampling.max_tokens = p.max_tokens;
  r.sampling.temperature = p.temperature;
  r.sampling.top_p = p.top_p;
  r.sampling.top_k = p.top_k;
  r.sampling.seed = p.seed;
  r.sampling.stop = std::move(p.stop);
  r.sampling.logprobs = p.logprobs;
  r.sampling.presence_penalty = p.presence_penalty;
  r.sampling.frequency_penalty = p.frequency_penalty;
  r.sampling.repetition_penalty = p.repetition_penalty;
  r.sampling.logit_bias = std::move(p.logit_bias);
  r.sampling.stop_token_ids = std::move(p.stop_token_ids);
  r.sampling.min_tokens = p.min_tokens;
  r.sampling.ignore_eos = p.ignore_eos;
  ex->log().team = r.team;
  ex->log().model = p.model;
  return true;
}

void handle_chat(front& f, const std::shared_ptr<exchange>& ex) {
  auto parsed = parse_chat_request(ex->request().body);
  if (auto* err = std::get_if<api_error>(&parsed)) return ex->respond(err->status, error_json(*err));
  auto& p = std::get<chat_params>(parsed);
  actors::request r;
  if (!common_request(f, ex, p, r)) return;
  for (auto& m : p.messages) r.messages.push_back({std::move(m.role), std::move(m.content)});
  r.chat_json = std::move(p.template_json);
  auto call = std::make_shared<chat_call>(f, ex, p.stream, p.include_usage, completion_meta{"chatcmpl-" + r.id.str(), unix_now(), p.model},
                                           tools_format_for(*f.deps.cfg, p));
  if (p.logprobs >= 0) call->want_logprobs();
  call->start(std::move(r));
}

// POST /v1/completions: the prompt goes to the model as it is (no template), as text or ids.
void handle_completion(front& f, const std::shared_ptr<exchange>& ex) {
  auto parsed = parse_completion_request(ex->request().body);
  if (auto* err = std::get_if<api_error>(&parsed)) return ex->respond(err->status, error_json(*err));
  auto& p = std::get<completion_params>(parsed);
  actors::request r;
  if (!common_request(f, ex, p.common, r)) return;
  r.prompt = std::move(p.prompt_ids);
  r.prompt_text = p.prompt_text;
  r.prompt_specials = p.add_special_tokens;
  r.sampling.prompt_logprobs = p.prompt_logprobs;
  completion_meta meta{"cmpl-" + r.id.str(), unix_now(), p.common.model, true};
  auto call = std::make_shared<chat_call>(f, ex, p.common.stream, p.common.include_usage, std::move(meta), tool_format::none);
  if (p.echo) call->echo(p.prompt_text);
  if (p.common.logprobs >= 0) call->want_logprobs();
  call->start(std::move(r));
}

}  // namespace

void add_openai_routes(front& f) {
  f.routes.add("POST", "/v1/chat/completions", access::team,
               [&f](const std::shared_ptr<exchange>& ex, const route_params&) { handle_chat(f, ex); });
  f.routes.add("POST", "/v1/completions", access::team,
               [&f](const std::shared_ptr<exchange>& ex, const route_params&) { handle_completion(f, ex); });
  f.routes.add("GET", "/v1/models", access::team, [&f](const std::shared_ptr<exchange>& ex, const route_params&) {
    ex->respond(200, models_json(*f.deps.cfg, unix_now()));
  });
  f.routes.add("GET", "/v1/models/{model}", access::team, [&f](const std::shared_ptr<exchange>& ex, const route_params& rp) {
    const std::string id = rp.get("model");
    if (auto body = model_json(*f.deps.cfg, id, unix_now())) return ex->respond(200, *body);
    const api_error e = to_api_error(actors::errc::unknown_model, "The model '" + id + "' does not exist.", "model");
    ex->respond(e.status, error_json(e));
  });
}

}  // namespace kiln::net
