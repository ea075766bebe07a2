// The read-only JSON API on the HTTP port (server/http_api.h) against a real
// in-process ClusterD with an agent: every endpoint, filters, pagination,
// the event feed, and errors as JSON with the matching HTTP status.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "clusterd/server/http_api.h"
#include "clusterd/server/server.h"
#include "test/support/grpc/agent_client.h"
#include "test/support/http_get.h"
#include "test/support/server/server_fixture.h"

namespace clusterd {
namespace {

using nlohmann::json;

class HttpApiTest : public testing::ClusterdServerTest {
 protected:
  void SetUp() override { StartServer(); }

  json Get(const std::string& target, int want = 200) {
    auto r = testing::HttpGet(server_->http_port(), target);
    EXPECT_EQ(r.status, want) << target << ": " << r.body;
    auto doc = json::parse(r.body, nullptr, false);
    EXPECT_FALSE(doc.is_discarded()) << target << ": " << r.body;
    return doc;
  }
};

// GET /api/v1/doctor: the software chain's findings, as clusterctl doctor
// prints them; with a node, every link of it.
TEST_F(HttpApiTest, DoctorAnswersTheChainsFindings) {
  testing::TestAgent plain(channel_, "worker01", 1, 2);
  ASSERT_TRUE(plain.Connect());
  testing::TestAgent npu(channel_, "npu1", 1, 2);
  v1::Hello hello = npu.MakeHello();
  for (const auto& [name, state] :
       {std::pair{"driver", v1::CHAIN_LINK_STATE_OK}, std::pair{"runtime", v1::CHAIN_LINK_STATE_BROKEN}}) {
    auto* l = hello.mutable_inventory()->add_chain();
    l->set_name(name);
    l->set_state(state);
    if (state == v1::CHAIN_LINK_STATE_BROKEN) {
      l->set_code("NODE_CHAIN_RUNTIME_NOT_CONFIGURED");
      l->set_evidence("none of /etc/containerd/config.toml names ascend-docker-runtime");
    }
  }
  ASSERT_TRUE(npu.Connect(&hello));
  auto all = Get("/api/v1/doctor");
  ASSERT_EQ(all["findings"].size(), 1u) << all.dump();
  EXPECT_EQ(all["findings"][0]["node"], "npu1");
  EXPECT_EQ(all["findings"][0]["link"], "runtime");
  EXPECT_EQ(all["findings"][0]["state"], "BROKEN");
  EXPECT_NE(all["findings"][0]["fix"].get<std::string>().find("Ascend Docker Runtime"), std::string::npos);
  EXPECT_EQ(all["summary"], "2 node(s), 1 reporting a software chain; 1 with a broken link or drift");
  EXPECT_FALSE(all.contains("truncated"));
  auto one = Get("/api/v1/doctor/npu1");
  ASSERT_EQ(one["findings"].size(), 2u) << one.dump();
  EXPECT_EQ(one["findings"][0]["state"], "BROKEN");  // worst first
  EXPECT_EQ(one["findings"][1]["state"], "ok");
  EXPECT_EQ(one["summary"], "1 link(s) to fix");
  EXPECT_EQ(Get("/api/v1/doctor/worker01")["summary"], "its agent reports no software chain");
  EXPECT_EQ(Get("/api/v1/doctor/nope", 404)["code"], "NOT_FOUND");
}

TEST_F(HttpApiTest, EndpointsAnswerTheSameQueriesAsGrpc) {
  testing::TestAgent w1(channel_, "worker01", 1, 4);
  testing::TestAgent w2(channel_, "worker02", 1, 4);
  ASSERT_TRUE(w1.Connect());
  ASSERT_TRUE(w2.Connect());
  ASSERT_TRUE(w1.Transition(1, true, 2, "80E01801"));

  auto summary = Get("/api/v1/summary");
  EXPECT_EQ(summary["nodes"]["healthy"].get<int>() + summary["nodes"].value("unhealthy", 0), 2) << summary.dump();
  auto nodes = Get("/api/v1/nodes");
  ASSERT_EQ(nodes["nodes"].size(), 2u);
  auto unhealthy = Get("/api/v1/nodes?health=HEALTH_UNHEALTHY");
  ASSERT_EQ(unhealthy["nodes"].size(), 1u) << unhealthy.dump();
  EXPECT_EQ(unhealthy["nodes"][0]["name"], "worker01");
  // Pagination: the token of one page gives the next.
  auto page1 = Get("/api/v1/nodes?page_size=1");
  ASSERT_EQ(page1["nodes"].size(), 1u);
  ASSERT_TRUE(page1.contains("nextPageToken"));
  auto page2 = Get("/api/v1/nodes?pageSize=1&page_token=" + page1["nextPageToken"].get<std::string>());
  ASSERT_EQ(page2["nodes"].size(), 1u);
  EXPECT_NE(page1["nodes"][0]["name"], page2["nodes"][0]["name"]);

  auto node = Get("/api/v1/nodes/worker01");
  ASSERT_EQ(node["activeFaults"].size(), 1u);
  EXPECT_EQ(node["activeFaults"][0]["code"], "80E01801");
  EXPECT_EQ(node["devices"].size(), 4u);
  auto faults = Get("/api/v1/faults?active_only=true&node=worker01&min_level=FAULT_LEVEL_SUB_HEALTH");
  ASSERT_EQ(faults["faults"].size(), 1u);
  EXPECT_EQ(Get("/api/v1/faults?node=worker02")["faults"].size(), 0u);
  EXPECT_TRUE(Get("/api/v1/jobs").is_object());
  EXPECT_TRUE(Get("/api/v1/recoveries").is_object());
  EXPECT_TRUE(Get("/api/v1/admin").is_object());

  // The event feed: from 0, filtered, limited, and resumable.
  auto all = Get("/api/v1/events?from_revision=0");
  ASSERT_GE(all["events"].size(), 3u);
  const uint64_t head = std::stoull(all["headRevision"].get<std::string>());
  EXPECT_EQ(std::stoull(all["nextFromRevision"].get<std::string>()), head);
  auto raised = Get("/api/v1/events?from_revision=0&types=EVENT_TYPE_FAULT_RAISED");
  ASSERT_EQ(raised["events"].size(), 1u);
  EXPECT_EQ(raised["events"][0]["fault"]["code"], "80E01801");
  auto first = Get("/api/v1/events?from_revision=0&limit=1");
  ASSERT_EQ(first["events"].size(), 1u);
  auto next = Get("/api/v1/events?from_revision=" + first["nextFromRevision"].get<std::string>() + "&limit=1");
  ASSERT_EQ(next["events"].size(), 1u);
  EXPECT_GT(std::stoull(next["events"][0]["revision"].get<std::string>()),
            std::stoull(first["events"][0]["revision"].get<std::string>()));
  auto nodes_only = Get("/api/v1/events?from_revision=0&nodes=worker02");
  for (const auto& e : nodes_only["events"]) EXPECT_EQ(e["node"], "worker02");
}

TEST_F(HttpApiTest, ErrorsAreJsonWithTheirStatus) {
  auto missing = Get("/api/v1/nodes/nobody", 404);
  EXPECT_EQ(missing["code"], "NOT_FOUND");
  EXPECT_EQ(Get("/api/v1/faults?nope=1", 400)["code"], "INVALID_ARGUMENT");
  EXPECT_EQ(Get("/api/v1/faults?active_only=yes", 400)["code"], "INVALID_ARGUMENT");
  EXPECT_EQ(Get("/api/v1/nodes?health=GREEN", 400)["code"], "INVALID_ARGUMENT");
  EXPECT_EQ(Get("/api/v1/events?limit=0", 400)["code"], "INVALID_ARGUMENT");
  // Digits only: strtoull would wrap "-1" to the largest number.
  EXPECT_EQ(Get("/api/v1/events?limit=-1", 400)["code"], "INVALID_ARGUMENT");
  EXPECT_EQ(Get("/api/v1/events?limit=+5", 400)["code"], "INVALID_ARGUMENT");
  EXPECT_EQ(Get("/api/v1/events?limit=%205", 400)["code"], "INVALID_ARGUMENT");
  EXPECT_EQ(Get("/api/v1/events?limit=99999999999999999999999")["events"].size(),
            Get("/api/v1/events")["events"].size());
  // A parameter given twice is refused, not silently the last.
  EXPECT_EQ(Get("/api/v1/events?limit=1&limit=2", 400)["code"], "INVALID_ARGUMENT");
  EXPECT_EQ(Get("/api/v1/events?from_revision=0&from_revision=1", 400)["code"], "INVALID_ARGUMENT");
  EXPECT_EQ(Get("/api/v1/events?from_revision=0&fromRevision=1", 400)["code"], "INVALID_ARGUMENT");
  EXPECT_EQ(Get("/api/v1/nodes?page_size=1&page_size=2", 400)["code"], "INVALID_ARGUMENT");
  // A revision beyond the head: this server's history is not the one the
  // client follows (410, as for a compacted one: read the state again).
  const uint64_t head = std::stoull(Get("/api/v1/events")["headRevision"].get<std::string>());
  EXPECT_EQ(Get("/api/v1/events?from_revision=" + std::to_string(head))["events"].size(), 0u);
  auto future = Get("/api/v1/events?from_revision=" + std::to_string(head + 1000), 410);
  EXPECT_EQ(future["code"], "OUT_OF_RANGE");
  EXPECT_NE(future["message"].get<std::string>().find("beyond the head revision " + std::to_string(head)),
            std::string::npos)
      << future.dump();
  EXPECT_EQ(Get("/api/v1/jobs/%zz", 400)["code"], "INVALID_ARGUMENT");
  EXPECT_EQ(Get("/api/v1/recoveries/none", 404)["code"], "NOT_FOUND");
  EXPECT_EQ(testing::HttpGet(server_->http_port(), "/api/v1/").status, 404);
  // Bytes that are not UTF-8 in a parameter: a clear 400, not a 500.
  EXPECT_EQ(Get("/api/v1/faults?page_token=%00%ff", 400)["code"], "INVALID_ARGUMENT");
  EXPECT_EQ(Get("/api/v1/nodes?label_selector=%ff%fe", 400)["code"], "INVALID_ARGUMENT");
}

TEST(HttpApiQueryTest, QueryToMessage) {
  v1::WatchRequest w;
  ASSERT_TRUE(QueryToMessage("from_revision=7&nodes=a&nodes=b,c&types=EVENT_TYPE_FAULT_RAISED&min_level=FAULT_LEVEL_"
                             "SEPARATE",
                             &w)
                  .ok());
  EXPECT_EQ(w.from_revision(), 7u);
  ASSERT_EQ(w.nodes_size(), 3);
  EXPECT_EQ(w.nodes(2), "c");
  EXPECT_EQ(w.min_level(), v1::FAULT_LEVEL_SEPARATE);
  v1::ListNodesRequest n;
  ASSERT_TRUE(QueryToMessage("label_selector=rack%3Dr1%2Cpool!%3Da&pageSize=5", &n).ok());
  EXPECT_EQ(n.label_selector(), "rack=r1,pool!=a");
  EXPECT_EQ(n.page_size(), 5);
  EXPECT_FALSE(QueryToMessage("page_size=many", &n).ok());
  EXPECT_FALSE(QueryToMessage("page_size=%4", &n).ok());
  EXPECT_FALSE(QueryToMessage("unknown=1", &n).ok());
}

}  // namespace
}  // namespace clusterd
