#include "common/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <variant>

#include "common/logging.h"

namespace clusterd {
namespace {

// Programming errors in metric definitions are invariants of the binary:
// say exactly what is wrong, then abort.
[[noreturn]] void Die(const std::string& message) {
  auto log = GetLogger("metrics");
  log->critical("metrics registry: {}", message);
  log->flush();
  std::abort();
}

bool IsValidName(const std::string& name, bool allow_colon) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (allow_colon && c == ':') ||
                    (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

// Go-compatible spelling of a sample value: shortest round-trip form,
// "+Inf", "-Inf", "NaN".
std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  if (ec != std::errc()) return "NaN";  // cannot happen with 64 bytes
  return std::string(buf, end);
}

// HELP text escapes backslash and newline; label values also escape quotes.
std::string Escape(const std::string& s, bool escape_quote) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '"':
        if (escape_quote) {
          out += "\\\"";
        } else {
          out += c;
        }
        break;
      default: out += c;
    }
  }
  return out;
}

// Renders `{a="x",b="y"}` (or "" without labels); `le` is appended last
// for histogram buckets when non-empty.
std::string FormatLabels(const MetricLabels& labels, const std::string& le = {}) {
  if (labels.empty() && le.empty()) return "";
  std::string out = "{";
  bool first = true;
  for (const auto& [k, v] : labels) {
    if (!first) out += ',';
    first = false;
    out += k;
    out += "=\"";
    out += Escape(v, /*escape_quote=*/true);
    out += '"';
  }
  if (!le.empty()) {
    if (!first) out += ',';
    out += "le=\"" + le + "\"";
  }
  out += '}';
  return out;
}

MetricLabels SortedLabels(MetricLabels labels) {
  std::sort(labels.begin(), labels.end());
  return labels;
}

}  // namespace

// ---------------------------------------------------------------------------
// Histogram

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), buckets_(new std::atomic<uint64_t>[bounds_.size() + 1]) {
  for (size_t i = 0; i <= bounds_.size(); ++i) buckets_[i].store(0, std::memory_order_relaxed);
}

void Histogram::Observe(double v) {
  size_t idx = bounds_.size();  // +Inf bucket, also for NaN
  if (!std::isnan(v)) {
    // First bound >= v: buckets are "less than or equal".
    idx = static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin());
  }
  buckets_[idx].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(v, std::memory_order_relaxed);
}

std::vector<uint64_t> Histogram::BucketCounts() const {
  std::vector<uint64_t> out(bounds_.size() + 1);
  for (size_t i = 0; i < out.size(); ++i) out[i] = buckets_[i].load(std::memory_order_relaxed);
  return out;
}

uint64_t Histogram::Count() const {
  uint64_t total = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) total += buckets_[i].load(std::memory_order_relaxed);
  return total;
}

double Histogram::Sum() const { return sum_.load(std::memory_order_relaxed); }

// ---------------------------------------------------------------------------
// MetricsRegistry

struct MetricsRegistry::Series {
  MetricLabels labels;
  // Exactly one is set, matching the family type (callback gauges use fn).
  std::unique_ptr<Counter> counter;
  std::unique_ptr<Gauge> gauge;
  std::unique_ptr<Histogram> histogram;
  std::function<double()> fn;
};

struct MetricsRegistry::Family {
  std::string name;
  std::string help;
  Type type;
  std::vector<std::unique_ptr<Series>> series;
  // A family listed at scrape time (AddGaugeFamily): no series of its own.
  std::vector<std::string> label_names;
  std::function<void(const EmitSeries&)> list;
};

MetricsRegistry::MetricsRegistry() = default;
MetricsRegistry::~MetricsRegistry() = default;

MetricsRegistry::Series& MetricsRegistry::AddSeries(const std::string& name, const std::string& help, Type type,
                                                    std::unique_ptr<Series> series) {
  const MetricLabels& labels = series->labels;
  if (!IsValidName(name, /*allow_colon=*/true)) {
    Die("invalid metric name '" + name + "' (must match [a-zA-Z_:][a-zA-Z0-9_:]*)");
  }
  for (size_t i = 0; i < labels.size(); ++i) {
    const std::string& label = labels[i].first;
    if (!IsValidName(label, /*allow_colon=*/false) || label.rfind("__", 0) == 0) {
      Die("metric '" + name + "': invalid label name '" + label +
          "' (must match [a-zA-Z_][a-zA-Z0-9_]* and not start with __)");
    }
    if (type == Type::kHistogram && label == "le") {
      Die("histogram '" + name + "': label name 'le' is reserved");
    }
    for (size_t j = 0; j < i; ++j) {
      if (labels[j].first == label) Die("metric '" + name + "': duplicate label name '" + label + "'");
    }
  }

  std::lock_guard lock(mu_);
  Family* family = nullptr;
  for (auto& f : families_) {
    if (f->name == name) {
      family = f.get();
      break;
    }
  }
  if (family == nullptr) {
    families_.push_back(std::make_unique<Family>(Family{name, help, type, {}, {}, {}}));
    family = families_.back().get();
  } else {
    if (family->list) Die("metric '" + name + "' is a family listed at scrape time: no series can be added");
    if (family->type != type) Die("metric '" + name + "' registered twice with different types");
    if (family->help != help) Die("metric '" + name + "' registered twice with different help texts");
    // Label order does not make a different series.
    const MetricLabels sorted = SortedLabels(labels);
    for (const auto& s : family->series) {
      if (SortedLabels(s->labels) == sorted) {
        Die("metric '" + name + FormatLabels(labels) + "' registered twice");
      }
    }
  }
  // The series is complete before it becomes visible to Render().
  family->series.push_back(std::move(series));
  return *family->series.back();
}

Counter& MetricsRegistry::AddCounter(const std::string& name, const std::string& help, MetricLabels labels) {
  auto s = std::make_unique<Series>();
  s->labels = std::move(labels);
  s->counter.reset(new Counter());
  return *AddSeries(name, help, Type::kCounter, std::move(s)).counter;
}

Gauge& MetricsRegistry::AddGauge(const std::string& name, const std::string& help, MetricLabels labels) {
  auto s = std::make_unique<Series>();
  s->labels = std::move(labels);
  s->gauge.reset(new Gauge());
  return *AddSeries(name, help, Type::kGauge, std::move(s)).gauge;
}

Histogram& MetricsRegistry::AddHistogram(const std::string& name, const std::string& help,
                                         std::vector<double> bucket_bounds, MetricLabels labels) {
  if (!bucket_bounds.empty() && std::isinf(bucket_bounds.back()) && bucket_bounds.back() > 0) {
    bucket_bounds.pop_back();
  }
  for (size_t i = 0; i < bucket_bounds.size(); ++i) {
    if (!std::isfinite(bucket_bounds[i])) {
      Die("histogram '" + name + "': bucket bound " + FormatValue(bucket_bounds[i]) + " is not finite");
    }
    if (i > 0 && !(bucket_bounds[i - 1] < bucket_bounds[i])) {
      Die("histogram '" + name + "': bucket bounds must be strictly increasing");
    }
  }
  auto s = std::make_unique<Series>();
  s->labels = std::move(labels);
  s->histogram.reset(new Histogram(std::move(bucket_bounds)));
  return *AddSeries(name, help, Type::kHistogram, std::move(s)).histogram;
}

void MetricsRegistry::AddCallbackGauge(const std::string& name, const std::string& help, std::function<double()> fn,
                                       MetricLabels labels) {
  if (!fn) Die("callback gauge '" + name + "' has an empty function");
  auto s = std::make_unique<Series>();
  s->labels = std::move(labels);
  s->fn = std::move(fn);
  AddSeries(name, help, Type::kGauge, std::move(s));
}

void MetricsRegistry::AddGaugeFamily(const std::string& name, const std::string& help,
                                     std::vector<std::string> label_names,
                                     std::function<void(const EmitSeries& emit)> fn) {
  if (!fn) Die("gauge family '" + name + "' has an empty function");
  if (!IsValidName(name, /*allow_colon=*/true)) {
    Die("invalid metric name '" + name + "' (must match [a-zA-Z_:][a-zA-Z0-9_:]*)");
  }
  for (size_t i = 0; i < label_names.size(); ++i) {
    const std::string& label = label_names[i];
    if (!IsValidName(label, /*allow_colon=*/false) || label.rfind("__", 0) == 0) {
      Die("metric '" + name + "': invalid label name '" + label + "'");
    }
    for (size_t j = 0; j < i; ++j) {
      if (label_names[j] == label) Die("metric '" + name + "': duplicate label name '" + label + "'");
    }
  }
  std::lock_guard lock(mu_);
  for (const auto& f : families_) {
    if (f->name == name) Die("metric '" + name + "' registered twice");
  }
  families_.push_back(
      std::make_unique<Family>(Family{name, help, Type::kGauge, {}, std::move(label_names), std::move(fn)}));
}

std::string MetricsRegistry::Render() const {
  std::string out;
  std::lock_guard lock(mu_);
  for (const auto& f : families_) {
    out += "# HELP " + f->name + " " + Escape(f->help, /*escape_quote=*/false) + "\n";
    out += "# TYPE " + f->name + " ";
    switch (f->type) {
      case Type::kCounter: out += "counter\n"; break;
      case Type::kGauge: out += "gauge\n"; break;
      case Type::kHistogram: out += "histogram\n"; break;
    }
    if (f->list) {
      f->list([&](const std::vector<std::string>& values, double value) {
        if (values.size() != f->label_names.size()) return;
        MetricLabels labels;
        labels.reserve(values.size());
        for (size_t i = 0; i < values.size(); ++i) labels.emplace_back(f->label_names[i], values[i]);
        out += f->name + FormatLabels(labels) + " " + FormatValue(value) + "\n";
      });
    }
    for (const auto& s : f->series) {
      if (s->counter) {
        out += f->name + FormatLabels(s->labels) + " " + std::to_string(s->counter->Value()) + "\n";
      } else if (s->gauge) {
        out += f->name + FormatLabels(s->labels) + " " + FormatValue(s->gauge->Value()) + "\n";
      } else if (s->fn) {
        out += f->name + FormatLabels(s->labels) + " " + FormatValue(s->fn()) + "\n";
      } else if (s->histogram) {
        const Histogram& h = *s->histogram;
        const std::vector<uint64_t> counts = h.BucketCounts();
        // _count is the cumulative +Inf bucket, so the two always agree even
        // while observations race with the scrape.
        uint64_t cumulative = 0;
        for (size_t i = 0; i < counts.size(); ++i) {
          cumulative += counts[i];
          const std::string le = i < h.bounds().size() ? FormatValue(h.bounds()[i]) : "+Inf";
          out += f->name + "_bucket" + FormatLabels(s->labels, le) + " " + std::to_string(cumulative) + "\n";
        }
        out += f->name + "_sum" + FormatLabels(s->labels) + " " + FormatValue(h.Sum()) + "\n";
        out += f->name + "_count" + FormatLabels(s->labels) + " " + std::to_string(cumulative) + "\n";
      }
    }
  }
  return out;
}

std::vector<double> ExponentialBuckets(double start, double factor, int count) {
  if (!(start > 0) || !(factor > 1) || count < 1 || !std::isfinite(start) || !std::isfinite(factor)) {
    Die("ExponentialBuckets(" + FormatValue(start) + ", " + FormatValue(factor) + ", " + std::to_string(count) +
        "): need start > 0, factor > 1, count >= 1");
  }
  std::vector<double> out;
  out.reserve(static_cast<size_t>(count));
  double v = start;
  for (int i = 0; i < count; ++i) {
    out.push_back(v);
    v *= factor;
  }
  return out;
}

}  // namespace clusterd
