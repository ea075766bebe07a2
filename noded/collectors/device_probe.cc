#include "noded/collectors/device_probe.h"

#include <arpa/inet.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cmath>
#include <fstream>
#include <set>
#include <thread>

#include "noded/accel/npu_smi.h"

namespace clusterd::noded {
namespace {

std::string_view HccnTrim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

template <typename T>
bool HccnNumber(std::string_view s, T* out) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size() && !s.empty();
}

bool IsIpv4Literal(const std::string& s) {
  unsigned char buf[4];
  return inet_pton(AF_INET, s.c_str(), buf) == 1;
}

// Splits text into lines, calling f(line_number, line) for each.
template <typename F>
void ForEachLine(std::string_view text, F f) {
  size_t line_no = 0;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    ++line_no;
    f(line_no, text.substr(0, nl));
    if (nl == std::string_view::npos) break;
    text.remove_prefix(nl + 1);
  }
}

}  // namespace

StatusOr<std::vector<DevicePort>> ParseHccnConf(std::string_view text) {
  if (text.size() > kMaxHccnConfBytes) {
    return InvalidArgument("hccn.conf: more than " + std::to_string(kMaxHccnConfBytes) + " bytes");
  }
  std::vector<DevicePort> ports;
  std::set<uint32_t> ids;
  Status bad;
  constexpr std::string_view kKey = "address_";
  ForEachLine(text, [&](size_t n, std::string_view raw) {
    if (!bad.ok()) return;
    const std::string_view line = HccnTrim(raw);
    if (line.empty() || line.front() == '#') return;
    const size_t eq = line.find('=');
    if (eq == std::string_view::npos) return;  // not a key=value line: not ours
    const std::string_view key = HccnTrim(line.substr(0, eq));
    if (key.substr(0, kKey.size()) != kKey) return;
    const std::string at = "hccn.conf line " + std::to_string(n) + ": ";
    uint32_t id = 0;
    if (!HccnNumber(key.substr(kKey.size()), &id) || id > 65535) {
      bad = InvalidArgument(at + "\"" + std::string(key) + "\" names no device 0..65535");
      return;
    }
    const std::string value(HccnTrim(line.substr(eq + 1)));
    if (!IsIpv4Literal(value)) {
      bad = InvalidArgument(at + "address of device " + std::to_string(id) + " is no IPv4 literal");
      return;
    }
    if (!ids.insert(id).second) {
      bad = InvalidArgument(at + "device " + std::to_string(id) + " given twice");
      return;
    }
    if (ports.size() >= kMaxDevicePorts) {
      bad = InvalidArgument(at + "more than " + std::to_string(kMaxDevicePorts) + " device addresses");
      return;
    }
    ports.push_back({id, value});
  });
  if (!bad.ok()) return bad;
  std::sort(ports.begin(), ports.end(), [](const auto& a, const auto& b) { return a.device_id < b.device_id; });
  return ports;
}

StatusOr<std::vector<DevicePort>> ReadHccnConf(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("cannot open " + path);
  std::string text(kMaxHccnConfBytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  auto ports = ParseHccnConf(text);
  if (!ports.ok()) return InvalidArgument(path + ": " + ports.status().message());
  return ports;
}

StatusOr<DevicePing> ParseHccnPing(std::string_view text) {
  DevicePing out;
  bool summary = false;
  Status bad;
  ForEachLine(text, [&](size_t n, std::string_view raw) {
    if (!bad.ok()) return;
    const std::string_view line = HccnTrim(raw);
    const std::string at = "hccn_tool ping output line " + std::to_string(n) + ": ";
    // "recv seq=0,time=0.079000ms"
    if (line.substr(0, 5) == "recv ") {
      const size_t t = line.find("time=");
      if (t == std::string_view::npos) return;  // a reply without a time: counted by the summary
      std::string_view v = line.substr(t + 5);
      if (v.size() >= 2 && v.substr(v.size() - 2) == "ms") v.remove_suffix(2);
      double ms = 0;
      if (!HccnNumber(HccnTrim(v), &ms) || !std::isfinite(ms) || ms < 0 || ms > 60'000) {
        bad = InvalidArgument(at + "round-trip time \"" + std::string(v) + "\" is no number of ms 0..60000");
        return;
      }
      const auto us = std::chrono::microseconds(std::llround(ms * 1000));
      out.rtt_sum += us;
      out.rtt_max = std::max(out.rtt_max, us);
      ++out.rtt_count;
      return;
    }
    // "3 packets transmitted, 3 received, 0.00% packet loss"
    const size_t tx = line.find(" packets transmitted, ");
    if (tx == std::string_view::npos) return;
    std::string_view rest = line.substr(tx + 22);
    const size_t rx = rest.find(" received");
    if (rx == std::string_view::npos || !HccnNumber(HccnTrim(line.substr(0, tx)), &out.sent) ||
        !HccnNumber(rest.substr(0, rx), &out.received)) {
      bad = InvalidArgument(at + "summary \"" + std::string(line) + "\" does not parse");
      return;
    }
    summary = true;
  });
  if (!bad.ok()) return bad;
  if (!summary) return InvalidArgument("hccn_tool ping output has no \"packets transmitted\" summary");
  if (out.received > out.sent) {
    return InvalidArgument("hccn_tool ping output: " + std::to_string(out.received) + " received of " +
                           std::to_string(out.sent) + " sent");
  }
  return out;
}

bool DeviceToolUsable(const std::string& path) { return !path.empty() && ::access(path.c_str(), X_OK) == 0; }

namespace {

DeviceProbeOutcome ProbeOneDevice(const DeviceProbeTarget& t, const DeviceProbeOptions& o) {
  DeviceProbeOutcome out;
  out.target = t;
  CaptureOptions capture;
  capture.max_output = kMaxPingOutputBytes;
  auto run = RunCommandCapture({o.tool, "-i", std::to_string(t.device_id), "-ping", "-g", "address", t.address, "pkt",
                                std::to_string(o.packets)},
                               o.timeout, capture);
  if (!run.ok()) {
    if (run.status().code() == StatusCode::kDeadlineExceeded) {
      // No answer within the timeout: every packet lost.
      out.ran = true;
      out.sent = o.packets;
      out.lost = o.packets;
      return out;
    }
    out.error = run.status().ToString();
    return out;
  }
  auto ping = ParseHccnPing(run->output);
  if (!ping.ok()) {
    out.error = ping.status().message() + " (exit " + std::to_string(run->exit_code) + ")";
    return out;
  }
  out.ran = true;
  out.sent = ping->sent;
  out.lost = ping->sent - ping->received;
  out.rtt_max = ping->rtt_max;
  // The reply lines' mean times the replies the summary counts.
  if (ping->rtt_count > 0) out.rtt_sum = ping->rtt_sum / ping->rtt_count * ping->received;
  return out;
}

}  // namespace

std::vector<DeviceProbeOutcome> ProbeDevices(const std::vector<DeviceProbeTarget>& targets,
                                             const DeviceProbeOptions& options) {
  const size_t n = std::min<size_t>(targets.size(), kMaxDeviceProbesPerRound);
  std::vector<DeviceProbeOutcome> out(n);
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < n; i = next++) out[i] = ProbeOneDevice(targets[i], options);
  };
  std::vector<std::thread> threads;
  const size_t parallel = std::min<size_t>(n, kDeviceProbeParallel);
  threads.reserve(parallel);
  for (size_t i = 1; i < parallel; ++i) threads.emplace_back(work);
  work();
  for (auto& t : threads) t.join();
  return out;
}

}  // namespace clusterd::noded
