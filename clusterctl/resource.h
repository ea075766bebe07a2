// The one get/list/describe skeleton every resource shares. A resource file
// (clusterctl/resources/*.cc) describes its resource (its RPCs, its table
// columns, the flags that narrow its list, its describe page) and gets its
// commands from GetCommand/DescribeCommand/ShowCommand, so flags, paging,
// -o table|wide|json, "No X found." and the exit codes (NOT_FOUND -> 3,
// UNIMPLEMENTED -> 5 ...) behave the same for every resource.
//
// Paging is ClusterClient::ListAll*: a list call returns every page.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <google/protobuf/repeated_field.h>

#include "clusterctl/client.h"
#include "clusterctl/command.h"
#include "clusterctl/format.h"

namespace clusterctl {

// One column of a table. A wide-only column shows with -o wide; `cell` also
// gets the output mode (a long message is cut unless wide).
template <typename Item>
struct Column {
  std::string header;
  bool wide_only;
  std::function<std::string(const Item&, bool wide)> cell;
};

template <typename Item>
using Columns = std::vector<Column<Item>>;

template <typename Item>
Table MakeTable(const Columns<Item>& columns, bool wide) {
  std::vector<std::string> headers;
  for (const auto& col : columns) {
    if (wide || !col.wide_only) headers.push_back(col.header);
  }
  return Table(std::move(headers));
}

template <typename Item>
void AddRow(Table* t, const Columns<Item>& columns, bool wide, const Item& item) {
  std::vector<std::string> row;
  for (const auto& col : columns) {
    if (wide || !col.wide_only) row.push_back(col.cell(item, wide));
  }
  t->AddRow(std::move(row));
}

template <typename Item, typename Range>
Table MakeTable(const Columns<Item>& columns, bool wide, const Range& items) {
  Table t = MakeTable(columns, wide);
  for (const Item& item : items) AddRow(&t, columns, wide, item);
  return t;
}

// What every command that makes one call shares: make it (`call(client,
// &resp)`), turn a failure into its message and exit code, print the whole
// response with -o json, else hand it to `print` for the text form.
template <typename Resp, typename CallFn, typename PrintFn>
int CallAndPrint(Context& c, const std::string& rpc, CallFn&& call, PrintFn&& print) {
  Resp resp;
  if (auto st = call(c.Client(), &resp); !st.ok()) return RpcFailure(c, rpc, st);
  if (c.json()) {
    c.out << ToJson(resp, true) << "\n";
    return kExitOk;
  }
  print(resp);
  return kExitOk;
}

// The GetResp of a resource that is only listed (faults).
struct NoGet {};

// A resource with a list call and, unless GetResp is NoGet, a call that
// fetches one object by name or id. Built once per command table; read-only after.
template <typename Item, typename GetResp, typename ListReq, typename ListResp>
struct Resource {
  std::string singular;   // "node": "... not one node", "describe node: missing node name"
  std::string plural;     // "nodes": "get nodes NAME", "No nodes found."
  std::string operand;    // "NAME" or "ID": what names one object
  Columns<Item> columns;  // get's table, one row per object

  // get PLURAL: every page of the list. `read_filters` turns the list flags
  // into the request (or returns an exit code for a bad one); `filters` names
  // those flags, refused next to an operand.
  std::string list_rpc;
  std::function<grpc::Status(ClusterClient&, ListReq, ListResp*)> list;
  std::function<const google::protobuf::RepeatedPtrField<Item>&(const ListResp&)> items;
  std::vector<std::string> filters;
  std::function<std::optional<int>(Context&, ListReq*)> read_filters;

  // get PLURAL OPERAND (one row; -o json prints the object) and describe
  // SINGULAR OPERAND (-o json prints the whole answer). Unset for NoGet: the
  // defaults let a list-only resource leave them out of its initializer.
  std::string get_rpc = {};
  std::function<grpc::Status(ClusterClient&, const std::string&, GetResp*)> get = {};
  std::function<const Item&(const GetResp&)> item = {};
  std::function<void(Context&, const GetResp&)> describe = {};
};

namespace resource_internal {

inline std::string Lower(std::string s) {
  for (char& ch : s) ch = static_cast<char>(ch >= 'A' && ch <= 'Z' ? ch - 'A' + 'a' : ch);
  return s;
}

template <typename Item, typename GetResp, typename ListReq, typename ListResp>
int GetOne(Context& c, const Resource<Item, GetResp, ListReq, ListResp>& r) {
  for (const auto& f : r.filters) {
    if (!c.args.Has(f)) continue;
    std::string names;
    for (size_t i = 0; i < r.filters.size(); ++i) {
      names += (i == 0 ? "" : i + 1 == r.filters.size() ? " and " : ", ") + ("--" + r.filters[i]);
    }
    return Usage(c, "get " + r.plural + " " + r.operand + ": " + names + " filter lists, not one " + r.singular);
  }
  GetResp resp;
  if (auto st = r.get(c.Client(), c.args.positional[0], &resp); !st.ok()) return RpcFailure(c, r.get_rpc, st);
  const Item& item = r.item(resp);
  if (c.json()) {
    c.out << ToJson(item, true) << "\n";
    return kExitOk;
  }
  Table t = MakeTable(r.columns, c.wide());
  AddRow(&t, r.columns, c.wide(), item);
  t.Print(c.out);
  return kExitOk;
}

template <typename Item, typename GetResp, typename ListReq, typename ListResp>
int Get(Context& c, const Resource<Item, GetResp, ListReq, ListResp>& r) {
  constexpr bool kHasGet = !std::is_same_v<GetResp, NoGet>;
  if (auto e = CheckPositional(c, 0, kHasGet ? 1 : 0, "")) return *e;
  if constexpr (kHasGet) {
    if (c.args.positional.size() == 1) return GetOne(c, r);
  }
  ListReq req;
  if (r.read_filters) {
    if (auto e = r.read_filters(c, &req)) return *e;
  }
  return CallAndPrint<ListResp>(
      c, r.list_rpc, [&](ClusterClient& client, ListResp* resp) { return r.list(client, std::move(req), resp); },
      [&](const ListResp& resp) {
        if (r.items(resp).empty()) {
          c.err << "No " << r.plural << " found.\n";
          return;
        }
        MakeTable(r.columns, c.wide(), r.items(resp)).Print(c.out);
      });
}

template <typename Item, typename GetResp, typename ListReq, typename ListResp>
int Describe(Context& c, const Resource<Item, GetResp, ListReq, ListResp>& r) {
  if (auto e = CheckPositional(c, 1, 1, r.singular + " " + Lower(r.operand))) return *e;
  return CallAndPrint<GetResp>(
      c, r.get_rpc, [&](ClusterClient& client, GetResp* resp) { return r.get(client, c.args.positional[0], resp); },
      [&](const GetResp& resp) { r.describe(c, resp); });
}

}  // namespace resource_internal

// `get NAMES... [OPERAND]`: one row by name or id, else the whole list.
template <typename R>
Command GetCommand(std::shared_ptr<const R> r, std::vector<std::string> names, std::vector<FlagSpec> flags,
                   std::string help) {
  return Command{"get",
                 std::move(names),
                 r->operand,
                 std::move(flags),
                 [r](Context& c) { return resource_internal::Get(c, *r); },
                 std::move(help)};
}

// `describe NAMES... OPERAND`: one object with everything the server knows about it.
template <typename R>
Command DescribeCommand(std::shared_ptr<const R> r, std::vector<std::string> names, std::string help) {
  return Command{
      "describe",     std::move(names), r->operand, {}, [r](Context& c) { return resource_internal::Describe(c, *r); },
      std::move(help)};
}

// `get NAME` of a resource that is a single object (summary, admin state).
template <typename Resp>
Command ShowCommand(std::vector<std::string> names, std::string rpc,
                    std::function<grpc::Status(ClusterClient&, Resp*)> call,
                    std::function<void(Context&, const Resp&)> print, std::string help) {
  return Command{"get",
                 std::move(names),
                 "",
                 {},
                 [rpc = std::move(rpc), call = std::move(call), print = std::move(print)](Context& c) {
                   if (auto e = CheckPositional(c, 0, 0, "")) return *e;
                   return CallAndPrint<Resp>(c, rpc, call, [&](const Resp& resp) { print(c, resp); });
                 },
                 std::move(help)};
}

}  // namespace clusterctl
