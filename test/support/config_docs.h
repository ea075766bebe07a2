// What the tests of the daemons' tables of config keys share (clusterd's
// ConfigTable, NodeD's NodedConfigTable): the chart's `<component>.config`
// map in values.yaml and its schema, and the generated reference tables of a
// docs page, rewritten with CLUSTERD_UPDATE_DOCS=1.
#pragma once

#include <algorithm>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "common/config_table.h"

namespace clusterd::testing {

// Every row of a table of keys is complete (each name once; section, help,
// accepted values and chart value given), and the default it documents is a
// value its own parser takes back unchanged.
template <typename Config>
void ExpectEveryRowDescribed(const std::vector<ConfigKeyOf<Config>>& keys) {
  std::set<std::string> names;
  for (const ConfigKeyOf<Config>& k : keys) {
    SCOPED_TRACE(k.name);
    EXPECT_TRUE(names.insert(k.name).second) << "listed twice";
    EXPECT_FALSE(k.section.empty());
    EXPECT_FALSE(k.help.empty());
    EXPECT_FALSE(k.accepted.empty());
    EXPECT_FALSE(k.chart_value.empty());
    ASSERT_TRUE(k.set && k.show);
    const std::string dflt = k.show(Config{});
    if (dflt.empty()) continue;  // unset by default (a path, a list, an id)
    Config c;
    ASSERT_TRUE(k.set(dflt, &c).ok()) << dflt;
    EXPECT_EQ(k.show(c), dflt);
  }
}

// Each (key, value) of a chart's config map (ChartConfigValues) names a row of
// the table whose chart value is `prefix` + key, and sets the row's default
// (parsed by the row, so "60s" and "1m" agree; "null" leaves it out).
// Returns how many values it compared.
template <typename Config>
int ExpectChartValuesAreDefaults(const std::vector<ConfigKeyOf<Config>>& keys,
                                 const std::vector<std::pair<std::string, std::string>>& values,
                                 const std::string& prefix) {
  int checked = 0;
  for (const auto& [key, value] : values) {
    SCOPED_TRACE(key + ": " + value);
    const std::string& name = key;  // clang refuses a structured binding in a lambda's capture
    auto row = std::find_if(keys.begin(), keys.end(), [&](const ConfigKeyOf<Config>& k) { return k.name == name; });
    EXPECT_NE(row, keys.end()) << "not a key of the table";
    if (row == keys.end()) continue;
    // The row names this value, alone or first with a qualifier ("clusterd.config.actuator,
    // else kubernetes.actuator").
    const std::string named = prefix + key;
    EXPECT_TRUE(row->chart_value == named || row->chart_value.rfind(named + ",", 0) == 0 ||
                row->chart_value.rfind(named + " ", 0) == 0)
        << "the row's Helm value is \"" << row->chart_value << "\", not " << named;
    if (value == "null") continue;  // left out: the binary's default applies
    Config c;
    EXPECT_TRUE(row->set(value, &c).ok());
    EXPECT_EQ(row->show(c), row->show(Config{}));
    ++checked;
  }
  return checked;
}

// The entries of `<component>.config` in the chart's values.yaml, in order:
// key and value as written ("[]" given as "", "null" as is). Empty when the
// file or the map is missing (the caller asserts on what it expects).
std::vector<std::pair<std::string, std::string>> ChartConfigValues(const std::string& values_path,
                                                                   const std::string& component);

// The keys values.schema.json allows in `<component>.config`; `closed` says
// whether it refuses others (additionalProperties false).
std::set<std::string> ChartSchemaConfigKeys(const std::string& schema_path, const std::string& component, bool* closed);

// The text of `doc_path` between `begin` (a whole line, "\n" included) and
// "<!-- END GENERATED -->" equals `want`; with CLUSTERD_UPDATE_DOCS set, a
// difference is written into the document instead and the test skipped.
void ExpectGeneratedSection(const std::string& doc_path, const std::string& begin, const std::string& want);

}  // namespace clusterd::testing
