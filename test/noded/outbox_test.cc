#include "noded/outbox.h"

#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/clock.h"
#include "test/support/temp_dir.h"

namespace clusterd::noded {
namespace {

namespace fs = std::filesystem;

// A fresh directory per test, and the outbox's state directory and log in it.
class TempDir : public clusterd::testing::TempDir {
 public:
  std::string state() const { return Sub("state"); }
  std::string log() const { return state() + "/outbox.log"; }
};

v1::FaultTransition Make(v1::TransitionAction action, std::optional<uint32_t> device, const std::string& code,
                         v1::FaultLevel level = v1::FAULT_LEVEL_SUB_HEALTH, const std::string& message = "",
                         const std::string& subject = "", v1::FaultSource source = v1::FAULT_SOURCE_ACCELERATOR) {
  v1::FaultTransition t;
  t.set_action(action);
  auto* f = t.mutable_fault();
  if (device) f->set_device_id(*device);
  f->set_source(source);
  f->set_code(code);
  f->set_level(level);
  f->set_message(message);
  f->set_subject(subject);
  return t;
}
v1::FaultTransition Raise(std::optional<uint32_t> device, const std::string& code,
                          v1::FaultLevel level = v1::FAULT_LEVEL_SUB_HEALTH, const std::string& message = "",
                          const std::string& subject = "", v1::FaultSource source = v1::FAULT_SOURCE_ACCELERATOR) {
  return Make(v1::TRANSITION_ACTION_RAISE, device, code, level, message, subject, source);
}
v1::FaultTransition Clear(std::optional<uint32_t> device, const std::string& code, const std::string& subject = "",
                          v1::FaultSource source = v1::FAULT_SOURCE_ACCELERATOR) {
  return Make(v1::TRANSITION_ACTION_CLEAR, device, code, v1::FAULT_LEVEL_UNSPECIFIED, "", subject, source);
}

std::unique_ptr<Outbox> MustOpen(const std::string& dir, Outbox::Options o = {}) {
  auto r = Outbox::Open(dir, o);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? std::move(*r) : nullptr;
}

// Records t and expects it stored; returns the stored transition.
v1::FaultTransition MustRecord(Outbox& box, v1::FaultTransition t) {
  auto r = box.Record(std::move(t));
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (!r.ok()) return {};
  EXPECT_TRUE(r->has_value()) << "unexpected no-op";
  return r->has_value() ? **r : v1::FaultTransition{};
}

uint64_t FileSize(const std::string& p) { return fs::file_size(p); }

std::vector<std::pair<uint64_t, uint64_t>> PendingIds(const Outbox& box) {
  std::vector<std::pair<uint64_t, uint64_t>> ids;
  for (const auto& p : box.Take().pending) {
    EXPECT_EQ(p.transition.id().epoch(), p.epoch);
    EXPECT_EQ(p.transition.id().seq(), p.seq);
    ids.emplace_back(p.epoch, p.seq);
  }
  return ids;
}

std::vector<std::string> ActiveCodes(const Outbox& box) {
  std::vector<std::string> out;
  for (const auto& f : box.Active()) {
    std::string s = f.has_device_id() ? std::to_string(f.device_id()) : "-";
    s += "/" + f.code();
    if (!f.subject().empty()) s += "@" + f.subject();
    out.push_back(s);
  }
  return out;
}

using Ids = std::vector<std::pair<uint64_t, uint64_t>>;
using Codes = std::vector<std::string>;

std::string ReadFile(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(OutboxTest, EpochIncrementsAcrossReopen) {
  TempDir dir;
  for (uint64_t want = 1; want <= 3; ++want) {
    auto box = MustOpen(dir.state());  // state dir created on first open
    ASSERT_NE(box, nullptr);
    EXPECT_EQ(box->epoch(), want);
    EXPECT_EQ(ReadFile(dir.state() + "/epoch"), std::to_string(want) + "\n");
  }
}

TEST(OutboxTest, RecordAssignsSeqTimeAndIdsSurviveReopen) {
  TempDir dir;
  FakeClock clock;
  Outbox::Options o;
  o.clock = &clock;
  std::vector<v1::FaultTransition> stored;
  {
    auto box = MustOpen(dir.state(), o);
    ASSERT_NE(box, nullptr);
    for (uint32_t d = 0; d < 3; ++d) {
      v1::FaultTransition in = Raise(d, "80E01801");
      in.mutable_id()->set_epoch(77);  // caller's id is ignored
      stored.push_back(MustRecord(*box, in));
      EXPECT_EQ(stored.back().id().epoch(), 1u);
      EXPECT_EQ(stored.back().id().seq(), d + 1);
      EXPECT_EQ(stored.back().time().seconds(), 1'700'000'000);
    }
    // A time set by the caller (when the fault was observed) is kept.
    v1::FaultTransition observed = Raise(std::nullopt, "NODE_DISK_FULL");
    observed.mutable_time()->set_seconds(42);
    stored.push_back(MustRecord(*box, observed));
    EXPECT_EQ(stored.back().time().seconds(), 42);
    EXPECT_EQ(stored.back().id().seq(), 4u);
  }  // destroyed without any flush: like a kill -9
  auto box = MustOpen(dir.state(), o);
  ASSERT_NE(box, nullptr);
  EXPECT_EQ(box->epoch(), 2u);
  auto snap = box->Take();
  ASSERT_EQ(snap.pending.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(snap.pending[i].transition.SerializeAsString(), stored[i].SerializeAsString()) << i;
  }
  auto next = MustRecord(*box, Raise(9, "80E01801"));
  EXPECT_EQ(next.id().epoch(), 2u);
  EXPECT_EQ(next.id().seq(), 1u);
}

TEST(OutboxTest, AckRemovesPendingDurablyAndIsIdempotent) {
  TempDir dir;
  {
    auto box = MustOpen(dir.state());
    for (uint32_t d = 0; d < 3; ++d) MustRecord(*box, Raise(d, "80E01801"));
    ASSERT_TRUE(box->Ack(1, 2).ok());
    EXPECT_EQ(box->pending_count(), 1u);
    EXPECT_EQ(PendingIds(*box), (Ids{{1, 3}}));

    const uint64_t size = FileSize(dir.log());
    ASSERT_TRUE(box->Ack(1, 2).ok());   // repeat
    ASSERT_TRUE(box->Ack(1, 1).ok());   // older
    ASSERT_TRUE(box->Ack(99, 5).ok());  // unknown epoch
    ASSERT_TRUE(box->Ack(1, 0).ok());
    EXPECT_EQ(FileSize(dir.log()), size);
    EXPECT_EQ(box->pending_count(), 1u);
  }
  auto box = MustOpen(dir.state());
  EXPECT_EQ(PendingIds(*box), (Ids{{1, 3}}));
  EXPECT_EQ(box->Active().size(), 3u);  // acks do not touch the active set
}

TEST(OutboxTest, AckOfOlderEpochAfterRestart) {
  TempDir dir;
  {
    auto box = MustOpen(dir.state());
    MustRecord(*box, Raise(0, "A"));
    MustRecord(*box, Raise(1, "B"));
  }
  {
    auto box = MustOpen(dir.state());
    ASSERT_EQ(box->epoch(), 2u);
    MustRecord(*box, Raise(2, "C"));
    EXPECT_EQ(PendingIds(*box), (Ids{{1, 1}, {1, 2}, {2, 1}}));
    // The Welcome's applied_seq for the current epoch acks only that epoch.
    ASSERT_TRUE(box->Ack(2, 1).ok());
    EXPECT_EQ(PendingIds(*box), (Ids{{1, 1}, {1, 2}}));
    ASSERT_TRUE(box->Ack(1, 1).ok());
    EXPECT_EQ(PendingIds(*box), (Ids{{1, 2}}));
  }
  {
    auto box = MustOpen(dir.state());
    EXPECT_EQ(PendingIds(*box), (Ids{{1, 2}}));
    ASSERT_TRUE(box->Ack(1, 2).ok());
    EXPECT_EQ(box->pending_count(), 0u);
  }
  auto box = MustOpen(dir.state());
  EXPECT_EQ(box->epoch(), 4u);
  EXPECT_EQ(box->pending_count(), 0u);
  EXPECT_EQ(ActiveCodes(*box), (Codes{"0/A", "1/B", "2/C"}));
}

TEST(OutboxTest, PendingAfterReturnsOnlyWhatFollowsTheCursorInResendOrder) {
  TempDir dir;
  {
    auto box = MustOpen(dir.state());
    MustRecord(*box, Raise(0, "A"));
    MustRecord(*box, Raise(1, "B"));
  }
  auto box = MustOpen(dir.state());  // epoch 2
  MustRecord(*box, Raise(2, "C"));
  MustRecord(*box, Raise(3, "D"));
  auto ids = [](const std::vector<Outbox::Pending>& v) {
    Ids out;
    for (const auto& p : v) out.emplace_back(p.epoch, p.seq);
    return out;
  };
  EXPECT_EQ(ids(box->PendingAfter(0, 0, 100)), (Ids{{1, 1}, {1, 2}, {2, 1}, {2, 2}}));
  // Older epochs come first; the cursor may name an acknowledged entry.
  EXPECT_EQ(ids(box->PendingAfter(1, 1, 100)), (Ids{{1, 2}, {2, 1}, {2, 2}}));
  EXPECT_EQ(ids(box->PendingAfter(1, 2, 1)), (Ids{{2, 1}}));
  ASSERT_TRUE(box->Ack(2, 1).ok());
  EXPECT_EQ(ids(box->PendingAfter(1, 2, 100)), (Ids{{2, 2}}));
  EXPECT_TRUE(box->PendingAfter(2, 2, 100).empty());
  const auto later = MustRecord(*box, Raise(4, "E"));
  const auto batch = box->PendingAfter(2, 2, 100);
  ASSERT_EQ(batch.size(), 1u);
  EXPECT_EQ(batch[0].transition.fault().code(), later.fault().code());
}

TEST(OutboxTest, ActiveSetFollowsRaiseClearRaiseAgain) {
  TempDir dir;
  {
    auto box = MustOpen(dir.state());
    MustRecord(*box, Raise(3, "80E01801", v1::FAULT_LEVEL_SUB_HEALTH));
    MustRecord(*box, Raise(std::nullopt, "NODE_DISK_FULL", v1::FAULT_LEVEL_SUB_HEALTH, "", "", v1::FAULT_SOURCE_DISK));
    EXPECT_EQ(ActiveCodes(*box), (Codes{"-/NODE_DISK_FULL", "3/80E01801"}));  // no device sorts first
    MustRecord(*box, Clear(3, "80E01801"));
    EXPECT_EQ(ActiveCodes(*box), (Codes{"-/NODE_DISK_FULL"}));
    MustRecord(*box, Raise(3, "80E01801", v1::FAULT_LEVEL_SEPARATE, "again"));
    // Same code on another source or device is another fault.
    MustRecord(*box, Raise(4, "80E01801"));
    MustRecord(*box, Raise(3, "80E01801", v1::FAULT_LEVEL_SUB_HEALTH, "", "", v1::FAULT_SOURCE_KERNEL));
    EXPECT_EQ(box->Active().size(), 4u);
  }
  auto box = MustOpen(dir.state());
  auto active = box->Active();
  ASSERT_EQ(active.size(), 4u);
  EXPECT_FALSE(active[0].has_device_id());
  EXPECT_EQ(active[1].device_id(), 3u);
  EXPECT_EQ(active[1].source(), v1::FAULT_SOURCE_ACCELERATOR);
  EXPECT_EQ(active[1].level(), v1::FAULT_LEVEL_SEPARATE);
  EXPECT_EQ(active[1].message(), "again");
  EXPECT_EQ(active[2].source(), v1::FAULT_SOURCE_KERNEL);
  EXPECT_EQ(active[3].device_id(), 4u);
}

TEST(OutboxTest, NoOpRaiseAndClearWriteNothing) {
  TempDir dir;
  auto box = MustOpen(dir.state());
  MustRecord(*box, Raise(1, "A", v1::FAULT_LEVEL_SUB_HEALTH, "m"));
  const uint64_t size = FileSize(dir.log());

  auto again = box->Record(Raise(1, "A", v1::FAULT_LEVEL_SUB_HEALTH, "m"));
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(again->has_value());
  auto clear_unknown = box->Record(Clear(2, "A"));
  ASSERT_TRUE(clear_unknown.ok());
  EXPECT_FALSE(clear_unknown->has_value());
  EXPECT_EQ(FileSize(dir.log()), size);
  EXPECT_EQ(box->pending_count(), 1u);

  // A new level or message is a real transition that replaces the fault.
  EXPECT_EQ(MustRecord(*box, Raise(1, "A", v1::FAULT_LEVEL_SEPARATE, "m")).id().seq(), 2u);
  EXPECT_EQ(MustRecord(*box, Raise(1, "A", v1::FAULT_LEVEL_SEPARATE, "other")).id().seq(), 3u);
  EXPECT_GT(FileSize(dir.log()), size);
  EXPECT_EQ(box->Active().size(), 1u);
  MustRecord(*box, Clear(1, "A"));
  const uint64_t size2 = FileSize(dir.log());
  auto clear_again = box->Record(Clear(1, "A"));
  ASSERT_TRUE(clear_again.ok());
  EXPECT_FALSE(clear_again->has_value());
  EXPECT_EQ(FileSize(dir.log()), size2);
}

TEST(OutboxTest, InvalidTransitionsAreRefused) {
  TempDir dir;
  auto box = MustOpen(dir.state());
  auto bad = Raise(1, "A");
  bad.set_action(v1::TRANSITION_ACTION_UNSPECIFIED);
  EXPECT_EQ(box->Record(bad).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(box->Record(Raise(1, "")).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(box->pending_count(), 0u);
}

TEST(OutboxTest, InvalidUtf8IsReplacedSoTheLogStaysReplayable) {
  TempDir dir;
  {
    auto box = MustOpen(dir.state());
    auto t = MustRecord(*box, Raise(1, "KMSG", v1::FAULT_LEVEL_SUB_HEALTH, std::string("bad \xff\xfe byte \xc3\xa9")));
    EXPECT_EQ(t.fault().message(), "bad \xEF\xBF\xBD\xEF\xBF\xBD byte \xc3\xa9");
  }
  auto box = MustOpen(dir.state());
  ASSERT_NE(box, nullptr);
  ASSERT_EQ(box->pending_count(), 1u);
  EXPECT_EQ(box->Take().pending[0].transition.fault().message(), "bad \xEF\xBF\xBD\xEF\xBF\xBD byte \xc3\xa9");
}

TEST(OutboxTest, SubjectDistinguishesFaults) {
  TempDir dir;
  auto box = MustOpen(dir.state());
  auto disk = [](const std::string& subject, bool raise) {
    return raise ? Raise(std::nullopt, "NODE_DISK_FULL", v1::FAULT_LEVEL_SUB_HEALTH, "", subject, v1::FAULT_SOURCE_DISK)
                 : Clear(std::nullopt, "NODE_DISK_FULL", subject, v1::FAULT_SOURCE_DISK);
  };
  MustRecord(*box, disk("/", true));
  MustRecord(*box, disk("/data", true));
  EXPECT_EQ(ActiveCodes(*box), (Codes{"-/NODE_DISK_FULL@/", "-/NODE_DISK_FULL@/data"}));
  MustRecord(*box, disk("/", false));
  EXPECT_EQ(ActiveCodes(*box), (Codes{"-/NODE_DISK_FULL@/data"}));
  auto noop = box->Record(disk("/", false));
  ASSERT_TRUE(noop.ok());
  EXPECT_FALSE(noop->has_value());
}

// Replays the pending list over an empty set: with no acks, the result must be
// exactly the active set of the same snapshot.
Codes Fold(const std::vector<Outbox::Pending>& pending) {
  std::map<std::string, bool> state;
  for (const auto& p : pending) {
    const auto& f = p.transition.fault();
    std::string key = (f.has_device_id() ? std::to_string(f.device_id()) : "-") + "/" + f.code();
    if (p.transition.action() == v1::TRANSITION_ACTION_RAISE) {
      state[key] = true;
    } else {
      state.erase(key);
    }
  }
  Codes out;
  for (const auto& [k, v] : state) out.push_back(k);
  return out;
}

TEST(OutboxTest, TakeIsConsistentUnderConcurrentRecords) {
  TempDir dir;
  auto box = MustOpen(dir.state());
  constexpr int kRounds = 200;
  std::atomic<bool> done{false};
  std::thread writer([&] {
    for (int i = 0; i < kRounds; ++i) {
      (void)box->Record(Raise(i % 4, "X"));
      (void)box->Record(Clear((i + 1) % 4, "X"));
    }
    done = true;
  });
  int checked = 0;
  while (!done.load() || checked == 0) {
    auto snap = box->Take();
    Codes active;
    for (const auto& f : snap.active) active.push_back(std::to_string(f.device_id()) + "/" + f.code());
    ASSERT_EQ(Fold(snap.pending), active) << "pending " << snap.pending.size();
    for (size_t i = 1; i < snap.pending.size(); ++i) ASSERT_EQ(snap.pending[i].seq, snap.pending[i - 1].seq + 1);
    ++checked;
  }
  writer.join();
  auto snap = box->Take();
  Codes active;
  for (const auto& f : snap.active) active.push_back(std::to_string(f.device_id()) + "/" + f.code());
  EXPECT_EQ(Fold(snap.pending), active);
  EXPECT_GT(snap.pending.size(), 0u);
}

TEST(OutboxTest, TornTailIsTruncatedAndTheGoodPrefixKept) {
  TempDir dir;
  std::vector<uint64_t> sizes;
  {
    auto box = MustOpen(dir.state());
    for (uint32_t d = 0; d < 3; ++d) {
      MustRecord(*box, Raise(d, "A"));
      sizes.push_back(FileSize(dir.log()));
    }
  }
  // A write cut short: the last record lost its last 5 bytes.
  ASSERT_EQ(::truncate(dir.log().c_str(), static_cast<off_t>(sizes[2] - 5)), 0);
  {
    auto box = MustOpen(dir.state());
    ASSERT_NE(box, nullptr);
    EXPECT_EQ(PendingIds(*box), (Ids{{1, 1}, {1, 2}}));
    EXPECT_EQ(ActiveCodes(*box), (Codes{"0/A", "1/A"}));
    EXPECT_EQ(FileSize(dir.log()), sizes[1]);
    MustRecord(*box, Raise(7, "A"));  // appends cleanly after the cut
  }
  {
    auto box = MustOpen(dir.state());
    EXPECT_EQ(PendingIds(*box), (Ids{{1, 1}, {1, 2}, {2, 1}}));
  }
  // Only the header of a record made it.
  const uint64_t good = FileSize(dir.log());
  ASSERT_EQ(::truncate(dir.log().c_str(), static_cast<off_t>(good + 10)), 0);  // zero-filled tail
  {
    auto box = MustOpen(dir.state());
    EXPECT_EQ(box->pending_count(), 3u);
    EXPECT_EQ(FileSize(dir.log()), good);
  }
  // Garbage after the last record.
  {
    std::ofstream out(dir.log(), std::ios::binary | std::ios::app);
    out << "this is not a record, just garbage left by a crash ......................";
  }
  {
    auto box = MustOpen(dir.state());
    ASSERT_NE(box, nullptr);
    EXPECT_EQ(box->pending_count(), 3u);
    EXPECT_EQ(FileSize(dir.log()), good);
  }
  // A block of zeros (the file system extended the file, the data never came).
  ASSERT_EQ(::truncate(dir.log().c_str(), static_cast<off_t>(good + 4096)), 0);
  auto box = MustOpen(dir.state());
  ASSERT_NE(box, nullptr);
  EXPECT_EQ(box->pending_count(), 3u);
  EXPECT_EQ(FileSize(dir.log()), good);
}

TEST(OutboxTest, CorruptionInTheMiddleNamesFileAndOffset) {
  TempDir dir;
  std::vector<uint64_t> sizes;
  {
    auto box = MustOpen(dir.state());
    for (uint32_t d = 0; d < 3; ++d) {
      MustRecord(*box, Raise(d, "A", v1::FAULT_LEVEL_SUB_HEALTH, "some message"));
      sizes.push_back(FileSize(dir.log()));
    }
  }
  const std::string before = ReadFile(dir.log());
  // Flip one byte in the payload of the second record.
  const uint64_t second = sizes[0];
  {
    std::fstream f(dir.log(), std::ios::binary | std::ios::in | std::ios::out);
    f.seekg(static_cast<std::streamoff>(second + 20));
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x5A);
    f.seekp(static_cast<std::streamoff>(second + 20));
    f.write(&c, 1);
  }
  auto r = Outbox::Open(dir.state());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(r.status().message().find(dir.log()), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("offset " + std::to_string(second)), std::string::npos) << r.status().message();
  // Nothing was truncated or rewritten.
  EXPECT_EQ(FileSize(dir.log()), sizes[2]);

  // The same for a damaged length field (record header).
  TempDir dir2;
  {
    auto box = MustOpen(dir2.state());
    for (uint32_t d = 0; d < 3; ++d) MustRecord(*box, Raise(d, "A"));
  }
  {
    std::fstream f(dir2.log(), std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(8 + 2);  // high bytes of the first record's length
    f.write("\x7f", 1);
  }
  auto r2 = Outbox::Open(dir2.state());
  ASSERT_FALSE(r2.ok());
  EXPECT_EQ(r2.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(r2.status().message().find("offset 8 "), std::string::npos) << r2.status().message();
}

TEST(OutboxTest, CorruptEpochFileIsAnError) {
  TempDir dir;
  { MustOpen(dir.state()); }
  { std::ofstream(dir.state() + "/epoch") << "12x\n"; }
  auto r = Outbox::Open(dir.state());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(r.status().message().find("epoch"), std::string::npos);
}

TEST(OutboxTest, LostEpochFileNeverReusesIds) {
  TempDir dir;
  {
    std::unique_ptr<Outbox> box;
    for (int i = 0; i < 5; ++i) {
      box.reset();
      box = MustOpen(dir.state());
    }
    ASSERT_EQ(box->epoch(), 5u);
    MustRecord(*box, Raise(1, "A"));
  }
  fs::remove(dir.state() + "/epoch");
  auto box = MustOpen(dir.state());
  EXPECT_EQ(box->epoch(), 6u);  // above the epoch found in the log
  auto t = MustRecord(*box, Raise(2, "A"));
  EXPECT_EQ(t.id().epoch(), 6u);
  EXPECT_EQ(PendingIds(*box), (Ids{{5, 1}, {6, 1}}));
}

TEST(OutboxTest, InstanceIdIsMadeOnceAndNewForAWipedStateDir) {
  TempDir dir;
  std::string first;
  {
    auto box = MustOpen(dir.state());
    first = box->instance_id();
    ASSERT_EQ(first.size(), 32u);
    EXPECT_EQ(first.find_first_not_of("0123456789abcdef"), std::string::npos) << first;
    EXPECT_EQ(ReadFile(dir.state() + "/instance"), first + "\n");
  }
  {
    auto box = MustOpen(dir.state());
    EXPECT_EQ(box->instance_id(), first);  // kept across restarts
    EXPECT_EQ(box->epoch(), 2u);
  }
  fs::remove_all(dir.state());  // re-imaged node, lost hostPath
  auto box = MustOpen(dir.state());
  EXPECT_EQ(box->epoch(), 1u);
  EXPECT_NE(box->instance_id(), first);
  EXPECT_EQ(box->instance_id().size(), 32u);
}

TEST(OutboxTest, CorruptInstanceFileIsAnError) {
  TempDir dir;
  { MustOpen(dir.state()); }
  { std::ofstream(dir.state() + "/instance") << "not-hex\n"; }
  auto r = Outbox::Open(dir.state());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(r.status().message().find("instance"), std::string::npos);
}

TEST(OutboxTest, StaleTempFilesAreRemovedAtOpen) {
  TempDir dir;
  {
    auto box = MustOpen(dir.state());
    MustRecord(*box, Raise(1, "A"));
  }
  // What a kill -9 in the middle of a replace or a compaction leaves, and the
  // fixed temp names of agents before durable_file.h; other files stay.
  const std::vector<std::string> stale = {"epoch.tmp.4242.0", "instance.tmp.4242.1", "outbox.log.tmp.77.3", "epoch.tmp",
                                          "outbox.log.tmp"};
  const std::vector<std::string> kept = {"notes.tmp.1.2", "epoch.tmp.keep"};
  for (const auto& name : stale) std::ofstream(dir.state() + "/" + name) << "garbage";
  for (const auto& name : kept) std::ofstream(dir.state() + "/" + name) << "mine";
  auto box = MustOpen(dir.state());
  EXPECT_EQ(box->epoch(), 2u);
  EXPECT_EQ(PendingIds(*box), (Ids{{1, 1}}));
  for (const auto& name : stale) EXPECT_FALSE(fs::exists(dir.state() + "/" + name)) << name;
  for (const auto& name : kept) EXPECT_TRUE(fs::exists(dir.state() + "/" + name)) << name;
}

TEST(OutboxTest, SecondOpenOfTheSameDirIsRefused) {
  TempDir dir;
  auto box = MustOpen(dir.state());
  auto second = Outbox::Open(dir.state());
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
  box.reset();
  EXPECT_TRUE(Outbox::Open(dir.state()).ok());
}

TEST(OutboxTest, CompactionKeepsActiveAndPendingAndShrinksTheLog) {
  TempDir dir;
  TempDir ref;  // same history, never compacted
  Outbox::Options small;
  small.compact_after_records = 20;
  Outbox::Options never;
  never.compact_after_records = 1'000'000;
  std::vector<v1::FaultTransition> unacked;
  {
    auto box = MustOpen(dir.state(), small);
    auto plain = MustOpen(ref.state(), never);
    for (auto* b : {box.get(), plain.get()}) {
      MustRecord(*b, Raise(0, "A"));
      MustRecord(*b, Raise(1, "B"));
      MustRecord(*b,
                 Raise(std::nullopt, "NODE_DISK_FULL", v1::FAULT_LEVEL_SUB_HEALTH, "", "/data", v1::FAULT_SOURCE_DISK));
      // A flapping fault, acked as it goes (each ack also covers A, B and the
      // disk fault, which then live on only in the snapshot's active set).
      for (int i = 0; i < 100; ++i) {
        auto t = MustRecord(*b, i % 2 == 0 ? Raise(5, "FLAP") : Clear(5, "FLAP"));
        ASSERT_TRUE(b->Ack(t.id().epoch(), t.id().seq()).ok());
        EXPECT_LE(b->log_records(), b == box.get() ? 2 * 20u + 2 : 1'000'000u);
      }
      MustRecord(*b, Clear(1, "B"));
      MustRecord(*b, Raise(6, "LATE"));
    }
    auto snap = box->Take();
    EXPECT_EQ(PendingIds(*box), (Ids{{1, 104}, {1, 105}}));
    for (const auto& p : snap.pending) unacked.push_back(p.transition);
    EXPECT_EQ(ActiveCodes(*box), (Codes{"-/NODE_DISK_FULL@/data", "0/A", "6/LATE"}));
    EXPECT_EQ(ActiveCodes(*plain), ActiveCodes(*box));
    EXPECT_LT(FileSize(dir.log()) * 4, FileSize(ref.log()));

    // An explicit compaction leaves exactly pending + one snapshot.
    ASSERT_TRUE(box->Compact().ok());
    EXPECT_EQ(box->log_records(), 3u);
    for (const auto& entry : fs::directory_iterator(dir.state())) {
      EXPECT_EQ(entry.path().filename().string().find("outbox.log.tmp"), std::string::npos) << entry.path();
    }
  }
  auto box = MustOpen(dir.state(), small);
  EXPECT_EQ(box->epoch(), 2u);
  auto snap = box->Take();
  ASSERT_EQ(snap.pending.size(), unacked.size());
  for (size_t i = 0; i < unacked.size(); ++i) {
    EXPECT_EQ(snap.pending[i].transition.SerializeAsString(), unacked[i].SerializeAsString());
  }
  EXPECT_EQ(ActiveCodes(*box), (Codes{"-/NODE_DISK_FULL@/data", "0/A", "6/LATE"}));
  // The snapshot + pending replay does not resurrect the cleared fault, and the
  // active set keeps working after compaction.
  auto noop = box->Record(Clear(1, "B"));
  ASSERT_TRUE(noop.ok());
  EXPECT_FALSE(noop->has_value());
  MustRecord(*box, Clear(0, "A"));
  box.reset();
  box = MustOpen(dir.state(), small);
  EXPECT_EQ(ActiveCodes(*box), (Codes{"-/NODE_DISK_FULL@/data", "6/LATE"}));
  EXPECT_EQ(PendingIds(*box), (Ids{{1, 104}, {1, 105}, {2, 1}}));
}

TEST(OutboxTest, ResourceExhaustedAtMaxPendingWritesNothing) {
  TempDir dir;
  Outbox::Options o;
  o.max_pending = 3;
  auto box = MustOpen(dir.state(), o);
  for (uint32_t d = 0; d < 3; ++d) MustRecord(*box, Raise(d, "A"));
  const uint64_t size = FileSize(dir.log());
  auto refused = box->Record(Raise(3, "A"));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(FileSize(dir.log()), size);
  EXPECT_EQ(box->pending_count(), 3u);
  EXPECT_EQ(box->Active().size(), 3u);  // the refused raise did not touch the active set
  // A no-op is still a no-op when full.
  auto noop = box->Record(Raise(0, "A"));
  ASSERT_TRUE(noop.ok());
  EXPECT_FALSE(noop->has_value());
  // After an ack the caller's retry goes through, with the next seq.
  ASSERT_TRUE(box->Ack(1, 1).ok());
  EXPECT_EQ(MustRecord(*box, Raise(3, "A")).id().seq(), 4u);
}

// The kill -9 guarantee: a child process records transitions, tells the parent,
// and is killed with SIGKILL at once; the parent finds every transition.
TEST(OutboxTest, TransitionSurvivesSigkillRightAfterRecord) {
  TempDir dir;
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::close(fds[0]);
    auto r = Outbox::Open(dir.state());
    if (!r.ok()) ::_exit(2);
    auto& box = **r;
    for (uint32_t d = 0; d < 3; ++d) {
      auto t = box.Record(Raise(d, "80E01801", v1::FAULT_LEVEL_RESTART_NPU, "chip " + std::to_string(d)));
      if (!t.ok() || !t->has_value()) ::_exit(3);
      uint64_t seq = (*t)->id().seq();
      if (::write(fds[1], &seq, sizeof(seq)) != sizeof(seq)) ::_exit(4);
    }
    for (;;) ::pause();  // wait for SIGKILL; never exit cleanly
  }
  ::close(fds[1]);
  std::vector<uint64_t> seqs;
  uint64_t seq = 0;
  while (seqs.size() < 3 && ::read(fds[0], &seq, sizeof(seq)) == sizeof(seq)) seqs.push_back(seq);
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ::close(fds[0]);
  ASSERT_TRUE(WIFSIGNALED(status)) << "child exited with " << WEXITSTATUS(status);
  EXPECT_EQ(WTERMSIG(status), SIGKILL);
  ASSERT_EQ(seqs, (std::vector<uint64_t>{1, 2, 3}));

  auto box = MustOpen(dir.state());  // the dead child's lock is gone
  ASSERT_NE(box, nullptr);
  EXPECT_EQ(box->epoch(), 2u);
  auto snap = box->Take();
  EXPECT_EQ(PendingIds(*box), (Ids{{1, 1}, {1, 2}, {1, 3}}));
  ASSERT_EQ(snap.pending.size(), 3u);
  EXPECT_EQ(snap.pending[2].transition.fault().message(), "chip 2");
  EXPECT_EQ(snap.pending[2].transition.fault().level(), v1::FAULT_LEVEL_RESTART_NPU);
  EXPECT_EQ(ActiveCodes(*box), (Codes{"0/80E01801", "1/80E01801", "2/80E01801"}));
}

}  // namespace
}  // namespace clusterd::noded
