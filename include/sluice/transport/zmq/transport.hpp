// zmq/transport: zmq_transport, the Transport over ZeroMQ. Each rank binds one ROUTER and connects
// one DEALER per peer; ZMTP heartbeats and socket monitors turn a vanished peer into errc::peer_lost.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <zmq.hpp>

#include <fmt/core.h>

#include <sluice/core/error.hpp>
#include <sluice/transport/concepts.hpp>
#include <sluice/transport/detail/progress.hpp>
#include <sluice/transport/launcher.hpp>
#include <sluice/transport/zmq/curve.hpp>
#include <sluice/transport/zmq/options.hpp>
#include <sluice/transport/zmq/rendezvous.hpp>
#include <sluice/transport/zmq/socket.hpp>

namespace sluice {

/// A Transport over ZeroMQ. Construction performs the rendezvous and a first barrier.
/// Thread-safety: any thread may call any member; calls are serialized by a mutex (ZeroMQ sockets
/// are not thread-safe), released between the 10 ms slices of a wait. The ZAP handler (CURVE only)
/// runs on its own thread.
class zmq_transport {
 public:
  using transport_concept = transport_tag;

  /// A send. Messages below zmq_options::zero_copy_min_bytes are copied and complete on return;
  /// larger ones are sent from the caller's bytes, which ZeroMQ's I/O thread reads until it
  /// releases the message (written to the kernel, or dropped by cancel() or the transport's
  /// destruction): only then does the request complete. Until it completes the caller must keep
  /// the bytes alive and unchanged; a request that is given up on must be cancelled
  /// (zmq_transport::cancel, or detail::settle_send) before the bytes are freed.
  class request {
   public:
    friend class zmq_transport;
    request() = default;
    request(std::shared_ptr<std::atomic<bool>> done, int rank, int peer)
        : done_(std::move(done)), rank_(rank), peer_(peer) {}
    [[nodiscard]] bool test() const noexcept { return !done_ || done_->load(std::memory_order_acquire); }
    void wait(deadline d) const {
      if (!detail::poll_until([&] { return test(); }, d))
        throw_error(errc::timeout, "zmq_transport: rank {}: send to rank {} was not written before the deadline", rank_,
                    peer_);
    }

   private:
    std::shared_ptr<std::atomic<bool>> done_{};
    int rank_ = 0, peer_ = 0;
  };

  explicit zmq_transport(zmq_options opt = {}) : opt_(std::move(opt)) {
    bool const explicit_endpoints = !opt_.endpoints.empty();
    rank_ = opt_.rank >= 0 ? opt_.rank : detail::env_int("RANK", -1, "zmq_transport");
    size_ = explicit_endpoints
                ? static_cast<int>(opt_.endpoints.size())
                : (opt_.world_size >= 0 ? opt_.world_size : detail::env_int("WORLD_SIZE", -1, "zmq_transport"));
    require(rank_ >= 0 && size_ >= 1 && rank_ < size_, errc::invalid_argument,
            "zmq_transport: rank {} / world size {} invalid (set RANK and WORLD_SIZE, or zmq_options)", rank_, size_);
    deadline const d = deadline::after(opt_.connect_timeout);
    if (opt_.curve) {
      require(zmq_has("curve") != 0, errc::unsupported, "zmq_transport: this libzmq has no CURVE support");
      public_key_ = detail::read_key(opt_.keys.public_key_file, "public");
      secret_key_ = detail::read_key(opt_.keys.secret_key_file, "secret");
      keys_ = detail::read_key_list(opt_.keys.authorized_keys_file);
      require(static_cast<int>(keys_.size()) >= size_, errc::invalid_argument,
              "zmq_transport: '{}' lists {} keys for a world of {}", opt_.keys.authorized_keys_file, keys_.size(),
              size_);
      require(keys_[static_cast<std::size_t>(rank_)] == public_key_, errc::invalid_argument,
              "zmq_transport: rank {}: public key in '{}' differs from line {} of '{}'", rank_,
              opt_.keys.public_key_file, rank_ + 1, opt_.keys.authorized_keys_file);
      zap_ = std::make_unique<detail::zap_handler>(ctx_, keys_, rank_, opt_.keys.authorized_keys_file);
    }
    require(opt_.receive_queue_messages >= 1, errc::invalid_argument,
            "zmq_transport: receive_queue_messages {} must be >= 1", opt_.receive_queue_messages);
    router_ = zmq::socket_t(ctx_, zmq::socket_type::router);
    router_.set(zmq::sockopt::rcvhwm, opt_.receive_queue_messages);
    require(opt_.max_frame_bytes >= (std::size_t{4} << 10) && opt_.max_frame_bytes <= (std::size_t{64} << 20),
            errc::invalid_argument, "zmq_transport: max_frame_bytes {} is outside [4 KiB, 64 MiB]",
            opt_.max_frame_bytes);
    // Every frame a peer may send, CURVE's box around it included; nothing larger is set aside,
    // whether or not the peer has completed its handshake.
    router_.set(zmq::sockopt::maxmsgsize, static_cast<std::int64_t>(opt_.max_frame_bytes + frame_overhead));
    router_.set(zmq::sockopt::linger, 0);
    detail::set_heartbeats(router_, opt_);
    make_server(router_);
    if (char const* e = std::getenv("SLUICE_ZMQ_TRACE"); e != nullptr && *e != '\0' && std::strcmp(e, "0") != 0)
      trace_ = true;
    {
      // The ROUTER's closed connections: a peer is lost only once its own connection to this rank,
      // which carries its messages, has closed (see incoming_gone).
      std::string const mon = fmt::format("inproc://sluice-monitor-{}-router", static_cast<void*>(this));
      require(zmq_socket_monitor(router_.handle(), mon.c_str(), trace_ ? ZMQ_EVENT_ALL : ZMQ_EVENT_DISCONNECTED) == 0,
              errc::unsupported, "zmq_transport: zmq_socket_monitor failed");
      router_monitor_ = zmq::socket_t(ctx_, zmq::socket_type::pair);
      router_monitor_.connect(mon);
    }
    std::vector<std::string> table;
    if (explicit_endpoints) {
      table = opt_.endpoints;
      router_.bind(table[static_cast<std::size_t>(rank_)]);
    } else {
      table = rendezvous(d);
    }
    endpoints_ = table;
    dealers_.resize(static_cast<std::size_t>(size_));
    monitors_.resize(static_cast<std::size_t>(size_));
    lost_since_.assign(static_cast<std::size_t>(size_), {});
    incoming_.assign(static_cast<std::size_t>(size_), {});
    left_.assign(static_cast<std::size_t>(size_), false);
    reached_.assign(static_cast<std::size_t>(size_), false);
    retry_said_.assign(static_cast<std::size_t>(size_), false);
    bye_answered_.assign(static_cast<std::size_t>(size_), false);
    for (int p = 0; p < size_; ++p)
      if (p != rank_) open_dealer(p);
    barrier(d);
  }

  zmq_transport(zmq_transport const&) = delete;
  zmq_transport& operator=(zmq_transport const&) = delete;
  ~zmq_transport() {
    say_goodbye();
    for (std::size_t p = 0; p < dealers_.size(); ++p)
      if (dealers_[p]) zmq_socket_monitor(dealers_[p].handle(), nullptr, 0);
    for (auto& m : monitors_) m.close();
    if (router_monitor_) {
      zmq_socket_monitor(router_.handle(), nullptr, 0);
      router_monitor_.close();
    }
    for (auto& s : dealers_) s.close();
    router_.close();
    zap_.reset();
    ctx_.close();
  }

  [[nodiscard]] int rank() const noexcept { return rank_; }
  [[nodiscard]] int size() const noexcept { return size_; }
  /// The endpoint each rank bound (after rendezvous).
  [[nodiscard]] std::vector<std::string> const& endpoints() const noexcept { return endpoints_; }
  /// CURVE clients refused by this rank's ZAP handler so far.
  [[nodiscard]] std::uint64_t refused_clients() const noexcept { return zap_ ? zap_->refused() : 0; }
  /// Messages this rank's ROUTER received and dropped so far: malformed framing, a routing id that
  /// names no other rank, or (CURVE) a routing id that is not the sender's key's rank.
  [[nodiscard]] std::uint64_t dropped_messages() const noexcept { return dropped_.load(); }

  request send(int peer, message_tag tag, std::span<std::byte const> bytes) {
    detail::check_peer(peer, size_, "zmq_transport::send");
    std::lock_guard lock(m_);
    std::uint32_t const t = to_underlying(tag);
    if (peer == rank_) {
      queues_[{peer, t}].emplace_back(bytes.data(), bytes.size());
      return {};
    }
    require(opt_.max_message_bytes == 0 || bytes.size() <= opt_.max_message_bytes, errc::invalid_argument,
            "zmq_transport: rank {}: a message of {} bytes for rank {} exceeds zmq_options::max_message_bytes = {}; "
            "raise it (on every rank) to the largest message the job sends",
            rank_, bytes.size(), peer, opt_.max_message_bytes);
    poll_events(std::chrono::milliseconds(0));
    require(!lost_for_good(peer), errc::peer_lost, "zmq_transport: rank {} sending to rank {} (tag {}): peer lost",
            rank_, peer, t);
    auto& s = dealers_[static_cast<std::size_t>(peer)];
    // Frames of at most max_frame_bytes, each [tag, total, offset][bytes]; without a copy from
    // zero_copy_min_bytes on: the request completes when ZeroMQ has released every frame.
    std::size_t const total = bytes.size(), frame = opt_.max_frame_bytes;
    std::size_t const frames = total == 0 ? 1 : (total + frame - 1) / frame;
    std::shared_ptr<send_state> state;
    if (total >= opt_.zero_copy_min_bytes) state = std::make_shared<send_state>(frames);
    for (std::size_t k = 0; k < frames; ++k) {
      std::size_t const offset = k * frame, len = std::min(frame, total - offset);
      std::array<std::byte, frame_head_bytes> head{};
      std::memcpy(head.data(), &t, 4);
      std::uint64_t const tot = total, off = offset;
      std::memcpy(head.data() + 4, &tot, 8);
      std::memcpy(head.data() + 12, &off, 8);
      zmq::message_t body;
      if (state)
        // ZeroMQ only reads the bytes; the free function counts the frame released.
        body = zmq::message_t(const_cast<std::byte*>(bytes.data()) + offset, len, &release_send,
                              new std::shared_ptr<send_state>(state));
      else
        body = zmq::message_t(bytes.data() + offset, len);
      bool const ok =
          s.send(zmq::const_buffer(head.data(), head.size()), zmq::send_flags::sndmore | zmq::send_flags::dontwait) &&
          s.send(std::move(body), zmq::send_flags::dontwait);
      if (ok) continue;
      // Frames already queued may still be read: drop them with the connection before throwing.
      if (state && k > 0) {
        request r{std::shared_ptr<std::atomic<bool>>(state, &state->done), rank_, peer};
        reset_dealer(peer);
        (void)detail::poll_until([&] { return r.test(); },
                                 deadline::after(std::max(opt_.linger, std::chrono::milliseconds(1'000))));
      }
      throw_error(errc::peer_lost, "zmq_transport: rank {} cannot queue a message for rank {} (tag {})", rank_, peer,
                  t);
    }
    if (!state) return {};
    return {std::shared_ptr<std::atomic<bool>>(state, &state->done), rank_, peer};
  }

  std::span<std::byte const> recv(int peer, message_tag tag, std::vector<std::byte>& buffer, deadline d) {
    detail::check_peer(peer, size_, "zmq_transport::recv");
    std::uint32_t const t = to_underlying(tag);
    for (;;) {
      {
        std::lock_guard lock(m_);
        poll_events(std::chrono::milliseconds(0));
        auto it = queues_.find({peer, t});
        if (it != queues_.end() && !it->second.empty()) {
          auto& msg = it->second.front();
          buffer.resize(msg.size());
          if (msg.size()) std::memcpy(buffer.data(), msg.data(), msg.size());
          it->second.pop_front();
          return buffer;
        }
        if (peer != rank_ && left_[static_cast<std::size_t>(peer)])
          throw_error(errc::peer_lost,
                      "zmq_transport: rank {} waiting for rank {} (tag {}): peer lost (it has left; nothing more comes "
                      "from it)",
                      rank_, peer, t);
        if (peer != rank_ && lost_for_good(peer) && incoming_gone(peer))
          throw_error(errc::peer_lost, "zmq_transport: rank {} waiting for rank {} (tag {}): peer lost (disconnected)",
                      rank_, peer, t);
        if (d.expired())
          throw_error(errc::timeout, "zmq_transport: rank {} waiting for rank {} (tag {}): deadline passed", rank_,
                      peer, t);
        auto const slice = std::min<transport_clock::duration>(d.remaining(), std::chrono::milliseconds(10));
        poll_events(std::chrono::duration_cast<std::chrono::milliseconds>(slice) + std::chrono::milliseconds(1));
      }
    }
  }

  void barrier(deadline d) {
    std::vector<std::byte> scratch;
    detail::dissemination_barrier(*this, barrier_tag, d, scratch, enter_barrier());
  }
  /// Counts a barrier this endpoint enters; returns its number (0, 1, ...). See Transport.
  std::uint64_t enter_barrier() noexcept { return barriers_.fetch_add(1); }

  /// Gives up on a send: on return ZeroMQ no longer reads its bytes, so they may be freed. A
  /// request still in ZeroMQ's hands (a stalled or slow peer) is dropped by closing the connection
  /// to its peer and opening a new one, which drops every message still queued for that peer
  /// (receivers detect the loss: collectives raise errc::timeout). Throws errc::timeout only if
  /// ZeroMQ has not released the message within max(zmq_options::linger, 1 s) after the close.
  void cancel(request& r) {
    if (r.test()) return;
    {
      std::lock_guard lock(m_);
      if (r.test()) return;
      reset_dealer(r.peer_);
    }
    // The I/O thread releases the message when it tears the old connection down.
    if (!detail::poll_until([&] { return r.test(); },
                            deadline::after(std::max(opt_.linger, std::chrono::milliseconds(1'000)))))
      throw_error(errc::timeout, "zmq_transport: rank {}: a cancelled send to rank {} was not released by ZeroMQ",
                  rank_, r.peer_);
  }

 private:
  // The DEALER to peer p (routing id = this rank) and its monitor; connects at once (messages
  // queue until the handshake is done).
  void open_dealer(int p) {
    auto const up = static_cast<std::size_t>(p);
    auto& s = dealers_[up];
    s = zmq::socket_t(ctx_, zmq::socket_type::dealer);
    std::uint32_t const id = static_cast<std::uint32_t>(rank_);
    s.set(zmq::sockopt::routing_id, zmq::const_buffer(&id, 4));
    s.set(zmq::sockopt::sndhwm, 0);
    // A DEALER here only sends: what comes back is ZMTP commands (handshake, heartbeats).
    s.set(zmq::sockopt::rcvhwm, 1);
    s.set(zmq::sockopt::maxmsgsize, detail::zmq_control_max_bytes);
    s.set(zmq::sockopt::linger, static_cast<int>(opt_.linger.count()));
    detail::set_heartbeats(s, opt_);
    make_client(s, p);
    std::string const mon =
        fmt::format("inproc://sluice-monitor-{}-{}-{}", static_cast<void*>(this), p, monitor_generation_++);
    require(zmq_socket_monitor(s.handle(), mon.c_str(), trace_ ? ZMQ_EVENT_ALL : watched_events) == 0,
            errc::unsupported, "zmq_transport: zmq_socket_monitor failed");
    auto& m = monitors_[up];
    m = zmq::socket_t(ctx_, zmq::socket_type::pair);
    m.connect(mon);
    s.connect(endpoints_[up]);
    // The first message on the connection, so that the peer knows it for this rank's at once.
    send_control(p, hello_tag);
  }

  // An empty message on one of the transport's own tags (never queued for recv).
  void send_control(int p, std::uint32_t tag) {
    auto& s = dealers_[static_cast<std::size_t>(p)];
    std::array<std::byte, frame_head_bytes> head{};
    std::memcpy(head.data(), &tag, 4);
    (void)(s.send(zmq::const_buffer(head.data(), head.size()), zmq::send_flags::sndmore | zmq::send_flags::dontwait) &&
           s.send(zmq::const_buffer(), zmq::send_flags::dontwait));
  }

  // Before the sockets close: a goodbye to every peer still connected, behind everything already
  // queued for it, and a wait (at most `linger`) for each peer to answer that it has read it, so
  // that this rank's last messages are read before it leaves. ZeroMQ's linger alone does not
  // promise that: a connection closed with the tail of a message still unwritten loses it. A peer
  // whose ROUTER has gone (it left too) is not waited for.
  void say_goodbye() noexcept {
    try {
      std::lock_guard lock(m_);
      if (opt_.linger.count() <= 0) return;
      poll_events(std::chrono::milliseconds(0));
      for (int p = 0; p < size_; ++p)
        if (p != rank_ && dealers_[static_cast<std::size_t>(p)] && !is_lost(p)) send_control(p, bye_tag);
      deadline const d = deadline::after(opt_.linger);
      auto const answered = [&] {
        for (int p = 0; p < size_; ++p)
          if (p != rank_ && !bye_answered_[static_cast<std::size_t>(p)] && !is_lost(p)) return false;
        return true;
      };
      while (!answered() && !d.expired()) poll_events(std::chrono::milliseconds(10));
    } catch (std::exception const& e) {
      std::fprintf(stderr, "sluice zmq_transport: rank %d: goodbye: %s\n", rank_, e.what());
    }
  }

  // Closes the connection to peer p, dropping every frame still queued for it, and opens a new one.
  void reset_dealer(int p) {
    auto const up = static_cast<std::size_t>(p);
    zmq_socket_monitor(dealers_[up].handle(), nullptr, 0);
    monitors_[up].close();
    dealers_[up].set(zmq::sockopt::linger, 0);
    dealers_[up].close();
    lost_since_[up] = {};
    open_dealer(p);
  }

  // The DEALER events that mark a peer connected (HANDSHAKE_SUCCEEDED) or not (the others).
  static constexpr int watched_events = ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_HANDSHAKE_SUCCEEDED |
                                        ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                                        ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL;

  // SLUICE_ZMQ_TRACE: one stderr line per socket event, with the time (Unix seconds).
  void trace(std::string_view socket, std::uint16_t event, std::uint32_t value, std::string_view addr) const {
    fmt::print(stderr, "sluice zmq_transport trace: {:.6f} rank {} {} event 0x{:x} value {} {}\n",
               std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(), rank_,
               socket, event, value, addr);
  }

  using queue_key = std::pair<int, std::uint32_t>;

  // A message sent without a copy: done once ZeroMQ has released all its frames.
  struct send_state {
    explicit send_state(std::size_t frames) : left(frames) {}
    std::atomic<std::size_t> left;
    std::atomic<bool> done{false};
  };
  static void release_send(void*, void* hint) noexcept {
    auto* state = static_cast<std::shared_ptr<send_state>*>(hint);
    if ((*state)->left.fetch_sub(1, std::memory_order_acq_rel) == 1)
      (*state)->done.store(true, std::memory_order_release);
    delete state;
  }

  // A message being put together from its frames (from one rank, on one tag).
  struct partial {
    zmq::message_t bytes;
    std::size_t next = 0;  // offset of the frame expected next
  };
  // [tag u32][total u64][offset u64]; CURVE adds at most this to a frame on the wire.
  static constexpr std::size_t frame_head_bytes = 20, frame_overhead = 64;
  // The tag of the empty message a DEALER sends first on its connection (never queued for recv).
  static constexpr std::uint32_t hello_tag = 0xFFFF'FFFF;
  // A leaving rank's last message to a peer, and the peer's answer once it has read it.
  static constexpr std::uint32_t bye_tag = 0xFFFF'FFFE, bye_answer_tag = 0xFFFF'FFFD;

  // Drops a message that fails a check; says so on stderr for the first 10.
  void drop(std::string_view what) {
    auto const k = dropped_.fetch_add(1) + 1;
    if (k <= 10)
      fmt::print(stderr, "sluice zmq_transport: rank {} dropped {}{}\n", rank_, what,
                 k == 10 ? " (further ones are only counted: dropped_messages())" : "");
  }

  // Takes one checked frame of rank src's message on tag t: queues the message when it is whole.
  void take_frame(int src, std::uint32_t t, std::uint64_t total, std::uint64_t offset, zmq::message_t payload) {
    queue_key const key{src, t};
    auto it = partials_.find(key);
    if (offset == 0) {
      if (it != partials_.end()) {
        partials_.erase(it);
        drop("the unfinished part of a message (its sender started another)");
      }
      if (payload.size() == total) {
        queues_[key].push_back(std::move(payload));
        return;
      }
      // The whole is checked against max_message_bytes before this: an authenticated peer's.
      partial p{zmq::message_t(static_cast<std::size_t>(total)), 0};
      std::memcpy(p.bytes.data(), payload.data(), payload.size());
      p.next = payload.size();
      partials_.emplace(key, std::move(p));
      return;
    }
    if (it == partials_.end() || it->second.next != offset || it->second.bytes.size() != total) {
      if (it != partials_.end()) partials_.erase(it);
      drop("a frame that does not continue the message it names");
      return;
    }
    std::memcpy(static_cast<std::byte*>(it->second.bytes.data()) + offset, payload.data(), payload.size());
    it->second.next += payload.size();
    if (it->second.next == total) {
      queues_[key].push_back(std::move(it->second.bytes));
      partials_.erase(it);
    }
  }

  void make_server(zmq::socket_t& s) {
    if (!opt_.curve) return;
    s.set(zmq::sockopt::zap_domain, "sluice");
    s.set(zmq::sockopt::curve_server, true);
    s.set(zmq::sockopt::curve_secretkey, secret_key_);
  }
  void make_client(zmq::socket_t& s, int server_rank) {
    if (!opt_.curve) return;
    s.set(zmq::sockopt::curve_serverkey, keys_[static_cast<std::size_t>(server_rank)]);
    s.set(zmq::sockopt::curve_publickey, public_key_);
    s.set(zmq::sockopt::curve_secretkey, secret_key_);
  }

  [[nodiscard]] bool is_lost(int p) const {
    return lost_since_[static_cast<std::size_t>(p)] != transport_clock::time_point{};
  }
  // This rank's DEALER to p disconnected for longer than peer_lost_grace: ZeroMQ reconnects
  // within it after a dropped connection (cancel(), a refused oversized frame), and messages sent
  // meanwhile are queued. Enough to refuse a send to p; a recv from p needs incoming_gone too.
  [[nodiscard]] bool lost_for_good(int p) const {
    return is_lost(p) && transport_clock::now() - lost_since_[static_cast<std::size_t>(p)] >= opt_.peer_lost_grace;
  }
  // Nothing more can come from p: the connection its messages came by closed at least
  // peer_lost_grace ago (every message it carried was read before the ROUTER reported the close)
  // and none came by another since; or none ever came. A peer that leaves closes its ROUTER at
  // once, but its last messages may still be on their way for seconds on a slow link (its DEALER
  // lingers to write them): until they are read, it is not lost.
  [[nodiscard]] bool incoming_gone(int p) const {
    auto const& in = incoming_[static_cast<std::size_t>(p)];
    return in.fd < 0 ||
           (in.closed != transport_clock::time_point{} && transport_clock::now() - in.closed >= opt_.peer_lost_grace);
  }

  // Drains the router and the monitors; waits up to `wait` for the first event.
  void poll_events(std::chrono::milliseconds wait) {
    std::vector<zmq::pollitem_t>& items = items_;
    items.clear();
    items.push_back({router_.handle(), 0, ZMQ_POLLIN, 0});
    for (auto& m : monitors_)
      if (m) items.push_back({m.handle(), 0, ZMQ_POLLIN, 0});
    items.push_back({router_monitor_.handle(), 0, ZMQ_POLLIN, 0});
    zmq::poll(items.data(), items.size(), wait);
    drain_router();
    for (std::size_t p = 0; p < monitors_.size(); ++p)
      if (monitors_[p]) drain_monitor(static_cast<int>(p));
    // A closed incoming connection: what it carried was queued before the close was reported.
    if (drain_monitor(-1)) drain_router();
  }

  // A frame is [routing id][tag, total, offset][payload]. ZeroMQ delivers the parts of one frame
  // together, so after the first part the rest are read whatever they hold, and a frame that
  // fails a check is drained to the end by the `more` flag of the last part actually read: no
  // part of it is ever taken for the start of the next one.
  void drain_router() {
    for (;;) {
      zmq::message_t id, head, payload;
      if (!router_.recv(id, zmq::recv_flags::dontwait)) return;
      bool more = id.more();
      bool ok = more && id.size() == 4;
      if (more) {
        (void)router_.recv(head);
        more = head.more();
        ok = ok && more && head.size() == frame_head_bytes;
      }
      if (more) {
        (void)router_.recv(payload);
        more = payload.more();
        ok = ok && !more;
      }
      for (zmq::message_t rest; more;) {
        (void)router_.recv(rest);
        more = rest.more();
      }
      int const src = ok ? static_cast<int>(detail::load_u32(id.data())) : -1;
      ok = ok && src >= 0 && src < size_ && src != rank_;
      if (ok && opt_.curve) {
        // The ZAP handler named the key's rank as User-Id: a peer cannot speak for another rank.
        char const* user = payload.gets("User-Id");
        ok = user && std::to_string(src) == user;
      }
      if (!ok) {
        drop("a malformed or unauthenticated message");
        continue;
      }
      // The connection it came by is src's (until the ROUTER reports it closed).
      if (int const fd = zmq_msg_get(payload.handle(), ZMQ_SRCFD); fd >= 0)
        incoming_[static_cast<std::size_t>(src)] = {fd, {}};
      if (std::uint32_t const tag = detail::load_u32(head.data()); tag >= bye_answer_tag) {
        if (tag == bye_tag) {
          left_[static_cast<std::size_t>(src)] = true;  // nothing comes after it
          if (dealers_[static_cast<std::size_t>(src)]) send_control(src, bye_answer_tag);
        } else if (tag == bye_answer_tag) {
          bye_answered_[static_cast<std::size_t>(src)] = true;
        }
        continue;
      }
      std::uint64_t total = 0, offset = 0;
      std::memcpy(&total, static_cast<std::byte const*>(head.data()) + 4, 8);
      std::memcpy(&offset, static_cast<std::byte const*>(head.data()) + 12, 8);
      if (opt_.max_message_bytes != 0 && total > opt_.max_message_bytes) {
        if (offset == 0)  // said once per message; its later frames are only counted
          drop(fmt::format("a message of {} bytes from rank {} (above max_message_bytes)", total, src));
        else
          dropped_.fetch_add(1);
        continue;
      }
      if (offset > total || payload.size() > total - offset || (payload.size() == 0 && total != 0)) {
        drop(fmt::format("a frame from rank {} outside the message it names", src));
        continue;
      }
      take_frame(src, detail::load_u32(head.data()), total, offset, std::move(payload));
    }
  }

  // The events of the DEALER to peer p, or (p = -1) of the ROUTER: true if an incoming
  // connection closed.
  bool drain_monitor(int p) {
    auto& m = p < 0 ? router_monitor_ : monitors_[static_cast<std::size_t>(p)];
    bool closed = false;
    for (;;) {
      zmq::message_t ev, addr;
      if (!m.recv(ev, zmq::recv_flags::dontwait)) return closed;
      if (ev.more()) (void)m.recv(addr);
      if (ev.size() < 6) continue;
      std::uint16_t event = 0;
      std::memcpy(&event, ev.data(), 2);
      std::uint32_t const value = detail::load_u32(static_cast<std::byte const*>(ev.data()) + 2);
      if (trace_)
        trace(p < 0 ? std::string("router") : fmt::format("dealer to rank {}", p), event, value, addr.to_string_view());
      if (p < 0) {
        if (event != ZMQ_EVENT_DISCONNECTED) continue;
        // value: the connection's file descriptor. A descriptor reused by a newer connection
        // whose message was read before this event marks that peer closed too, until its next
        // message: it then needs its ROUTER gone as well to count as lost (lost_for_good).
        closed = true;
        for (auto& in : incoming_)
          if (in.fd == static_cast<int>(value) && in.closed == transport_clock::time_point{})
            in.closed = transport_clock::now();
        continue;
      }
      if ((event & watched_events) == 0) continue;
      auto const up = static_cast<std::size_t>(p);
      auto& since = lost_since_[up];
      if (event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
        since = {};
        reached_[up] = true;
      } else if (!reached_[up] && (event == ZMQ_EVENT_DISCONNECTED || event == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL)) {
        // A connection that broke before this rank first reached p (p still starting, or a
        // process other than p on its port): ZeroMQ retries it, as it does a refused connect, and
        // a peer never reached is not lost; a deadline ends the wait.
        if (event == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL && !retry_said_[up]) {
          retry_said_[up] = true;
          fmt::print(stderr,
                     "sluice zmq_transport: rank {}: the connection to rank {} at {} broke in its handshake; "
                     "retrying\n",
                     rank_, p, endpoints_[up]);
        }
      } else if (since == transport_clock::time_point{}) {
        since = transport_clock::now();
        if (event != ZMQ_EVENT_DISCONNECTED)
          fmt::print(stderr, "sluice zmq_transport: rank {}: handshake with rank {} failed (event 0x{:x})\n", rank_, p,
                     event);
      }
    }
  }

  // Rank 0 binds MASTER_ADDR:MASTER_PORT, collects every rank's data endpoint and sends the table back.
  std::vector<std::string> rendezvous(deadline d) {
    return detail::zmq_rendezvous(
        ctx_, router_, opt_, rank_, size_, d, [this](zmq::socket_t& s) { make_server(s); },
        [this](zmq::socket_t& s, int server_rank) { make_client(s, server_rank); });
  }

  zmq_options opt_;
  int rank_ = 0, size_ = 1;
  zmq::context_t ctx_{1};
  std::string public_key_, secret_key_;
  std::vector<std::string> keys_;
  std::unique_ptr<detail::zap_handler> zap_;
  zmq::socket_t router_;
  std::vector<zmq::socket_t> dealers_;
  std::vector<zmq::socket_t> monitors_;
  zmq::socket_t router_monitor_;
  bool trace_ = false;
  std::vector<transport_clock::time_point> lost_since_;
  // Per peer: the ROUTER connection its last message came by (-1: none yet) and when that
  // connection was reported closed (zero: open).
  struct incoming {
    int fd = -1;
    transport_clock::time_point closed{};
  };
  std::vector<incoming> incoming_;
  std::vector<bool> left_;          // per peer: its goodbye came (it sends nothing more)
  std::vector<bool> reached_;       // per peer: a handshake with it has succeeded once
  std::vector<bool> retry_said_;    // per peer: a broken first connection was reported
  std::vector<bool> bye_answered_;  // per peer: it has read this rank's goodbye
  std::vector<std::string> endpoints_;
  std::map<queue_key, std::deque<zmq::message_t>> queues_;
  std::map<queue_key, partial> partials_;
  std::vector<zmq::pollitem_t> items_;
  std::uint64_t monitor_generation_ = 0;
  std::atomic<std::uint64_t> dropped_{0};
  std::atomic<std::uint64_t> barriers_{0};
  std::mutex m_;
};
static_assert(Transport<zmq_transport>);

}  // namespace sluice
