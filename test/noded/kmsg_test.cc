#include <gtest/gtest.h>

#include "noded/collectors/kmsg.h"
#include "test_util.h"

namespace clusterd::noded {
namespace {

using testing::TempDir;

TEST(KmsgParseTest, ParsesRecordHeader) {
  auto r = ParseKmsgLine("3,1234,5678901,-;Out of memory: Killed process 42 (python)");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->level, 3);
  EXPECT_EQ(r->facility, 0);
  EXPECT_EQ(r->seq, 1234u);
  EXPECT_EQ(r->timestamp_us, 5678901u);
  EXPECT_EQ(r->message, "Out of memory: Killed process 42 (python)");

  auto extra = ParseKmsgLine("30,7,100,c,more;systemd[1]: started; with semicolons");
  ASSERT_TRUE(extra);
  EXPECT_EQ(extra->facility, 3);
  EXPECT_EQ(extra->level, 6);
  EXPECT_EQ(extra->message, "systemd[1]: started; with semicolons");
}

TEST(KmsgParseTest, RefusesContinuationAndJunk) {
  EXPECT_FALSE(ParseKmsgLine(" SUBSYSTEM=pci"));
  EXPECT_FALSE(ParseKmsgLine("no header here"));
  EXPECT_FALSE(ParseKmsgLine("a,b,c,-;message"));
  EXPECT_FALSE(ParseKmsgLine(""));
}

TEST(KmsgMatcherTest, DefaultPatternsMapToCodes) {
  auto m = KmsgMatcher::Create(DefaultKernelPatterns());
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  auto code = [&](std::string_view msg) {
    const std::string* c = m->Match(msg);
    return c ? *c : std::string("-");
  };
  EXPECT_EQ(code("Out of memory: Killed process 4242 (python3) total-vm:123kB"), "KERNEL_OOM_KILL");
  EXPECT_EQ(code("Memory cgroup out of memory: Killed process 17 (train)"), "KERNEL_OOM_KILL");
  EXPECT_EQ(code("INFO: task jbd2/sda1-8:301 blocked for more than 120 seconds."), "KERNEL_HUNG_TASK");
  EXPECT_EQ(code("mce: [Hardware Error]: Machine check events logged"), "KERNEL_MCE");
  EXPECT_EQ(code("EXT4-fs error (device sda1): ext4_find_entry:1455: inode #2: comm ls: reading directory"),
            "KERNEL_FS_ERROR");
  EXPECT_EQ(code("XFS (nvme0n1): Corruption detected. Unmount and run xfs_repair"), "KERNEL_FS_ERROR");
  EXPECT_EQ(code("blk_update_request: I/O error, dev sdb, sector 2048"), "KERNEL_FS_ERROR");
  EXPECT_EQ(code("[davinci] devdrv_manager: device 3 heartbeat lost, error"), "KERNEL_ACCEL_DRIVER_ERROR");
  EXPECT_EQ(code("NPU 2 reported a FAULT on ring 0"), "KERNEL_ACCEL_DRIVER_ERROR");
  EXPECT_EQ(code("NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus."), "KERNEL_GPU_XID");
  // Near misses stay quiet.
  EXPECT_EQ(code("mce: CPU0: Core temperature above threshold, cpu clock throttled"), "-");
  EXPECT_EQ(code("python3 invoked oom-killer: gfp_mask=0x100cca"), "-");
  EXPECT_EQ(code("input: Power Button as /devices/LNXSYSTM:00, failed"), "-");
  EXPECT_EQ(code("EXT4-fs (sda1): mounted filesystem with ordered data mode"), "-");
}

TEST(KmsgMatcherTest, BadPatternNamesItself) {
  auto bad = KmsgMatcher::Create({{"KERNEL_X", "(unclosed", false}});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("KERNEL_X"), std::string::npos) << bad.status().message();
  EXPECT_NE(bad.status().message().find("regex"), std::string::npos);
  EXPECT_FALSE(KmsgMatcher::Create({{"", "x", false}}).ok());
}

// std::regex reads back-reference and repeat-count numbers without an
// overflow check (undefined behaviour, found by the rules_config fuzzer):
// longer than six digits they are refused, naming the pattern; escaped
// braces and long literal numbers are not numbers it reads.
TEST(KmsgMatcherTest, HugeBackReferencesAndRepeatCountsAreRefused) {
  for (const char* re :
       {R"(Xid \18446744073709551616)", "a{18446744073709551616}", "a{2,99999999999999999999}", R"(\1234567)"}) {
    auto bad = KmsgMatcher::Create({{"KERNEL_X", re, false}});
    ASSERT_FALSE(bad.ok()) << re;
    EXPECT_NE(bad.status().message().find("kernel pattern 0 (code 'KERNEL_X'): field 'regex'"), std::string::npos)
        << bad.status().message();
    EXPECT_NE(bad.status().message().find("more than 6 digits"), std::string::npos) << bad.status().message();
  }
  for (const char* re : {R"(Xid 18446744073709551616)", R"(\{18446744073709551616\})", R"((a)\1 b{2,100})"}) {
    EXPECT_TRUE(KmsgMatcher::Create({{"KERNEL_X", re, false}}).ok()) << re;
  }
}

TEST(KmsgReaderTest, FollowsAFileAcrossPolls) {
  TempDir dir;
  const std::string path = dir.path() + "/kmsg";
  dir.Write("kmsg", "6,1,100,-;boot message\n");
  KmsgReader reader({path, /*start_at_end=*/false});
  auto first = reader.Poll();
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  ASSERT_EQ(first->size(), 1u);
  EXPECT_EQ((*first)[0].message, "boot message");

  auto nothing = reader.Poll();
  ASSERT_TRUE(nothing.ok());
  EXPECT_TRUE(nothing->empty()) << "a poll with nothing new returns at once";

  // A line written in two pieces is returned once it is complete.
  dir.Append("kmsg", "3,2,200,-;first half");
  auto partial = reader.Poll();
  ASSERT_TRUE(partial.ok());
  EXPECT_TRUE(partial->empty());
  dir.Append("kmsg", " and second half\n SUBSYSTEM=block\n4,3,300,-;next\n");
  auto rest = reader.Poll();
  ASSERT_TRUE(rest.ok());
  ASSERT_EQ(rest->size(), 2u);
  EXPECT_EQ((*rest)[0].message, "first half and second half");
  EXPECT_EQ((*rest)[1].seq, 3u);
  EXPECT_EQ(reader.lost(), 0u);
}

TEST(KmsgReaderTest, StartAtEndSkipsHistoryAndSequenceSkipsRepeats) {
  TempDir dir;
  const std::string path = dir.path() + "/kmsg";
  dir.Write("kmsg", "6,1,100,-;old\n6,2,100,-;old too\n");
  KmsgReader reader({path, /*start_at_end=*/true});
  auto first = reader.Poll();
  ASSERT_TRUE(first.ok());
  EXPECT_TRUE(first->empty());

  dir.Append("kmsg", "6,3,100,-;new\n6,7,100,-;after a gap\n");
  auto second = reader.Poll();
  ASSERT_TRUE(second.ok());
  ASSERT_EQ(second->size(), 2u);
  EXPECT_EQ(reader.lost(), 3u) << "sequence 4..6 were never seen";

  // Rewritten from scratch (truncated): records already seen are not returned again.
  dir.Write("kmsg", "6,6,100,-;seen\n6,7,100,-;seen\n6,8,100,-;fresh\n");
  auto third = reader.Poll();
  ASSERT_TRUE(third.ok());
  ASSERT_EQ(third->size(), 1u);
  EXPECT_EQ((*third)[0].message, "fresh");
}

TEST(KmsgReaderTest, MissingFileFailsAndRetries) {
  TempDir dir;
  KmsgReader reader({dir.path() + "/later", false});
  EXPECT_EQ(reader.Poll().status().code(), StatusCode::kUnavailable);
  dir.Write("later", "6,1,1,-;hello\n");
  auto r = reader.Poll();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->size(), 1u);
}

TEST(KmsgReaderTest, CapsRecordsPerPoll) {
  TempDir dir;
  std::string lines;
  for (int i = 1; i <= 10; ++i) lines += "6," + std::to_string(i) + ",1,-;line\n";
  dir.Write("kmsg", lines);
  KmsgReaderOptions opts{dir.path() + "/kmsg", false, 4};
  KmsgReader reader(opts);
  size_t total = 0;
  for (int poll = 0; poll < 10 && total < 10; ++poll) {
    auto r = reader.Poll();
    ASSERT_TRUE(r.ok());
    total += r->size();
  }
  EXPECT_EQ(total, 10u);
}

TEST(KernelLogCollectorTest, CountsMatchesPerCode) {
  TempDir dir;
  dir.Write("kmsg", "");
  auto m = KmsgMatcher::Create(DefaultKernelPatterns());
  ASSERT_TRUE(m.ok());
  KernelLogCollector c(std::move(*m), {dir.path() + "/kmsg", true});
  auto first = c.Collect();
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->counts.size(), 6u);
  EXPECT_EQ(first->counts.at("KERNEL_OOM_KILL"), 0u);

  dir.Append("kmsg",
             "3,1,10,-;Out of memory: Killed process 1 (a)\n"
             "6,2,11,-;unrelated\n"
             "3,3,12,-;Out of memory: Killed process 2 (b)\n"
             "3,4,13,-;INFO: task x:1 blocked for more than 120 seconds.\n");
  auto second = c.Collect();
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->matches.size(), 3u);
  EXPECT_EQ(second->counts.at("KERNEL_OOM_KILL"), 2u);
  EXPECT_EQ(second->counts.at("KERNEL_HUNG_TASK"), 1u);
  EXPECT_EQ(second->last_message.at("KERNEL_OOM_KILL"), "Out of memory: Killed process 2 (b)");

  auto third = c.Collect();
  ASSERT_TRUE(third.ok());
  EXPECT_TRUE(third->matches.empty());
  EXPECT_EQ(third->counts.at("KERNEL_OOM_KILL"), 2u) << "counts are cumulative";
}

}  // namespace
}  // namespace clusterd::noded
