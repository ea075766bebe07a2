// What the tests of the daemons' tables of config keys share (clusterd's
// ConfigTable, NodeD's NodedConfigTable): the chart's `<component>.config`
// map in values.yaml and its schema, and the generated reference tables of a
// docs page, rewritten with CLUSTERD_UPDATE_DOCS=1.
#pragma once

#include <set>
#include <string>
#include <utility>
#include <vector>

namespace clusterd::testing {

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
