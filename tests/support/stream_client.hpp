#pragma once
// Many chat completions at once over loopback, one connection each (Asio, one thread), for
// the end-to-end drills: every answer is parsed into what a client would check.
#include <string>
#include <vector>

namespace kiln::test {

struct stream_spec {
  std::string body;
  std::vector<std::string> headers;
  int start_ms = 0;  ///< when to send it, after the run begins
};

struct stream_result {
  int status = 0;              ///< HTTP status; 0: no answer at all
  std::string content;         ///< the content deltas, concatenated
  int terminals = 0;           ///< chunks with a finish_reason plus error events (and error answers)
  bool finished = false;       ///< a finish_reason chunk arrived
  bool done = false;           ///< data: [DONE] arrived
  int after_done = 0;          ///< events after [DONE] (must be 0)
  std::string error_code;      ///< of an SSE error event or of an error answer
  bool error_mid_stream = false;
  int prompt_tokens = -1;
  int completion_tokens = -1;
  int attempts = 0;
  std::string replica_id;
  std::string region;    ///< of the usage chunk: the region that served it
  double ttft_ms = -1;   ///< from sending to the first content delta
  int retry_after = -1;  ///< of an error answer, when it had one
};

/// Runs every request concurrently and returns the results in the same order.
std::vector<stream_result> run_streams(int port, const std::vector<stream_spec>& specs, int timeout_s);

}  // namespace kiln::test
