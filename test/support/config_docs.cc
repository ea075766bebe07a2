#include "test/support/config_docs.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace clusterd::testing {

std::vector<std::pair<std::string, std::string>> ChartConfigValues(const std::string& values_path,
                                                                   const std::string& component) {
  std::vector<std::pair<std::string, std::string>> out;
  std::ifstream in(values_path);
  bool in_component = false, in_config = false;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line[0] != ' ' && line[0] != '#') in_component = line == component + ":";
    if (in_component && line == "  config:") {
      in_config = true;
      continue;
    }
    if (!in_config) continue;
    if (!line.empty() && line.rfind("    ", 0) != 0) break;  // the map ended
    const size_t colon = line.find(':');
    if (line.rfind("    #", 0) == 0 || colon == std::string::npos) continue;
    std::string value = colon + 2 <= line.size() ? line.substr(colon + 2) : std::string();
    if (value == "[]") value.clear();  // an empty list: the flag's empty text
    out.emplace_back(line.substr(4, colon - 4), value);
  }
  return out;
}

std::set<std::string> ChartSchemaConfigKeys(const std::string& schema_path, const std::string& component,
                                            bool* closed) {
  std::ifstream in(schema_path);
  const nlohmann::json schema = nlohmann::json::parse(in);
  const nlohmann::json& config = schema.at("properties").at(component).at("properties").at("config");
  *closed = !config.value("additionalProperties", true);
  std::set<std::string> keys;
  for (const auto& [key, value] : config.at("properties").items()) keys.insert(key);
  return keys;
}

void ExpectGeneratedSection(const std::string& doc_path, const std::string& begin, const std::string& want) {
  std::ifstream in(doc_path);
  ASSERT_TRUE(in) << doc_path;
  std::stringstream buf;
  buf << in.rdbuf();
  const std::string doc = buf.str();
  const std::string end = "<!-- END GENERATED -->";
  const size_t b = doc.find(begin), e = doc.find(end, b == std::string::npos ? 0 : b);
  ASSERT_NE(b, std::string::npos) << doc_path << " lacks " << begin;
  ASSERT_NE(e, std::string::npos) << doc_path << " lacks " << end;
  const std::string have = doc.substr(b + begin.size(), e - b - begin.size());
  if (have != want && std::getenv("CLUSTERD_UPDATE_DOCS")) {
    std::ofstream(doc_path) << doc.substr(0, b + begin.size()) << want << doc.substr(e);
    GTEST_SKIP() << "rewrote " << doc_path;
  }
  EXPECT_EQ(have, want) << doc_path
                        << " is out of step with the table of keys: run this test with CLUSTERD_UPDATE_DOCS=1";
}

}  // namespace clusterd::testing
