// zmq/curve: CurveZMQ key files (Z85 text, one public key per rank) and the ZAP handler
// (ZeroMQ RFC 27) that admits only the listed keys.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <sys/stat.h>

#include <zmq.hpp>

#include <fmt/core.h>

#include <sluice/core/error.hpp>

namespace sluice {

namespace detail {

inline std::string read_key(std::string const& path, char const* what) {
  std::ifstream in(path);
  require(in.good(), errc::invalid_argument, "zmq_transport: cannot read {} key file '{}'", what, path);
  std::string key;
  in >> key;
  require(key.size() == 40, errc::invalid_argument,
          "zmq_transport: {} key file '{}' does not hold a 40-character Z85 key", what, path);
  return key;
}

inline std::vector<std::string> read_key_list(std::string const& path) {
  std::ifstream in(path);
  require(in.good(), errc::invalid_argument, "zmq_transport: cannot read authorized keys file '{}'", path);
  std::vector<std::string> keys;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ls(line);
    std::string k;
    ls >> k;
    require(k.size() == 40, errc::invalid_argument, "zmq_transport: '{}' line {}: not a 40-character Z85 key", path,
            keys.size() + 1);
    keys.push_back(k);
  }
  return keys;
}

/// ZAP (ZeroMQ RFC 27) handler: admits CURVE clients whose public key is listed; logs and counts refusals.
class zap_handler {
 public:
  zap_handler(zmq::context_t& ctx, std::vector<std::string> keys, int rank, std::string file)
      : keys_(std::move(keys)), rank_(rank), file_(std::move(file)), sock_(ctx, zmq::socket_type::rep) {
    sock_.bind("inproc://zeromq.zap.01");
    thread_ = std::thread([this] { run(); });
  }
  zap_handler(zap_handler const&) = delete;
  zap_handler& operator=(zap_handler const&) = delete;
  ~zap_handler() {
    stop_.store(true);
    thread_.join();
  }
  [[nodiscard]] std::uint64_t refused() const noexcept { return refused_.load(); }

 private:
  void run() {
    while (!stop_.load()) {
      zmq::pollitem_t item{sock_.handle(), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, std::chrono::milliseconds(50));
      if (!(item.revents & ZMQ_POLLIN)) continue;
      std::vector<zmq::message_t> parts;
      for (;;) {
        zmq::message_t m;
        (void)sock_.recv(m);
        bool const more = m.more();
        parts.push_back(std::move(m));
        if (!more) break;
      }
      // version, request id, domain, address, identity, mechanism, credentials...
      std::string status = "400", text = "refused", user;
      std::string key;
      if (parts.size() >= 7 && parts[5].to_string() == "CURVE" && parts[6].size() == 32) {
        char z85[41] = {};
        zmq_z85_encode(z85, static_cast<std::uint8_t const*>(parts[6].data()), 32);
        key = z85;
        for (std::size_t r = 0; r < keys_.size(); ++r)
          if (keys_[r] == key) {
            status = "200";
            text = "OK";
            user = std::to_string(r);
          }
      }
      if (status != "200") {
        refused_.fetch_add(1);
        std::string const addr = parts.size() > 3 ? parts[3].to_string() : std::string("?");
        fmt::print(stderr, "sluice zmq_transport: rank {} refused a {} client from {} with key {}: not in '{}'\n",
                   rank_, parts.size() > 5 ? parts[5].to_string() : std::string("?"), addr,
                   key.empty() ? std::string("(none)") : key, file_);
      }
      std::string const request_id = parts.size() > 1 ? parts[1].to_string() : std::string();
      sock_.send(zmq::buffer(std::string_view("1.0")), zmq::send_flags::sndmore);
      sock_.send(zmq::buffer(request_id), zmq::send_flags::sndmore);
      sock_.send(zmq::buffer(status), zmq::send_flags::sndmore);
      sock_.send(zmq::buffer(text), zmq::send_flags::sndmore);
      sock_.send(zmq::buffer(user), zmq::send_flags::sndmore);
      sock_.send(zmq::message_t(), zmq::send_flags::none);
    }
  }
  std::vector<std::string> keys_;
  int rank_;
  std::string file_;
  zmq::socket_t sock_;
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> refused_{0};
  std::thread thread_;
};

}  // namespace detail

/// Writes a fresh CurveZMQ key pair as Z85 text files (the secret one with mode 0600).
inline void write_curve_keypair(std::string const& public_file, std::string const& secret_file) {
  char pub[41] = {}, sec[41] = {};
  require(zmq_curve_keypair(pub, sec) == 0, errc::unsupported,
          "write_curve_keypair: this libzmq has no CURVE support (built without libsodium)");
  {
    std::ofstream o(public_file);
    o << pub << '\n';
    require(o.good(), errc::invalid_argument, "write_curve_keypair: cannot write '{}'", public_file);
  }
  {
    std::ofstream o(secret_file);
    o << sec << '\n';
    require(o.good(), errc::invalid_argument, "write_curve_keypair: cannot write '{}'", secret_file);
  }
  (void)::chmod(secret_file.c_str(), 0600);
}

}  // namespace sluice
