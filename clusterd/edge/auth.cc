#include "clusterd/edge/auth.h"

#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <unordered_map>

#include <openssl/bio.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include "clusterd/edge/authz.h"
#include "common/logging.h"

namespace clusterd {
namespace {

constexpr std::string_view kNodeNameExtra = "authentication.kubernetes.io/node-name";
// Bounds of the caches a client could otherwise grow: distinct client
// certificates and distinct reviewed tokens remembered.
constexpr size_t kMaxCachedCerts = 4096;
constexpr size_t kMaxCachedReviews = 16384;
// TokenReview calls in flight at once. Each holds a gRPC thread until the
// API answers (up to its 5 s deadline); beyond this a caller is told to retry
// (UNAVAILABLE) instead of stalling every other call, e.g. when thousands of
// agents reconnect after a restart.
constexpr int kMaxReviewsInFlight = 16;

bool IEquals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

// One CSV line of a kube-apiserver --token-auth-file: token,user,uid then an
// optional groups column, itself comma-separated inside double quotes.
std::vector<std::string> SplitCsvLine(const std::string& line) {
  std::vector<std::string> fields;
  std::string cur;
  bool quoted = false;
  for (char ch : line) {
    if (ch == '"') {
      quoted = !quoted;
    } else if (ch == ',' && !quoted) {
      fields.push_back(std::move(cur));
      cur.clear();
    } else {
      cur += ch;
    }
  }
  fields.push_back(std::move(cur));
  for (auto& f : fields) {
    while (!f.empty() && (f.back() == ' ' || f.back() == '\r')) f.pop_back();
    while (!f.empty() && f.front() == ' ') f.erase(f.begin());
  }
  return fields;
}

struct TokenEntry {
  std::string user;
  std::vector<std::string> groups;
};

// The token file, re-read when its modification time or size changes.
class TokenFile {
 public:
  explicit TokenFile(std::string path) : path_(std::move(path)) {}

  // The entry for `token`, or nullptr. Thread-safe.
  std::optional<TokenEntry> Find(std::string_view token) {
    std::lock_guard<std::mutex> lock(mu_);
    MaybeReload();
    auto it = tokens_.find(std::string(token));
    if (it == tokens_.end()) return std::nullopt;
    return it->second;
  }

 private:
  void MaybeReload() {
    struct stat st {};
    if (::stat(path_.c_str(), &st) != 0) {
      if (!missing_logged_)
        GetLogger("auth")->warn("token file {}: cannot stat; keeping {} tokens", path_, tokens_.size());
      missing_logged_ = true;
      return;
    }
    missing_logged_ = false;
    const int64_t stamp = static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
    if (stamp == stamp_ && st.st_size == size_) return;
    std::ifstream in(path_);
    if (!in) return;
    std::unordered_map<std::string, TokenEntry> tokens;
    std::string line;
    int n = 0, bad = 0;
    while (std::getline(in, line)) {
      ++n;
      if (line.empty() || line[0] == '#') continue;
      auto f = SplitCsvLine(line);
      if (f.size() < 3 || f[0].empty() || f[1].empty()) {
        ++bad;
        continue;
      }
      TokenEntry e{f[1], {}};
      if (f.size() >= 4) {
        std::istringstream groups(f[3]);
        std::string g;
        while (std::getline(groups, g, ',')) {
          if (!g.empty()) e.groups.push_back(g);
        }
      }
      tokens[f[0]] = std::move(e);
    }
    GetLogger("auth")->info("token file {}: {} tokens{}", path_, tokens.size(),
                            bad ? fmt::format(", {} malformed lines skipped", bad) : std::string());
    tokens_ = std::move(tokens);
    stamp_ = stamp;
    size_ = st.st_size;
  }

  const std::string path_;
  std::mutex mu_;
  std::unordered_map<std::string, TokenEntry> tokens_;  // guarded by mu_
  int64_t stamp_ = -1;
  off_t size_ = -1;
  bool missing_logged_ = false;
};

struct CertIdentity {
  std::string cn;
  std::vector<std::string> orgs;
};

std::string EntryText(X509_NAME_ENTRY* entry) {
  unsigned char* utf8 = nullptr;
  int len = ASN1_STRING_to_UTF8(&utf8, X509_NAME_ENTRY_get_data(entry));
  if (len < 0 || utf8 == nullptr) return {};
  std::string out(reinterpret_cast<char*>(utf8), static_cast<size_t>(len));
  OPENSSL_free(utf8);
  return out;
}

std::optional<CertIdentity> ParseCert(std::string_view pem) {
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  if (bio == nullptr) return std::nullopt;
  X509* cert = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  if (cert == nullptr) return std::nullopt;
  CertIdentity id;
  X509_NAME* subject = X509_get_subject_name(cert);
  for (int i = -1; (i = X509_NAME_get_index_by_NID(subject, NID_commonName, i)) >= 0;) {
    id.cn = EntryText(X509_NAME_get_entry(subject, i));  // the last CN, as Kubernetes does
  }
  for (int i = -1; (i = X509_NAME_get_index_by_NID(subject, NID_organizationName, i)) >= 0;) {
    std::string o = EntryText(X509_NAME_get_entry(subject, i));
    if (!o.empty()) id.orgs.push_back(std::move(o));
  }
  X509_free(cert);
  return id;
}

class AuthenticatorImpl final : public Authenticator {
 public:
  AuthenticatorImpl(AuthOptions options, MetricsRegistry* metrics) : options_(std::move(options)) {
    if (!options_.token_file.empty()) tokens_ = std::make_unique<TokenFile>(options_.token_file);
    if (metrics != nullptr) {
      const char* help = "Calls by authentication and authorization result.";
      allowed_ = &metrics->AddCounter("clusterd_auth_requests_total", help, {{"result", "allowed"}});
      unauthenticated_ = &metrics->AddCounter("clusterd_auth_requests_total", help, {{"result", "unauthenticated"}});
      denied_ = &metrics->AddCounter("clusterd_auth_requests_total", help, {{"result", "denied"}});
      reviews_ = &metrics->AddCounter("clusterd_auth_token_reviews_total", "TokenReview calls to the Kubernetes API.");
      review_errors_ = &metrics->AddCounter("clusterd_auth_token_review_errors_total",
                                            "TokenReview calls that failed (API unreachable, refused).");
      review_busy_ = &metrics->AddCounter("clusterd_auth_token_review_busy_total",
                                          "Calls told to retry because too many TokenReviews were in flight.");
    }
  }

  bool enforcing() const override { return !options_.insecure; }

  StatusOr<Principal> Authenticate(const grpc::ServerContextBase& ctx, std::string_view claimed_actor) const override {
    Principal p;
    p.peer = ctx.peer();
    if (options_.insecure) {
      // Development mode: whoever the client says it is, with every role.
      if (!claimed_actor.empty()) {
        p.kind = Principal::Kind::kClaimed;
        p.name = std::string(claimed_actor);
      }
      p.roles = kAllRoles;
      return p;
    }
    const auto& md = ctx.client_metadata();
    auto it = md.find("authorization");
    if (it != md.end()) {
      std::string_view value(it->second.data(), it->second.size());
      if (value.size() < 7 || !IEquals(value.substr(0, 7), "bearer ")) {
        return Status(StatusCode::kUnauthenticated, "authorization: only \"Bearer <token>\" is accepted");
      }
      return AuthenticateToken(value.substr(7), p.peer);
    }
    auto auth = ctx.auth_context();
    if (auth != nullptr && auth->IsPeerAuthenticated()) {
      auto pems = auth->FindPropertyValues("x509_pem_cert");
      return CertPrincipal(
          pems.empty() ? std::string_view() : std::string_view(pems.front().data(), pems.front().size()), std::move(p));
    }
    return p;  // anonymous: only the methods anyone may call
  }

  StatusOr<Principal> AuthenticateToken(std::string_view raw, std::string peer) const override {
    std::string_view token = raw;
    while (!token.empty() && token.front() == ' ') token.remove_prefix(1);
    while (!token.empty() && token.back() == ' ') token.remove_suffix(1);
    if (token.empty()) return Status(StatusCode::kUnauthenticated, "empty bearer token");
    Principal p;
    p.peer = std::move(peer);
    if (tokens_ != nullptr) {
      if (auto e = tokens_->Find(token)) {
        p.kind = Principal::Kind::kAuthenticated;
        p.method = "token-file";
        p.name = e->user;
        p.groups = e->groups;
        AssignRoles(options_.bindings, &p);
        return p;
      }
    }
    if (options_.reviewer != nullptr) {
      auto r = Review(std::string(token));
      if (!r.ok()) return Status(StatusCode::kUnavailable, "token review: " + r.status().message());
      if (!r->authenticated) {
        return Status(StatusCode::kUnauthenticated,
                      "bearer token not accepted" + (r->error.empty() ? std::string() : ": " + r->error));
      }
      p.kind = Principal::Kind::kAuthenticated;
      p.method = "token-review";
      p.name = r->user;
      p.groups = r->groups;
      AssignRoles(options_.bindings, &p);
      if (!r->node_name.empty() && IsAgentServiceAccount(r->user)) {
        p.roles |= RoleBit(Role::kAgent);
        p.node = r->node_name;
      }
      return p;
    }
    return Status(StatusCode::kUnauthenticated, "unknown bearer token");
  }

  Status AuthorizeHttp(const HttpRequest& req, RoleMask roles, std::string_view what) const override {
    if (options_.insecure) return Status::Ok();
    auto who = AuthenticateHttp(req);
    if (!who.ok()) {
      Count(unauthenticated_);
      Audit(false, req.peer, "-", what, who.status().message());
      return who.status();
    }
    const RoleMask allowed = roles | RoleBit(Role::kAdmin);
    if ((who->roles & allowed) == 0) {
      const std::string why = "roles " + RoleMaskNames(who->roles) + "; needs " + RoleMaskNames(allowed);
      Count(denied_);
      Audit(false, req.peer, who->name, what, why);
      return Status(StatusCode::kPermissionDenied, who->name + " may not " + std::string(what) + ": " + why);
    }
    Count(allowed_);
    return Status::Ok();
  }

  StatusOr<Principal> Authorize(const grpc::ServerContextBase& ctx, std::string_view method,
                                std::string_view claimed_actor) const override {
    const MethodRule* rule = FindMethodRule(method);
    auto who = Authenticate(ctx, claimed_actor);
    if (!who.ok()) {
      Count(unauthenticated_);
      Audit(false, ctx.peer(), "-", method, who.status().message());
      return who.status();
    }
    Principal& p = *who;
    if (rule == nullptr) return Deny(p, method, "method is not in the authorization table");
    if (rule->anyone || options_.insecure) {
      Count(allowed_);
      return who;
    }
    if (p.kind == Principal::Kind::kAnonymous) {
      Count(unauthenticated_);
      Audit(false, p.peer, "-", method, "no client certificate or bearer token");
      return Status(StatusCode::kUnauthenticated,
                    std::string(method) + " needs an identity: a client certificate or a bearer token");
    }
    const RoleMask allowed = rule->roles | RoleBit(Role::kAdmin);
    if ((p.roles & allowed) == 0) {
      return Deny(p, method, "roles " + RoleMaskNames(p.roles) + "; needs " + RoleMaskNames(allowed));
    }
    Count(allowed_);
    // Every write is audited; reads (a viewer's methods) would drown it.
    if ((rule->roles & RoleBit(Role::kViewer)) == 0) {
      Audit(true, p.peer, p.name, method,
            claimed_actor.empty() || claimed_actor == p.name ? std::string()
                                                             : "claimed actor \"" + std::string(claimed_actor) + "\"");
    }
    return who;
  }

  Status Deny(const Principal& p, std::string_view method, std::string why) const override {
    Count(denied_);
    Audit(false, p.peer, p.name.empty() ? "-" : p.name, method, why);
    return Status(StatusCode::kPermissionDenied, (p.name.empty() ? std::string("anonymous") : p.name) +
                                                     " may not call " + std::string(method) + ": " + why);
  }

 private:
  static void Count(Counter* c) {
    if (c != nullptr) c->Inc();
  }

  static void Audit(bool allowed, std::string_view peer, std::string_view who, std::string_view method,
                    std::string_view detail) {
    auto log = GetLogger("audit");
    if (allowed) {
      log->info("allow principal={} method={} peer={}{}{}", who, method, peer, detail.empty() ? "" : " ", detail);
    } else {
      log->warn("deny principal={} method={} peer={} reason=\"{}\"", who, method, peer, detail);
    }
  }

  // `p` (its peer set) as the subject of a verified client certificate (PEM):
  // user = CN, groups = O.
  StatusOr<Principal> CertPrincipal(std::string_view pem, Principal p) const {
    auto id = pem.empty() ? std::nullopt : CertIdentityOf(pem);
    if (!id || id->cn.empty()) {
      return Status(StatusCode::kUnauthenticated, "client certificate has no subject common name");
    }
    p.kind = Principal::Kind::kAuthenticated;
    p.method = "x509";
    p.name = id->cn;
    p.groups = id->orgs;
    AssignRoles(options_.bindings, &p);
    return p;
  }

  // The principal of an HTTP request: its bearer token, else its client
  // certificate (verified by the TLS handshake).
  StatusOr<Principal> AuthenticateHttp(const HttpRequest& req) const {
    const std::string_view authorization = req.authorization;
    if (!authorization.empty()) {
      // The scheme is case-insensitive (RFC 7235 section 2.1), as on gRPC.
      constexpr std::string_view kBearer = "Bearer ";
      if (authorization.size() < kBearer.size() || !IEquals(authorization.substr(0, kBearer.size()), kBearer)) {
        return Status(StatusCode::kUnauthenticated, "Authorization is not \"Bearer <token>\"");
      }
      return AuthenticateToken(authorization.substr(kBearer.size()), req.peer);
    }
    if (!req.client_certificate_pem.empty()) {
      Principal p;
      p.peer = req.peer;
      return CertPrincipal(req.client_certificate_pem, std::move(p));
    }
    return Status(StatusCode::kUnauthenticated, "no client certificate or bearer token");
  }

  bool IsAgentServiceAccount(const std::string& user) const {
    for (const auto& sa : options_.agent_service_accounts) {
      auto slash = sa.find('/');
      if ("system:serviceaccount:" + sa.substr(0, slash) + ":" + sa.substr(slash + 1) == user) return true;
    }
    return false;
  }

  std::optional<CertIdentity> CertIdentityOf(std::string_view pem) const {
    std::lock_guard<std::mutex> lock(cert_mu_);
    auto it = certs_.find(std::string(pem));
    if (it != certs_.end()) return it->second;
    auto id = ParseCert(pem);
    if (!id) return id;
    if (certs_.size() >= kMaxCachedCerts) certs_.clear();
    certs_.emplace(std::string(pem), *id);
    return id;
  }

  StatusOr<TokenReviewResult> Review(const std::string& token) const {
    const auto now = std::chrono::steady_clock::now();
    {
      std::lock_guard<std::mutex> lock(review_mu_);
      auto it = reviews_cache_.find(token);
      if (it != reviews_cache_.end() && it->second.first > now) return it->second.second;
    }
    if (reviews_in_flight_.fetch_add(1) >= kMaxReviewsInFlight) {
      reviews_in_flight_.fetch_sub(1);
      Count(review_busy_);
      return Unavailable("too many token reviews in flight; retry");
    }
    Count(reviews_);
    auto r = options_.reviewer->Review(token);
    reviews_in_flight_.fetch_sub(1);
    if (!r.ok()) {
      Count(review_errors_);
      return r;
    }
    std::lock_guard<std::mutex> lock(review_mu_);
    if (reviews_cache_.size() >= kMaxCachedReviews) {
      std::erase_if(reviews_cache_, [&](const auto& kv) { return kv.second.first <= now; });
      if (reviews_cache_.size() >= kMaxCachedReviews) reviews_cache_.clear();
    }
    // A refusal is remembered briefly, so a client retrying a bad token does
    // not turn into a TokenReview per call.
    auto ttl = r->authenticated
                   ? options_.review_cache_ttl
                   : std::min<std::chrono::nanoseconds>(options_.review_cache_ttl, std::chrono::seconds(10));
    reviews_cache_[token] = {now + ttl, *r};
    return r;
  }

  const AuthOptions options_;
  std::unique_ptr<TokenFile> tokens_;
  mutable std::mutex cert_mu_;
  mutable std::map<std::string, CertIdentity> certs_;  // guarded by cert_mu_
  mutable std::mutex review_mu_;
  mutable std::unordered_map<std::string, std::pair<std::chrono::steady_clock::time_point, TokenReviewResult>>
      reviews_cache_;  // guarded by review_mu_
  Counter* allowed_ = nullptr;
  Counter* unauthenticated_ = nullptr;
  Counter* denied_ = nullptr;
  Counter* reviews_ = nullptr;
  Counter* review_errors_ = nullptr;
  Counter* review_busy_ = nullptr;
  mutable std::atomic<int> reviews_in_flight_{0};
};

}  // namespace

std::unique_ptr<Authenticator> MakeAuthenticator(AuthOptions options, MetricsRegistry* metrics) {
  return std::make_unique<AuthenticatorImpl>(std::move(options), metrics);
}

std::unique_ptr<Authenticator> MakeClaimedActorAuthenticator() {
  AuthOptions o;
  o.insecure = true;
  return MakeAuthenticator(std::move(o), nullptr);
}

RoleMask MetricsRoles(std::string_view metrics_role) {
  if (metrics_role == "operator") return RoleBit(Role::kOperator) | RoleBit(Role::kAdmin);
  if (metrics_role == "admin") return RoleBit(Role::kAdmin);
  return kReaderRoles;
}

int HttpStatusOfRefusal(const Status& st) {
  switch (st.code()) {
    case StatusCode::kPermissionDenied: return 403;
    case StatusCode::kUnavailable: return 503;
    default: return 401;
  }
}

bool MayActForNode(const Principal& p, std::string_view node) {
  if ((p.roles & RoleBit(Role::kAdmin)) != 0) return true;
  return (p.roles & RoleBit(Role::kAgent)) != 0 && p.node == node;
}

bool MayAttachJob(const Principal& p, std::string_view job) {
  if ((p.roles & RoleBit(Role::kAdmin)) != 0) return true;
  return (p.roles & RoleBit(Role::kJobAgent)) != 0 && p.job == job;
}

bool MayReportAs(const Principal& p, std::string_view reporter) {
  if ((p.roles & RoleBit(Role::kAdmin)) != 0) return true;
  return (p.roles & RoleBit(Role::kReporter)) != 0 && ReporterScope(p) == reporter;
}

}  // namespace clusterd
