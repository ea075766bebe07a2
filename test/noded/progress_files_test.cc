// Job progress files (noded/collectors/progress.h): what NodeD reads from
// the files training processes write, and what it refuses: each file once
// per change, old files, links, huge, garbage and hostile files, names that
// are not job ids or ranks.
#include "noded/collectors/progress.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "test/support/temp_dir.h"

namespace clusterd::noded {
namespace {

using std::chrono::seconds;

class ProgressFilesTest : public ::testing::Test {
 protected:
  ProgressFilesTest() {
    ProgressFileOptions o;
    o.dir = dir_.path();
    files_ = std::make_unique<ProgressFiles>(o);
  }
  // Now, as the files' modification times go (the real clock: they were
  // just written).
  static TimePoint Now() { return std::chrono::system_clock::now(); }
  // Sets a file's modification time `ago` back.
  void Age(const std::string& path, std::chrono::seconds ago) {
    struct timespec times[2];
    clock_gettime(CLOCK_REALTIME, &times[0]);
    times[0].tv_sec -= ago.count();
    times[1] = times[0];
    ASSERT_EQ(utimensat(AT_FDCWD, path.c_str(), times, 0), 0);
  }
  static std::vector<std::string> Jobs(const ProgressFiles::Pass& p) {
    std::vector<std::string> out;
    for (const auto& r : p.reports) out.push_back(r.job_id());
    return out;
  }
  static bool Mentions(const ProgressFiles::Pass& p, const std::string& what) {
    for (const auto& e : p.errors) {
      if (e.find(what) != std::string::npos) return true;
    }
    return false;
  }

  testing::TempDir dir_;
  std::unique_ptr<ProgressFiles> files_;
};

TEST_F(ProgressFilesTest, EachChangedFileIsSentOnceAsItsJobsReport) {
  dir_.Write("train-a/0.json", R"({"step": 120, "step_time": 0.98, "collective_time": 0.25, "time": 1733400000.5,
                                    "samples": 512, "tokens": 1048576, "checkpointing": false})");
  dir_.Write("train-a/1.json", R"({"step": 119})");
  dir_.Write("train-b/7.json", R"({"step": 3, "checkpointing": true})");
  dir_.Write("train-a/.1.abc.tmp", "half a fil");  // a writer's temporary file
  ProgressFiles::Pass p = files_->Scan(Now());
  ASSERT_EQ(Jobs(p), (std::vector<std::string>{"train-a", "train-b"}));
  EXPECT_TRUE(p.errors.empty()) << p.errors[0];
  const v1::ProgressReport& a = p.reports[0].report();
  ASSERT_EQ(a.ranks_size(), 2);
  EXPECT_EQ(a.ranks(0).rank(), 0u);
  EXPECT_EQ(a.ranks(0).step(), 120u);
  EXPECT_EQ(a.ranks(0).step_time().nanos(), 980'000'000);
  EXPECT_EQ(a.ranks(0).collective_time().nanos(), 250'000'000);
  EXPECT_EQ(a.ranks(0).step_end_time().seconds(), 1733400000);
  EXPECT_EQ(a.ranks(0).samples(), 512u);
  EXPECT_EQ(a.ranks(0).tokens(), 1048576u);
  EXPECT_EQ(a.ranks(1).rank(), 1u);
  EXPECT_FALSE(a.ranks(1).has_step_time());
  EXPECT_TRUE(p.reports[1].report().ranks(0).checkpointing());
  // Nothing changed: nothing sent (a rank that stopped writing stops
  // reporting, which is how ClusterD sees it stop).
  EXPECT_TRUE(files_->Scan(Now()).reports.empty());
  dir_.Write("train-a/1.json", R"({"step": 120})");
  p = files_->Scan(Now());
  ASSERT_EQ(Jobs(p), std::vector<std::string>{"train-a"});
  ASSERT_EQ(p.reports[0].report().ranks_size(), 1);
  EXPECT_EQ(p.reports[0].report().ranks(0).step(), 120u);
}

TEST_F(ProgressFilesTest, AnOldJobsFilesAreNotSent) {
  const std::string f = dir_.Write("done/0.json", R"({"step": 5})");
  Age(f, seconds(3600));
  EXPECT_TRUE(files_->Scan(Now()).reports.empty());
}

TEST_F(ProgressFilesTest, BadFilesAreSkippedAndNamedTheOthersAreSent) {
  dir_.Write("job/0.json", R"({"step": 1})");
  dir_.Write("job/1.json",
             "\x7f"
             "ELF\x02\x01\x01\x00 binary garbage");
  dir_.Write("job/2.json", R"({"step": -4})");
  dir_.Write("job/3.json", R"({"step": 1, "step_time": 1e300})");
  dir_.Write("job/4.json", R"({"step": 1, "step_time": 1, "collective_time": 2})");
  dir_.Write("job/5.json", R"({"step": 1, "checkpointing": "yes"})");
  dir_.Write("job/6.json", R"([1, 2, 3])");
  dir_.Write("job/7.json", std::string(5000, ' ') + R"({"step": 1})");  // over 4 KiB
  dir_.Write("job/8.json", R"({"step": 1, "time": -1})");
  dir_.Write("job/99999999999.json", R"({"step": 1})");  // not a rank
  dir_.Write("job/x.json", R"({"step": 1})");
  ProgressFiles::Pass p = files_->Scan(Now());
  ASSERT_EQ(p.reports.size(), 1u);
  ASSERT_EQ(p.reports[0].report().ranks_size(), 1);
  EXPECT_EQ(p.reports[0].report().ranks(0).rank(), 0u);
  for (const char* what :
       {"1.json: not a JSON object", "2.json: step", "3.json: step_time", "4.json: collective_time",
        "5.json: checkpointing", "6.json: not a JSON object", "7.json: 5011 bytes", "8.json: time"}) {
    EXPECT_TRUE(Mentions(p, what)) << what;
  }
}

TEST_F(ProgressFilesTest, LinksLoopsHugeFilesAndOddNamesAreNotFollowed) {
  dir_.Write("outside/0.json", R"({"step": 1})");
  // A job directory that is a link elsewhere, a rank file that is a link,
  // a link loop, a FIFO (a read would block), a 1 GB sparse file.
  ASSERT_EQ(symlink(dir_.Sub("outside").c_str(), dir_.Sub("linked").c_str()), 0);
  dir_.MakeDir("job");
  ASSERT_EQ(symlink(dir_.Sub("outside/0.json").c_str(), dir_.Sub("job/0.json").c_str()), 0);
  ASSERT_EQ(symlink(dir_.Sub("job/1.json").c_str(), dir_.Sub("job/1.json").c_str()), 0);
  ASSERT_EQ(mkfifo(dir_.Sub("job/2.json").c_str(), 0600), 0);
  const int fd = open(dir_.Sub("job/3.json").c_str(), O_CREAT | O_WRONLY, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, int64_t{1} << 30), 0);
  close(fd);
  dir_.Write(".hidden/0.json", R"({"step": 1})");
  dir_.Write("bad name!/0.json", R"({"step": 1})");
  ProgressFiles::Pass p = files_->Scan(Now());
  // Only the real directory "outside" is read; nothing of "job".
  EXPECT_EQ(Jobs(p), std::vector<std::string>{"outside"});
  EXPECT_TRUE(Mentions(p, "job/0.json: a symbolic link"));
  EXPECT_TRUE(Mentions(p, "job/1.json: a symbolic link"));
  EXPECT_TRUE(Mentions(p, "job/2.json: not a regular file"));
  EXPECT_TRUE(Mentions(p, "job/3.json: 1073741824 bytes"));
  EXPECT_TRUE(Mentions(p, "not a job id"));
}

TEST_F(ProgressFilesTest, ManyRanksAreCappedPerJob) {
  ProgressFileOptions o;
  o.dir = dir_.path();
  o.max_ranks_per_job = 3;
  ProgressFiles files(o);
  for (int r = 0; r < 5; ++r) dir_.Write("job/" + std::to_string(r) + ".json", R"({"step": 1})");
  ProgressFiles::Pass p = files.Scan(Now());
  ASSERT_EQ(p.reports.size(), 1u);
  EXPECT_EQ(p.reports[0].report().ranks_size(), 3);
  EXPECT_TRUE(Mentions(p, "more than 3 ranks"));
}

TEST_F(ProgressFilesTest, NoDirectoryIsNoReport) {
  ProgressFileOptions o;
  o.dir = dir_.Sub("missing");
  EXPECT_TRUE(ProgressFiles(o).Scan(Now()).reports.empty());
  o.dir = "";
  EXPECT_TRUE(ProgressFiles(o).Scan(Now()).reports.empty());
}

}  // namespace
}  // namespace clusterd::noded
