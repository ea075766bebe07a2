#include "noded/validator.h"

#include <algorithm>

#include <google/protobuf/util/time_util.h>
#include <nlohmann/json.hpp>

#include "common/logging.h"
#include "noded/accel/npu_smi.h"

namespace clusterd::noded {
namespace {

using google::protobuf::util::TimeUtil;

constexpr size_t kMaxCommands = 32;
constexpr size_t kMaxArgs = 64;

std::string ValidationDeviceList(const std::vector<uint32_t>& devices) {
  std::string out;
  for (uint32_t d : devices) out += (out.empty() ? "" : ",") + std::to_string(d);
  return out;
}

// The last `max` bytes of `text`, cut at a UTF-8 character start.
std::string EvidenceTail(const std::string& text, size_t max) {
  if (text.size() <= max) return text;
  size_t from = text.size() - max;
  while (from < text.size() && (static_cast<unsigned char>(text[from]) & 0xC0) == 0x80) ++from;
  return text.substr(from);
}

}  // namespace

void AddReadings(const std::vector<uint32_t>& devices,
                 const std::function<std::optional<DeviceStatus>(int32_t)>& reading, ValidationSample* sample) {
  for (uint32_t id : devices) {
    const std::string name = "device " + std::to_string(id);
    const std::optional<DeviceStatus> r = reading ? reading(static_cast<int32_t>(id)) : std::nullopt;
    if (!r) {
      sample->problems.push_back(name + " has no reading from the backend");
      continue;
    }
    if (!r->healthy) {
      sample->problems.push_back(name + " reads unhealthy (health " + std::to_string(r->health_raw) +
                                 (r->read_error.empty() ? "" : ", " + r->read_error) + ")");
    }
    for (const auto& [counter, value] : r->error_counters) sample->counters[name + " " + counter] = value;
    for (const std::string& code : r->error_codes) sample->codes.insert(name + " code " + code);
  }
}

StatusOr<std::vector<ValidationCommand>> ParseValidationCommands(const std::string& text) {
  nlohmann::json doc = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) return InvalidArgument("validation commands: not a JSON object");
  if (!doc.contains("commands")) return std::vector<ValidationCommand>{};
  const nlohmann::json& list = doc["commands"];
  if (!list.is_array()) return InvalidArgument("validation commands: \"commands\" is not an array");
  if (list.size() > kMaxCommands) {
    return InvalidArgument("validation commands: at most " + std::to_string(kMaxCommands) + " commands");
  }
  std::vector<ValidationCommand> out;
  for (size_t i = 0; i < list.size(); ++i) {
    const nlohmann::json& e = list[i];
    const std::string where = "validation commands[" + std::to_string(i) + "]";
    if (!e.is_object()) return InvalidArgument(where + ": not an object");
    ValidationCommand c;
    auto text_of = [&](const char* key, std::string* into) -> Status {
      if (!e.contains(key)) return Status::Ok();
      if (!e[key].is_string()) return InvalidArgument(where + "." + key + ": not a string");
      *into = e[key].get<std::string>();
      return Status::Ok();
    };
    CLUSTERD_RETURN_IF_ERROR(text_of("name", &c.name));
    CLUSTERD_RETURN_IF_ERROR(text_of("vendor", &c.vendor));
    CLUSTERD_RETURN_IF_ERROR(text_of("model", &c.model));
    CLUSTERD_RETURN_IF_ERROR(text_of("pass_regex", &c.pass_regex));
    if (c.name.empty() || c.name.size() > 64) return InvalidArgument(where + ".name: 1 to 64 characters");
    if (!e.contains("argv") || !e["argv"].is_array() || e["argv"].empty() || e["argv"].size() > kMaxArgs) {
      return InvalidArgument(where + ".argv: an array of 1 to " + std::to_string(kMaxArgs) + " strings");
    }
    for (const auto& a : e["argv"]) {
      if (!a.is_string()) return InvalidArgument(where + ".argv: not all strings");
      c.argv.push_back(a.get<std::string>());
    }
    if (c.argv[0].empty()) return InvalidArgument(where + ".argv[0]: empty");
    if (e.contains("timeout_seconds")) {
      if (!e["timeout_seconds"].is_number_integer() || e["timeout_seconds"].get<int64_t>() < 1 ||
          e["timeout_seconds"].get<int64_t>() > 3600) {
        return InvalidArgument(where + ".timeout_seconds: 1 to 3600");
      }
      c.timeout = std::chrono::seconds(e["timeout_seconds"].get<int64_t>());
    }
    if (!c.pass_regex.empty()) {
      try {
        std::regex check(c.pass_regex);
      } catch (const std::regex_error& err) {
        return InvalidArgument(where + ".pass_regex: " + err.what());
      }
    }
    out.push_back(std::move(c));
  }
  return out;
}

Validator::Validator(ValidatorOptions options, Probe probe, DeviceModel model, NodeDevices node_devices,
                     std::function<void()> ready)
    : options_(std::move(options)),
      probe_(std::move(probe)),
      model_(std::move(model)),
      node_devices_(std::move(node_devices)),
      ready_(std::move(ready)) {
  for (size_t i = 0; i < std::max<size_t>(1, options_.max_running); ++i) workers_.emplace_back([this] { Work(); });
}

Validator::~Validator() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void Validator::Submit(const v1::ValidationRequest& req) {
  {
    std::lock_guard lock(mu_);
    if (active_.count(req.validation_id())) {
      ++duplicates_;
      return;  // runs already: its result comes once
    }
    if (auto it = done_.find(req.validation_id()); it != done_.end()) {
      // Asked again after a reconnect: the same result, not a second run.
      ++duplicates_;
      ready_results_.push_back(it->second);
    } else {
      active_.insert(req.validation_id());
      waiting_.push_back(req);
      GetLogger("noded")->info("validation {} asked ({} checks)", req.validation_id(), req.checks_size());
    }
  }
  cv_.notify_all();
  if (ready_) ready_();
}

std::vector<v1::ValidationResult> Validator::TakeReady() {
  std::lock_guard lock(mu_);
  std::vector<v1::ValidationResult> out;
  out.swap(ready_results_);
  return out;
}

size_t Validator::running() const {
  std::lock_guard lock(mu_);
  return running_;
}

uint64_t Validator::duplicates() const {
  std::lock_guard lock(mu_);
  return duplicates_;
}

void Validator::Work() {
  for (;;) {
    v1::ValidationRequest req;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [this] { return stop_ || !waiting_.empty(); });
      if (stop_) return;
      req = std::move(waiting_.front());
      waiting_.pop_front();
      ++running_;
    }
    v1::ValidationResult result = Run(req);
    const bool passed = result.passed();
    {
      std::lock_guard lock(mu_);
      --running_;
      if (stop_) return;
      active_.erase(req.validation_id());
      done_[req.validation_id()] = result;
      done_order_.push_back(req.validation_id());
      while (done_order_.size() > options_.remembered) {
        done_.erase(done_order_.front());
        done_order_.pop_front();
      }
      ready_results_.push_back(std::move(result));
    }
    GetLogger("noded")->info("validation {} {}", req.validation_id(), passed ? "passed" : "failed");
    if (ready_) ready_();
  }
}

v1::ValidationResult Validator::Run(const v1::ValidationRequest& req) {
  v1::ValidationResult out;
  out.set_validation_id(req.validation_id());
  std::vector<uint32_t> devices(req.device_ids().begin(), req.device_ids().end());
  if (req.whole_node() && node_devices_) devices = node_devices_();
  bool passed = true;
  for (const std::string& check : req.checks()) {
    if (check == "health-stable") {
      *out.add_checks() = HealthStable(req, devices);
      passed = passed && out.checks(out.checks_size() - 1).passed();
    } else if (check == "commands") {
      for (const ValidationCommand& c : options_.commands) {
        // The command applies when one of the devices is of its vendor and model.
        bool applies = c.vendor.empty() && c.model.empty();
        for (uint32_t d : devices) {
          if (applies) break;
          const auto [vendor, model] = model_ ? model_(d) : std::pair<std::string, std::string>{};
          applies = (c.vendor.empty() || c.vendor == vendor) && (c.model.empty() || model.rfind(c.model, 0) == 0);
        }
        if (!applies) continue;
        *out.add_checks() = RunCommand(c, devices);
        passed = passed && out.checks(out.checks_size() - 1).passed();
        {
          std::lock_guard lock(mu_);
          if (stop_) break;
        }
      }
    } else {
      v1::ValidationCheckResult r;
      r.set_name(check);
      r.set_passed(false);
      r.set_exit_code(-1);
      r.set_message("this agent does not know the check \"" + check.substr(0, 64) + "\"");
      *out.add_checks() = std::move(r);
      passed = false;
    }
  }
  out.set_passed(passed && out.checks_size() > 0);
  return out;
}

v1::ValidationCheckResult Validator::HealthStable(const v1::ValidationRequest& req,
                                                  const std::vector<uint32_t>& devices) {
  const auto start = std::chrono::steady_clock::now();
  const auto window = std::chrono::nanoseconds(TimeUtil::DurationToNanoseconds(req.stable_window()));
  const auto until = start + window;
  v1::ValidationCheckResult r;
  r.set_name("health-stable");
  r.set_exit_code(-1);
  std::string evidence;
  size_t samples = 0;
  // The window's first sample: the counters (lowered when one drops: a reset
  // device counts again from there) and the codes present when it began.
  std::optional<ValidationSample> first;
  for (;;) {
    ValidationSample sample = probe_ ? probe_(devices, req.whole_node()) : ValidationSample{};
    ++samples;
    std::vector<std::string> problems = std::move(sample.problems);
    if (!first) {
      first = std::move(sample);
    } else {
      for (const auto& [counter, value] : sample.counters) {
        auto base = first->counters.find(counter);
        if (base == first->counters.end()) {
          first->counters.emplace(counter, value);  // read for the first time: from here
        } else if (value > base->second) {
          problems.push_back(counter + " rose from " + std::to_string(base->second) + " to " + std::to_string(value));
        } else {
          base->second = value;
        }
      }
      for (const std::string& code : sample.codes) {
        if (first->codes.count(code) == 0) problems.push_back(code + " appeared");
      }
    }
    if (!problems.empty()) {
      std::string list;
      for (const auto& p : problems) list += (list.empty() ? "" : "; ") + p;
      r.set_passed(false);
      r.set_message("not stable after " + std::to_string(samples) + " samples: " + list.substr(0, 900));
      evidence += list + "\n";
      break;
    }
    std::unique_lock lock(mu_);
    if (stop_) {
      r.set_passed(false);
      r.set_message("the agent stopped");
      break;
    }
    if (std::chrono::steady_clock::now() >= until) {
      r.set_passed(true);
      r.set_message("devices " + (devices.empty() ? std::string("(none)") : ValidationDeviceList(devices)) +
                    ": no active fault, readings healthy, no error counter grown and no new code, chain OK over " +
                    std::to_string(samples) + " samples");
      // What held still, for the record: the counters as the window ended.
      for (const auto& [counter, value] : first->counters) evidence += counter + " " + std::to_string(value) + "\n";
      break;
    }
    cv_.wait_until(lock, std::min(until, std::chrono::steady_clock::now() + options_.sample), [this] { return stop_; });
  }
  r.set_evidence(EvidenceTail(evidence, options_.max_evidence));
  *r.mutable_duration() = TimeUtil::NanosecondsToDuration(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count());
  return r;
}

v1::ValidationCheckResult Validator::RunCommand(const ValidationCommand& c, const std::vector<uint32_t>& devices) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::string> argv;
  const std::string list = ValidationDeviceList(devices);
  for (std::string a : c.argv) {
    for (size_t at = a.find("{devices}"); at != std::string::npos; at = a.find("{devices}", at + list.size())) {
      a.replace(at, 9, list);
    }
    argv.push_back(std::move(a));
  }
  v1::ValidationCheckResult r;
  r.set_name(c.name);
  CaptureOptions capture;
  capture.max_output = options_.max_evidence;
  capture.with_stderr = true;
  capture.keep_tail = true;
  auto run = RunCommandCapture(argv, c.timeout, capture);
  if (!run.ok()) {
    r.set_passed(false);
    r.set_exit_code(-1);
    r.set_message(run.status().message());
  } else {
    r.set_exit_code(run->exit_code);
    r.set_evidence(EvidenceTail(run->output, options_.max_evidence));
    if (run->timed_out) {
      r.set_passed(false);
      r.set_message("did not finish within " + std::to_string(c.timeout.count() / 1000) + " s");
    } else if (run->exit_code != 0) {
      r.set_passed(false);
      r.set_message(run->signal ? "killed by signal " + std::to_string(run->signal)
                                : "exited with status " + std::to_string(run->exit_code));
    } else if (!c.pass_regex.empty() && !std::regex_search(run->output, std::regex(c.pass_regex))) {
      r.set_passed(false);
      r.set_message("its output does not match " + c.pass_regex.substr(0, 200));
    } else {
      r.set_passed(true);
      r.set_message("passed");
    }
  }
  *r.mutable_duration() = TimeUtil::NanosecondsToDuration(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count());
  return r;
}

}  // namespace clusterd::noded
