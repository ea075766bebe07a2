// NodeD's evidence bundles (noded/evidence.h): the kernel log excerpt from a
// file in /dev/kmsg's format (only the records since the request's time, the
// newest under the cap), the agent's readout, the configured commands with
// their exit status, timeout and size cap, the bundle under the smaller of
// the request's and the agent's cap, and the commands file's errors.
#include "noded/evidence.h"

#include <time.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>

#include <google/protobuf/util/time_util.h>
#include <gtest/gtest.h>

namespace clusterd::noded {
namespace {

using google::protobuf::util::TimeUtil;

int64_t Ns(clockid_t id) {
  timespec ts{};
  ::clock_gettime(id, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

class EvidenceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/noded-evidence-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    kmsg_ = dir_ + "/kmsg";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // A kmsg record `ago_s` seconds before now.
  void Record(std::ofstream& out, uint64_t seq, double ago_s, const std::string& msg) {
    const int64_t mono_us = Ns(CLOCK_MONOTONIC) / 1000 - static_cast<int64_t>(ago_s * 1e6);
    out << "3," << seq << "," << mono_us << ",-;" << msg << "\n";
  }
  v1::EvidenceRequest Request(int64_t since_ago_s, uint64_t max_bytes = 0) {
    v1::EvidenceRequest r;
    r.set_incident_id("inc-7");
    r.set_node("worker01");
    *r.mutable_since() = TimeUtil::NanosecondsToTimestamp(Ns(CLOCK_REALTIME) - since_ago_s * 1'000'000'000);
    r.set_max_bytes(max_bytes);
    return r;
  }
  static const v1::EvidenceSection* SectionOf(const v1::EvidenceBundle& b, const std::string& name) {
    for (const auto& s : b.sections()) {
      if (s.name() == name) return &s;
    }
    return nullptr;
  }

  std::string dir_;
  std::string kmsg_;
};

TEST_F(EvidenceTest, KernelLogSinceTheFaultsReadoutAndCommandsMakeTheBundle) {
  {
    std::ofstream out(kmsg_);
    Record(out, 1, 600, "long before: left out");
    Record(out, 2, 30, "NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus");
    Record(out, 3, 5, "hccn link down on port 3");
  }
  EvidenceCollectorOptions o;
  o.kmsg_path = kmsg_;
  EvidenceCommand ok{"vendor-ok", {"/bin/sh", "-c", "echo link-counters; echo to-stderr >&2"}};
  EvidenceCommand fails{"vendor-fails", {"/bin/sh", "-c", "echo partial; exit 2"}};
  EvidenceCommand missing{"vendor-missing", {"/nonexistent/tool"}};
  o.commands = {ok, fails, missing};
  EvidenceCollector c(
      o,
      [] {
        return std::vector<std::pair<std::string, std::string>>{{"accelerator", "device 0 healthy"}};
      },
      nullptr);
  const v1::EvidenceBundle b = c.Collect(Request(60));
  EXPECT_EQ(b.incident_id(), "inc-7");
  EXPECT_EQ(b.node(), "worker01");
  EXPECT_TRUE(b.has_collect_time());
  const auto* log = SectionOf(b, "kernel-log");
  ASSERT_NE(log, nullptr);
  EXPECT_EQ(log->content().find("long before"), std::string::npos);
  EXPECT_NE(log->content().find("GPU has fallen off the bus"), std::string::npos);
  EXPECT_NE(log->content().find(" err hccn link down on port 3"), std::string::npos);
  EXPECT_FALSE(log->truncated());
  ASSERT_NE(SectionOf(b, "accelerator"), nullptr);
  EXPECT_EQ(SectionOf(b, "accelerator")->content(), "device 0 healthy");
  const auto* vok = SectionOf(b, "command/vendor-ok");
  ASSERT_NE(vok, nullptr);
  EXPECT_NE(vok->content().find("link-counters"), std::string::npos);
  EXPECT_NE(vok->content().find("to-stderr"), std::string::npos);
  EXPECT_TRUE(vok->error().empty()) << vok->error();
  const auto* vfails = SectionOf(b, "command/vendor-fails");
  ASSERT_NE(vfails, nullptr);
  EXPECT_EQ(vfails->error(), "exit 2");
  EXPECT_NE(vfails->content().find("partial"), std::string::npos);
  const auto* vmissing = SectionOf(b, "command/vendor-missing");
  ASSERT_NE(vmissing, nullptr);
  EXPECT_FALSE(vmissing->error().empty());
}

TEST_F(EvidenceTest, TheBundleStaysUnderTheSmallerCapKeepingTheNewestLogLines) {
  {
    std::ofstream out(kmsg_);
    for (int i = 0; i < 5000; ++i)
      Record(out, static_cast<uint64_t>(i + 1), 50 - i * 0.001, "line " + std::to_string(i));
  }
  EvidenceCollectorOptions o;
  o.kmsg_path = kmsg_;
  o.max_bytes = 64 << 10;
  EvidenceCommand big{"big", {"/bin/sh", "-c", "head -c 200000 /dev/zero | tr '\\0' x"}};
  big.max_bytes = 100 << 10;
  o.commands = {big};
  EvidenceCollector c(
      o,
      [] {
        return std::vector<std::pair<std::string, std::string>>{{"metrics", std::string(100'000, 'm')}};
      },
      nullptr);
  // The request's cap (16 KiB) is the smaller.
  const v1::EvidenceBundle b = c.Collect(Request(60, 16 << 10));
  EXPECT_LE(b.ByteSizeLong(), size_t{16} << 10);
  const auto* log = SectionOf(b, "kernel-log");
  ASSERT_NE(log, nullptr);
  EXPECT_TRUE(log->truncated());
  EXPECT_NE(log->content().find("line 4999\n"), std::string::npos);
  EXPECT_EQ(log->content().find("line 0\n"), std::string::npos);
  ASSERT_NE(SectionOf(b, "metrics"), nullptr);
  EXPECT_TRUE(SectionOf(b, "metrics")->truncated());
  // The agent's cap when the request names none.
  const v1::EvidenceBundle b2 = c.Collect(Request(60));
  EXPECT_LE(b2.ByteSizeLong(), size_t{64} << 10);
  EXPECT_GT(b2.ByteSizeLong(), size_t{16} << 10);
}

TEST_F(EvidenceTest, ACommandPastItsTimeoutIsStoppedAndSaysSo) {
  EvidenceCollectorOptions o;
  o.kmsg_path = "";
  EvidenceCommand slow{"slow", {"/bin/sh", "-c", "echo started; exec sleep 600"}};
  slow.timeout = std::chrono::milliseconds(200);
  o.commands = {slow};
  EvidenceCollector c(o, nullptr, nullptr);
  const v1::EvidenceBundle b = c.Collect(Request(60));
  EXPECT_EQ(SectionOf(b, "kernel-log"), nullptr);
  const auto* s = SectionOf(b, "command/slow");
  ASSERT_NE(s, nullptr);
  EXPECT_NE(s->error().find("timed out"), std::string::npos) << s->error();
}

TEST_F(EvidenceTest, InvalidUtf8BecomesQuestionMarksSoTheBundleSerializes) {
  EvidenceCollectorOptions o;
  o.kmsg_path = "";
  EvidenceCollector c(
      o,
      [] {
        return std::vector<std::pair<std::string, std::string>>{{"accelerator", "ok \xff\xfe end"}};
      },
      nullptr);
  const v1::EvidenceBundle b = c.Collect(Request(60));
  EXPECT_EQ(SectionOf(b, "accelerator")->content(), "ok ?? end");
  v1::EvidenceBundle back;
  ASSERT_TRUE(back.ParseFromString(b.SerializeAsString()));
}

TEST_F(EvidenceTest, RequestsRunOnTheCollectorsThreadAndComeBackOnce) {
  std::mutex mu;
  std::condition_variable cv;
  int ready = 0;
  EvidenceCollectorOptions o;
  o.kmsg_path = "";
  EvidenceCollector c(o, nullptr, [&] {
    std::lock_guard lock(mu);
    ++ready;
    cv.notify_all();
  });
  c.Submit(Request(60));
  std::unique_lock lock(mu);
  ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(30), [&] { return ready == 1; }));
  lock.unlock();
  auto bundles = c.TakeReady();
  ASSERT_EQ(bundles.size(), 1u);
  EXPECT_EQ(bundles[0].incident_id(), "inc-7");
  EXPECT_TRUE(c.TakeReady().empty());
  EXPECT_EQ(c.collected(), 1u);
}

TEST(EvidenceCommandsTest, TheFileIsCheckedEntryByEntry) {
  auto ok = ParseEvidenceCommands(
      R"({"commands": [{"name": "npu-smi-info", "argv": ["npu-smi", "info"], "timeout_seconds": 10,
      "max_bytes": 65536}]})");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  ASSERT_EQ(ok->size(), 1u);
  EXPECT_EQ((*ok)[0].timeout, std::chrono::seconds(10));
  EXPECT_EQ((*ok)[0].max_bytes, 65536u);
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"[]", "not a JSON object"},
      {R"({"commands": [{"argv": ["x"]}]})", "commands[0].name"},
      {R"({"commands": [{"name": "a b", "argv": ["x"]}]})", "commands[0].name"},
      {R"({"commands": [{"name": "a", "argv": []}]})", "commands[0].argv"},
      {R"({"commands": [{"name": "a", "argv": ["x"], "timeout_seconds": 0}]})", "timeout_seconds"},
      {R"({"commands": [{"name": "a", "argv": ["x"], "max_bytes": 2000000}]})", "max_bytes"},
      {R"({"commands": [{"name": "a", "argv": ["x"]}, {"name": "a", "argv": ["y"]}]})", "given twice"},
  };
  for (const auto& [text, want] : bad) {
    auto r = ParseEvidenceCommands(text);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_NE(r.status().message().find(want), std::string::npos) << text << ": " << r.status().ToString();
  }
}

}  // namespace
}  // namespace clusterd::noded
