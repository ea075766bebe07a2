// A standby's read-only gRPC server (clusterd/ha/standby_server.h) over
// real gRPC on loopback. A leader ClusterdServer runs in-process with its
// store wrapped in the replicated store over a log in memory (fake_log.h);
// the test plays the follower: it applies those entries to the standby's own
// store, then tells the standby (Applied, Refresh).
#include "clusterd/ha/standby_server.h"

#include <future>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <boost/asio/ip/tcp.hpp>
#include <google/protobuf/util/message_differencer.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "clusterd/ha/replication/log_entry.h"
#include "clusterd/ha/replication/replicated_store.h"
#include "clusterd/server/server.h"
#include "clusterd/storage/memory_store.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "mindcluster/profiling.pb.h"
#include "mindcluster/recover.pb.h"
#include "test/support/fakes/fake_log.h"
#include "test/support/grpc/agent_client.h"
#include "test/support/http_get.h"
#include "test/support/server/server_fixture.h"
#include "test/support/temp_dir.h"
#include "test/support/wait.h"

namespace clusterd {
namespace {

using google::protobuf::util::MessageDifferencer;
using testing::ReadEvents;
using testing::WaitFor;

constexpr char kLeader[] = "replica-a";
constexpr char kStandby[] = "replica-b";

// A deadline for every call, so that a call the server never answers fails
// the test instead of hanging it.
void SetDeadline(grpc::ClientContext* ctx) {
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
}

grpc::Status Report(const std::shared_ptr<grpc::Channel>& channel, const std::string& id) {
  v1::ReportRequest req;
  req.set_reporter("netprobe");
  req.set_id(id);
  req.set_node("worker01");
  req.set_code("ROCE_LINK_DOWN");
  req.set_level(v1::FAULT_LEVEL_RESTART_REQUEST);
  req.set_action(v1::TRANSITION_ACTION_RAISE);
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  v1::ReportResponse resp;
  return v1::FaultService::NewStub(channel)->Report(&ctx, req, &resp);
}

v1::GetSummaryResponse Summary(const std::shared_ptr<grpc::Channel>& channel) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  v1::GetSummaryResponse resp;
  grpc::Status st = v1::ClusterService::NewStub(channel)->GetSummary(&ctx, v1::GetSummaryRequest(), &resp);
  EXPECT_TRUE(st.ok()) << st.error_message();
  return resp;
}

v1::ListFaultsResponse ListFaults(const std::shared_ptr<grpc::Channel>& channel) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  v1::ListFaultsResponse resp;
  grpc::Status st = v1::ClusterService::NewStub(channel)->ListFaults(&ctx, v1::ListFaultsRequest(), &resp);
  EXPECT_TRUE(st.ok()) << st.error_message();
  return resp;
}

// A Watch of every event from the beginning of history.
struct WatchStream {
  explicit WatchStream(const std::shared_ptr<grpc::Channel>& channel) : stub(v1::ClusterService::NewStub(channel)) {
    SetDeadline(&ctx);
    reader = stub->Watch(&ctx, v1::WatchRequest());
  }
  std::unique_ptr<v1::ClusterService::Stub> stub;
  grpc::ClientContext ctx;
  std::unique_ptr<grpc::ClientReader<v1::WatchResponse>> reader;
};

bool StartsWith(const std::string& text, const std::string& prefix) { return text.rfind(prefix, 0) == 0; }
bool Contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Whether anything accepts a TCP connection on the loopback port.
bool Accepts(int port) {
  boost::asio::io_context ioc;
  boost::asio::ip::tcp::socket socket(ioc);
  boost::system::error_code ec;
  socket.connect({boost::asio::ip::address_v4::loopback(), static_cast<unsigned short>(port)}, ec);
  return !ec;
}

class StandbyServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ClusterdConfig cfg = testing::LoopbackConfig(dir_.Sub("leader"));
    // No node is declared lost while a test runs: the leader writes only
    // what the test asks it to.
    cfg.node_grace = std::chrono::hours(1);
    Tune(&cfg);
    leader_ = std::make_unique<ClusterdServer>(cfg);
    leader_->WrapStore([this](std::unique_ptr<storage::Store> local,
                              MetricsRegistry* metrics) -> StatusOr<std::unique_ptr<storage::Store>> {
      return std::unique_ptr<storage::Store>(
          std::make_unique<replication::ReplicatedStore>(std::move(local), &log_, 0, kLeader, metrics, nullptr));
    });
    Status st = leader_->Start();
    ASSERT_TRUE(st.ok()) << st.ToString();
    leader_channel_ = testing::Dial(leader_->grpc_port());

    auto store = storage::MemoryStore::Open();
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(*store);
    standby_ = StartStandby(store_.get(), kLeader);
    ASSERT_TRUE(standby_);
    standby_channel_ = testing::Dial(standby_->grpc_port());

    // The node the faults are reported on.
    agent_ = std::make_unique<testing::TestAgent>(leader_channel_, "worker01", 1);
    ASSERT_TRUE(agent_->Connect());
  }

  // The leader's config and the standby's options, for a fixture that
  // needs more of them.
  virtual void Tune(ClusterdConfig*) {}
  virtual void TuneStandby(StandbyServer::Options*) {}

  std::unique_ptr<StandbyServer> StartStandby(storage::Store* store, std::string leader) {
    StandbyServer::Options options;
    options.replica_id = kStandby;
    options.leader = [leader = std::move(leader)] { return leader; };
    options.min_refresh_interval = std::chrono::nanoseconds(0);
    options.idle_refresh_interval = std::chrono::nanoseconds(0);
    TuneStandby(&options);
    auto standby =
        std::make_unique<StandbyServer>(testing::LoopbackConfig(dir_.Sub("standby")), store, std::move(options));
    Status st = standby->Start();
    EXPECT_TRUE(st.ok()) << st.ToString();
    return st.ok() ? std::move(standby) : nullptr;
  }

  // The follower's step: applies every entry appended since the last call
  // to the standby's store and passes on what each wrote.
  // With `through`, stops after that entry.
  ::testing::AssertionResult Follow(uint64_t through = std::numeric_limits<uint64_t>::max()) {
    for (const std::string& entry : log_.EntriesAfter(applied_)) {
      if (applied_ >= through) break;
      storage::ChangeSet written;
      Status st = replication::ApplyLogEntry(store_.get(), entry, &applied_, &revision_, &written);
      if (!st.ok()) return ::testing::AssertionFailure() << "entry " << applied_ + 1 << ": " << st.ToString();
      standby_->Applied(written);
    }
    return ::testing::AssertionSuccess();
  }

  // The last entry in the log that sets a revision: what follows it changes
  // the store without a new one (compaction).
  uint64_t LastRevisionEntry() const {
    uint64_t last = 0;
    for (const std::string& bytes : log_.EntriesAfter(0)) {
      auto entry = replication::DecodeEntry(bytes);
      EXPECT_TRUE(entry.ok()) << entry.status().ToString();
      if (entry.ok() && replication::RevisionPut(entry->changes)) last = entry->index;
    }
    return last;
  }

  // Refreshes until queries are answered at `revision`: even with no
  // minimum interval, loads are spaced by nine times the last one's length,
  // so a single Refresh may not load.
  bool RefreshTo(uint64_t revision) {
    return WaitFor([&] {
      standby_->Refresh();
      return standby_->state_revision() == revision;
    });
  }

  void ExpectSameAnswers() {
    v1::GetSummaryResponse leader = Summary(leader_channel_);
    v1::GetSummaryResponse standby = Summary(standby_channel_);
    // An agent's connection lives in the leader's memory, not in the log.
    EXPECT_EQ(leader.connected_agents(), 1u);
    EXPECT_EQ(standby.connected_agents(), 0u);
    leader.clear_connected_agents();
    EXPECT_TRUE(MessageDifferencer::Equals(standby, leader))
        << "standby: " << standby.DebugString() << "leader: " << leader.DebugString();
    const v1::ListFaultsResponse leader_faults = ListFaults(leader_channel_);
    const v1::ListFaultsResponse standby_faults = ListFaults(standby_channel_);
    EXPECT_TRUE(MessageDifferencer::Equals(standby_faults, leader_faults))
        << "standby: " << standby_faults.DebugString() << "leader: " << leader_faults.DebugString();
  }

  // Declared in the order they must outlive each other: the leader's store
  // appends to log_, the standby reads store_.
  testing::TempDir dir_;
  testing::FakeLog log_;
  std::unique_ptr<ClusterdServer> leader_;
  std::shared_ptr<grpc::Channel> leader_channel_;
  std::unique_ptr<testing::TestAgent> agent_;
  // The standby's store and where the follower stands in the log.
  std::unique_ptr<storage::MemoryStore> store_;
  uint64_t applied_ = 0;
  uint64_t revision_ = 0;
  std::unique_ptr<StandbyServer> standby_;
  std::shared_ptr<grpc::Channel> standby_channel_;
};

TEST_F(StandbyServerTest, QueriesAnswerAsTheLeaderOnceRefreshed) {
  ASSERT_TRUE(Report(leader_channel_, "roce-1").ok());
  ASSERT_TRUE(Follow());
  const uint64_t first = Summary(leader_channel_).revision();
  ASSERT_GT(first, 0u);
  ASSERT_TRUE(RefreshTo(first));
  ExpectSameAnswers();
  EXPECT_EQ(ListFaults(standby_channel_).faults_size(), 1);

  // Applied alone moves the watchers on, not the queries: they stay at the
  // state last loaded until a Refresh.
  ASSERT_TRUE(Report(leader_channel_, "roce-2").ok());
  ASSERT_TRUE(Follow());
  const uint64_t second = Summary(leader_channel_).revision();
  ASSERT_GT(second, first);
  EXPECT_EQ(standby_->state_revision(), first);
  EXPECT_EQ(Summary(standby_channel_).revision(), first);
  EXPECT_EQ(ListFaults(standby_channel_).faults_size(), 1);

  ASSERT_TRUE(RefreshTo(second));
  ExpectSameAnswers();
  EXPECT_EQ(ListFaults(standby_channel_).faults_size(), 2);
  EXPECT_EQ(testing::MetricValue(standby_->RenderMetrics(), "clusterd_standby_state_revision"),
            static_cast<double>(second));
}

TEST_F(StandbyServerTest, WatchFollowsTheLogLiveWithTheLeadersRevisions) {
  ASSERT_TRUE(Report(leader_channel_, "roce-1").ok());
  ASSERT_TRUE(Follow());
  const uint64_t replayed = Summary(leader_channel_).revision();
  WatchStream standby(standby_channel_);
  std::vector<v1::Event> events = ReadEvents(standby.reader.get(), replayed);
  ASSERT_EQ(events.size(), replayed);

  // Entries applied while the stream is open reach it as they are applied.
  ASSERT_TRUE(Report(leader_channel_, "roce-2").ok());
  ASSERT_TRUE(Report(leader_channel_, "roce-3").ok());
  ASSERT_TRUE(Follow());
  const uint64_t head = Summary(leader_channel_).revision();
  ASSERT_GT(head, replayed);
  for (const v1::Event& e : ReadEvents(standby.reader.get(), head - replayed)) events.push_back(e);
  ASSERT_EQ(events.size(), head);
  // Without a single Refresh: Watch does not read the query state.
  EXPECT_EQ(standby_->state_revision(), 0u);

  WatchStream leader(leader_channel_);
  const std::vector<v1::Event> leader_events = ReadEvents(leader.reader.get(), head);
  ASSERT_EQ(leader_events.size(), head);
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i].revision(), i + 1);
    EXPECT_TRUE(MessageDifferencer::Equals(events[i], leader_events[i]))
        << "standby: " << events[i].DebugString() << "leader: " << leader_events[i].DebugString();
  }
  for (WatchStream* watch : {&standby, &leader}) {
    watch->ctx.TryCancel();
    watch->reader->Finish();
  }
}

TEST_F(StandbyServerTest, WritesAreRefusedNamingTheLeader) {
  grpc::Status report = Report(standby_channel_, "roce-1");
  EXPECT_EQ(report.error_code(), grpc::StatusCode::UNAVAILABLE) << report.error_message();
  EXPECT_TRUE(StartsWith(report.error_message(), "standby replica-b")) << report.error_message();
  EXPECT_TRUE(Contains(report.error_message(), "leader (replica-a)")) << report.error_message();

  testing::TestAgent agent(standby_channel_, "worker02", 1);
  EXPECT_FALSE(agent.Connect());
  EXPECT_EQ(agent.status().error_code(), grpc::StatusCode::UNAVAILABLE) << agent.status().error_message();
  EXPECT_TRUE(StartsWith(agent.status().error_message(), "standby replica-b")) << agent.status().error_message();
  EXPECT_TRUE(Contains(agent.status().error_message(), "leader (replica-a)")) << agent.status().error_message();

  EXPECT_EQ(testing::MetricValue(standby_->RenderMetrics(), "clusterd_standby_refused_total"), 2);
}

// TaskD's Recover service (no package) is the leader's too: TaskD is told
// where the leader is, as every other client, instead of UNIMPLEMENTED.
TEST_F(StandbyServerTest, TaskdsRecoverCallsAreRefusedNamingTheLeader) {
  grpc::GenericStub stub(standby_channel_);
  ::ClientInfo info;
  info.set_jobid("5d2c9a10-ascendjob-uid");
  info.set_role("taskd");
  grpc::Slice slice{info.SerializeAsString()};
  grpc::ByteBuffer request(&slice, 1), response;
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  std::promise<grpc::Status> done;
  stub.UnaryCall(&ctx, "/Recover/Init", grpc::StubOptions(), &request, &response,
                 [&done](grpc::Status st) { done.set_value(std::move(st)); });
  grpc::Status st = done.get_future().get();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE) << st.error_message();
  EXPECT_TRUE(Contains(st.error_message(), "leader (replica-a)")) << st.error_message();
}

// So is MindCluster's TrainingDataTrace (faultdiag-online, TaskD's manager).
TEST_F(StandbyServerTest, TrainingDataTraceCallsAreRefusedNamingTheLeader) {
  grpc::GenericStub stub(standby_channel_);
  ::DataStatusReq req;
  req.set_jobnsname("default/test-pytorch");
  grpc::Slice slice{req.SerializeAsString()};
  grpc::ByteBuffer request(&slice, 1), response;
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  std::promise<grpc::Status> done;
  stub.UnaryCall(&ctx, "/TrainingDataTrace/GetTrainingDataTraceSwitch", grpc::StubOptions(), &request, &response,
                 [&done](grpc::Status st) { done.set_value(std::move(st)); });
  grpc::Status st = done.get_future().get();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE) << st.error_message();
  EXPECT_TRUE(Contains(st.error_message(), "leader (replica-a)")) << st.error_message();
}

// So are MindCluster's job.Job (faultdiag-online) and config.Config (MindIE).
TEST_F(StandbyServerTest, JobSummaryAndRankTableCallsAreRefusedNamingTheLeader) {
  grpc::GenericStub stub(standby_channel_);
  for (const char* method : {"/job.Job/Register", "/config.Config/Register"}) {
    grpc::ByteBuffer request, response;
    grpc::Slice slice{std::string()};
    request = grpc::ByteBuffer(&slice, 1);
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    std::promise<grpc::Status> done;
    stub.UnaryCall(&ctx, method, grpc::StubOptions(), &request, &response,
                   [&done](grpc::Status st) { done.set_value(std::move(st)); });
    grpc::Status st = done.get_future().get();
    EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE) << method << ": " << st.error_message();
    EXPECT_TRUE(Contains(st.error_message(), "leader (replica-a)")) << st.error_message();
  }
}

TEST_F(StandbyServerTest, RefusalsSayWhenNoLeaderIsKnown) {
  auto store = storage::MemoryStore::Open();
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto leaderless = StartStandby(store->get(), "");
  ASSERT_TRUE(leaderless);
  grpc::Status report = Report(testing::Dial(leaderless->grpc_port()), "roce-1");
  EXPECT_EQ(report.error_code(), grpc::StatusCode::UNAVAILABLE) << report.error_message();
  EXPECT_TRUE(StartsWith(report.error_message(), "standby replica-b")) << report.error_message();
  EXPECT_TRUE(Contains(report.error_message(), "none elected yet")) << report.error_message();
}

TEST_F(StandbyServerTest, UnknownMethodIsUnimplemented) {
  grpc::GenericStub stub(standby_channel_);
  // Unknown services, and unknown methods of the leader's own services.
  for (const char* method : {"/no.such.Service/Method", "/clusterd.v1.FaultService/NoSuchMethod"}) {
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    // An empty message: a ByteBuffer with no slice is no message at all.
    grpc::Slice empty{std::string()};
    grpc::ByteBuffer request(&empty, 1), response;
    std::promise<grpc::Status> done;
    stub.UnaryCall(&ctx, method, grpc::StubOptions(), &request, &response,
                   [&done](grpc::Status st) { done.set_value(std::move(st)); });
    grpc::Status st = done.get_future().get();
    EXPECT_EQ(st.error_code(), grpc::StatusCode::UNIMPLEMENTED) << method << ": " << st.error_message();
  }
  // Not a refusal: no other replica serves them either.
  EXPECT_EQ(testing::MetricValue(standby_->RenderMetrics(), "clusterd_standby_refused_total"), 0);
}

TEST_F(StandbyServerTest, HealthServesOnlyClusterService) {
  auto health = grpc::health::v1::Health::NewStub(standby_channel_);
  using Serving = grpc::health::v1::HealthCheckResponse;
  const std::vector<std::pair<std::string, Serving::ServingStatus>> want = {
      {"", Serving::NOT_SERVING},
      {"clusterd.v1.ClusterService", Serving::SERVING},
      {"clusterd.v1.FaultService", Serving::NOT_SERVING},
      {"clusterd.v1.NodeAgentService", Serving::NOT_SERVING},
  };
  for (const auto& [service, status] : want) {
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    grpc::health::v1::HealthCheckRequest req;
    req.set_service(service);
    grpc::health::v1::HealthCheckResponse resp;
    grpc::Status st = health->Check(&ctx, req, &resp);
    ASSERT_TRUE(st.ok()) << service << ": " << st.error_message();
    EXPECT_EQ(resp.status(), status) << "service \"" << service << "\"";
  }
}

TEST_F(StandbyServerTest, ShutdownEndsWatchStreamsAndClosesThePort) {
  ASSERT_TRUE(Report(leader_channel_, "roce-1").ok());
  ASSERT_TRUE(Follow());
  const uint64_t head = Summary(leader_channel_).revision();
  WatchStream watch(standby_channel_);
  ASSERT_EQ(ReadEvents(watch.reader.get(), head).size(), head);  // open and caught up
  const int port = standby_->grpc_port();
  ASSERT_TRUE(Accepts(port));

  standby_->Shutdown();
  v1::WatchResponse resp;
  EXPECT_FALSE(watch.reader->Read(&resp));
  // Ended by the server, not by the client's deadline.
  grpc::Status st = watch.reader->Finish();
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << st.error_message();
  EXPECT_FALSE(Accepts(port));

  standby_->Shutdown();
  EXPECT_FALSE(Accepts(port));
}

// A leader that keeps only the last two events of its history.
class StandbyServerCompactionTest : public StandbyServerTest {
 protected:
  void Tune(ClusterdConfig* cfg) override {
    cfg->retention_events = 2;
    cfg->retention_interval = std::chrono::milliseconds(100);
  }
};

// Compaction changes the store without a new revision: the standby's queries
// and Watch must learn of it all the same, as on the leader.
TEST_F(StandbyServerCompactionTest, CompactionReachesQueriesAndWatch) {
  for (int i = 1; i <= 5; ++i) ASSERT_TRUE(Report(leader_channel_, "roce-" + std::to_string(i)).ok());
  const uint64_t head = Summary(leader_channel_).revision();
  // Compaction to head - 2 needs the last report durable, so it comes in an
  // entry of its own after every entry that sets a revision (earlier ones
  // may ride with a report: the leader compacts every 100 ms).
  const uint64_t compacted = head - 2;
  ASSERT_TRUE(WaitFor([&] { return Summary(leader_channel_).compacted_revision() == compacted; }));
  ASSERT_EQ(Summary(leader_channel_).revision(), head);

  // The standby loads the head before that entry reaches it ...
  ASSERT_TRUE(Follow(LastRevisionEntry()));
  ASSERT_TRUE(RefreshTo(head));
  ASSERT_LT(Summary(standby_channel_).compacted_revision(), compacted);
  // ... and learns of the compaction, which brings no new revision.
  ASSERT_TRUE(Follow());
  ASSERT_TRUE(WaitFor([&] {
    standby_->Refresh();
    return Summary(standby_channel_).compacted_revision() == compacted;
  }));
  EXPECT_EQ(standby_->state_revision(), head);

  // Watch from before the floor: refused on both, naming the oldest revision.
  for (const auto& channel : {leader_channel_, standby_channel_}) {
    WatchStream watch(channel);
    v1::WatchResponse resp;
    EXPECT_FALSE(watch.reader->Read(&resp));
    grpc::Status st = watch.reader->Finish();
    EXPECT_EQ(st.error_code(), grpc::StatusCode::OUT_OF_RANGE) << st.error_message();
    EXPECT_TRUE(Contains(st.error_message(), "oldest revision available is " + std::to_string(compacted + 1)))
        << st.error_message();
  }
}

// A standby nobody queries loads its state only every idle interval (here
// never): Watch streams, which read the log's events, do not count.
class StandbyServerIdleTest : public StandbyServerTest {
 protected:
  void TuneStandby(StandbyServer::Options* options) override { options->idle_refresh_interval = std::chrono::hours(1); }
};

TEST_F(StandbyServerIdleTest, OnlyQueriesMakeLoadsFrequent) {
  WatchStream watch(standby_channel_);
  ASSERT_TRUE(Report(leader_channel_, "roce-1").ok());
  ASSERT_TRUE(Follow());
  const uint64_t head = Summary(leader_channel_).revision();
  ASSERT_EQ(ReadEvents(watch.reader.get(), head).size(), head);
  standby_->Refresh();
  EXPECT_EQ(standby_->state_revision(), 0u);

  // A query: the state is loaded at the next refresh (the query itself was
  // answered at the revision loaded before).
  EXPECT_EQ(Summary(standby_channel_).revision(), 0u);
  ASSERT_TRUE(RefreshTo(head));
  EXPECT_EQ(Summary(standby_channel_).revision(), head);
  watch.ctx.TryCancel();
  watch.reader->Finish();
}

}  // namespace
}  // namespace clusterd
