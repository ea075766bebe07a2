#include "common/durable_file.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "test/support/temp_dir.h"

namespace clusterd {
namespace {

namespace fs = std::filesystem;

using testing::TempDir;

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::set<std::string> Names(const std::string& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.insert(e.path().filename().string());
  return out;
}

void Touch(const std::string& path, const std::string& content = "x") { std::ofstream(path) << content; }

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

TEST(DurableFileTest, WritesAndReplacesContent) {
  TempDir dir;
  const std::string path = dir.Sub("state");
  ASSERT_TRUE(WriteFileDurably(path, "first\n").ok());
  EXPECT_EQ(Slurp(path), "first\n");
  ASSERT_TRUE(WriteFileDurably(path, "second, longer\n").ok());
  EXPECT_EQ(Slurp(path), "second, longer\n");
  ASSERT_TRUE(WriteFileDurably(path, "").ok());
  EXPECT_TRUE(fs::exists(path));
  EXPECT_EQ(fs::file_size(path), 0u);
  // Binary content, NULs included, and more than one write's worth.
  std::string big(3 << 20, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7);
  ASSERT_TRUE(WriteFileDurably(path, big).ok());
  EXPECT_EQ(Slurp(path), big);
}

TEST(DurableFileTest, ModeIsApplied) {
  TempDir dir;
  const mode_t old_umask = ::umask(022);
  const std::string path = dir.Sub("secret");
  ASSERT_TRUE(WriteFileDurably(path, "a", 0600).ok());
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  // A replace takes the new mode, not the old file's.
  ASSERT_TRUE(WriteFileDurably(path, "b", 0640).ok());
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640u);
  // The default, through the umask.
  ASSERT_TRUE(WriteFileDurably(dir.Sub("plain"), "c").ok());
  ASSERT_EQ(::stat(dir.Sub("plain").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
  ::umask(old_umask);
}

TEST(DurableFileTest, NoTempFileIsLeftAfterSuccess) {
  TempDir dir;
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(WriteFileDurably(dir.Sub("state"), std::to_string(i)).ok());
  EXPECT_EQ(Names(dir.path()), (std::set<std::string>{"state"}));
}

TEST(DurableFileTest, FailedRenameRemovesTheTempAndLeavesTheTarget) {
  TempDir dir;
  // rename(2) cannot replace a non-empty directory with a file.
  const std::string target = dir.Sub("target");
  ASSERT_TRUE(fs::create_directory(target));
  Touch(target + "/inside", "kept");
  Status st = WriteFileDurably(target, "new");
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kInternal);
  EXPECT_TRUE(Contains(st.message(), "rename")) << st.message();
  EXPECT_TRUE(Contains(st.message(), target)) << st.message();
  EXPECT_TRUE(fs::is_directory(target));
  EXPECT_EQ(Slurp(target + "/inside"), "kept");
  EXPECT_EQ(Names(dir.path()), (std::set<std::string>{"target"}));
}

TEST(DurableFileTest, MissingDirectoryIsAnErrorNamingThePath) {
  TempDir dir;
  const std::string path = dir.Sub("no/such/dir/state");
  Status st = WriteFileDurably(path, "x");
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Contains(st.message(), path)) << st.message();
  EXPECT_TRUE(Contains(st.message(), "create")) << st.message();
  EXPECT_TRUE(Contains(st.message(), std::strerror(ENOENT))) << st.message();
  EXPECT_TRUE(Names(dir.path()).empty());
}

TEST(DurableFileTest, RemoveStaleTempFilesRemovesOnlyMatchingSiblings) {
  TempDir dir;
  const std::string path = dir.Sub("state");
  for (const char* name : {"state", "state.tmp.12.3", "state.tmp.99999.0", "state.tmp", "state.tmp.keep",
                           "state.tmp.1.2x", "state.tmp.1", "statex.tmp.1.2", "other.tmp.1.2", "xstate.tmp.1.2"}) {
    Touch(dir.Sub(name));
  }
  ASSERT_TRUE(fs::create_directory(dir.Sub("sub")));
  Touch(dir.Sub("sub/state.tmp.1.2"));
  ASSERT_TRUE(RemoveStaleTempFiles(path).ok());
  EXPECT_EQ(Names(dir.path()),
            (std::set<std::string>{"state", "state.tmp", "state.tmp.keep", "state.tmp.1.2x", "state.tmp.1",
                                   "statex.tmp.1.2", "other.tmp.1.2", "xstate.tmp.1.2", "sub"}));
  EXPECT_TRUE(fs::exists(dir.Sub("sub/state.tmp.1.2")));
  // Nothing to remove, or no directory at all: fine.
  EXPECT_TRUE(RemoveStaleTempFiles(path).ok());
  EXPECT_TRUE(RemoveStaleTempFiles(dir.Sub("missing/state")).ok());
}

TEST(DurableFileTest, TempPathsAreUniqueAndClearedAsStale) {
  TempDir dir;
  const std::string path = dir.Sub("state");
  const std::string a = TempPathFor(path), b = TempPathFor(path);
  EXPECT_NE(a, b);
  EXPECT_EQ(a.rfind(path + ".tmp." + std::to_string(::getpid()) + ".", 0), 0u) << a;
  Touch(a);
  Touch(b);
  ASSERT_TRUE(RemoveStaleTempFiles(path).ok());
  EXPECT_TRUE(Names(dir.path()).empty());
}

TEST(DurableFileTest, ParentDirectory) {
  EXPECT_EQ(ParentDirectory("a/b"), "a");
  EXPECT_EQ(ParentDirectory("/a/b/c"), "/a/b");
  EXPECT_EQ(ParentDirectory("/a"), "/");
  EXPECT_EQ(ParentDirectory("a"), ".");
  EXPECT_EQ(ParentDirectory("./a"), ".");
  EXPECT_EQ(ParentDirectory("a//b"), "a");
  EXPECT_EQ(ParentDirectory("//a"), "/");
}

TEST(DurableFileTest, WriteAllFillsAPipeBeyondItsBuffer) {
  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  ::fcntl(fds[1], F_SETPIPE_SZ, 4096);  // the smallest buffer: many partial writes
  std::string data(1 << 20, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>('a' + i % 26);
  std::string got;
  std::thread reader([&] {
    char buf[1000];
    for (;;) {
      const ssize_t n = ::read(fds[0], buf, sizeof(buf));
      if (n <= 0) break;
      got.append(buf, static_cast<size_t>(n));
    }
  });
  Status st = WriteAll(fds[1], data, "pipe");
  ASSERT_TRUE(CloseFile(fds[1], "pipe").ok());
  reader.join();
  ::close(fds[0]);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(got, data);
}

void Nothing(int) {}

TEST(DurableFileTest, WriteAllRetriesInterruptedAndShortWrites) {
  // A handler without SA_RESTART: a blocked write returns EINTR (nothing
  // written yet) or a short count (some written) when the signal arrives.
  struct sigaction sa {
  }, old{};
  sa.sa_handler = Nothing;
  sigemptyset(&sa.sa_mask);
  ASSERT_EQ(::sigaction(SIGUSR1, &sa, &old), 0);
  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  ::fcntl(fds[1], F_SETPIPE_SZ, 4096);
  std::string data(4 << 20, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 31 + i / 4096);
  std::string got;
  std::thread reader([&] {
    char buf[512];
    for (;;) {
      const ssize_t n = ::read(fds[0], buf, sizeof(buf));
      if (n <= 0) break;
      got.append(buf, static_cast<size_t>(n));
    }
  });
  std::atomic<bool> done{false};
  const pthread_t writer = ::pthread_self();
  std::thread signaller([&] {
    while (!done.load()) {
      ::pthread_kill(writer, SIGUSR1);
      std::this_thread::yield();
    }
  });
  Status st = WriteAll(fds[1], data, "pipe");
  done = true;
  signaller.join();
  ASSERT_TRUE(CloseFile(fds[1], "pipe").ok());
  reader.join();
  ::close(fds[0]);
  ::sigaction(SIGUSR1, &old, nullptr);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(got, data);
}

TEST(DurableFileTest, WriteAllToAClosedPipeNamesThePath) {
  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  ::close(fds[0]);
  struct sigaction sa {
  }, old{};
  sa.sa_handler = SIG_IGN;
  ASSERT_EQ(::sigaction(SIGPIPE, &sa, &old), 0);
  Status st = WriteAll(fds[1], "data", "the-pipe");
  ::sigaction(SIGPIPE, &old, nullptr);
  ::close(fds[1]);
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Contains(st.message(), "write the-pipe")) << st.message();
  EXPECT_TRUE(Contains(st.message(), std::strerror(EPIPE))) << st.message();
}

TEST(DurableFileTest, CloseFileOnABadDescriptorIsAnError) {
  Status st = CloseFile(-1, "/some/file");
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Contains(st.message(), "close /some/file")) << st.message();
  EXPECT_TRUE(Contains(st.message(), std::strerror(EBADF))) << st.message();
}

TEST(DurableFileTest, SyncFileAndSyncDirectory) {
  TempDir dir;
  const std::string path = dir.Sub("f");
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(WriteAll(fd, "abc", path).ok());
  EXPECT_TRUE(SyncFile(fd, path, SyncKind::kAll).ok());
  EXPECT_TRUE(SyncFile(fd, path, SyncKind::kData).ok());
  ASSERT_TRUE(CloseFile(fd, path).ok());
  EXPECT_TRUE(SyncDirectory(dir.path()).ok());

  Status bad = SyncFile(-1, "nowhere", SyncKind::kData);
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(Contains(bad.message(), "fdatasync nowhere")) << bad.message();
  bad = SyncFile(-1, "nowhere", SyncKind::kAll);
  EXPECT_TRUE(Contains(bad.message(), "fsync nowhere")) << bad.message();
  bad = SyncDirectory(dir.Sub("missing"));
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(Contains(bad.message(), dir.Sub("missing"))) << bad.message();
}

TEST(DurableFileTest, RenameDurablyAcrossDirectories) {
  TempDir dir;
  ASSERT_TRUE(fs::create_directory(dir.Sub("a")));
  ASSERT_TRUE(fs::create_directory(dir.Sub("b")));
  Touch(dir.Sub("a/f"), "moved");
  ASSERT_TRUE(RenameDurably(dir.Sub("a/f"), dir.Sub("b/g")).ok());
  EXPECT_FALSE(fs::exists(dir.Sub("a/f")));
  EXPECT_EQ(Slurp(dir.Sub("b/g")), "moved");

  // A directory, in the same parent.
  Touch(dir.Sub("a/inside"), "x");
  ASSERT_TRUE(RenameDurably(dir.Sub("a"), dir.Sub("c")).ok());
  EXPECT_EQ(Slurp(dir.Sub("c/inside")), "x");

  Status st = RenameDurably(dir.Sub("a/none"), dir.Sub("b/none"));
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Contains(st.message(), "rename " + dir.Sub("a/none") + " to " + dir.Sub("b/none"))) << st.message();
}

}  // namespace
}  // namespace clusterd
