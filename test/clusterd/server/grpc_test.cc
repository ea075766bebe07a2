// In-process ClusterD on port 0 driven through real gRPC stubs.
#include <thread>

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "clusterd/server/server.h"
#include "clusterd/v1/job.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "mindcluster/pubfault.grpc.pb.h"
#include "test/support/grpc/agent_client.h"
#include "test/support/http_get.h"
#include "test/support/server/server_fixture.h"
#include "test/support/wait.h"

namespace clusterd {
namespace {

using testing::HttpGet;
using testing::ReadEvents;
using testing::TestAgent;
using testing::WaitFor;

class GrpcTest : public testing::ClusterdServerTest {
 protected:
  void SetUp() override { StartServer(); }
  void OnServerStarted() override { cluster_ = v1::ClusterService::NewStub(channel_); }

  v1::GetNodeResponse GetNode(const std::string& name, grpc::Status* status = nullptr) {
    grpc::ClientContext ctx;
    v1::GetNodeRequest req;
    req.set_name(name);
    v1::GetNodeResponse resp;
    grpc::Status st = cluster_->GetNode(&ctx, req, &resp);
    if (status) *status = st;
    return resp;
  }

  v1::GetSummaryResponse Summary() {
    grpc::ClientContext ctx;
    v1::GetSummaryResponse resp;
    EXPECT_TRUE(cluster_->GetSummary(&ctx, v1::GetSummaryRequest(), &resp).ok());
    return resp;
  }

  std::unique_ptr<v1::ClusterService::Stub> cluster_;
};

TEST_F(GrpcTest, AgentStreamAcknowledgesDurableTransitionsOnce) {
  TestAgent agent(channel_, "worker01", 1);
  ASSERT_TRUE(agent.Connect());
  EXPECT_EQ(agent.welcome().applied_seq(), 0u);
  EXPECT_EQ(agent.welcome().node_grace().seconds(), 10);
  v1::Ack ack;
  ASSERT_TRUE(agent.Transition(1, true, 3, "80E01801", &ack));
  EXPECT_EQ(ack.id().seq(), 1u);
  const uint64_t rev = ack.revision();
  ASSERT_TRUE(agent.Transition(1, true, 3, "80E01801", &ack));  // resend: acknowledged again
  EXPECT_EQ(ack.revision(), rev);
  auto node = GetNode("worker01");
  EXPECT_EQ(node.node().health(), v1::HEALTH_UNHEALTHY);
  ASSERT_EQ(node.active_faults_size(), 1);
  EXPECT_EQ(node.active_faults(0).count(), 1u);
  EXPECT_EQ(node.active_faults(0).level(), v1::FAULT_LEVEL_RESTART_BUSINESS);
  EXPECT_TRUE(node.node().connected());
  agent.Close();
  EXPECT_TRUE(agent.status().ok()) << agent.status().error_message();
  EXPECT_TRUE(WaitFor([&] { return !GetNode("worker01").node().connected(); }));
}

TEST_F(GrpcTest, StreamMustStartWithAValidHello) {
  {
    auto stub = v1::NodeAgentService::NewStub(channel_);
    grpc::ClientContext ctx;
    auto stream = stub->Connect(&ctx);
    v1::ConnectRequest req;
    req.mutable_heartbeat();
    stream->Write(req);
    v1::ConnectResponse resp;
    EXPECT_FALSE(stream->Read(&resp));
    grpc::Status st = stream->Finish();
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(st.error_message().find("hello"), std::string::npos);
  }
  TestAgent bad(channel_, "bad/name", 1);
  EXPECT_FALSE(bad.Connect());
  EXPECT_EQ(bad.status().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Summary().nodes().total(), 0u);
  EXPECT_EQ(Summary().revision(), 0u);
}

TEST_F(GrpcTest, OversizedMessageIsRefused) {
  StartServer([](ClusterdConfig& c) { c.max_message_bytes = 4096; });
  TestAgent agent(channel_, "worker01", 1);
  v1::Hello h = agent.MakeHello();
  h.mutable_inventory()->set_cpu_model(std::string(10000, 'x'));
  EXPECT_FALSE(agent.Connect(&h));
  EXPECT_EQ(agent.status().error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(Summary().nodes().total(), 0u);
}

// PodDevicesUpdate over a real stream, as a hostile agent sends it: a good
// one is stored; an empty one clears; unsorted, repeated, out-of-range or
// oversized ones end the stream with INVALID_ARGUMENT naming the field and
// change nothing; one sent before the hello is refused; the server stays up.
TEST_F(GrpcTest, PodDevicesUpdatesAreValidatedAndAHostileOneChangesNothing) {
  // Each update applied at once (InventoryUpdatesFasterThanTheInterval...
  // covers the interval), not a real second after the one before.
  StartServer([](ClusterdConfig& c) { c.inventory_update_interval = std::chrono::nanoseconds(0); });
  auto update = [](std::vector<std::pair<std::string, std::vector<uint32_t>>> pods) {
    v1::ConnectRequest req;
    req.mutable_pod_devices();  // set even with no pods
    for (auto& [name, ids] : pods) {
      auto* p = req.mutable_pod_devices()->add_pods();
      p->set_namespace_("train");
      p->set_name(name);
      for (uint32_t id : ids) p->add_device_ids(id);
    }
    return req;
  };
  auto stored = [&] {
    std::string out;
    const v1::GetNodeResponse node = GetNode("worker01");
    for (const auto& p : node.node().inventory().pod_devices()) out += p.name() + " ";
    return out;
  };
  TestAgent agent(channel_, "worker01", 1);
  ASSERT_TRUE(agent.Connect());
  ASSERT_TRUE(agent.Send(update({{"a", {0, 1}}, {"b", {4}}})));
  EXPECT_TRUE(testing::WaitFor([&] { return stored() == "a b "; }));
  ASSERT_TRUE(agent.Send(update({})));  // every pod gone
  EXPECT_TRUE(testing::WaitFor([&] { return stored().empty(); }));
  ASSERT_TRUE(agent.Send(update({{"a", {0}}})));
  EXPECT_TRUE(testing::WaitFor([&] { return stored() == "a "; }));

  std::vector<v1::ConnectRequest> hostile = {
      update({{"b", {0}}, {"a", {1}}}),        // out of order
      update({{"a", {0}}, {"a", {1}}}),        // the same pod twice
      update({{"a", {3, 3}}}),                 // a device twice
      update({{"a", {70000}}}),                // no such device id
      update({{"bad name", {0}}}),             // not a Kubernetes name
      update({{std::string(300, 'p'), {0}}}),  // too long
  };
  v1::ConnectRequest many;
  for (int i = 0; i < 600; ++i)
    *many.mutable_pod_devices()->add_pods() = update({{"p" + std::to_string(1000 + i), {}}}).pod_devices().pods(0);
  hostile.push_back(many);
  int epoch = 2;
  for (const auto& req : hostile) {
    TestAgent bad(channel_, "worker01", epoch++);
    v1::Hello hello = bad.MakeHello();  // the hello carries the pods too: "a"
    *hello.mutable_inventory()->mutable_pod_devices() = update({{"a", {0}}}).pod_devices().pods();
    ASSERT_TRUE(bad.Connect(&hello));
    ASSERT_TRUE(bad.Send(req));
    bad.Close();
    EXPECT_EQ(bad.status().error_code(), grpc::StatusCode::INVALID_ARGUMENT) << req.ShortDebugString().substr(0, 200);
    EXPECT_NE(bad.status().error_message().find("pod_devices.pods"), std::string::npos) << bad.status().error_message();
    EXPECT_EQ(stored(), "a ") << "a refused update changed nothing";
  }
  // Before the hello: refused, nothing stored.
  {
    auto stub = v1::NodeAgentService::NewStub(channel_);
    grpc::ClientContext ctx;
    auto stream = stub->Connect(&ctx);
    ASSERT_TRUE(stream->Write(update({{"z", {0}}})));
    stream->WritesDone();
    v1::ConnectResponse resp;
    EXPECT_FALSE(stream->Read(&resp));
    EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  EXPECT_EQ(stored(), "a ");
  EXPECT_EQ(Summary().nodes().total(), 1u);
}

// Item 2 of the reliability probe: an agent alternating inventory updates as
// fast as its stream takes them. At most one is applied per
// inventory_update_interval (an hour here); the ones that come sooner wait,
// each replaced by the next (counted: clusterd_agent_inventory_updates_
// coalesced_total), and the latest is applied when the agent is done (or the
// interval passes): the node's record and the event log get two updates, not
// one per message.
TEST_F(GrpcTest, InventoryUpdatesFasterThanTheIntervalAreCoalescedToTheLatest) {
  StartServer([](ClusterdConfig& c) { c.inventory_update_interval = std::chrono::hours(1); });
  auto update = [](const std::string& name) {
    v1::ConnectRequest req;
    auto* p = req.mutable_pod_devices()->add_pods();
    p->set_namespace_("train");
    p->set_name(name);
    p->add_device_ids(0);
    return req;
  };
  auto stored = [&] {
    std::string out;
    const v1::GetNodeResponse node = GetNode("worker01");
    for (const auto& p : node.node().inventory().pod_devices()) out += p.name() + " ";
    return out;
  };
  TestAgent agent(channel_, "worker01", 1);
  ASSERT_TRUE(agent.Connect());
  ASSERT_TRUE(agent.Send(update("a")));
  EXPECT_TRUE(WaitFor([&] { return stored() == "a "; }));
  const uint64_t before = GetNode("worker01").node().revision();
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(agent.Send(update(i % 2 ? "b" : "c")));
  // Everything before the acknowledged transition was read: nothing of it applied yet.
  ASSERT_TRUE(agent.Transition(1, true, 3, "80E01801"));
  EXPECT_EQ(stored(), "a ");
  const std::string metrics = HttpGet(server_->http_port(), "/metrics").body;
  EXPECT_NE(metrics.find("clusterd_agent_inventory_updates_coalesced_total 99\n"), std::string::npos) << metrics;
  // The agent is done: the latest one is applied, once.
  agent.Close();
  EXPECT_TRUE(agent.status().ok()) << agent.status().error_message();
  EXPECT_TRUE(WaitFor([&] { return stored() == "b "; }));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  v1::WatchRequest req;
  req.set_from_revision(before);
  req.add_types(v1::EVENT_TYPE_NODE_UPDATED);
  req.add_nodes("worker01");
  auto watch = cluster_->Watch(&ctx, req);
  // Every NODE_UPDATED since "a" was stored, up to the one that stores "b".
  int updates = 0;
  bool latest = false;
  v1::WatchResponse resp;
  while (!latest && watch->Read(&resp)) {
    for (const auto& ev : resp.events()) {
      if (ev.revision() <= before) continue;
      ++updates;
      const auto& pods = ev.node_info().inventory().pod_devices();
      latest = latest || (pods.size() == 1 && pods[0].name() == "b");
    }
  }
  EXPECT_TRUE(latest);
  EXPECT_EQ(updates, 1) << "one update stored for the 100 sent";
  ctx.TryCancel();
}

TEST_F(GrpcTest, NewerStreamReplacesOlderOne) {
  TestAgent first(channel_, "worker01", 1);
  ASSERT_TRUE(first.Connect());
  TestAgent second(channel_, "worker01", 2);
  ASSERT_TRUE(second.Connect());
  EXPECT_FALSE(first.Transition(1, true, 0, "80E01801"));
  first.Close();
  EXPECT_EQ(first.status().error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_TRUE(second.Transition(1, true, 0, "80E01801"));
}

TEST_F(GrpcTest, QueriesAndErrors) {
  TestAgent agent(channel_, "worker01", 1);
  ASSERT_TRUE(agent.Connect());
  ASSERT_TRUE(agent.Transition(1, true, 3, "80E01801"));
  grpc::Status st;
  GetNode("nobody", &st);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND);
  GetNode("", &st);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  {
    grpc::ClientContext ctx;
    v1::ListFaultsRequest req;
    req.set_node("worker01");
    req.set_min_level(v1::FAULT_LEVEL_RESTART_REQUEST);
    v1::ListFaultsResponse resp;
    ASSERT_TRUE(cluster_->ListFaults(&ctx, req, &resp).ok());
    ASSERT_EQ(resp.faults_size(), 1);
    EXPECT_EQ(resp.faults(0).code(), "80E01801");
  }
  {
    grpc::ClientContext ctx;
    v1::ListNodesRequest req;
    req.set_page_size(-5);
    v1::ListNodesResponse resp;
    EXPECT_EQ(cluster_->ListNodes(&ctx, req, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  auto summary = Summary();
  EXPECT_EQ(summary.nodes().unhealthy(), 1u);
  EXPECT_EQ(summary.devices().total(), 8u);
  EXPECT_GT(summary.revision(), 0u);
}

TEST_F(GrpcTest, FaultServiceReportIsIdempotentAndValidated) {
  TestAgent agent(channel_, "worker01", 1);
  ASSERT_TRUE(agent.Connect());
  auto stub = v1::FaultService::NewStub(channel_);
  v1::ReportRequest req;
  req.set_reporter("netprobe");
  req.set_id("roce-1");
  req.set_node("worker01");
  req.set_code("ROCE_LINK_DOWN");
  req.set_level(v1::FAULT_LEVEL_RESTART_REQUEST);
  req.set_action(v1::TRANSITION_ACTION_RAISE);
  for (int i = 0; i < 2; ++i) {
    grpc::ClientContext ctx;
    v1::ReportResponse resp;
    ASSERT_TRUE(stub->Report(&ctx, req, &resp).ok());
    EXPECT_EQ(resp.unchanged(), i == 1);
    EXPECT_EQ(resp.fault().count(), 1u);
  }
  grpc::ClientContext ctx;
  v1::ReportRequest bad = req;
  bad.set_action(v1::TRANSITION_ACTION_UNSPECIFIED);
  v1::ReportResponse resp;
  EXPECT_EQ(stub->Report(&ctx, bad, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  grpc::ClientContext ctx2;
  bad = req;
  bad.set_node("ghost");
  EXPECT_EQ(stub->Report(&ctx2, bad, &resp).error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(GrpcTest, WatchReplaysHistoryThenFollowsLive) {
  TestAgent agent(channel_, "worker01", 1);
  ASSERT_TRUE(agent.Connect());
  ASSERT_TRUE(agent.Transition(1, true, 3, "80E01801"));
  const uint64_t head = Summary().revision();
  ASSERT_EQ(head, 4u);  // registered, raised, device health, node health

  grpc::ClientContext ctx;
  v1::WatchRequest req;
  req.set_from_revision(0);
  auto reader = cluster_->Watch(&ctx, req);
  auto replay = ReadEvents(reader.get(), head);
  ASSERT_EQ(replay.size(), head);
  for (size_t i = 0; i < replay.size(); ++i) EXPECT_EQ(replay[i].revision(), i + 1);
  EXPECT_EQ(replay[0].type(), v1::EVENT_TYPE_NODE_REGISTERED);
  EXPECT_EQ(replay[1].type(), v1::EVENT_TYPE_FAULT_RAISED);

  ASSERT_TRUE(agent.Transition(2, false, 3, "80E01801"));
  auto live = ReadEvents(reader.get(), 3);
  ASSERT_EQ(live.size(), 3u);
  EXPECT_EQ(live[0].revision(), head + 1);
  EXPECT_EQ(live[0].type(), v1::EVENT_TYPE_FAULT_CLEARED);
  ctx.TryCancel();
  reader->Finish();
}

TEST_F(GrpcTest, WatchFiltersAndResumesWithoutGapOrDuplicate) {
  TestAgent a(channel_, "worker01", 1), b(channel_, "worker02", 1);
  ASSERT_TRUE(a.Connect());
  ASSERT_TRUE(b.Connect());
  ASSERT_TRUE(a.Transition(1, true, 1, "80E01801"));
  ASSERT_TRUE(b.Transition(1, true, 2, "80E01801"));
  grpc::ClientContext ctx;
  v1::WatchRequest req;
  req.add_nodes("worker02");
  req.add_types(v1::EVENT_TYPE_FAULT_RAISED);
  auto reader = cluster_->Watch(&ctx, req);
  auto events = ReadEvents(reader.get(), 1);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].node(), "worker02");
  EXPECT_EQ(events[0].fault().device_id(), 2u);
  ctx.TryCancel();
  reader->Finish();

  // Resume from a middle revision: exactly the later events.
  grpc::ClientContext ctx2;
  v1::WatchRequest resume;
  resume.set_from_revision(3);
  auto r2 = cluster_->Watch(&ctx2, resume);
  const uint64_t head = Summary().revision();
  auto rest = ReadEvents(r2.get(), head - 3);
  ASSERT_EQ(rest.size(), head - 3);
  EXPECT_EQ(rest.front().revision(), 4u);
  EXPECT_EQ(rest.back().revision(), head);
  ctx2.TryCancel();
  r2->Finish();
}

// Watch is a raw method (server/wire_events.h): it parses the request itself,
// so bytes that are not a WatchRequest must get a clear INVALID_ARGUMENT and
// leave the server serving.
TEST_F(GrpcTest, WatchRefusesBytesThatAreNotAWatchRequest) {
  StartServer();
  grpc::GenericStub generic(channel_);
  // Not a WatchRequest: a varint tag that never ends, and a field 1 of
  // length 5 holding 2 bytes.
  const std::string truncated_field = std::string("\x0a\x05", 2) + "ab";
  for (const std::string& bytes : {std::string("\xff\xff\xff\xff\x0f", 5) + " garbage", truncated_field}) {
    grpc::ClientContext ctx;
    grpc::Slice slice(bytes);
    grpc::ByteBuffer request(&slice, 1);
    grpc::CompletionQueue cq;
    auto call = generic.PrepareCall(&ctx, "/clusterd.v1.ClusterService/Watch", &cq);
    call->StartCall(reinterpret_cast<void*>(1));
    void* tag = nullptr;
    bool ok = false;
    ASSERT_TRUE(cq.Next(&tag, &ok));
    call->Write(request, reinterpret_cast<void*>(2));
    ASSERT_TRUE(cq.Next(&tag, &ok));
    call->WritesDone(reinterpret_cast<void*>(3));
    ASSERT_TRUE(cq.Next(&tag, &ok));
    grpc::Status status;
    call->Finish(&status, reinterpret_cast<void*>(4));
    ASSERT_TRUE(cq.Next(&tag, &ok));
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
    EXPECT_NE(status.error_message().find("not a clusterd.v1.WatchRequest"), std::string::npos)
        << status.error_message();
    cq.Shutdown();
    while (cq.Next(&tag, &ok)) {
    }
  }
  // Still serving: a well-formed Watch is answered.
  EXPECT_GE(Summary().revision(), 0u);
}

TEST_F(GrpcTest, WatchFromCompactedHistoryIsOutOfRange) {
  StartServer([](ClusterdConfig& c) {
    c.retention_events = 1000;
    c.retention_interval = std::chrono::milliseconds(100);
  });
  TestAgent agent(channel_, "worker01", 1);
  ASSERT_TRUE(agent.Connect());
  for (uint64_t seq = 1; seq <= 520; ++seq) {
    // Raise and clear alternate: 4 or 3 events each, well over 1000 events.
    ASSERT_TRUE(agent.Transition(seq, seq % 2 == 1, 3, "80E01801"));
  }
  ASSERT_TRUE(WaitFor([&] {
    agent.Heartbeat();
    return Summary().compacted_revision() > 0;
  }));
  const uint64_t compacted = Summary().compacted_revision();
  grpc::ClientContext ctx;
  v1::WatchRequest req;
  req.set_from_revision(compacted - 1);
  auto reader = cluster_->Watch(&ctx, req);
  v1::WatchResponse resp;
  EXPECT_FALSE(reader->Read(&resp));
  grpc::Status st = reader->Finish();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::OUT_OF_RANGE);
  EXPECT_NE(st.error_message().find(std::to_string(compacted + 1)), std::string::npos) << st.error_message();
}

TEST_F(GrpcTest, LostNodeBecomesUnknownAndReturns) {
  StartServer([](ClusterdConfig& c) { c.node_grace = std::chrono::milliseconds(300); });
  TestAgent agent(channel_, "worker01", 1);
  ASSERT_TRUE(agent.Connect());
  ASSERT_TRUE(WaitFor([&] { return GetNode("worker01").node().health() == v1::HEALTH_UNKNOWN; }));
  auto node = GetNode("worker01");
  ASSERT_EQ(node.active_faults_size(), 1);
  EXPECT_EQ(node.active_faults(0).code(), "HEARTBEAT_LOST");
  ASSERT_TRUE(agent.Heartbeat());
  ASSERT_TRUE(WaitFor([&] { return GetNode("worker01").node().health() == v1::HEALTH_HEALTHY; }));
}

TEST_F(GrpcTest, WatcherThatFallsBehindIsEndedAndCanResume) {
  StartServer([](ClusterdConfig& c) { c.watch_max_lag_events = 16; });
  TestAgent agent(channel_, "worker01", 1);
  ASSERT_TRUE(agent.Connect());
  // A watcher on its own connection with a fixed 64 KiB flow-control window,
  // so that a client that does not read really stalls the server's writes.
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  args.SetInt("grpc.use_local_subchannel_pool", 1);
  auto watch_channel = grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(server_->grpc_port()),
                                                 grpc::InsecureChannelCredentials(), args);
  auto watch_stub = v1::ClusterService::NewStub(watch_channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
  v1::WatchRequest req;
  req.set_from_revision(Summary().revision());
  auto reader = watch_stub->Watch(&ctx, req);
  // The watcher reads nothing while megabytes of events are stored: ingest
  // goes on regardless.
  const std::string message(3000, 'm');
  for (uint64_t seq = 1; seq <= 600; ++seq) {
    ASSERT_TRUE(agent.Transition(seq, seq % 2 == 1, 3, "80E01801", nullptr, message + std::to_string(seq)));
  }
  const uint64_t head = Summary().revision();
  std::vector<uint64_t> got;
  v1::WatchResponse resp;
  while (reader->Read(&resp)) {
    for (const auto& e : resp.events()) got.push_back(e.revision());
  }
  grpc::Status st = reader->Finish();
  ASSERT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
  ASSERT_FALSE(got.empty());
  EXPECT_LT(got.back(), head);
  EXPECT_NE(st.error_message().find("from_revision=" + std::to_string(got.back())), std::string::npos)
      << st.error_message();
  // Resuming from the last revision received continues without a gap.
  grpc::ClientContext ctx2;
  v1::WatchRequest resume;
  resume.set_from_revision(got.back());
  auto r2 = cluster_->Watch(&ctx2, resume);
  auto rest = ReadEvents(r2.get(), head - got.back());
  ASSERT_EQ(rest.size(), head - got.back());
  EXPECT_EQ(rest.front().revision(), got.back() + 1);
  ctx2.TryCancel();
  r2->Finish();
}

TEST_F(GrpcTest, JobServiceAndFaultImpact) {
  TestAgent agent(channel_, "worker01", 1);
  ASSERT_TRUE(agent.Connect());
  auto jobs = v1::JobService::NewStub(channel_);
  v1::CreateJobRequest create;
  auto* job = create.mutable_job();
  job->set_id("llm-7b");
  job->set_kind(v1::JOB_KIND_TRAINING);
  for (uint32_t r = 0; r < 4; ++r) {
    auto* p = job->add_placement();
    p->set_rank(r);
    p->set_node("worker01");
    p->set_device_id(r);
  }
  {
    grpc::ClientContext ctx;
    v1::CreateJobResponse resp;
    ASSERT_TRUE(jobs->CreateJob(&ctx, create, &resp).ok());
    EXPECT_EQ(resp.job().state(), v1::JOB_STATE_RUNNING);
  }
  {
    grpc::ClientContext ctx;
    v1::CreateJobResponse resp;
    EXPECT_EQ(jobs->CreateJob(&ctx, create, &resp).error_code(), grpc::StatusCode::ALREADY_EXISTS);
  }
  grpc::ClientContext wctx;
  v1::WatchRequest wreq;
  wreq.add_jobs("llm-7b");
  wreq.add_types(v1::EVENT_TYPE_FAULT_RAISED);
  auto reader = cluster_->Watch(&wctx, wreq);
  ASSERT_TRUE(agent.Transition(1, true, 6, "80E01801"));  // no rank on device 6
  ASSERT_TRUE(agent.Transition(2, true, 2, "80E01801"));  // rank 2
  auto events = ReadEvents(reader.get(), 1);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].fault().device_id(), 2u);
  wctx.TryCancel();
  reader->Finish();
  {
    grpc::ClientContext ctx;
    v1::GetJobRequest req;
    req.set_id("llm-7b");
    v1::GetJobResponse resp;
    ASSERT_TRUE(jobs->GetJob(&ctx, req, &resp).ok());
    ASSERT_EQ(resp.job().impacts_size(), 1);
    EXPECT_EQ(resp.job().impacts(0).ranks(0), 2u);
  }
  {
    grpc::ClientContext ctx;
    v1::DeleteJobRequest req;
    req.set_id("llm-7b");
    v1::DeleteJobResponse resp;
    ASSERT_TRUE(jobs->DeleteJob(&ctx, req, &resp).ok());
    grpc::ClientContext ctx2;
    v1::GetJobRequest get;
    get.set_id("llm-7b");
    v1::GetJobResponse gresp;
    EXPECT_EQ(jobs->GetJob(&ctx2, get, &gresp).error_code(), grpc::StatusCode::NOT_FOUND);
  }
}

TEST_F(GrpcTest, AttachDeliversCommandsTakesAcksAndOneAgentPerJob) {
  TestAgent agent(channel_, "worker01", 1);
  ASSERT_TRUE(agent.Connect());
  auto jobs = v1::JobService::NewStub(channel_);
  {
    v1::CreateJobRequest create;
    auto* job = create.mutable_job();
    job->set_id("train");
    job->set_kind(v1::JOB_KIND_TRAINING);
    auto* p = job->add_placement();
    p->set_node("worker01");
    p->set_device_id(2);
    job->mutable_policy()->mutable_hold_down()->set_seconds(0);
    grpc::ClientContext ctx;
    v1::CreateJobResponse resp;
    ASSERT_TRUE(jobs->CreateJob(&ctx, create, &resp).ok());
  }
  // Bad first messages are refused with a reason.
  {
    grpc::ClientContext ctx;
    auto stream = jobs->Attach(&ctx);
    v1::AttachRequest ack;
    ack.mutable_ack()->set_command_id("x");
    ASSERT_TRUE(stream->Write(ack));
    v1::AttachResponse resp;
    EXPECT_FALSE(stream->Read(&resp));
    EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  grpc::ClientContext ctx;
  auto stream = jobs->Attach(&ctx);
  v1::AttachRequest hello;
  hello.mutable_hello()->set_job_id("train");
  ASSERT_TRUE(stream->Write(hello));
  v1::AttachResponse resp;
  ASSERT_TRUE(stream->Read(&resp));
  ASSERT_TRUE(resp.has_attached());
  EXPECT_EQ(resp.attached().job().id(), "train");
  // A RESTART_BUSINESS fault on the job's device: the command arrives here.
  ASSERT_TRUE(agent.Transition(1, true, 2, "80E01801"));
  ASSERT_TRUE(stream->Read(&resp));
  ASSERT_TRUE(resp.has_command());
  EXPECT_EQ(resp.command().id(), "train.1/0");
  EXPECT_EQ(resp.command().kind(), v1::JOB_COMMAND_RESTART_PROCESSES);
  v1::AttachRequest ack;
  ack.mutable_ack()->set_command_id("train.1/0");
  ack.mutable_ack()->set_success(true);
  ack.mutable_ack()->set_message("restarted");
  ASSERT_TRUE(stream->Write(ack));
  auto recovery_state = [&] {
    grpc::ClientContext c;
    v1::GetRecoveryRequest req;
    req.set_id("train.1");
    v1::GetRecoveryResponse r;
    return cluster_->GetRecovery(&c, req, &r).ok() ? r.recovery().state() : v1::RECOVERY_STATE_UNSPECIFIED;
  };
  EXPECT_TRUE(WaitFor([&] { return recovery_state() == v1::RECOVERY_STATE_SUCCEEDED; }));
  // A second agent for the job replaces the first.
  grpc::ClientContext ctx2;
  auto second = jobs->Attach(&ctx2);
  ASSERT_TRUE(second->Write(hello));
  ASSERT_TRUE(second->Read(&resp));
  EXPECT_TRUE(resp.has_attached());
  EXPECT_FALSE(stream->Read(&resp));
  EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  second->WritesDone();
  EXPECT_TRUE(second->Finish().ok());
  {
    grpc::ClientContext c;
    v1::ListRecoveriesRequest req;
    req.set_job("train");
    v1::ListRecoveriesResponse r;
    ASSERT_TRUE(cluster_->ListRecoveries(&c, req, &r).ok());
    EXPECT_EQ(r.total_size(), 1);
    grpc::ClientContext c2;
    v1::GetRecoveryRequest get;
    get.set_id("nope.1");
    v1::GetRecoveryResponse g;
    EXPECT_EQ(cluster_->GetRecovery(&c2, get, &g).error_code(), grpc::StatusCode::NOT_FOUND);
  }
}

TEST_F(GrpcTest, HealthServiceAndStartErrors) {
  auto health = grpc::health::v1::Health::NewStub(channel_);
  for (const char* service : {"", "clusterd.v1.ClusterService"}) {
    grpc::ClientContext ctx;
    grpc::health::v1::HealthCheckRequest req;
    req.set_service(service);
    grpc::health::v1::HealthCheckResponse resp;
    ASSERT_TRUE(health->Check(&ctx, req, &resp).ok());
    EXPECT_EQ(resp.status(), grpc::health::v1::HealthCheckResponse::SERVING);
  }
  {
    grpc::ClientContext ctx;
    grpc::health::v1::HealthCheckRequest req;
    req.set_service("no.such.Service");
    grpc::health::v1::HealthCheckResponse resp;
    EXPECT_EQ(health->Check(&ctx, req, &resp).error_code(), grpc::StatusCode::NOT_FOUND);
  }
  // A second server on the same data directory cannot open the store.
  ClusterdConfig cfg;
  cfg.listen = "127.0.0.1:0";
  cfg.http_listen = "127.0.0.1:0";
  cfg.data_dir = dir_.Sub("data");
  cfg.insecure = true;
  ClusterdServer second(cfg);
  Status st = second.Start();
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("lock"), std::string::npos) << st.ToString();
}

}  // namespace
}  // namespace clusterd

namespace clusterd {
namespace {

::PublicFaultRequest PublicFault(const std::string& resource, const std::string& fault_id, const std::string& assertion,
                                 const std::string& code = "220001001") {
  ::PublicFaultRequest r;
  r.set_id("req-" + fault_id);
  r.set_timestamp(1'700'000'000'000);
  r.set_version("1.0");
  r.set_resource(resource);
  auto* f = r.add_faults();
  f->set_faultid(fault_id);
  f->set_faulttype("Network");
  f->set_faultcode(code);
  f->set_faulttime(1'700'000'000'000);
  f->set_assertion(assertion);
  auto* in = f->add_influence();
  in->set_nodename("worker01");
  in->add_deviceids(2);
  return r;
}

::RespStatus SendPublic(const std::shared_ptr<grpc::Channel>& ch, const ::PublicFaultRequest& r) {
  auto stub = ::PubFault::NewStub(ch);
  grpc::ClientContext ctx;
  ::RespStatus resp;
  grpc::Status st = stub->SendPublicFault(&ctx, r, &resp);
  EXPECT_TRUE(st.ok()) << st.error_message();  // the outcome is in the RespStatus
  return resp;
}

// MindCluster's PubFault on the same port: accepted faults are ClusterD
// faults (durable before the reply), refusals are RespStatus codes. The
// server runs on a FakeClock: a "once" fault's minimum visibility (5 s)
// passes when the test moves it.
TEST_F(GrpcTest, PubFaultSendPublicFaultDrivesFaults) {
  FakeClock clock;
  server_clock_ = &clock;
  StartServer([](ClusterdConfig& cfg) {
    cfg.commit_delay = std::chrono::seconds(0);  // a group gathering on a clock that stands would wait for ever
    cfg.pubfault.burst = 4;
    cfg.pubfault.rate_per_second = 1e-6;  // no token comes back during the test
  });
  TestAgent agent(channel_, "worker01", 1);
  ASSERT_TRUE(agent.Connect());
  auto ok = SendPublic(channel_, PublicFault("pingmesh", "link-00001", "occur"));
  EXPECT_EQ(ok.code(), 0) << ok.info();
  auto node = GetNode("worker01");
  bool found = false;
  for (const auto& f : node.active_faults()) {
    if (f.reporter() != "pubfault/pingmesh") continue;
    found = true;
    EXPECT_EQ(f.level(), v1::FAULT_LEVEL_SEPARATE);
    EXPECT_EQ(f.device_id(), 2u);
    EXPECT_EQ(f.external_id(), "link-00001");
  }
  EXPECT_TRUE(found);
  EXPECT_EQ(node.node().health(), v1::HEALTH_UNHEALTHY);

  auto bad = PublicFault("pingmesh", "link-00002", "occur");
  bad.set_version("0.9");
  EXPECT_EQ(SendPublic(channel_, bad).code(), 409);
  EXPECT_EQ(SendPublic(channel_, PublicFault("somebody", "link-00003", "occur")).code(), 410);
  // Burst of 4: the invalid request took a token too (the unknown resource
  // has no bucket), so the 5th request of pingmesh is over the limit.
  EXPECT_EQ(SendPublic(channel_, PublicFault("pingmesh", "link-00004", "once", "010001001")).code(), 0);
  EXPECT_EQ(SendPublic(channel_, PublicFault("pingmesh", "link-00005", "once", "010001001")).code(), 0);
  auto limited = SendPublic(channel_, PublicFault("pingmesh", "link-00006", "occur"));
  EXPECT_EQ(limited.code(), 410);
  EXPECT_NE(limited.info().find("rate limit"), std::string::npos) << limited.info();

  // "once" faults clear themselves after their minimum visibility.
  auto active_once = [&] {
    int n = 0;
    const auto now = GetNode("worker01");
    for (const auto& f : now.active_faults()) {
      if (f.state() == v1::FAULT_STATE_ACTIVE && f.code() == "010001001") ++n;
    }
    return n;
  };
  EXPECT_EQ(active_once(), 2);
  clock.Advance(std::chrono::seconds(4));
  ASSERT_TRUE(agent.Transition(1, true, 0, "80BB8000"));  // a write: the writer runs its rules
  EXPECT_EQ(active_once(), 2);
  clock.Advance(std::chrono::seconds(1));
  ASSERT_TRUE(agent.Transition(2, true, 1, "80BB8000"));
  EXPECT_EQ(active_once(), 0);
  StopServer();  // before the clock goes
  server_clock_ = nullptr;
}

// Every request of an allowed resource is charged to its rate limit before
// it is validated: requests refused as invalid take their tokens too.
TEST_F(GrpcTest, PubFaultInvalidRequestsTakeRateLimitTokens) {
  StartServer([](ClusterdConfig& cfg) {
    cfg.pubfault.burst = 3;
    cfg.pubfault.rate_per_second = 1e-6;  // no token comes back during the test
    cfg.pubfault.max_faults = 4;
  });
  auto bad = PublicFault("pingmesh", "link-00001", "occur");
  bad.set_version("0.9");
  EXPECT_EQ(SendPublic(channel_, bad).code(), 409);
  EXPECT_EQ(SendPublic(channel_, bad).code(), 409);
  auto too_big = PublicFault("pingmesh", "link-00001", "occur");
  for (int d : {0, 1, 3, 4}) too_big.mutable_faults(0)->mutable_influence(0)->add_deviceids(d);
  EXPECT_EQ(SendPublic(channel_, too_big).code(), 409);
  auto limited = SendPublic(channel_, PublicFault("pingmesh", "link-00002", "occur"));
  EXPECT_EQ(limited.code(), 410);
  EXPECT_NE(limited.info().find("resource pingmesh is over its rate limit"), std::string::npos) << limited.info();
  // Another resource has its own bucket: planned, and refused only because
  // no node is registered.
  auto other = SendPublic(channel_, PublicFault("CCAE", "link-00003", "occur"));
  EXPECT_EQ(other.code(), 409);
  EXPECT_NE(other.info().find("node worker01 is not registered"), std::string::npos) << other.info();
}

// A request naming more (fault, node, device) entries than public faults may
// be active is refused from its sizes alone, before any element is checked:
// its invalid fault type does not change the answer, and nothing is stored.
TEST_F(GrpcTest, PubFaultOverTheSizeLimitIsRefusedNamingItAndChangesNothing) {
  StartServer([](ClusterdConfig& cfg) { cfg.pubfault.max_faults = 4; });
  TestAgent agent(channel_, "worker01", 1, 8);
  ASSERT_TRUE(agent.Connect());
  const uint64_t before = Summary().revision();
  auto r = PublicFault("pingmesh", "link-00001", "occur");
  for (int d : {0, 1, 3, 4}) r.mutable_faults(0)->mutable_influence(0)->add_deviceids(d);
  r.mutable_faults(0)->set_faulttype("Disk");
  auto refused = SendPublic(channel_, r);
  EXPECT_EQ(refused.code(), 409);
  EXPECT_NE(refused.info().find("the request names 5 (fault, node, device) entries, more than the 4 public faults"),
            std::string::npos)
      << refused.info();
  EXPECT_EQ(refused.info().find("faultType"), std::string::npos) << refused.info();
  EXPECT_EQ(Summary().revision(), before);
  EXPECT_EQ(GetNode("worker01").active_faults_size(), 0);
  // Within the limit (and valid), the same faults are applied.
  r.mutable_faults(0)->set_faulttype("Network");
  r.mutable_faults(0)->mutable_influence(0)->mutable_deviceids()->RemoveLast();
  auto ok = SendPublic(channel_, r);
  EXPECT_EQ(ok.code(), 0) << ok.info();
  EXPECT_EQ(GetNode("worker01").active_faults_size(), 4);
}

// A public fault on a device the node does not have is dropped, naming the
// node's devices (it would otherwise appear as a ninth device and turn the
// node unhealthy); the reply names each reason once, not once per device.
TEST_F(GrpcTest, PubFaultRefusesDevicesOutsideTheInventoryAndSaysEachReasonOnce) {
  StartServer();
  TestAgent agent(channel_, "worker01", 1, 8);
  ASSERT_TRUE(agent.Connect());
  auto r = PublicFault("pingmesh", "link-00001", "occur");
  r.mutable_faults(0)->mutable_influence(0)->set_deviceids(0, 20);
  auto* unknown = r.mutable_faults(0)->add_influence();
  unknown->set_nodename("worker99");
  for (int d = 0; d < 8; ++d) unknown->add_deviceids(d);
  auto refused = SendPublic(channel_, r);
  EXPECT_EQ(refused.code(), 409) << refused.info();
  EXPECT_NE(refused.info().find("node worker01 has no device 20 (its devices are 0-7)"), std::string::npos)
      << refused.info();
  const std::string unregistered = "node worker99 is not registered";
  const size_t first = refused.info().find(unregistered);
  ASSERT_NE(first, std::string::npos) << refused.info();
  EXPECT_EQ(refused.info().find(unregistered, first + 1), std::string::npos) << refused.info();
  auto node = GetNode("worker01");
  EXPECT_EQ(node.devices_size(), 8);
  EXPECT_EQ(node.node().health(), v1::HEALTH_HEALTHY);
  EXPECT_EQ(node.active_faults_size(), 0);

  // With a device it has as well, that one is applied and the reply says what was dropped.
  r.mutable_faults(0)->mutable_influence(0)->add_deviceids(3);
  auto accepted = SendPublic(channel_, r);
  EXPECT_EQ(accepted.code(), 0) << accepted.info();
  EXPECT_NE(accepted.info().find("accepted; dropped: "), std::string::npos) << accepted.info();
  node = GetNode("worker01");
  EXPECT_EQ(node.devices_size(), 8);
  ASSERT_EQ(node.active_faults_size(), 1);
  EXPECT_EQ(node.active_faults(0).device_id(), 3u);
}

}  // namespace
}  // namespace clusterd
