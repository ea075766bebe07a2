// A minimal Prometheus metrics registry (text exposition format 0.0.4).
//
// Ownership and lifetime: every Counter, Gauge and Histogram is created and
// owned by a MetricsRegistry. The references returned by Add* stay valid for
// the registry's whole lifetime (metrics are never removed or moved), so
// callers typically keep a `Counter&` / `Counter*` next to the code that
// updates it. Metrics must not outlive their registry.
//
// Threading: registration (Add*) and Render() take an internal mutex and may
// be called from any thread. The hot path -- Inc/Set/Add/Observe/Value -- is
// lock-free (relaxed atomics) and safe to call concurrently from any number
// of threads, including while Render() runs. A scrape is not an atomic
// snapshot across metrics; each individual value is read atomically.
//
// Programming errors (bad metric or label name, the same name+labels
// registered twice, one name used with two types or two help texts, bad
// histogram bounds) are invariants of the binary, not user input: they log a
// clear message and abort the process.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace clusterd {

// Label pairs (name, value), rendered in the given order.
using MetricLabels = std::vector<std::pair<std::string, std::string>>;

// A monotonically increasing count.
class Counter {
 public:
  void Inc(uint64_t n = 1) { value_.fetch_add(n, std::memory_order_relaxed); }
  uint64_t Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  friend class MetricsRegistry;
  Counter() = default;
  Counter(const Counter&) = delete;
  Counter& operator=(const Counter&) = delete;

  std::atomic<uint64_t> value_{0};
};

// A value that can go up and down.
class Gauge {
 public:
  void Set(double v) { value_.store(v, std::memory_order_relaxed); }
  void Add(double delta) { value_.fetch_add(delta, std::memory_order_relaxed); }
  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  friend class MetricsRegistry;
  Gauge() = default;
  Gauge(const Gauge&) = delete;
  Gauge& operator=(const Gauge&) = delete;

  std::atomic<double> value_{0.0};
};

// Observations counted into fixed buckets. Buckets are upper bounds ("le",
// inclusive); the +Inf bucket is implicit. NaN observations land only in the
// +Inf bucket (and make the sum NaN), as in the reference Go client.
class Histogram {
 public:
  void Observe(double v);

  // Per-bucket (non-cumulative) counts; the last entry is the +Inf bucket.
  // Mostly useful for tests.
  std::vector<uint64_t> BucketCounts() const;
  uint64_t Count() const;
  double Sum() const;
  const std::vector<double>& bounds() const { return bounds_; }

 private:
  friend class MetricsRegistry;
  explicit Histogram(std::vector<double> bounds);
  Histogram(const Histogram&) = delete;
  Histogram& operator=(const Histogram&) = delete;

  const std::vector<double> bounds_;  // strictly increasing, finite
  // bounds_.size() + 1 counters; the last one is the +Inf bucket.
  const std::unique_ptr<std::atomic<uint64_t>[]> buckets_;
  std::atomic<double> sum_{0.0};
};

class MetricsRegistry {
 public:
  MetricsRegistry();
  ~MetricsRegistry();
  MetricsRegistry(const MetricsRegistry&) = delete;
  MetricsRegistry& operator=(const MetricsRegistry&) = delete;

  // Each call creates one series. Calls with the same name (and different
  // label sets) form one metric family and must agree on type and help.
  Counter& AddCounter(const std::string& name, const std::string& help, MetricLabels labels = {});
  Gauge& AddGauge(const std::string& name, const std::string& help, MetricLabels labels = {});
  // `bucket_bounds` must be strictly increasing; a trailing +Inf is allowed
  // and dropped (the +Inf bucket always exists). The label "le" is reserved.
  Histogram& AddHistogram(const std::string& name, const std::string& help, std::vector<double> bucket_bounds,
                          MetricLabels labels = {});
  // A gauge whose value is computed by `fn` at scrape time.
  // `fn` runs on the thread calling Render(), under the registry mutex: it
  // must be quick, thread-safe, and must not call back into this registry.
  void AddCallbackGauge(const std::string& name, const std::string& help, std::function<double()> fn,
                        MetricLabels labels = {});

  // A gauge family whose series are listed at scrape time: `fn` calls
  // `emit(label_values, value)` once per series, the values in the order of
  // `label_names` (a call with another count of values is dropped). For
  // series that come and go (one per job): nothing is registered per series,
  // so nothing needs removing. Same rules for `fn` as for a callback gauge;
  // the family's name takes no other series.
  using EmitSeries = std::function<void(const std::vector<std::string>& label_values, double value)>;
  void AddGaugeFamily(const std::string& name, const std::string& help, std::vector<std::string> label_names,
                      std::function<void(const EmitSeries& emit)> fn);

  // Prometheus text exposition format 0.0.4; families in registration order.
  std::string Render() const;

  // The Content-Type to serve Render()'s output with.
  static constexpr const char* kContentType = "text/plain; version=0.0.4; charset=utf-8";

 private:
  struct Series;
  struct Family;
  enum class Type { kCounter, kGauge, kHistogram };

  // Validates and links a fully built series into its family.
  Series& AddSeries(const std::string& name, const std::string& help, Type type, std::unique_ptr<Series> series);

  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Family>> families_;  // guarded by mu_
};

// `count` bounds: start, start*factor, start*factor^2, ...
// Requires start > 0, factor > 1, count >= 1 (aborts otherwise).
std::vector<double> ExponentialBuckets(double start, double factor, int count);

}  // namespace clusterd
