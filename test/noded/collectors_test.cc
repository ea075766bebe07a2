#include <map>

#include <gtest/gtest.h>

#include "noded/collectors/cpu.h"
#include "noded/collectors/disk.h"
#include "noded/collectors/fs_root.h"
#include "noded/collectors/memory.h"
#include "noded/collectors/network.h"
#include "test_util.h"

namespace clusterd::noded {
namespace {

using testing::FixtureDir;
using testing::TempDir;

TEST(FsRootTest, JoinsPathsUnderTheRoot) {
  EXPECT_EQ(FsRoot("/").Path("/proc/stat"), "/proc/stat");
  EXPECT_EQ(FsRoot("/host/").Path("/proc/stat"), "/host/proc/stat");
  EXPECT_EQ(FsRoot("/host").Path("proc"), "/host/proc");
}

TEST(FsRootTest, ParsesNumbersAndEscapes) {
  EXPECT_EQ(ParseUint("42\n"), 42u);
  EXPECT_EQ(ParseUint("0x1f"), 31u);
  EXPECT_FALSE(ParseUint("-1"));
  EXPECT_FALSE(ParseUint(""));
  EXPECT_FALSE(ParseUint("12ab"));
  EXPECT_EQ(ParseDouble("1.25"), 1.25);
  EXPECT_EQ(UnescapeOctal(R"(/mnt/my\040disk)"), "/mnt/my disk");
  EXPECT_EQ(UnescapeOctal(R"(a\\b\04)"), R"(a\\b\04)");
}

TEST(FsRootTest, MissingFileIsNotFound) {
  FsRoot fs(FixtureDir("minimal"));
  auto r = fs.Read("/proc/nope");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(fs.List("/sys/nothing").empty());
}

TEST(CpuCollectorTest, ReadsLoadAndThrottleFromFixture) {
  CpuCollector c(FixtureDir("full"));
  auto r = c.Collect();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->cpus, 2);
  EXPECT_EQ(r->times.user, 1000u);
  EXPECT_EQ(r->times.idle, 8000u);
  EXPECT_FALSE(r->utilisation_percent) << "a delta needs two samples";
  EXPECT_DOUBLE_EQ(*r->load1, 1.5);
  EXPECT_DOUBLE_EQ(*r->load5, 0.75);
  EXPECT_DOUBLE_EQ(*r->load15, 0.25);
  ASSERT_EQ(r->throttle.size(), 2u);
  // Core counts 5 + 3, and the package counter (7 on both cpus of package 0) once.
  EXPECT_EQ(r->throttle_events, 15u);
}

TEST(CpuCollectorTest, UtilisationIsTheDeltaBetweenSamples) {
  TempDir dir;
  dir.Write("proc/stat", "cpu  100 0 100 800 0 0 0 0\ncpu0 100 0 100 800 0 0 0 0\n");
  CpuCollector c(dir.path());
  ASSERT_TRUE(c.Collect().ok());
  // +300 busy (user 150, system 50, iowait 100 is idle), +100 idle -> 400 total.
  dir.Write("proc/stat", "cpu  250 0 150 900 100 0 0 0\ncpu0 250 0 150 900 100 0 0 0\n");
  auto r = c.Collect();
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(r->utilisation_percent);
  EXPECT_DOUBLE_EQ(*r->utilisation_percent, 50.0);
  EXPECT_DOUBLE_EQ(*r->iowait_percent, 25.0);
}

TEST(CpuCollectorTest, OptionalFilesMayBeMissing) {
  CpuCollector c(FixtureDir("minimal"));
  auto r = c.Collect();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->load1);
  EXPECT_TRUE(r->throttle.empty());
  EXPECT_EQ(r->throttle_events, 0u);
}

TEST(CpuCollectorTest, MissingOrMalformedStatFails) {
  TempDir dir;
  EXPECT_EQ(CpuCollector(dir.path()).Collect().status().code(), StatusCode::kNotFound);
  dir.Write("proc/stat", "cpu  x y z\n");
  EXPECT_FALSE(CpuCollector(dir.path()).Collect().ok());
}

TEST(MemoryCollectorTest, ReadsMeminfoPressureAndEdac) {
  MemoryCollector c(FixtureDir("full"));
  auto r = c.Collect();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->total_kib, 16000000u);
  EXPECT_EQ(r->available_kib, 4000000u);
  EXPECT_DOUBLE_EQ(r->available_percent, 25.0);
  EXPECT_EQ(r->hardware_corrupted_kib, 8u);
  EXPECT_EQ(r->meminfo_kib.at("HugePages_Total"), 0u);
  ASSERT_TRUE(r->pressure_some);
  EXPECT_DOUBLE_EQ(r->pressure_some->avg10, 12.5);
  EXPECT_EQ(r->pressure_some->total_us, 123456u);
  ASSERT_TRUE(r->pressure_full);
  EXPECT_DOUBLE_EQ(r->pressure_full->avg10, 4.25);
  ASSERT_EQ(r->edac.size(), 2u);  // "power" is not a controller
  EXPECT_EQ(r->ecc_corrected, 5u);
  EXPECT_EQ(r->ecc_uncorrected, 1u);
}

TEST(MemoryCollectorTest, OldKernelWithoutAvailablePsiOrEdac) {
  MemoryCollector c(FixtureDir("minimal"));
  auto r = c.Collect();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->available_kib, 250u);  // MemFree + Buffers + Cached
  EXPECT_DOUBLE_EQ(r->available_percent, 25.0);
  EXPECT_FALSE(r->pressure_some);
  EXPECT_FALSE(r->pressure_full);
  EXPECT_TRUE(r->edac.empty());
}

TEST(MemoryCollectorTest, NoMemTotalFails) {
  TempDir dir;
  dir.Write("proc/meminfo", "MemFree: 10 kB\n");
  EXPECT_FALSE(MemoryCollector(dir.path()).Collect().ok());
}

// Fixed statvfs answers per mount point; unknown mounts fail like an EACCES would.
class FakeStatFs : public StatFs {
 public:
  StatusOr<FsStats> Stat(const std::string& mount_point) override {
    calls.push_back(mount_point);
    auto it = stats.find(mount_point);
    if (it == stats.end()) return Unavailable("statvfs " + mount_point + ": permission denied");
    return it->second;
  }
  std::map<std::string, FsStats> stats;
  std::vector<std::string> calls;
};

FsStats Stats(uint64_t blocks, uint64_t free, uint64_t avail, uint64_t files, uint64_t ffree) {
  return FsStats{4096, blocks, free, avail, files, ffree};
}

TEST(DiskCollectorTest, RealMountsSpaceInodesAndReadOnly) {
  FakeStatFs statfs;
  statfs.stats["/"] = Stats(1000, 100, 50, 1000, 900);   // used 900 of 950 -> 94.7%
  statfs.stats["/boot/efi"] = Stats(100, 90, 90, 0, 0);  // vfat: no inode counts
  statfs.stats["/data"] = Stats(1000, 1000, 1000, 100, 1);
  statfs.stats["/mnt/my disk"] = Stats(200, 100, 100, 10, 5);
  DiskCollectorOptions opts;
  opts.root = FixtureDir("full");
  DiskCollector c(opts, statfs);
  auto r = c.Collect();
  ASSERT_TRUE(r.ok()) << r.status().ToString();

  std::map<std::string, MountReading> m;
  for (const auto& mount : r->mounts) m[mount.mount_point] = mount;
  // Pseudo, container, squashfs and network mounts are skipped; statvfs is never
  // called on them (an NFS statvfs can hang).
  std::vector<std::string> points;
  for (const auto& [p, _] : m) points.push_back(p);
  EXPECT_EQ(points, (std::vector<std::string>{"/", "/boot/efi", "/data", "/images", "/mnt/my disk"}));
  EXPECT_EQ(statfs.calls.size(), 5u);

  EXPECT_EQ(m["/"].device, "/dev/sda2");
  EXPECT_EQ(m["/"].fs_type, "ext4");
  EXPECT_NEAR(*m["/"].used_percent, 100.0 * 900 / 950, 1e-9);
  EXPECT_DOUBLE_EQ(*m["/"].inodes_used_percent, 10.0);
  EXPECT_FALSE(m["/boot/efi"].inodes_used_percent);
  EXPECT_DOUBLE_EQ(*m["/mnt/my disk"].used_percent, 50.0);

  // /data is ro but fstab says rw: unexpected. /images is ro by design.
  EXPECT_TRUE(m["/data"].read_only);
  EXPECT_TRUE(m["/data"].unexpected_read_only);
  EXPECT_DOUBLE_EQ(*m["/data"].inodes_used_percent, 99.0);
  EXPECT_TRUE(m["/images"].read_only);
  EXPECT_FALSE(m["/images"].unexpected_read_only);
  EXPECT_FALSE(m["/images"].stats);
  EXPECT_NE(m["/images"].stat_error.find("permission denied"), std::string::npos);

  ASSERT_EQ(r->devices.size(), 1u);  // nvme0n1 has no ioerr_cnt
  EXPECT_EQ(r->devices[0].name, "sda");
  EXPECT_EQ(r->devices[0].io_errors, 31u);
}

TEST(DiskCollectorTest, RemountReadOnlyAfterSeenWritable) {
  TempDir dir;
  dir.Write("proc/mounts", "/dev/vdb /scratch ext4 rw,relatime 0 0\n/dev/vdc /ro ext4 ro 0 0\n");
  FakeStatFs statfs;
  DiskCollectorOptions opts;
  opts.root = dir.path();
  DiskCollector c(opts, statfs);
  auto first = c.Collect();
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->mounts[0].mount_point, "/ro");
  EXPECT_FALSE(first->mounts[0].unexpected_read_only) << "never seen rw, not in fstab";

  dir.Write("proc/mounts", "/dev/vdb /scratch ext4 ro,relatime 0 0\n/dev/vdc /ro ext4 ro 0 0\n");
  auto second = c.Collect();
  ASSERT_TRUE(second.ok());
  ASSERT_EQ(second->mounts.size(), 2u);
  EXPECT_EQ(second->mounts[0].mount_point, "/ro");
  EXPECT_FALSE(second->mounts[0].unexpected_read_only);
  EXPECT_EQ(second->mounts[1].mount_point, "/scratch");
  EXPECT_TRUE(second->mounts[1].unexpected_read_only);
  EXPECT_FALSE(second->mounts[1].used_percent) << "statvfs failed";
}

TEST(DiskCollectorTest, LastMountOnAPointWinsAndMissingFilesTolerated) {
  TempDir dir;
  dir.Write("proc/mounts",
            "/dev/vda / ext4 rw 0 0\ntmpfs /tmp tmpfs rw 0 0\n/dev/vdb /tmp ext4 rw 0 0\n"
            "/dev/vdc /x ext4 rw 0 0\ntmpfs /x tmpfs rw 0 0\n");
  FakeStatFs statfs;
  DiskCollectorOptions opts;
  opts.root = dir.path();
  DiskCollector c(opts, statfs);
  auto r = c.Collect();
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->mounts.size(), 2u);  // "/x" is now a tmpfs on top: skipped
  EXPECT_EQ(r->mounts[1].device, "/dev/vdb");
  EXPECT_TRUE(r->devices.empty());

  DiskCollectorOptions none;
  none.root = dir.path() + "/nowhere";
  EXPECT_FALSE(DiskCollector(none, statfs).Collect().ok());
}

TEST(DiskCollectorTest, RealStatFsOnATempDir) {
  TempDir dir;
  RealStatFs statfs(dir.path());
  auto st = statfs.Stat("/");
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_GT(st->blocks, 0u);
  EXPECT_FALSE(statfs.Stat("/does/not/exist").ok());
}

TEST(NetworkCollectorTest, PhysicalInterfacesWithState) {
  NetworkCollectorOptions opts;
  opts.root = FixtureDir("full");
  auto r = NetworkCollector(opts).Collect();
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->interfaces.size(), 3u);  // lo and the veth are skipped
  const auto& eth0 = r->interfaces[0];
  EXPECT_EQ(eth0.name, "eth0");
  EXPECT_EQ(eth0.operstate, "up");
  EXPECT_TRUE(eth0.admin_up);
  EXPECT_TRUE(eth0.physical);
  EXPECT_EQ(eth0.carrier, true);
  EXPECT_EQ(eth0.carrier_changes, 4u);
  EXPECT_EQ(eth0.rx_errors, 1u);
  EXPECT_EQ(eth0.tx_errors, 2u);
  EXPECT_EQ(eth0.rx_dropped, 10u);
  EXPECT_EQ(eth0.tx_dropped, 0u);
  EXPECT_FALSE(eth0.LinkDown());

  const auto& eth1 = r->interfaces[1];
  EXPECT_EQ(eth1.carrier, false);
  EXPECT_TRUE(eth1.LinkDown());

  // Administratively down: no carrier file, not a fault.
  const auto& eth2 = r->interfaces[2];
  EXPECT_FALSE(eth2.admin_up);
  EXPECT_FALSE(eth2.carrier);
  EXPECT_FALSE(eth2.rx_errors);
  EXPECT_FALSE(eth2.LinkDown());
}

TEST(NetworkCollectorTest, VirtualInterfacesOnRequest) {
  NetworkCollectorOptions opts;
  opts.root = FixtureDir("full");
  opts.include = {"veth9a"};
  opts.ignore = {"eth2"};
  auto r = NetworkCollector(opts).Collect();
  ASSERT_TRUE(r.ok());
  std::vector<std::string> names;
  for (const auto& i : r->interfaces) names.push_back(i.name);
  EXPECT_EQ(names, (std::vector<std::string>{"eth0", "eth1", "veth9a"}));
  EXPECT_FALSE(r->interfaces[2].physical);

  NetworkCollectorOptions empty;
  empty.root = FixtureDir("minimal");
  auto none = NetworkCollector(empty).Collect();
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->interfaces.empty());
}

// Smoke test on this machine's own /proc and /sys: the collectors must cope with a
// real host, whatever it has. Asserts only what every Linux host provides.
TEST(RealHostTest, CollectorsRunOnThisMachine) {
  CpuCollector cpu;
  auto c = cpu.Collect();
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_GT(c->cpus, 0);
  auto m = MemoryCollector().Collect();
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_GT(m->total_kib, 0u);
  RealStatFs statfs;
  DiskCollector disk({}, statfs);
  EXPECT_TRUE(disk.Collect().ok());
  EXPECT_TRUE(NetworkCollector().Collect().ok());
}

}  // namespace
}  // namespace clusterd::noded
