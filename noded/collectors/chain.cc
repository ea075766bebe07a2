#include "noded/collectors/chain.h"

#include <algorithm>
#include <cctype>
#include <set>

#include "common/validation.h"

namespace clusterd::noded {
namespace {

// Entries looked at in one directory: a hostile tree does not make a probe
// walk for long.
constexpr size_t kMaxEntries = 256;
constexpr size_t kMaxVersion = 64;
constexpr size_t kMaxEvidence = 400;
// The Ascend Docker Runtime's binary: a containerd runtime or a Docker
// runtime that names it is the runtime configured for Ascend.
constexpr std::string_view kAscendRuntime = "ascend-docker-runtime";

std::string Lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

// A value from the system, safe to send: one printable line, bounded.
std::string Clean(std::string_view s, size_t max) {
  std::string out(s.substr(0, 4 * max));
  SanitizeLine(&out);  // valid UTF-8 from here on: cut at a character boundary
  if (out.size() > max) {
    size_t cut = max;
    while (cut > 0 && (static_cast<unsigned char>(out[cut]) & 0xC0) == 0x80) --cut;
    out.resize(cut);
  }
  return out;
}

// The value of the first "key=value" line whose key is `key` (any case).
std::string ValueOf(std::string_view text, std::string_view key) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = Trim(text.substr(pos, end - pos));
    pos = end + 1;
    const size_t eq = line.find('=');
    if (eq == std::string_view::npos || Lower(Trim(line.substr(0, eq))) != Lower(key)) continue;
    std::string_view v = Trim(line.substr(eq + 1));
    if (v.size() >= 2 && v.front() == '"' && v.back() == '"') v = v.substr(1, v.size() - 2);
    return Clean(v, kMaxVersion);
  }
  return {};
}

bool IsDavinciChip(std::string_view name) {
  constexpr std::string_view prefix = "davinci";
  if (name.size() <= prefix.size() || name.substr(0, prefix.size()) != prefix) return false;
  return std::all_of(name.begin() + prefix.size(), name.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::string Join(const std::vector<std::string>& items, std::string_view sep, size_t max_items = 8) {
  std::string out;
  for (size_t i = 0; i < items.size() && i < max_items; ++i) {
    if (i > 0) out += sep;
    out += items[i];
  }
  if (items.size() > max_items) out += std::string(sep) + "... (" + std::to_string(items.size()) + ")";
  return out;
}

ChainLink Link(std::string name, LinkState state, const std::string& evidence, std::string code = "",
               std::string version = "") {
  ChainLink l;
  l.name = std::move(name);
  l.state = state;
  l.evidence = Clean(evidence, kMaxEvidence);
  l.code = state == LinkState::kBroken ? std::move(code) : std::string();
  l.version = std::move(version);
  return l;
}

}  // namespace

const char* LinkStateName(LinkState s) {
  switch (s) {
    case LinkState::kOk: return "ok";
    case LinkState::kBroken: return "broken";
    case LinkState::kUnknown: break;
  }
  return "unknown";
}

const ChainLink* ChainReading::Find(const std::string& name) const {
  for (const auto& l : links) {
    if (l.name == name) return &l;
  }
  return nullptr;
}

ChainCollector::ChainCollector(ChainOptions options) : options_(std::move(options)), fs_(options_.root) {}

StatusOr<std::string> ChainCollector::ReadSmall(const std::string& abs) const {
  return fs_.Read(abs, options_.max_file_bytes);
}

ChainReading ChainCollector::Collect(uint32_t backend_chips, bool ascend_node) const {
  ChainReading r;
  r.links.push_back(Driver(ascend_node));
  // The node is an Ascend node when its backend says so or its driver is
  // installed: only then is a missing link a fault rather than no Ascend.
  const bool ascend = ascend_node || r.links.back().state == LinkState::kOk;
  r.links.push_back(Firmware());
  uint32_t chips = 0;
  r.links.push_back(DeviceFiles(ascend, &chips));
  const uint32_t expected = options_.expected_chips != 0 ? options_.expected_chips : backend_chips;
  r.links.push_back(Chips(r.links.back(), chips, expected));
  r.links.push_back(Cann());
  r.links.push_back(Runtime(ascend));
  r.links.push_back(DevicePlugin(ascend));
  r.links.push_back(Kernel());
  return r;
}

ChainLink ChainCollector::Driver(bool ascend_node) const {
  const std::string file = options_.ascend_path + "/driver/version.info";
  auto text = ReadSmall(file);
  if (text.ok()) {
    std::string version = ValueOf(*text, "Version");
    if (!version.empty()) return Link("driver", LinkState::kOk, file + ": Version=" + version, "", version);
    return Link("driver", LinkState::kUnknown, file + " has no Version= line");
  }
  if (text.status().code() != StatusCode::kNotFound)
    return Link("driver", LinkState::kUnknown, text.status().message());
  if (ascend_node) {
    return Link("driver", LinkState::kBroken,
                "no " + file + " although the accelerator backend is Ascend: the driver is not installed there",
                kChainDriverMissing);
  }
  return Link("driver", LinkState::kUnknown, "no " + file + " (not an Ascend node, or not mounted into NodeD)");
}

ChainLink ChainCollector::Firmware() const {
  // The firmware package installed for the chips (the one the driver loads
  // onto them); whether it suits the driver is ClusterD's to judge, from the
  // catalog's pairs. Missing: unknown, never broken (the firmware may be
  // installed elsewhere, or not mounted into NodeD's container).
  const std::string file = options_.ascend_path + "/firmware/version.info";
  auto text = ReadSmall(file);
  if (!text.ok()) {
    return Link("firmware", LinkState::kUnknown,
                text.status().code() == StatusCode::kNotFound ? "no " + file : text.status().message());
  }
  std::string version = ValueOf(*text, "Version");
  if (version.empty()) return Link("firmware", LinkState::kUnknown, file + " has no Version= line");
  return Link("firmware", LinkState::kOk, file + ": Version=" + version, "", version);
}

ChainLink ChainCollector::DeviceFiles(bool ascend, uint32_t* chips) const {
  const std::string& dev = options_.dev_path;
  // A directory without null is not a real /dev (not mounted into NodeD's
  // container): nothing can be told from it.
  if (!fs_.Exists(dev + "/null")) return Link("device_files", LinkState::kUnknown, dev + " is not a device directory");
  std::vector<std::string> names = fs_.List(dev);
  size_t seen = 0;
  for (const auto& n : names) {
    if (++seen > 4 * kMaxEntries) break;
    if (IsDavinciChip(n)) ++*chips;
  }
  const bool manager = fs_.Exists(dev + "/davinci_manager");
  const std::string counted = std::to_string(*chips) + " " + dev + "/davinci<N>";
  if (manager) return Link("device_files", LinkState::kOk, dev + "/davinci_manager and " + counted);
  if (ascend) {
    return Link("device_files", LinkState::kBroken,
                "no " + dev + "/davinci_manager (" + counted + "): the driver is not loaded", kChainDriverNotLoaded);
  }
  return Link("device_files", LinkState::kUnknown, "no " + dev + "/davinci_manager (not an Ascend node)");
}

ChainLink ChainCollector::Chips(const ChainLink& device_files, uint32_t chips, uint32_t expected) const {
  if (device_files.state != LinkState::kOk)
    return Link("chips", LinkState::kUnknown, "the driver's device files are not seen");
  if (expected == 0) return Link("chips", LinkState::kUnknown, std::to_string(chips) + " chips, none expected by name");
  const std::string text = std::to_string(chips) + " of " + std::to_string(expected) + " expected chips have a " +
                           options_.dev_path + "/davinci<N>";
  if (chips < expected) return Link("chips", LinkState::kBroken, text, kChainChipsMissing);
  return Link("chips", LinkState::kOk, text);
}

ChainLink ChainCollector::Cann() const {
  // <ascend>/ascend-toolkit/<version or latest>/<arch>-linux/ and, from
  // CANN 8.5, <ascend>/cann[-<version>]/<arch>-linux/: ascend_toolkit_install.info.
  std::vector<std::string> homes;
  std::vector<std::string> top = fs_.List(options_.ascend_path);
  if (top.size() > kMaxEntries) top.resize(kMaxEntries);
  for (const auto& e : top) {
    if (e == "ascend-toolkit") {
      std::vector<std::string> subs = fs_.List(options_.ascend_path + "/" + e);
      if (subs.size() > kMaxEntries) subs.resize(kMaxEntries);
      for (const auto& s : subs) homes.push_back(options_.ascend_path + "/" + e + "/" + s);
    } else if (e == "cann" || e.rfind("cann-", 0) == 0) {
      homes.push_back(options_.ascend_path + "/" + e);
    }
  }
  std::set<std::string> versions;
  std::string where;
  for (const auto& home : homes) {
    for (const char* arch : {"aarch64-linux", "x86_64-linux"}) {
      const std::string file = home + "/" + arch + "/ascend_toolkit_install.info";
      auto text = ReadSmall(file);
      if (!text.ok()) continue;
      std::string v = ValueOf(*text, "version");
      if (v.empty()) continue;
      if (versions.insert(v).second && where.empty()) where = file;
    }
  }
  if (versions.empty()) {
    return Link("cann", LinkState::kUnknown,
                "no CANN toolkit under " + options_.ascend_path + " (jobs may bring their own in the image)");
  }
  std::vector<std::string> list(versions.begin(), versions.end());
  return Link("cann", LinkState::kOk, "version= in " + where + (list.size() > 1 ? " and others" : ""), "",
              Clean(Join(list, ","), kMaxVersion * 2));
}

ChainLink ChainCollector::Runtime(bool ascend) const {
  std::vector<std::string> files = options_.runtime_files;
  for (const auto& dir : options_.runtime_dirs) {
    std::vector<std::string> names = fs_.List(dir);
    if (names.size() > kMaxEntries) names.resize(kMaxEntries);
    for (const auto& n : names) files.push_back(dir + "/" + n);
  }
  std::vector<std::string> read, skipped;
  for (const auto& f : files) {
    auto text = ReadSmall(f);
    if (!text.ok()) {
      if (text.status().code() != StatusCode::kNotFound) skipped.push_back(text.status().message());
      continue;
    }
    read.push_back(f);
    if (text->find(kAscendRuntime) != std::string::npos) {
      return Link("runtime", LinkState::kOk, f + " names " + std::string(kAscendRuntime));
    }
  }
  if (read.empty() || !skipped.empty()) {
    // Nothing to read, or a file that could not be read may be the one.
    return Link("runtime", LinkState::kUnknown,
                read.empty() && skipped.empty() ? "no containerd or Docker configuration found"
                                                : "not decided: " + Join(skipped, "; ", 2));
  }
  if (!ascend) return Link("runtime", LinkState::kUnknown, "not an Ascend node");
  return Link("runtime", LinkState::kBroken,
              "none of " + Join(read, ", ", 4) + " names " + std::string(kAscendRuntime) +
                  ": pods get no /dev/davinci* (install or configure the Ascend Docker Runtime)",
              kChainRuntimeNotConfigured);
}

ChainLink ChainCollector::DevicePlugin(bool ascend) const {
  const std::string& dir = options_.device_plugin_dir;
  std::vector<std::string> names = fs_.List(dir);
  if (names.size() > kMaxEntries) names.resize(kMaxEntries);
  if (std::find(names.begin(), names.end(), "kubelet.sock") == names.end()) {
    return Link("device_plugin", LinkState::kUnknown, "no " + dir + "/kubelet.sock (no kubelet, or not mounted)");
  }
  std::vector<std::string> ours;
  for (const auto& n : names) {
    const std::string low = Lower(n);
    if (n == "kubelet.sock" || low.size() < 5 || low.substr(low.size() - 5) != ".sock") continue;
    if (low.find("ascend") != std::string::npos || low.find("davinci") != std::string::npos ||
        low.find("npu") != std::string::npos || low.find("huawei") != std::string::npos) {
      ours.push_back(n);
    }
  }
  if (!ours.empty()) return Link("device_plugin", LinkState::kOk, "registered: " + Join(ours, ", ", 4));
  if (!ascend) return Link("device_plugin", LinkState::kUnknown, "no Ascend plugin socket (not an Ascend node)");
  return Link("device_plugin", LinkState::kBroken,
              "no Ascend device plugin socket in " + dir + " next to kubelet.sock: the kubelet offers no NPUs here",
              kChainDevicePluginNotRegistered);
}

ChainLink ChainCollector::Kernel() const {
  auto release = fs_.ReadLine("/proc/sys/kernel/osrelease");
  if (!release || release->empty()) return Link("kernel", LinkState::kUnknown, "/proc/sys/kernel/osrelease unreadable");
  std::string v = Clean(*release, kMaxVersion);
  return Link("kernel", LinkState::kOk, "/proc/sys/kernel/osrelease", "", v);
}

}  // namespace clusterd::noded
