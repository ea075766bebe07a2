#include "common/metrics.h"

#include <limits>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace clusterd {
namespace {

TEST(MetricsTest, RendersCountersAndGaugesWithLabelsAndEscaping) {
  MetricsRegistry reg;
  reg.AddCounter("requests_total", "Requests served.", {{"method", "GET"}, {"code", "200"}}).Inc(3);
  reg.AddCounter("requests_total", "Requests served.", {{"method", "POST"}, {"code", "500"}});
  Gauge& g = reg.AddGauge("temperature", "Line 1\nback\\slash \"q\"", {{"path", "C:\\dir \"x\"\nend"}});
  g.Set(1.5);
  g.Add(-0.25);
  reg.AddGauge("plain", "No labels.").Set(-3);

  EXPECT_EQ(reg.Render(),
            "# HELP requests_total Requests served.\n"
            "# TYPE requests_total counter\n"
            "requests_total{method=\"GET\",code=\"200\"} 3\n"
            "requests_total{method=\"POST\",code=\"500\"} 0\n"
            "# HELP temperature Line 1\\nback\\\\slash \"q\"\n"
            "# TYPE temperature gauge\n"
            "temperature{path=\"C:\\\\dir \\\"x\\\"\\nend\"} 1.25\n"
            "# HELP plain No labels.\n"
            "# TYPE plain gauge\n"
            "plain -3\n");
  EXPECT_DOUBLE_EQ(g.Value(), 1.25);
}

TEST(MetricsTest, RendersHistogramCumulativeBuckets) {
  MetricsRegistry reg;
  Histogram& h = reg.AddHistogram("latency_seconds", "Latency.", {0.5, 1, 10}, {{"op", "read"}});
  for (double v : {0.25, 0.5, 1.0, 4.0, 100.0}) h.Observe(v);
  reg.AddHistogram("empty_seconds", "Nothing yet.", {1, std::numeric_limits<double>::infinity()});

  EXPECT_EQ(reg.Render(),
            "# HELP latency_seconds Latency.\n"
            "# TYPE latency_seconds histogram\n"
            "latency_seconds_bucket{op=\"read\",le=\"0.5\"} 2\n"
            "latency_seconds_bucket{op=\"read\",le=\"1\"} 3\n"
            "latency_seconds_bucket{op=\"read\",le=\"10\"} 4\n"
            "latency_seconds_bucket{op=\"read\",le=\"+Inf\"} 5\n"
            "latency_seconds_sum{op=\"read\"} 105.75\n"
            "latency_seconds_count{op=\"read\"} 5\n"
            "# HELP empty_seconds Nothing yet.\n"
            "# TYPE empty_seconds histogram\n"
            "empty_seconds_bucket{le=\"1\"} 0\n"
            "empty_seconds_bucket{le=\"+Inf\"} 0\n"
            "empty_seconds_sum 0\n"
            "empty_seconds_count 0\n");
  EXPECT_EQ(h.BucketCounts(), (std::vector<uint64_t>{2, 1, 1, 1}));
  EXPECT_EQ(h.Count(), 5u);
}

TEST(MetricsTest, NanObservationGoesToInfBucket) {
  MetricsRegistry reg;
  Histogram& h = reg.AddHistogram("h", "h", {1});
  h.Observe(std::numeric_limits<double>::quiet_NaN());
  EXPECT_EQ(h.BucketCounts(), (std::vector<uint64_t>{0, 1}));
  EXPECT_EQ(reg.Render(),
            "# HELP h h\n# TYPE h histogram\n"
            "h_bucket{le=\"1\"} 0\nh_bucket{le=\"+Inf\"} 1\nh_sum NaN\nh_count 1\n");
}

TEST(MetricsTest, FormatsSpecialAndSmallValues) {
  MetricsRegistry reg;
  reg.AddGauge("g", "g", {{"v", "small"}}).Set(1e-5);
  reg.AddGauge("g", "g", {{"v", "tenth"}}).Set(0.1);
  reg.AddGauge("g", "g", {{"v", "inf"}}).Set(std::numeric_limits<double>::infinity());
  reg.AddGauge("g", "g", {{"v", "-inf"}}).Set(-std::numeric_limits<double>::infinity());
  reg.AddGauge("g", "g", {{"v", "nan"}}).Set(std::numeric_limits<double>::quiet_NaN());
  EXPECT_EQ(reg.Render(),
            "# HELP g g\n# TYPE g gauge\n"
            "g{v=\"small\"} 1e-05\n"
            "g{v=\"tenth\"} 0.1\n"
            "g{v=\"inf\"} +Inf\n"
            "g{v=\"-inf\"} -Inf\n"
            "g{v=\"nan\"} NaN\n");
}

TEST(MetricsTest, CallbackGaugeIsEvaluatedAtScrapeTime) {
  MetricsRegistry reg;
  double queue_depth = 7;
  reg.AddCallbackGauge("queue_depth", "Items queued.", [&] { return queue_depth; });
  EXPECT_EQ(reg.Render(), "# HELP queue_depth Items queued.\n# TYPE queue_depth gauge\nqueue_depth 7\n");
  queue_depth = 2.5;
  EXPECT_EQ(reg.Render(), "# HELP queue_depth Items queued.\n# TYPE queue_depth gauge\nqueue_depth 2.5\n");
}

TEST(MetricsTest, CallbackGaugesWithLabelsFormOneFamily) {
  MetricsRegistry reg;
  reg.AddCallbackGauge("devices", "Devices per health.", [] { return 6.0; }, {{"health", "healthy"}});
  reg.AddCallbackGauge("devices", "Devices per health.", [] { return 2.0; }, {{"health", "unhealthy"}});
  EXPECT_EQ(reg.Render(),
            "# HELP devices Devices per health.\n# TYPE devices gauge\n"
            "devices{health=\"healthy\"} 6\ndevices{health=\"unhealthy\"} 2\n");
}

TEST(MetricsTest, AGaugeFamilyListsItsSeriesAtScrapeTime) {
  MetricsRegistry reg;
  std::vector<std::pair<std::string, double>> jobs = {{"a", 0.5}, {"b\"x", 1}};
  reg.AddGaugeFamily("job_ettr", "ETTR per job.", {"job"}, [&](const MetricsRegistry::EmitSeries& emit) {
    for (const auto& [job, v] : jobs) emit({job}, v);
    emit({"too", "many"}, 3);  // not as many values as label names: dropped
  });
  EXPECT_EQ(reg.Render(),
            "# HELP job_ettr ETTR per job.\n# TYPE job_ettr gauge\n"
            "job_ettr{job=\"a\"} 0.5\njob_ettr{job=\"b\\\"x\"} 1\n");
  jobs.erase(jobs.begin());  // a series that goes is simply not listed
  EXPECT_EQ(reg.Render(), "# HELP job_ettr ETTR per job.\n# TYPE job_ettr gauge\njob_ettr{job=\"b\\\"x\"} 1\n");
  jobs.clear();
  EXPECT_EQ(reg.Render(), "# HELP job_ettr ETTR per job.\n# TYPE job_ettr gauge\n");
}

TEST(MetricsTest, ReferencesStayValidAcrossRegistrations) {
  MetricsRegistry reg;
  Counter& first = reg.AddCounter("first_total", "first");
  for (int i = 0; i < 1000; ++i) reg.AddCounter("many_total", "many", {{"i", std::to_string(i)}});
  first.Inc(2);
  EXPECT_EQ(first.Value(), 2u);
  EXPECT_NE(reg.Render().find("first_total 2\n"), std::string::npos);
}

TEST(MetricsTest, ConcurrentUpdatesSumExactly) {
  MetricsRegistry reg;
  Counter& c = reg.AddCounter("c_total", "c");
  Gauge& g = reg.AddGauge("g", "g");
  Histogram& h = reg.AddHistogram("h", "h", {0.5, 2});
  constexpr int kThreads = 4;
  constexpr int kPerThread = 50000;

  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kPerThread; ++i) {
        c.Inc();
        g.Add(1.0);  // integers are exact in a double, so the sum is too
        h.Observe(1.0);
      }
    });
  }
  // Scrapes racing with the updates must be safe (and never see _count
  // disagree with the +Inf bucket, which Render derives from one snapshot).
  for (int i = 0; i < 20; ++i) EXPECT_FALSE(reg.Render().empty());
  for (auto& t : threads) t.join();

  constexpr uint64_t kTotal = uint64_t{kThreads} * kPerThread;
  EXPECT_EQ(c.Value(), kTotal);
  EXPECT_EQ(g.Value(), static_cast<double>(kTotal));
  EXPECT_EQ(h.BucketCounts(), (std::vector<uint64_t>{0, kTotal, 0}));
  EXPECT_EQ(h.Sum(), static_cast<double>(kTotal));
  const std::string text = reg.Render();
  EXPECT_NE(text.find("c_total 200000\n"), std::string::npos) << text;
  EXPECT_NE(text.find("h_bucket{le=\"+Inf\"} 200000\n"), std::string::npos) << text;
  EXPECT_NE(text.find("h_count 200000\n"), std::string::npos) << text;
}

TEST(MetricsTest, ExponentialBuckets) {
  EXPECT_EQ(ExponentialBuckets(1, 2, 4), (std::vector<double>{1, 2, 4, 8}));
  EXPECT_EQ(ExponentialBuckets(0.5, 10, 1), (std::vector<double>{0.5}));
}

class MetricsDeathTest : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

TEST_F(MetricsDeathTest, InvalidNamesAbort) {
  MetricsRegistry reg;
  EXPECT_DEATH(reg.AddCounter("1abc", "x"), "invalid metric name '1abc'");
  EXPECT_DEATH(reg.AddCounter("a-b", "x"), "invalid metric name 'a-b'");
  EXPECT_DEATH(reg.AddCounter("", "x"), "invalid metric name ''");
  EXPECT_DEATH(reg.AddGauge("ok", "x", {{"bad-label", "v"}}), "invalid label name 'bad-label'");
  EXPECT_DEATH(reg.AddGauge("ok", "x", {{"__reserved", "v"}}), "invalid label name '__reserved'");
  EXPECT_DEATH(reg.AddGauge("ok", "x", {{"a", "1"}, {"a", "2"}}), "duplicate label name 'a'");
  EXPECT_DEATH(reg.AddHistogram("h", "x", {1}, {{"le", "1"}}), "label name 'le' is reserved");
  // Colons are allowed in metric names (recording rules), not in labels.
  reg.AddCounter("ns:sub_total", "x");
}

TEST_F(MetricsDeathTest, DuplicateRegistrationsAbort) {
  MetricsRegistry reg;
  reg.AddCounter("c_total", "help", {{"a", "1"}, {"b", "2"}});
  EXPECT_DEATH(reg.AddCounter("c_total", "help", {{"a", "1"}, {"b", "2"}}), "registered twice");
  EXPECT_DEATH(reg.AddCounter("c_total", "help", {{"b", "2"}, {"a", "1"}}), "registered twice");
  EXPECT_DEATH(reg.AddGauge("c_total", "help", {{"a", "3"}}), "different types");
  EXPECT_DEATH(reg.AddCounter("c_total", "other help", {{"a", "3"}}), "different help");
  reg.AddCallbackGauge("cb", "help", [] { return 1.0; });
  EXPECT_DEATH(reg.AddCallbackGauge("cb", "help", [] { return 2.0; }), "registered twice");
  auto none = [](const MetricsRegistry::EmitSeries&) {};
  EXPECT_DEATH(reg.AddGaugeFamily("cb", "help", {"job"}, none), "registered twice");
  reg.AddGaugeFamily("per_job", "help", {"job"}, none);
  EXPECT_DEATH(reg.AddGauge("per_job", "help", {{"job", "a"}}), "listed at scrape time");
  EXPECT_DEATH(reg.AddGaugeFamily("f", "help", {"a", "a"}, none), "duplicate label name 'a'");
}

TEST_F(MetricsDeathTest, BadBucketsAbort) {
  MetricsRegistry reg;
  EXPECT_DEATH(reg.AddHistogram("h", "x", {1, 1}), "strictly increasing");
  EXPECT_DEATH(reg.AddHistogram("h", "x", {2, 1}), "strictly increasing");
  EXPECT_DEATH(reg.AddHistogram("h", "x", {std::numeric_limits<double>::quiet_NaN()}), "not finite");
  EXPECT_DEATH(ExponentialBuckets(0, 2, 3), "need start > 0");
  EXPECT_DEATH(ExponentialBuckets(1, 1, 3), "need start > 0");
  EXPECT_DEATH(ExponentialBuckets(1, 2, 0), "need start > 0");
}

}  // namespace
}  // namespace clusterd
