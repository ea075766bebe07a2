// Checkpoints (clusterd/ha/replication/checkpoint.h): a real RocksDB store
// served over a real HTTP port on loopback, fetched, checked and swapped in.
#include "clusterd/ha/replication/checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "clusterd/ha/replication/log_entry.h"
#include "clusterd/storage/rocksdb_store.h"
#include "common/http_client.h"
#include "common/http_server.h"
#include "common/logging.h"
#include "common/tls_context.h"
#include "test/support/temp_dir.h"
#include "test/support/test_certs.h"

#include <spdlog/sinks/ostream_sink.h>

namespace clusterd::replication {
namespace {

namespace fs = std::filesystem;
using storage::Cf;

constexpr const char* kToken = "s3cret-token";

// Writes `n` entries' worth of records (one per write, with the log index
// and the revision), like a standby applying the log.
void Fill(storage::Store* store, uint64_t from, uint64_t n) {
  for (uint64_t i = from; i < from + n; ++i) {
    storage::ChangeSet changes;
    changes.Put(Cf::kJobs, "job-" + std::to_string(i), std::string(300, static_cast<char>('a' + i % 26)));
    storage::PutRevision(&changes, i);
    PutLogIndex(&changes, i);
    ASSERT_TRUE(store->Write(changes).ok());
  }
}

std::map<std::string, std::string> Jobs(const storage::Store& store) {
  std::map<std::string, std::string> out;
  EXPECT_TRUE(store.ForEach(Cf::kJobs, [&](std::string_view k, std::string_view v) { out[std::string(k)] = v; }).ok());
  return out;
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto opened = storage::RocksDbStore::Open(dir_.Sub("peer"), storage::StoreOptions{.sync = false});
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    peer_ = std::move(*opened);
    Fill(peer_.get(), 1, 200);
    CheckpointServer::Options options{dir_.Sub("peer.checkpoint"), kToken};
    options.chunk_bytes = 4096;  // many chunks per file
    server_ = std::make_unique<CheckpointServer>(options);
    server_->RegisterMetrics(&metrics_);
    storage::RocksDbStore* raw = peer_.get();
    server_->SetSource([raw](const std::string& dir) { return raw->CreateCheckpoint(dir); });
    server_->Install([this](std::string method, std::string path, HttpServer::Handler handler) {
      http_.Handle(std::move(method), std::move(path), std::move(handler));
    });
    ASSERT_TRUE(http_.Start("127.0.0.1:0").ok());
  }
  void TearDown() override {
    http_.Stop();
    server_->SetSource(nullptr);
  }

  FetchOptions Options(std::string token = kToken) {
    FetchOptions o;
    o.address = "127.0.0.1:" + std::to_string(http_.port());
    o.token = std::move(token);
    return o;
  }

  HttpClientAnswer Get(const std::string& target, const std::string& token = kToken) {
    HttpClientRequest req;
    req.host = "127.0.0.1";
    req.port = std::to_string(http_.port());
    req.target = target;
    if (!token.empty()) req.headers = {{"Authorization", "Bearer " + token}};
    return HttpCall(req, std::chrono::steady_clock::now() + std::chrono::seconds(10), 1 << 20);
  }

  testing::TempDir dir_;
  std::unique_ptr<storage::RocksDbStore> peer_;
  MetricsRegistry metrics_;
  HttpServer http_;
  std::unique_ptr<CheckpointServer> server_;
};

TEST(CheckpointManifestTest, RoundTripsAndRefusesWhatCouldEscapeItsDirectory) {
  CheckpointManifest m{"7", 42, 1042, {{"000012.sst", 1234}, {"CURRENT", 16}, {"MANIFEST-000005", 99}}};
  auto parsed = ParseManifest(FormatManifest(m));
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->id, "7");
  EXPECT_EQ(parsed->log_index, 42u);
  EXPECT_EQ(parsed->revision, 1042u);
  EXPECT_EQ(parsed->files, m.files);

  const std::string head = "clusterd-checkpoint 1\nid 1\nlog_index 1\nrevision 1\n";
  for (const std::string& bad :
       {head + "file ../etc/passwd 10\n", head + "file a/b 10\n", head + "file .. 1\n", head + "file x 1\nfile x 2\n",
        head + "file x -1\n", head + "file x\n", head + "file CLUSTERD_CHECKPOINT_COMPLETE 1\n", head + "owner me\n",
        head, std::string("clusterd-checkpoint 2\n"), std::string("<html>"), std::string()}) {
    auto r = ParseManifest(bad);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST_F(CheckpointTest, FetchedCheckpointOpensWithThePeersRecordsAndReplacesTheDataDir) {
  // The replica that rebuilds: a store the log no longer reaches.
  const std::string data = dir_.Sub("data");
  {
    auto stale = storage::RocksDbStore::Open(data, storage::StoreOptions{.sync = false});
    ASSERT_TRUE(stale.ok());
    Fill(stale->get(), 1, 3);
  }
  uint64_t announced = 0;
  FetchOptions options = Options();
  options.on_manifest = [&](const CheckpointManifest& m) { announced = m.log_index; };
  auto fetched = FetchCheckpoint(options, BootstrapDir(data));
  ASSERT_TRUE(fetched.ok()) << fetched.status().ToString();
  EXPECT_EQ(fetched->log_index, 200u);
  EXPECT_EQ(fetched->revision, 200u);
  EXPECT_EQ(announced, 200u);

  // The peer goes on writing; the checkpoint holds what it had.
  Fill(peer_.get(), 201, 5);
  ASSERT_TRUE(InstallCheckpoint(data, /*keep_old=*/false).ok());
  EXPECT_FALSE(fs::exists(BootstrapDir(data)));
  auto store = storage::RocksDbStore::Open(data);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_EQ(*ReadLogIndex(**store), 200u);
  EXPECT_EQ((*store)->revision_at_open(), 200u);
  auto jobs = Jobs(**store);
  EXPECT_EQ(jobs.size(), 200u);
  auto peer_jobs = Jobs(*peer_);
  for (int i = 201; i <= 205; ++i) EXPECT_EQ(peer_jobs.erase("job-" + std::to_string(i)), 1u);
  EXPECT_EQ(peer_jobs.size(), jobs.size());
  for (const auto& [k, v] : jobs) EXPECT_EQ(peer_jobs[k], v) << k;
  EXPECT_EQ(metrics_.Render().find("clusterd_ha_checkpoints_created_total 1") != std::string::npos, true);
}

TEST_F(CheckpointTest, KeepOldMovesADivergedStoreAside) {
  const std::string data = dir_.Sub("data");
  {
    auto other = storage::RocksDbStore::Open(data, storage::StoreOptions{.sync = false});
    ASSERT_TRUE(other.ok());
    Fill(other->get(), 1, 2);
  }
  ASSERT_TRUE(FetchCheckpoint(Options(), BootstrapDir(data)).ok());
  ASSERT_TRUE(InstallCheckpoint(data, /*keep_old=*/true).ok());
  auto aside = storage::RocksDbStore::Open(data + ".diverged", storage::StoreOptions{.read_only = true});
  ASSERT_TRUE(aside.ok()) << aside.status().ToString();
  EXPECT_EQ(*ReadLogIndex(**aside), 2u);
  auto store = storage::RocksDbStore::Open(data, storage::StoreOptions{.read_only = true});
  ASSERT_TRUE(store.ok());
  EXPECT_EQ(*ReadLogIndex(**store), 200u);
}

TEST_F(CheckpointTest, WithoutTheTokenNothingIsServedAndNothingChanges) {
  const std::string data = dir_.Sub("data");
  auto fetched = FetchCheckpoint(Options("wrong"), BootstrapDir(data));
  ASSERT_FALSE(fetched.ok());
  EXPECT_NE(fetched.status().message().find("401"), std::string::npos) << fetched.status().message();
  EXPECT_EQ(Get("/ha/v1/checkpoint", "").status, 401);
  EXPECT_EQ(Get("/ha/v1/checkpoint", std::string(kToken) + "x").status, 401);
  EXPECT_EQ(Get("/ha/v1/checkpoint/file?id=1&name=CURRENT&offset=0", "").status, 401);
  EXPECT_NE(metrics_.Render().find("clusterd_ha_checkpoint_requests_refused_total 4"), std::string::npos);
  EXPECT_NE(metrics_.Render().find("clusterd_ha_checkpoints_created_total 0"), std::string::npos);
  ASSERT_TRUE(FinishInterruptedInstall(data).ok());
  EXPECT_FALSE(fs::exists(data));
}

TEST_F(CheckpointTest, FileRequestsOutsideTheCheckpointAreRefused) {
  auto fetched = FetchCheckpoint(Options(), dir_.Sub("copy"));
  ASSERT_TRUE(fetched.ok()) << fetched.status().ToString();
  const std::string base = "/ha/v1/checkpoint/file?id=" + fetched->id;
  const auto& [name, size] = fetched->files.front();
  EXPECT_EQ(Get(base + "&name=" + name + "&offset=0").status, 200);
  EXPECT_EQ(Get(base + "&name=" + name + "&offset=" + std::to_string(size + 1)).status, 416);
  EXPECT_EQ(Get(base + "&name=" + name + "&offset=-1").status, 400);
  EXPECT_EQ(Get(base + "&name=" + name).status, 400);
  EXPECT_EQ(Get(base + "&name=../peer/CURRENT&offset=0").status, 404);
  EXPECT_EQ(Get(base + "&name=LOCK&offset=0").status, 404);
  EXPECT_EQ(Get("/ha/v1/checkpoint/file?id=999&name=" + name + "&offset=0").status, 404);
  // A chunk is at most chunk_bytes.
  EXPECT_LE(Get(base + "&name=" + fetched->files.back().first + "&offset=0").body.size(), 4096u);
}

TEST_F(CheckpointTest, WithoutAStoreTheServerSaysSo) {
  server_->SetSource(nullptr);
  HttpClientRequest req;
  req.method = "POST";
  req.host = "127.0.0.1";
  req.port = std::to_string(http_.port());
  req.target = "/ha/v1/checkpoint";
  req.headers = {{"Authorization", std::string("Bearer ") + kToken}};
  auto answer = HttpCall(req, std::chrono::steady_clock::now() + std::chrono::seconds(10), 1 << 20);
  EXPECT_EQ(answer.status, 503);
  EXPECT_EQ(Get("/ha/v1/checkpoint").status, 404);
}

// Over TLS with client certificates (as a replica's HTTP port serves it):
// only a peer replica (a certificate with a CN of ha_peer_names, here the
// replicas' shared "clusterd") fetches a checkpoint; a client with the token
// but another certificate, or none, is refused 403, counted and audited.
TEST(CheckpointTlsTest, OnlyAPeerReplicasCertificateFetches) {
  const auto& certs = testing::TestCerts::Get();
  ASSERT_TRUE(certs.ok());
  testing::TempDir dir;
  auto opened = storage::RocksDbStore::Open(dir.Sub("peer"), storage::StoreOptions{.sync = false});
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  std::unique_ptr<storage::RocksDbStore> peer = std::move(*opened);
  Fill(peer.get(), 1, 20);
  MetricsRegistry metrics;
  CheckpointServer server({dir.Sub("peer.checkpoint"), kToken, PeerCertificateCheck({"clusterd"})});
  server.RegisterMetrics(&metrics);
  storage::RocksDbStore* raw = peer.get();
  server.SetSource([raw](const std::string& d) { return raw->CreateCheckpoint(d); });
  // Client certificates verified when sent ("request"), so that the refusal
  // of a client without one is the checkpoint server's, not the handshake's.
  auto tls = ReloadingTlsContext::Create(
      {certs.Path("server.crt"), certs.Path("server.key"), certs.Path("ca.crt"), "request", std::chrono::seconds(10)});
  ASSERT_TRUE(tls.ok()) << tls.status().ToString();
  HttpServer::Options ho;
  ho.tls = [src = *tls] { return src->Current(); };
  HttpServer http(ho);
  server.Install([&http](std::string method, std::string path, HttpServer::Handler handler) {
    http.Handle(std::move(method), std::move(path), std::move(handler));
  });
  ASSERT_TRUE(http.Start("127.0.0.1:0").ok());
  std::ostringstream audit;
  auto audit_log = GetLogger("audit");
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(audit);
  audit_log->sinks().push_back(sink);

  const auto fetch = [&](const std::string& cert, const std::string& to) {
    FetchOptions o;
    o.address = "127.0.0.1:" + std::to_string(http.port());
    o.token = kToken;
    auto ctx = MakeTlsClientContext(certs.Path("ca.crt"), cert.empty() ? "" : certs.Path(cert + ".crt"),
                                    cert.empty() ? "" : certs.Path(cert + ".key"));
    EXPECT_TRUE(ctx.ok()) << ctx.status().ToString();
    o.tls = *ctx;
    return FetchCheckpoint(o, dir.Sub(to));
  };
  auto viewer = fetch("viewer", "by-viewer");
  ASSERT_FALSE(viewer.ok());
  EXPECT_NE(viewer.status().message().find("403"), std::string::npos) << viewer.status().message();
  auto anonymous = fetch("", "by-anonymous");
  ASSERT_FALSE(anonymous.ok());
  EXPECT_NE(anonymous.status().message().find("403"), std::string::npos) << anonymous.status().message();
  EXPECT_EQ(metrics.Render().find("clusterd_ha_checkpoints_created_total 1"), std::string::npos)
      << "nothing was made for them";
  EXPECT_NE(metrics.Render().find("clusterd_ha_checkpoint_requests_refused_total 2"), std::string::npos)
      << metrics.Render();
  audit_log->flush();
  EXPECT_NE(audit.str().find("deny principal=alice method=\"POST /ha/v1/checkpoint\""), std::string::npos)
      << audit.str();
  EXPECT_NE(audit.str().find("no client certificate"), std::string::npos) << audit.str();

  // A replica presents its own certificate (MakeHttpPeerTls).
  auto replica = fetch("server", "by-replica");
  ASSERT_TRUE(replica.ok()) << replica.status().ToString();
  EXPECT_EQ(replica->log_index, 20u);
  auto& sinks = audit_log->sinks();
  sinks.erase(std::remove(sinks.begin(), sinks.end(), sink), sinks.end());
  http.Stop();
  server.SetSource(nullptr);
}

TEST(CheckpointInstallTest, AnInterruptedInstallIsFinishedAndAnIncompleteFetchDropped) {
  testing::TempDir dir;
  const std::string data = dir.Sub("data");
  fs::create_directories(data);
  std::ofstream(data + "/OLD") << "old";
  // A fetch that stopped halfway: dropped, the data dir untouched.
  fs::create_directories(BootstrapDir(data));
  std::ofstream(BootstrapDir(data) + "/000001.sst") << "partial";
  ASSERT_TRUE(FinishInterruptedInstall(data).ok());
  EXPECT_FALSE(fs::exists(BootstrapDir(data)));
  EXPECT_TRUE(fs::exists(data + "/OLD"));
  // A complete one whose swap a crash interrupted: finished.
  fs::create_directories(BootstrapDir(data));
  std::ofstream(BootstrapDir(data) + "/NEW") << "new";
  std::ofstream(BootstrapDir(data) + "/CLUSTERD_CHECKPOINT_COMPLETE");
  ASSERT_TRUE(FinishInterruptedInstall(data).ok());
  EXPECT_FALSE(fs::exists(BootstrapDir(data)));
  EXPECT_FALSE(fs::exists(data + "/OLD"));
  EXPECT_TRUE(fs::exists(data + "/NEW"));
  EXPECT_FALSE(fs::exists(data + "/CLUSTERD_CHECKPOINT_COMPLETE"));
}

}  // namespace
}  // namespace clusterd::replication
