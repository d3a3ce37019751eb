// stream_load: N concurrent streaming chat completions against a running kiln.
// Closed loop: N slots (opened at --ramp per second), each starting a new stream when its
// last one ends, for --duration seconds. Prints delivered tokens/s, TTFT percentiles, the
// TTFT overhead beyond the engine's own time to first token, per-stream token rate, and
// kiln's CPU seconds per million streamed tokens (from /proc/PID/stat, with --pid). With
// --syscalls S it also counts kiln's system calls per thousand tokens over S seconds after the
// ramp, by `strace -c -f` attached meanwhile (/proc counts no socket calls): a traced process
// runs slower, so take the run's other figures from a run without it.
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <boost/asio.hpp>

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using clock_type = std::chrono::steady_clock;

namespace {

struct options {
  int port = 8080;
  int pid = 0;
  int streams = 100;
  double duration_s = 20;
  double ramp_per_s = 100;
  int prompt_words = 1200;
  int max_tokens = 300;
  std::string key = "kiln-search-local";
  std::string model = "chat-7b";
  double syscalls_s = 0;  ///< > 0: count kiln's system calls for this long (strace)
};

struct sample {
  double ttft_ms = 0;
  double overhead_ms = 0;
  double tokens_per_s = 0;
  int tokens = 0;
};

struct stats {
  std::vector<sample> done;
  int failed = 0;
  clock_type::time_point end_of_run;
  std::atomic<long long> token_events{0};  ///< content events received so far (read by the tracer)
};

double seconds(clock_type::duration d) { return std::chrono::duration<double>(d).count(); }

// utime + stime of a /proc stat file (a process's or one thread's), and its name.
double stat_cpu_seconds(const std::string& path, std::string* name = nullptr) {
  std::ifstream f(path);
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const auto open = s.find('(');
  if (name && open != std::string::npos) *name = s.substr(open + 1, s.rfind(')') - open - 1);
  const auto close = s.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream rest(s.substr(close + 2));
  std::string field;
  unsigned long long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) utime = std::stoull(field);
    if (i == 15) stime = std::stoull(field);
  }
  return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

double cpu_seconds(int pid) { return pid <= 0 ? 0 : stat_cpu_seconds("/proc/" + std::to_string(pid) + "/stat"); }

// CPU seconds of the process's living threads, summed by thread name (kiln.io: the front).
std::map<std::string, double> cpu_by_thread_name(int pid) {
  std::map<std::string, double> out;
  if (pid <= 0) return out;
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task", ec)) {
    std::string name;
    const double s = stat_cpu_seconds((task.path() / "stat").string(), &name);
    out[name] += s;
  }
  return out;
}

// Context switches (voluntary and not) of every thread of the process, from /proc.
struct switches {
  unsigned long long voluntary = 0, involuntary = 0;
};

switches context_switches(int pid) {
  switches out;
  if (pid <= 0) return out;
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task", ec)) {
    std::ifstream f(task.path() / "status");
    for (std::string line; std::getline(f, line);) {
      if (line.starts_with("voluntary_ctxt_switches:")) out.voluntary += std::stoull(line.substr(24));
      if (line.starts_with("nonvoluntary_ctxt_switches:")) out.involuntary += std::stoull(line.substr(27));
    }
  }
  return out;
}

double extract_number(const std::string& s, const std::string& key) {
  const auto at = s.find("\"" + key + "\":");
  if (at == std::string::npos) return -1;
  return std::atof(s.c_str() + at + key.size() + 3);
}

class slot : public std::enable_shared_from_this<slot> {
 public:
  slot(asio::io_context& ioc, const options& o, const std::string& request, stats& st)
      : sock_(ioc), opt_(o), request_(request), st_(st) {}

  void start() {
    if (clock_type::now() >= st_.end_of_run) return;
    reset();
    sock_ = tcp::socket(sock_.get_executor());
    sock_.async_connect(tcp::endpoint(asio::ip::address_v4::loopback(), static_cast<unsigned short>(opt_.port)),
                        [self = shared_from_this()](boost::system::error_code ec) {
                          if (ec) return self->fail();
                          self->started_ = clock_type::now();
                          asio::async_write(self->sock_, asio::buffer(self->request_),
                                            [self](boost::system::error_code ec, std::size_t) {
                                              if (ec) return self->fail();
                                              self->read();
                                            });
                        });
  }

 private:
  void reset() {
    buf_.clear();
    first_token_ = {};
    engine_ttft_ms_ = -1;
    tokens_ = 0;
    got_done_ = false;
  }

  void read() {
    sock_.async_read_some(asio::buffer(chunk_), [self = shared_from_this()](boost::system::error_code ec, std::size_t n) {
      if (n) self->consume(n);
      if (self->got_done_) return self->finish();
      if (ec) return self->fail();
      self->read();
    });
  }

  void consume(std::size_t n) {
    buf_.append(chunk_.data(), n);
    std::size_t pos;
    while ((pos = buf_.find("\n\n")) != std::string::npos) {
      const std::string event = buf_.substr(0, pos);
      buf_.erase(0, pos + 2);
      const auto data = event.find("data: ");
      if (data == std::string::npos) continue;
      const std::string payload = event.substr(data + 6);
      if (payload == "[DONE]") {
        got_done_ = true;
      } else if (payload.find("\"delta\":{\"content\":") != std::string::npos) {
        if (first_token_ == clock_type::time_point{}) first_token_ = clock_type::now();
        st_.token_events.fetch_add(1, std::memory_order_relaxed);
      } else if (payload.find("\"usage\":") != std::string::npos) {
        tokens_ = static_cast<int>(extract_number(payload, "completion_tokens"));
        engine_ttft_ms_ = extract_number(payload, "engine_ttft_ms");
      }
    }
  }

  void finish() {
    const auto now = clock_type::now();
    boost::system::error_code ignored;
    sock_.close(ignored);
    if (first_token_ == clock_type::time_point{} || tokens_ <= 0) return fail();
    sample s;
    s.ttft_ms = seconds(first_token_ - started_) * 1e3;
    s.overhead_ms = s.ttft_ms - engine_ttft_ms_;
    s.tokens = tokens_;
    const double stream_s = seconds(now - first_token_);
    s.tokens_per_s = stream_s > 0 ? (tokens_ - 1) / stream_s : 0;
    st_.done.push_back(s);
    start();
  }

  void fail() {
    boost::system::error_code ignored;
    sock_.close(ignored);
    ++st_.failed;
    start();
  }

  tcp::socket sock_;
  const options& opt_;
  const std::string& request_;
  stats& st_;
  std::array<char, 16384> chunk_{};
  std::string buf_;
  clock_type::time_point started_, first_token_;
  double engine_ttft_ms_ = -1;
  int tokens_ = 0;
  bool got_done_ = false;
};

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto i = static_cast<std::size_t>(p / 100.0 * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

extern "C" char** environ;

/// System calls of a process over a window, by strace's summary (-c): calls per syscall.
struct syscall_window {
  std::string why;  ///< non-empty: no figures, and why
  double seconds = 0;
  long long token_events = 0;
  std::vector<std::pair<std::string, long long>> calls;  ///< most first
};

syscall_window no_figures(std::string why) {
  syscall_window w;
  w.why = std::move(why);
  return w;
}

syscall_window trace_syscalls(int pid, clock_type::time_point from, double length_s, const std::atomic<long long>& events) {
  syscall_window w;
  std::this_thread::sleep_until(from);
  char path[] = "/tmp/stream_load_strace_XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) return no_figures("cannot make a temporary file");
  close(fd);
  const std::string pid_text = std::to_string(pid);
  const char* argv[] = {"strace", "-c", "-f", "-qq", "-o", path, "-p", pid_text.c_str(), nullptr};
  pid_t child = 0;
  if (const int err = posix_spawnp(&child, "strace", nullptr, nullptr, const_cast<char**>(argv), environ); err != 0) {
    unlink(path);
    return no_figures(std::string("cannot run strace: ") + std::strerror(err));
  }
  const auto t0 = clock_type::now();
  const long long e0 = events.load();
  std::this_thread::sleep_for(std::chrono::duration<double>(length_s));
  kill(child, SIGINT);  // strace detaches and writes its summary
  int status = 0;
  waitpid(child, &status, 0);
  w.seconds = seconds(clock_type::now() - t0);
  w.token_events = events.load() - e0;
  std::ifstream f(path);
  for (std::string line; std::getline(f, line);) {
    std::istringstream in(line);
    std::vector<std::string> fields;
    for (std::string x; in >> x;) fields.push_back(x);
    // % time, seconds, usecs/call, calls, [errors], syscall
    if (fields.size() < 5 || fields[0] == "%" || fields[0].starts_with("-") || fields.back() == "total") continue;
    w.calls.emplace_back(fields.back(), std::atoll(fields[3].c_str()));
  }
  unlink(path);
  if (w.calls.empty())
    w.why = "strace counted nothing (exit status " + std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1) +
            "; is it allowed to trace pid " + pid_text + "?)";
  std::sort(w.calls.begin(), w.calls.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  return w;
}

void usage() {
  std::fprintf(stderr,
               "usage: stream_load [--port N] [--pid PID] [--streams N] [--duration S] [--ramp PER_S]\n"
               "                   [--prompt-words N] [--max-tokens N] [--key KEY] [--model M]\n"
               "                   [--syscalls SECONDS]   (with --pid: strace -c of kiln after the ramp)\n");
  std::exit(2);
}

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    if (i + 1 >= argc) usage();
    const char* v = argv[++i];
    if (f == "--port") o.port = std::atoi(v);
    else if (f == "--pid") o.pid = std::atoi(v);
    else if (f == "--streams") o.streams = std::atoi(v);
    else if (f == "--duration") o.duration_s = std::atof(v);
    else if (f == "--ramp") o.ramp_per_s = std::atof(v);
    else if (f == "--prompt-words") o.prompt_words = std::atoi(v);
    else if (f == "--max-tokens") o.max_tokens = std::atoi(v);
    else if (f == "--key") o.key = v;
    else if (f == "--model") o.model = v;
    else if (f == "--syscalls") o.syscalls_s = std::atof(v);
    else usage();
  }
  if (o.streams <= 0 || o.duration_s <= 0 || o.ramp_per_s <= 0 || o.max_tokens <= 0 || o.syscalls_s < 0) usage();
  if (o.syscalls_s > 0 && o.pid <= 0) usage();
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  const options opt = parse(argc, argv);
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0) {
    lim.rlim_cur = lim.rlim_max;
    setrlimit(RLIMIT_NOFILE, &lim);
  }
  static const char* kWords[] = {"the", "kiln", "fire", "clay", "glaze", "bowl", "cup", "heat"};
  std::string prompt;
  for (int i = 0; i < opt.prompt_words; ++i) prompt += std::string(i ? " " : "") + kWords[i % 8];
  const std::string body = "{\"model\":\"" + opt.model + "\",\"stream\":true,\"max_tokens\":" +
                           std::to_string(opt.max_tokens) + ",\"messages\":[{\"role\":\"user\",\"content\":\"" +
                           prompt + "\"}]}";
  const std::string request = "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " +
                              opt.key + "\r\nContent-Type: application/json\r\nContent-Length: " +
                              std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;

  asio::io_context ioc;
  stats st;
  const auto t0 = clock_type::now();
  st.end_of_run = t0 + std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(opt.duration_s));
  const double cpu0 = cpu_seconds(opt.pid);
  const switches sw0 = context_switches(opt.pid);
  auto threads0 = cpu_by_thread_name(opt.pid);
  std::vector<std::shared_ptr<slot>> slots;
  std::vector<std::unique_ptr<asio::steady_timer>> timers;
  for (int i = 0; i < opt.streams; ++i) {
    auto s = std::make_shared<slot>(ioc, opt, request, st);
    slots.push_back(s);
    auto t = std::make_unique<asio::steady_timer>(ioc);
    t->expires_at(t0 + std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(i / opt.ramp_per_s)));
    t->async_wait([s](boost::system::error_code ec) {
      if (!ec) s->start();
    });
    timers.push_back(std::move(t));
  }
  // The syscall window: after the ramp (or from the middle of a shorter run), within the run.
  std::thread tracer;
  syscall_window traced;
  if (opt.syscalls_s > 0) {
    const double from = std::min(opt.streams / opt.ramp_per_s + 1, opt.duration_s / 2);
    const double length = std::min(opt.syscalls_s, opt.duration_s - from);
    tracer = std::thread([&, from, length] {
      traced = trace_syscalls(opt.pid, t0 + std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(from)),
                              length, st.token_events);
    });
  }
  ioc.run();
  if (tracer.joinable()) tracer.join();
  const double wall = seconds(clock_type::now() - t0);
  const double cpu = cpu_seconds(opt.pid) - cpu0;
  const switches sw1 = context_switches(opt.pid);
  const auto threads1 = cpu_by_thread_name(opt.pid);

  std::vector<double> ttft, overhead, rate;
  long long tokens = 0;
  for (const auto& s : st.done) {
    ttft.push_back(s.ttft_ms);
    overhead.push_back(s.overhead_ms);
    rate.push_back(s.tokens_per_s);
    tokens += s.tokens;
  }
  std::printf("stream_load: streams=%d duration=%.0fs ramp=%.0f/s prompt_words=%d max_tokens=%d\n", opt.streams,
              opt.duration_s, opt.ramp_per_s, opt.prompt_words, opt.max_tokens);
  std::printf("completed_streams %zu\nfailed_streams %d\nwall_s %.2f\n", st.done.size(), st.failed, wall);
  std::printf("delivered_tokens_per_s %.0f\n", static_cast<double>(tokens) / wall);
  std::printf("ttft_ms p50 %.1f p95 %.1f p99 %.1f\n", percentile(ttft, 50), percentile(ttft, 95), percentile(ttft, 99));
  std::printf("ttft_overhead_ms p50 %.2f p95 %.2f p99 %.2f\n", percentile(overhead, 50), percentile(overhead, 95),
              percentile(overhead, 99));
  std::printf("stream_tokens_per_s p5 %.1f p50 %.1f p95 %.1f\n", percentile(rate, 5), percentile(rate, 50), percentile(rate, 95));
  if (opt.pid > 0 && tokens > 0)
    std::printf("kiln_cpu_s %.2f cpu_s_per_million_tokens %.2f\n", cpu, cpu / (static_cast<double>(tokens) / 1e6));
  if (opt.pid > 0 && tokens > 0)
    std::printf("kiln_context_switches_per_1000_tokens voluntary %.1f involuntary %.1f\n",
                static_cast<double>(sw1.voluntary - sw0.voluntary) * 1000 / static_cast<double>(tokens),
                static_cast<double>(sw1.involuntary - sw0.involuntary) * 1000 / static_cast<double>(tokens));
  if (opt.pid > 0 && tokens > 0) {
    std::printf("cpu_s_per_million_tokens_by_thread");
    for (auto& [name, s] : threads1)
      std::printf(" %s %.2f", name.c_str(), (s - threads0[name]) / (static_cast<double>(tokens) / 1e6));
    std::printf("\n");
  }
  if (opt.syscalls_s > 0 && !traced.why.empty()) std::printf("kiln_syscalls: none counted: %s\n", traced.why.c_str());
  if (opt.syscalls_s > 0 && traced.why.empty() && traced.token_events > 0) {
    long long total = 0;
    for (const auto& [name, n] : traced.calls) total += n;
    const double per = 1000.0 / static_cast<double>(traced.token_events);
    std::printf("kiln_syscalls_per_1000_tokens %.1f (over %.1f s traced, %lld tokens):", static_cast<double>(total) * per,
                traced.seconds, traced.token_events);
    for (std::size_t i = 0; i < traced.calls.size() && i < 8; ++i)
      std::printf(" %s %.1f", traced.calls[i].first.c_str(), static_cast<double>(traced.calls[i].second) * per);
    std::printf("\n");
  }
  return st.done.empty() ? 1 : 0;
}
