// A daemon's table of config keys: one row per key says its name, type and
// bounds, --help's text, and the Helm value that sets it; the parser, --help
// and the reference tables of the docs all come from the rows, and the
// defaults from the config struct's initialisers (each row's `show` of a
// default-constructed config), so each is written once. ClusterD's table is
// clusterd/config/config.cc, NodeD's noded/server/config.cc; this is what they
// share.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/config_util.h"
#include "common/status.h"

namespace clusterd {

// One row of a table of keys for the config struct `Config`.
template <typename Config>
struct ConfigKeyOf {
  std::string name;         // the JSON key; the flag is --name with '_' written '-'
  std::string section;      // --help's and the reference's section
  std::string value_name;   // --help's placeholder: N, DUR, FILE, LIST, ... ("" for a switch such as --insecure)
  std::string help;         // what it does, in a phrase or two
  std::string accepted;     // the values it takes, bounds included
  std::string chart_value;  // the Helm chart's value that sets it
  // Parses one value (a flag's text, or a JSON value as text) into cfg;
  // InvalidArgument naming the key otherwise, cfg then unchanged for it.
  std::function<Status(const std::string& value, Config* cfg)> set;
  // The value as a flag would spell it ("" when unset).
  std::function<std::string(const Config& cfg)> show;
};

namespace config_table {

// ------------------------------------------------------------ the rows ---

// A field of a (const or not) Config: FieldOf<Config>([](auto& c) -> auto& {
// return c.member; }). Its type names the config, so the makers below know
// which table they make a row of.
template <typename Config, typename Get>
struct Field {
  Get get;
  auto& operator()(Config& c) const { return get(c); }
  const auto& operator()(const Config& c) const { return get(c); }
};
template <typename Config, typename Get>
Field<Config, Get> FieldOf(Get get) {
  return Field<Config, Get>{std::move(get)};
}

// "0s" for zero, else FormatDuration's text.
std::string ShowDuration(std::chrono::nanoseconds d);
// A free-text setting: one printable line.
Status SetText(const std::string& v, std::string* out);

// A row of any type: its own parse and display. The makers below are the
// common types.
template <typename Config>
ConfigKeyOf<Config> Custom(std::string name, std::string value_name, std::string accepted,
                           std::function<Status(const std::string&, Config*)> set,
                           std::function<std::string(const Config&)> show) {
  ConfigKeyOf<Config> k;
  k.name = std::move(name);
  k.value_name = std::move(value_name);
  k.accepted = std::move(accepted);
  k.set = std::move(set);
  k.show = std::move(show);
  return k;
}

// Shows a text field as it is.
template <typename Config, typename Get>
std::function<std::string(const Config&)> AsText(Field<Config, Get> get) {
  return [get](const Config& c) { return std::string(get(c)); };
}

// One printable line.
template <typename Config, typename Get>
ConfigKeyOf<Config> Text(const std::string& name, Field<Config, Get> get, std::string value_name) {
  return Custom<Config>(
      name, std::move(value_name), "one line of text",
      [get](const std::string& v, Config* c) { return SetText(v, &get(*c)); }, AsText(get));
}

// Any text, taken as it is (a path, a shell command, a URL).
template <typename Config, typename Get>
ConfigKeyOf<Config> Raw(const std::string& name, Field<Config, Get> get, std::string value_name, std::string accepted) {
  return Custom<Config>(
      name, std::move(value_name), std::move(accepted),
      [get](const std::string& v, Config* c) {
        get(*c) = v;
        return Status::Ok();
      },
      AsText(get));
}

template <typename Config, typename Get>
ConfigKeyOf<Config> Address(const std::string& name, Field<Config, Get> get) {
  return Custom<Config>(
      name, "ADDR", "host:port", [name, get](const std::string& v, Config* c) { return SetAddress(name, v, &get(*c)); },
      AsText(get));
}

// A count from `min` to `max` (uint32_t or uint64_t, as the field is).
template <typename T, typename Config, typename Get>
ConfigKeyOf<Config> Count(const std::string& name, Field<Config, Get> get, T min, T max) {
  static_assert(std::is_same_v<T, uint32_t> || std::is_same_v<T, uint64_t>);
  std::string accepted = max == std::numeric_limits<T>::max() ? "at least " + std::to_string(min)
                                                              : std::to_string(min) + " to " + std::to_string(max);
  return Custom<Config>(
      name, "N", std::move(accepted),
      [name, get, min, max](const std::string& v, Config* c) {
        if constexpr (std::is_same_v<T, uint32_t>) {
          return SetU32(name, v, min, max, &get(*c));
        } else {
          return SetU64(name, v, min, max, &get(*c));
        }
      },
      [get](const Config& c) { return std::to_string(get(c)); });
}
template <typename Config, typename Get>
ConfigKeyOf<Config> U32(const std::string& name, Field<Config, Get> get, uint32_t min, uint32_t max) {
  return Count<uint32_t>(name, get, min, max);
}
template <typename Config, typename Get>
ConfigKeyOf<Config> U64(const std::string& name, Field<Config, Get> get, uint64_t min, uint64_t max) {
  return Count<uint64_t>(name, get, min, max);
}

// A duration of at least `min` and, when `max` is not zero, at most `max`.
template <typename Config, typename Get>
ConfigKeyOf<Config> Dur(const std::string& name, Field<Config, Get> get, std::chrono::nanoseconds min,
                        std::chrono::nanoseconds max = std::chrono::nanoseconds(0)) {
  return Custom<Config>(
      name, "DUR", max.count() ? ShowDuration(min) + " to " + ShowDuration(max) : "at least " + ShowDuration(min),
      [name, get, min, max](const std::string& v, Config* c) {
        std::chrono::nanoseconds d{};
        CLUSTERD_RETURN_IF_ERROR(SetDuration(name, v, min, &d));
        if (max.count() && d > max) {
          return InvalidArgument(name + ": " + v + " is longer than the maximum " + ShowDuration(max));
        }
        get(*c) = d;
        return Status::Ok();
      },
      [get](const Config& c) { return ShowDuration(get(c)); });
}

// true or false; `value_name` "" for a switch that may be given alone as a
// flag (the daemon's parser says which keys are switches).
template <typename Config, typename Get>
ConfigKeyOf<Config> Bool(const std::string& name, Field<Config, Get> get, std::string value_name = "BOOL",
                         std::string accepted = "true or false") {
  return Custom<Config>(
      name, std::move(value_name), std::move(accepted),
      [name, get](const std::string& v, Config* c) { return SetBool(name, v, &get(*c)); },
      [get](const Config& c) { return std::string(get(c) ? "true" : "false"); });
}

// A comma-separated list (a JSON list in the file; empty items dropped), each
// item checked by `check` (an error without the key: the row adds it).
template <typename Config, typename Get>
ConfigKeyOf<Config> List(const std::string& name, Field<Config, Get> get, std::string accepted,
                         const std::function<Status(const std::string& item)>& check) {
  return Custom<Config>(
      name, "LIST", std::move(accepted),
      [name, get, check](const std::string& v, Config* c) {
        std::vector<std::string> items = SplitCommaList(v);
        for (const std::string& item : items) {
          if (Status st = check(item); !st.ok()) return InvalidArgument(name + ": " + st.message());
        }
        get(*c) = std::move(items);
        return Status::Ok();
      },
      [get](const Config& c) { return JoinCommaList(get(c)); });
}

// One of a fixed set of words.
template <typename Config, typename Get>
ConfigKeyOf<Config> OneOf(const std::string& name, Field<Config, Get> get, const std::vector<std::string>& choices,
                          std::string value_name) {
  return Custom<Config>(
      name, std::move(value_name), JoinNames(choices, " or "),
      [name, get, choices](const std::string& v, Config* c) {
        if (std::find(choices.begin(), choices.end(), v) == choices.end()) {
          return InvalidArgument(name + ": \"" + v + "\" is not " + JoinNames(choices, " or "));
        }
        get(*c) = v;
        return Status::Ok();
      },
      AsText(get));
}

// Builds a table in order: Section() starts a --help section, Add() a row
// with its help text and the Helm value that sets it (nullptr: the chart's
// `default_chart_prefix` followed by the key).
template <typename Config>
class TableBuilder {
 public:
  explicit TableBuilder(std::string default_chart_prefix) : default_chart_prefix_(std::move(default_chart_prefix)) {}
  void Section(std::string title) { section_ = std::move(title); }
  void Add(ConfigKeyOf<Config> key, std::string help, const char* chart = nullptr) {
    key.section = section_;
    key.help = std::move(help);
    key.chart_value = chart ? chart : default_chart_prefix_ + key.name;
    keys_.push_back(std::move(key));
  }
  std::vector<ConfigKeyOf<Config>> Take() { return std::move(keys_); }

 private:
  std::string default_chart_prefix_;
  std::string section_;
  std::vector<ConfigKeyOf<Config>> keys_;
};

// ----------------------------------------------------------- the parser ---

// "--flag" for a key.
std::string FlagOf(const std::string& key);

// The rows by name (the table outlives it).
template <typename Config>
std::map<std::string, const ConfigKeyOf<Config>*> IndexKeys(const std::vector<ConfigKeyOf<Config>>& keys) {
  std::map<std::string, const ConfigKeyOf<Config>*> m;
  for (const ConfigKeyOf<Config>& k : keys) m.emplace(k.name, &k);
  return m;
}

// Applies a JSON object over cfg, all or nothing. `origin` prefixes error
// messages; `find` gives a key's row (nullptr: unknown).
template <typename Config, typename Find>
Status ApplyJson(std::string_view json_text, std::string_view origin, const Find& find, Config* cfg) {
  Config next = *cfg;
  CLUSTERD_RETURN_IF_ERROR(ApplyJsonObject(
      json_text, origin, [&](const std::string& key) { return find(key) != nullptr; },
      [&](const std::string& key, const std::string& value) { return find(key)->set(value, &next); }));
  *cfg = std::move(next);
  return Status::Ok();
}

// Parses flags (argv[1..]) and the --config file they name over a
// default-constructed Config: the file first, then each flag (an error names
// the flag). `aliases` maps another flag name to its key ("catalog" ->
// "catalog_file"); `is_switch` says which keys may be given alone ("--probe":
// true). `help` is set when --help was given (the config is then the default).
template <typename Config, typename Find>
StatusOr<Config> ParseArgs(const std::vector<std::string>& args, const Find& find,
                           const std::map<std::string, std::string>& aliases,
                           const std::function<bool(const std::string&)>& is_switch, bool* help) {
  auto split = SplitFlags(
      args, [&](const std::string& key) { return aliases.count(key) > 0 || find(key) != nullptr; }, is_switch);
  if (!split.ok()) return split.status();
  *help = split->help;
  Config cfg;
  if (split->help) return cfg;
  if (!split->config_path.empty()) {
    auto text = ReadFileToString(split->config_path);
    if (!text.ok()) return InvalidArgument("--config: " + text.status().message());
    CLUSTERD_RETURN_IF_ERROR(ApplyJson(*text, "config file " + split->config_path, find, &cfg));
  }
  for (auto [key, value] : split->flags) {
    if (auto alias = aliases.find(key); alias != aliases.end()) key = alias->second;
    Status st = find(key)->set(value, &cfg);
    if (!st.ok()) return InvalidArgument(FlagOf(key) + ": " + st.message());
  }
  return cfg;
}

// ------------------------------------------------------------- the docs ---

// What --help and the reference say of one key: its row's text with its
// default shown and its accepted values as the daemon words them.
struct KeyDoc {
  std::string name, section, value_name, help, accepted, chart_value;
  std::string default_value;  // "" when unset by default
  // --help adds the accepted values after the default (counts and durations
  // by default: their bounds).
  bool accepted_in_help = false;
};

template <typename Config>
std::vector<KeyDoc> KeyDocs(const std::vector<ConfigKeyOf<Config>>& keys) {
  std::vector<KeyDoc> docs;
  docs.reserve(keys.size());
  const Config defaults{};
  for (const ConfigKeyOf<Config>& k : keys) {
    docs.push_back(KeyDoc{k.name, k.section, k.value_name, k.help, k.accepted, k.chart_value, k.show(defaults),
                          k.value_name == "N" || k.value_name == "DUR"});
  }
  return docs;
}

// --help: `head`, one line per key by section (each key's help, its default
// and, where asked, the values it takes), wrapped at 100 columns, then
// `tail`.
std::string Usage(const std::vector<KeyDoc>& keys, const std::string& head, const std::string& tail);

// The reference tables of a docs page (markdown, one table per section).
std::string Reference(const std::vector<KeyDoc>& keys);

}  // namespace config_table
}  // namespace clusterd
