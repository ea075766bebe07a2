#!/usr/bin/env python3
"""Validates the objects `helm template` rendered for the clusterd chart.

Usage: validate.py KUBE_VERSION RENDERED.yaml [RENDERED.yaml ...]

Every built-in Kubernetes object is validated strictly (unknown fields are errors) against
the OpenAPI schemas that the kubernetes-validate package bundles, offline. The Prometheus
Operator kinds (ServiceMonitor, PrometheusRule) and cert-manager's Certificate are CRDs the
package has no schema for: they are checked structurally here instead. On top of the schemas,
the chart's own promises are checked: the security contexts; RBAC only for ClusterD's
ServiceAccount and only the rules in ALLOWED_RULES (no wildcards, nothing else; patch on pods
only in a Role of ha.leaderLabel or for mindcluster.taskd.objects; configmaps only in the two Roles of the mindcluster
integration, read-only in the device plugin's namespace, in the namespaces and with the
integration config.json names, and read-only in one Role per namespace of its
mindcluster_public_fault_namespaces, or a read-only ClusterRole for ["*"] alone); a
service-account API token mounted only into the ClusterD pod and only when it has a role
(kubernetes.enabled, mindcluster.volcano.enabled, auth.tokenReview or ha.leaderLabel), never into NodeD, whose projected token must carry
an audience of its own (one the API server does not accept); TLS keys and tokens mounted
read-only; one ClusterD replica with the Recreate strategy, or (ha.enabled) a StatefulSet of
at least 2 with Parallel pod management, and never both; every StatefulSet governed by a
rendered headless Service that publishes not-ready pods, covered by a PodDisruptionBudget and
with stable (selector-only) labels on its immutable volumeClaimTemplates; private keys from
Secrets never world-readable; TLS to etcd all or nothing (ClusterD's etcd endpoints all https
or none, its etcd_* files only with https and all in its read-only config volume; a deployed
etcd serving https requires client and peer certificates, its certificate files in a read-only
Secret volume, its probes on the metrics port, which no NetworkPolicy opens); and that every
JSON payload (config.json, catalog.json, rules.json, the Grafana dashboard) parses.
Exits non-zero after printing every problem found.
"""
import json
import re
import sys

import kubernetes_validate
import yaml

CRD_KINDS = {("monitoring.coreos.com/v1", "ServiceMonitor"), ("monitoring.coreos.com/v1", "PrometheusRule"),
             ("cert-manager.io/v1", "Certificate"), ("cert-manager.io/v1", "Issuer")}
# What ClusterD may do with the Kubernetes API (docs/deploy.md, "Kubernetes API access"):
# (kind of role, apiGroup, resource) -> verbs. A rendered rule outside it is a problem.
ALLOWED_RULES = {
    # patch: mindcluster.taskd.objects (the label fault-type on TaskD jobs' pods).
    ("ClusterRole", "", "pods"): {"get", "list", "watch", "delete", "patch"},
    ("ClusterRole", "", "nodes"): {"get", "list", "watch", "patch"},
    ("ClusterRole", "", "nodes/status"): {"patch"},
    ("ClusterRole", "", "pods/eviction"): {"create"},
    # patch: mindcluster.taskd.objects (TaskD jobs' label and annotation).
    ("ClusterRole", "scheduling.volcano.sh", "podgroups"): {"get", "list", "watch", "patch"},
    ("ClusterRole", "", "events"): {"create", "patch", "get"},
    ("ClusterRole", "events.k8s.io", "events"): {"create", "patch", "get"},
    # The kubernetes actuator's DRA device taints.
    ("ClusterRole", "resource.k8s.io", "resourceslices"): {"list"},
    ("ClusterRole", "resource.k8s.io", "devicetaintrules"): {"get", "list", "create", "patch", "delete"},
    ("Role", "coordination.k8s.io", "leases"): {"get", "create", "update"},
    # ha.leaderLabel: each replica labels its own pod, and a new leader its predecessor's
    # (a Role of its own, in the release namespace).
    ("Role", "", "pods"): {"get", "patch"},
    # auth.tokenReview: who sent a bearer token (its own ClusterRole).
    ("ClusterRole", "authentication.k8s.io", "tokenreviews"): {"create"},
    # mindcluster.volcano.enabled: the device plugin's ConfigMaps read (get, list, watch), Volcano's
    # cluster-info ConfigMaps written; two Roles of their own, in those two namespaces.
    ("Role", "", "configmaps"): {"get", "list", "watch", "create", "update", "delete"},
    # mindcluster.volcano.publicFaultNamespaces ["*"]: public-fault ConfigMaps read in every
    # namespace (a ClusterRole of its own).
    # mindcluster.taskd.objects: TaskD jobs' reset-config ConfigMaps, get and update (in the
    # integration's ClusterRole).
    ("ClusterRole", "", "configmaps"): {"get", "list", "watch", "update"},
}
# mindcluster.jobSummary.enabled: job-summary-<job> ConfigMaps in every job's namespace (a
# ClusterRole of its own, <fullname>-mindcluster-jobs): listed at start, created, updated, deleted.
JOBS_SUFFIX = "-mindcluster-jobs"
JOBS_RULES = {("ClusterRole", "", "configmaps"): {"list", "create", "update", "delete"}}
# The ClusterRole rules that belong to the Kubernetes integration (all or nothing with its Role).
TOKEN_REVIEW = ("authentication.k8s.io", "tokenreviews")
# The Role of ha.leaderLabel (pods in the release namespace), apart from the integration's too.
LEADER_LABEL = ("", "pods")
# The Roles of the mindcluster integration (configmaps), apart from the Kubernetes integration's.
MINDCLUSTER = ("", "configmaps")
MINDCLUSTER_READ = {"get", "list", "watch"}
# The Roles (one per namespace) or ClusterRole (["*"]) on the public-fault ConfigMaps.
SYSTEM_SUFFIX = "-mindcluster-system"
# mindcluster.volcano.superPodConfigMaps: the Nodes' annotations read (a ClusterRole of its own).
NODES_SUFFIX = "-mindcluster-nodes"
NODES = ("", "nodes")
PUBLIC_FAULT_SUFFIX = "-mindcluster-publicfault"
PROM_DURATION = re.compile(r"^([0-9]+(ms|s|m|h|d|w|y))+$")

problems = []


def problem(obj, msg):
    problems.append(f"{obj.get('kind')}/{obj.get('metadata', {}).get('name')}: {msg}")


def check_service_monitor(obj):
    spec = obj.get("spec") or {}
    if not (spec.get("selector") or {}).get("matchLabels"):
        problem(obj, "spec.selector.matchLabels is empty")
    eps = spec.get("endpoints") or []
    if not eps:
        problem(obj, "spec.endpoints is empty")
    for i, ep in enumerate(eps):
        allowed = {"port", "path", "scheme", "interval", "scrapeTimeout", "relabelings", "metricRelabelings",
                   "authorization", "bearerTokenFile", "tlsConfig"}
        if set(ep) - allowed:
            problem(obj, f"endpoints[{i}] has unknown fields {sorted(set(ep) - allowed)}")
        if ep.get("scheme", "http") not in ("http", "https"):
            problem(obj, f"endpoints[{i}].scheme {ep.get('scheme')!r} is not http or https")
        # The Prometheus Operator's SafeTLSConfig: Secret or ConfigMap references (name, key).
        tls = ep.get("tlsConfig")
        if tls is not None:
            if ep.get("scheme") != "https":
                problem(obj, f"endpoints[{i}].tlsConfig without scheme https")
            if set(tls) - {"ca", "cert", "keySecret", "serverName", "insecureSkipVerify"}:
                problem(obj, f"endpoints[{i}].tlsConfig has unknown fields {sorted(set(tls) - {'ca', 'cert', 'keySecret', 'serverName', 'insecureSkipVerify'})}")
            for key in ("ca", "cert"):
                ref = tls.get(key)
                if ref is not None and (set(ref) - {"secret", "configMap"} or len(ref) != 1
                                        or set(next(iter(ref.values()))) != {"name", "key"}):
                    problem(obj, f"endpoints[{i}].tlsConfig.{key} must be one secret or configMap with name and key")
            if "keySecret" in tls and set(tls["keySecret"]) != {"name", "key"}:
                problem(obj, f"endpoints[{i}].tlsConfig.keySecret must have name and key")
            if ("cert" in tls) != ("keySecret" in tls):
                problem(obj, f"endpoints[{i}].tlsConfig: cert and keySecret go together")
        if not ep.get("port"):
            problem(obj, f"endpoints[{i}].port missing")
        auth = ep.get("authorization")
        if auth is not None and (auth.get("type") != "Bearer" or set(auth) - {"type", "credentials"}
                                 or set(auth.get("credentials") or {}) != {"name", "key"}):
            problem(obj, f"endpoints[{i}].authorization must be type Bearer with credentials name and key")
        if "authorization" in ep and "bearerTokenFile" in ep:
            problem(obj, f"endpoints[{i}]: authorization and bearerTokenFile are exclusive")
        for key in ("interval", "scrapeTimeout"):
            if key in ep and not PROM_DURATION.match(str(ep[key])):
                problem(obj, f"endpoints[{i}].{key} {ep[key]!r} is not a Prometheus duration")


def check_prometheus_rule(obj):
    groups = (obj.get("spec") or {}).get("groups") or []
    if not groups:
        problem(obj, "spec.groups is empty")
    names = set()
    for g in groups:
        if set(g) - {"name", "interval", "rules"}:
            problem(obj, f"group {g.get('name')} has unknown fields")
        for r in g.get("rules") or []:
            if set(r) - {"alert", "record", "expr", "for", "labels", "annotations"}:
                problem(obj, f"rule {r.get('alert')} has unknown fields {sorted(set(r))}")
            if not r.get("alert") or not isinstance(r.get("expr"), str) or not r["expr"].strip():
                problem(obj, f"rule {r!r} needs alert and expr")
                continue
            if r["alert"] in names:
                problem(obj, f"duplicate alert {r['alert']}")
            names.add(r["alert"])
            if "for" in r and not PROM_DURATION.match(str(r["for"])):
                problem(obj, f"alert {r['alert']}: for {r['for']!r} is not a Prometheus duration")
            if (r.get("labels") or {}).get("severity") not in ("critical", "warning", "info"):
                problem(obj, f"alert {r['alert']}: labels.severity must be critical, warning or info")
            if not (r.get("annotations") or {}).get("summary"):
                problem(obj, f"alert {r['alert']}: annotations.summary missing")
            expr = r["expr"]
            if expr.count("(") != expr.count(")") or expr.count("{") != expr.count("}"):
                problem(obj, f"alert {r['alert']}: unbalanced brackets in {expr!r}")


def check_certificate(obj):
    """cert-manager Certificate (tls.source=certManager), checked structurally."""
    spec = obj.get("spec") or {}
    allowed = {"secretName", "commonName", "dnsNames", "ipAddresses", "duration", "renewBefore", "usages",
               "issuerRef", "privateKey", "subject", "isCA"}
    if set(spec) - allowed:
        problem(obj, f"spec has unknown fields {sorted(set(spec) - allowed)}")
    if not spec.get("secretName"):
        problem(obj, "spec.secretName missing")
    ref = spec.get("issuerRef") or {}
    if not ref.get("name") or set(ref) - {"name", "kind", "group"}:
        problem(obj, f"spec.issuerRef {ref} needs a name (and only kind, group)")
    if spec.get("isCA"):
        # The chart's own CA (tls.certManager.issuerRef.name ""): cert-manager's default usages.
        if spec.get("usages") or spec.get("dnsNames") or not spec.get("commonName"):
            problem(obj, "a CA certificate takes a commonName, and no usages or dnsNames")
        return
    usages = set(spec.get("usages") or [])
    known = {"digital signature", "key encipherment", "server auth", "client auth"}
    if usages - known:
        problem(obj, f"unexpected usages {sorted(usages - known)}")
    if "client auth" not in usages:
        problem(obj, "usages lack client auth")
    for key in ("duration", "renewBefore"):
        if key in spec and not re.match(r"^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$", str(spec[key])):
            problem(obj, f"spec.{key} {spec[key]!r} is not a Go duration")
    if not spec.get("dnsNames") and spec.get("commonName") != "clusterd-agents":
        problem(obj, "a server certificate needs dnsNames")


def check_issuer(obj):
    """cert-manager Issuer (the chart's own CA issuer), checked structurally."""
    spec = obj.get("spec") or {}
    if len(spec) != 1 or not (spec.get("selfSigned") == {} or (spec.get("ca") or {}).get("secretName")):
        problem(obj, f"spec {spec} is neither selfSigned: {{}} nor ca: {{secretName}}")


def check_role(obj):
    for i, rule in enumerate(obj.get("rules") or []):
        if rule.get("resourceNames") or rule.get("nonResourceURLs"):
            problem(obj, f"rules[{i}]: resourceNames/nonResourceURLs are not expected")
        for group in rule.get("apiGroups") or []:
            for res in rule.get("resources") or []:
                allowed = ALLOWED_RULES.get((obj["kind"], group, res))
                if obj["metadata"]["name"].endswith(JOBS_SUFFIX):
                    allowed = JOBS_RULES.get((obj["kind"], group, res))
                verbs = set(rule.get("verbs") or [])
                if allowed is None:
                    problem(obj, f"rules[{i}]: {res!r} in group {group!r} is not in ALLOWED_RULES")
                elif verbs - allowed:
                    problem(obj, f"rules[{i}]: verbs {sorted(verbs - allowed)} on {group}/{res} are not allowed")


def component(obj):
    return ((obj.get("metadata") or {}).get("labels") or {}).get("app.kubernetes.io/component")


def is_clusterd(obj):
    """ClusterD's workload: the Deployment, or the StatefulSet of ha.enabled."""
    return obj.get("kind") == "Deployment" or (obj.get("kind") == "StatefulSet" and component(obj) == "clusterd")


def check_statefulsets(docs):
    """ha.enabled: ClusterD's StatefulSet and the deployed etcd's."""
    sets = [d for d in docs if d.get("kind") == "StatefulSet"]
    clusterd = [d for d in docs if is_clusterd(d)]
    if len(clusterd) > 1:
        for d in clusterd:
            problem(d, "ClusterD runs as a Deployment or (ha.enabled) a StatefulSet, exactly one of them")
    for s in sets:
        spec = s["spec"]
        pod_labels = spec["template"]["metadata"].get("labels") or {}
        svc = [d for d in docs if d.get("kind") == "Service" and d["metadata"]["name"] == spec.get("serviceName")]
        if not svc:
            problem(s, f"serviceName {spec.get('serviceName')!r} is not a rendered Service")
        elif svc[0]["spec"].get("clusterIP") != "None" or svc[0]["spec"].get("publishNotReadyAddresses") is not True:
            problem(s, "its governing Service must be headless and publish not-ready addresses")
        elif any(pod_labels.get(k) != v for k, v in (svc[0]["spec"].get("selector") or {}).items()):
            problem(s, "its governing Service does not select its pods")
        if spec.get("podManagementPolicy") != "Parallel":
            problem(s, "podManagementPolicy must be Parallel (standbys and bootstrapping members are not Ready)")
        if not any(d.get("kind") == "PodDisruptionBudget"
                   and (d["spec"].get("selector") or {}).get("matchLabels") == spec["selector"]["matchLabels"]
                   for d in docs):
            problem(s, "no PodDisruptionBudget selects its pods")
        for vct in spec.get("volumeClaimTemplates") or []:
            labels = (vct.get("metadata") or {}).get("labels") or {}
            if labels != spec["selector"]["matchLabels"]:
                problem(s, f"volumeClaimTemplate {vct['metadata'].get('name')}: labels must be the selector labels "
                           "(the templates are immutable; version labels would break upgrades)")
        if component(s) == "clusterd":
            if (spec.get("replicas") or 0) < 2:
                problem(s, "a highly available ClusterD needs at least 2 replicas")
            vols = {v["name"] for v in spec["template"]["spec"].get("volumes") or []}
            vcts = {v["metadata"]["name"] for v in spec.get("volumeClaimTemplates") or []}
            if "data" not in vols | vcts or ("data" in vols and "data" in vcts):
                problem(s, "the data volume must come from a volumeClaimTemplate (or an emptyDir), once")
        elif component(s) == "etcd":
            if (spec.get("replicas") or 0) % 2 != 1:
                problem(s, "etcd needs an odd number of members")


def check_rbac(docs):
    """Bindings grant only ClusterD's own ServiceAccount its own roles; tokens only follow roles."""
    deployments = [d for d in docs if is_clusterd(d)]
    if not deployments:
        return
    dep = deployments[0]
    pod = dep["spec"]["template"]["spec"]
    sa = (pod.get("serviceAccountName"), dep["metadata"].get("namespace"))
    roles = {(d["kind"], d["metadata"]["name"]) for d in docs if d.get("kind") in ("Role", "ClusterRole")}
    bound = False
    for b in (d for d in docs if d.get("kind") in ("RoleBinding", "ClusterRoleBinding")):
        subjects = [(s.get("kind"), s.get("name"), s.get("namespace")) for s in b.get("subjects") or []]
        if subjects != [("ServiceAccount", sa[0], sa[1])]:
            problem(b, f"subjects {subjects} must be exactly ClusterD's ServiceAccount {sa}")
        ref = b.get("roleRef") or {}
        if (ref.get("kind"), ref.get("name")) not in roles:
            problem(b, f"roleRef {ref} is not a role the chart renders")
        if b["kind"] == "RoleBinding" and ref.get("kind") != "Role":
            problem(b, "a RoleBinding must reference the chart's Role")
        bound = True
    # The integration's RBAC is all or nothing; the TokenReview ClusterRole and the leader-label
    # Role (ha.leaderLabel, with ClusterD's StatefulSet only) stand alone.
    def only(role, pair):
        return all((g, r) == pair for rule in role.get("rules") or []
                   for g in rule.get("apiGroups") or [] for r in rule.get("resources") or [])
    leader_label = [d for d in docs if d.get("kind") == "Role" and only(d, LEADER_LABEL)]
    mindcluster = [d for d in docs if d.get("kind") in ("Role", "ClusterRole") and only(d, MINDCLUSTER)]
    nodes = [d for d in docs if d.get("kind") == "ClusterRole" and only(d, NODES)
             and d["metadata"]["name"].endswith(NODES_SUFFIX)]
    integration = [d for d in docs if (d.get("kind") == "Role" and d not in leader_label and d not in mindcluster)
                   or (d.get("kind") == "ClusterRole" and not only(d, TOKEN_REVIEW) and d not in mindcluster
                       and d not in nodes)]
    check_mindcluster_nodes_rbac(docs, nodes)
    if integration and not ({"ClusterRole", "Role"} <= {d["kind"] for d in integration}
                            and sum(d.get("kind") == "ClusterRoleBinding" for d in docs)
                            >= sum(d.get("kind") == "ClusterRole" for d in docs)
                            and sum(d.get("kind") == "RoleBinding" for d in docs)
                            > len(leader_label) + sum(d["kind"] == "Role" for d in mindcluster)):
        problem(dep, "RBAC is all or nothing: ClusterRole, Role and both bindings")
    jobs = [d for d in mindcluster if d["metadata"]["name"].endswith(JOBS_SUFFIX)]
    mindcluster = [d for d in mindcluster if d not in jobs]
    check_mindcluster_jobs_rbac(docs, jobs)
    check_mindcluster_rbac(docs, mindcluster)
    if leader_label and dep.get("kind") != "StatefulSet":
        problem(leader_label[0], "the pods Role belongs to ha.leaderLabel (ClusterD's StatefulSet) only")
    for r in leader_label:
        if r["metadata"].get("namespace") != sa[1]:
            problem(r, f"the pods Role must be in ClusterD's namespace {sa[1]!r}")
        if not any(b.get("kind") == "RoleBinding" and (b.get("roleRef") or {}).get("name") == r["metadata"]["name"]
                   for b in docs):
            problem(r, "no RoleBinding grants the pods Role")
    if pod.get("automountServiceAccountToken") is not bound:
        problem(dep, f"automountServiceAccountToken must be {bound} (roles bound: {bound})")


def clusterd_config(docs):
    """ClusterD's config.json as the chart renders it ({} when absent or not JSON:
    check_json_payloads reports that)."""
    for d in docs:
        if (d.get("kind") == "ConfigMap" and component(d) == "clusterd"
                and "config.json" in (d.get("data") or {})):
            try:
                return json.loads(d["data"]["config.json"])
            except ValueError:
                return {}
    return {}


def check_mindcluster_nodes_rbac(docs, roles):
    """mindcluster_super_pod_cms: one <fullname>-mindcluster-nodes ClusterRole, get, list and watch
    on nodes only, bound cluster-wide, iff the setting is on."""
    cfg = clusterd_config(docs)
    if cfg.get("mindcluster_super_pod_cms") is not True:
        for r in roles:
            problem(r, "a nodes ClusterRole without mindcluster_super_pod_cms")
        return
    if len(roles) != 1:
        problem(docs[0], f"mindcluster_super_pod_cms: want one {NODES_SUFFIX} ClusterRole, got {len(roles)}")
        return
    r = roles[0]
    verbs = {v for rule in r.get("rules") or [] for v in rule.get("verbs") or []}
    if verbs != MINDCLUSTER_READ:
        problem(r, f"the nodes ClusterRole must be get, list, watch only, not {sorted(verbs)}")
    if not any(b.get("kind") == "ClusterRoleBinding" and (b.get("roleRef") or {}).get("name") == r["metadata"]["name"]
               for b in docs):
        problem(r, "no ClusterRoleBinding grants the nodes ClusterRole")


def check_mindcluster_jobs_rbac(docs, roles):
    """mindcluster.jobSummary.enabled: one <fullname>-mindcluster-jobs ClusterRole, bound by a
    ClusterRoleBinding, iff config.json runs the mindcluster-jobs integration."""
    cfg = clusterd_config(docs)
    on = "mindcluster-jobs" in (cfg.get("integrations") or [])
    if not on:
        for r in roles:
            problem(r, "a job-summary ClusterRole without the mindcluster-jobs integration in config.json")
        return
    if len(roles) != 1 or roles[0]["kind"] != "ClusterRole":
        problem(docs[0], "mindcluster-jobs needs exactly one ClusterRole <fullname>-mindcluster-jobs")
        return
    name = roles[0]["metadata"]["name"]
    if not any(b.get("kind") == "ClusterRoleBinding" and (b.get("roleRef") or {}).get("name") == name for b in docs):
        problem(roles[0], "no ClusterRoleBinding grants it")


def check_mindcluster_rbac(docs, roles):
    """mindcluster.volcano.enabled: exactly a read-only Role in the device plugin's namespace and a
    read-write one in the cluster-info namespace, each bound, iff config.json runs the integration;
    and for its mindcluster_public_fault_namespaces a read-only <fullname>-mindcluster-publicfault
    Role in each namespace listed, or a read-only ClusterRole for ["*"] alone, bound, and nothing
    without them."""
    cfg = clusterd_config(docs)
    on = "mindcluster" in (cfg.get("integrations") or [])
    if not on:
        for r in roles:
            problem(r, "a configmaps Role without the mindcluster integration in config.json")
        if "mindcluster_public_fault_namespaces" in cfg:
            problem(docs[0], "mindcluster_public_fault_namespaces without the mindcluster integration in config.json")
        return
    public = [r for r in roles if r["metadata"]["name"].endswith(PUBLIC_FAULT_SUFFIX)]
    check_public_fault_rbac(docs, public, cfg.get("mindcluster_public_fault_namespaces"))
    system = [r for r in roles if r["metadata"]["name"].endswith(SYSTEM_SUFFIX)]
    check_system_rbac(docs, system, cfg)
    roles = [r for r in roles if r not in public and r not in system]
    for r in roles:
        if r["kind"] != "Role":
            problem(r, f"configmaps cluster-wide only for public faults (a name ending {PUBLIC_FAULT_SUFFIX})")
    roles = [r for r in roles if r["kind"] == "Role"]
    want = {"read": cfg.get("mindcluster_device_info_namespace", "kube-system"),
            "write": cfg.get("mindcluster_cluster_info_namespace", "mindx-dl")}
    got = {}
    for r in roles:
        verbs = {v for rule in r.get("rules") or [] for v in rule.get("verbs") or []}
        got.setdefault("read" if verbs <= MINDCLUSTER_READ else "write", []).append(r)
    for kind, ns in want.items():
        rs = got.get(kind, [])
        if len(rs) != 1:
            problem(docs[0], f"mindcluster: want one {kind} configmaps Role in {ns!r}, got {len(rs)}")
            continue
        r = rs[0]
        if r["metadata"].get("namespace") != ns:
            problem(r, f"the mindcluster {kind} Role must be in {ns!r} (config.json), not {r['metadata'].get('namespace')!r}")
        if not any(b.get("kind") == "RoleBinding" and (b.get("roleRef") or {}).get("name") == r["metadata"]["name"]
                   and b["metadata"].get("namespace") == r["metadata"].get("namespace") for b in docs):
            problem(r, "no RoleBinding in its namespace grants the mindcluster Role")


def check_system_rbac(docs, roles, cfg):
    """MindCluster's operators' ConfigMaps (mindcluster_separation_policy_cm, _manual_info_cm,
    _statistics_cms, _scheduling_exception_cm, _super_pod_cms): one configmaps Role
    <fullname>-mindcluster-system in mindcluster_system_namespace, bound, iff one is on, with only the
    verbs needed: get, list and watch; create and update when ClusterD writes there; delete only for
    the manual-info list and the super-pod ConfigMaps."""
    keys = ("mindcluster_separation_policy_cm", "mindcluster_manual_info_cm", "mindcluster_statistics_cms",
            "mindcluster_scheduling_exception_cm", "mindcluster_super_pod_cms")
    if not any(cfg.get(k) is True for k in keys):
        for r in roles:
            problem(r, "a mindcluster system Role without any of " + ", ".join(keys))
        return
    if len(roles) != 1:
        problem(docs[0], f"mindcluster: want one {SYSTEM_SUFFIX} Role, got {len(roles)}")
        return
    r = roles[0]
    ns = cfg.get("mindcluster_system_namespace", "cluster-system")
    if r["kind"] != "Role" or r["metadata"].get("namespace") != ns:
        problem(r, f"the mindcluster system Role must be a Role in {ns!r}")
    want = set(MINDCLUSTER_READ)
    if any(cfg.get(k) is True for k in keys[1:]):
        want |= {"create", "update"}
    if cfg.get("mindcluster_manual_info_cm") is True or cfg.get("mindcluster_super_pod_cms") is True:
        want.add("delete")
    verbs = {v for rule in r.get("rules") or [] for v in rule.get("verbs") or []}
    resources = {x for rule in r.get("rules") or [] for x in rule.get("resources") or []}
    if verbs != want or resources != {"configmaps"}:
        problem(r, f"mindcluster system Role: verbs {sorted(verbs)} on {sorted(resources)}, want {sorted(want)} on configmaps")
    if not any(b.get("kind") == "RoleBinding" and (b.get("roleRef") or {}).get("name") == r["metadata"]["name"]
               and b["metadata"].get("namespace") == r["metadata"].get("namespace") for b in docs):
        problem(r, "no RoleBinding in its namespace grants the mindcluster system Role")


def check_public_fault_rbac(docs, roles, namespaces):
    """mindcluster_public_fault_namespaces: a list of namespace names, or ["*"]; each name gets a
    read-only configmaps Role bound in it, ["*"] a read-only ClusterRole bound cluster-wide."""
    if namespaces is not None and (not isinstance(namespaces, list) or not namespaces
                                   or not all(isinstance(n, str) for n in namespaces)
                                   or len(set(namespaces)) != len(namespaces)
                                   or ("*" in namespaces and len(namespaces) != 1)):
        problem(docs[0], f"mindcluster_public_fault_namespaces {namespaces!r}: a non-empty list of distinct names, or [\"*\"]")
        return
    namespaces = namespaces or []
    for r in roles:
        verbs = {v for rule in r.get("rules") or [] for v in rule.get("verbs") or []}
        if verbs != MINDCLUSTER_READ:
            problem(r, f"the public-fault configmaps {r['kind']} must be get, list, watch only, not {sorted(verbs)}")
    cluster = [r for r in roles if r["kind"] == "ClusterRole"]
    local = [r for r in roles if r["kind"] == "Role"]
    if namespaces == ["*"]:
        if len(cluster) != 1 or local:
            problem(docs[0], f"public faults in every namespace: want one ClusterRole and no Role, got {len(cluster)} and {len(local)}")
        for r in cluster:
            if not any(b.get("kind") == "ClusterRoleBinding" and (b.get("roleRef") or {}).get("name") == r["metadata"]["name"]
                       for b in docs):
                problem(r, "no ClusterRoleBinding grants the public-fault ClusterRole")
        return
    for r in cluster:
        problem(r, "a public-fault ClusterRole without [\"*\"] in mindcluster_public_fault_namespaces")
    got = sorted(r["metadata"].get("namespace") for r in local)
    if got != sorted(namespaces):
        problem(docs[0], f"public-fault Roles in {got}, want one in each of {sorted(namespaces)} (config.json)")
    for r in local:
        if not any(b.get("kind") == "RoleBinding" and (b.get("roleRef") or {}).get("name") == r["metadata"]["name"]
                   and b["metadata"].get("namespace") == r["metadata"].get("namespace") for b in docs):
            problem(r, "no RoleBinding in its namespace grants the public-fault Role")


def check_pod(obj, pod):
    spec = pod.get("spec") or {}
    # ClusterD's token follows its roles (check_rbac); NodeD and etcd never get one.
    if not is_clusterd(obj) and spec.get("automountServiceAccountToken") is not False:
        problem(obj, "pod must set automountServiceAccountToken: false")
    psc = spec.get("securityContext") or {}
    if (psc.get("seccompProfile") or {}).get("type") != "RuntimeDefault":
        problem(obj, "pod securityContext.seccompProfile must be RuntimeDefault")
    for c in (spec.get("initContainers") or []) + (spec.get("containers") or []):
        sc = c.get("securityContext") or {}
        where = f"container {c.get('name')}"
        if sc.get("readOnlyRootFilesystem") is not True:
            problem(obj, f"{where}: readOnlyRootFilesystem must be true")
        if sc.get("privileged"):
            # The API server rejects privileged with allowPrivilegeEscalation=false.
            if sc.get("allowPrivilegeEscalation") is False:
                problem(obj, f"{where}: privileged with allowPrivilegeEscalation=false is invalid")
            continue
        if sc.get("allowPrivilegeEscalation") is not False:
            problem(obj, f"{where}: allowPrivilegeEscalation must be false")
        if "ALL" not in ((sc.get("capabilities") or {}).get("drop") or []):
            problem(obj, f"{where}: capabilities must drop ALL")
        added = set((sc.get("capabilities") or {}).get("add") or [])
        run_as_root = sc.get("runAsUser", psc.get("runAsUser")) == 0
        if run_as_root:
            if added - {"CHOWN"}:
                problem(obj, f"{where}: a root container may add only CHOWN, not {sorted(added)}")
        else:
            if added:
                problem(obj, f"{where}: a non-root container gets no capabilities (adds {sorted(added)})")
            if sc.get("runAsNonRoot", psc.get("runAsNonRoot")) is not True:
                problem(obj, f"{where}: runAsNonRoot must be true")
        if not (c.get("resources") or {}).get("requests"):
            problem(obj, f"{where}: resources.requests missing")
    for c in spec.get("containers") or []:
        if not c.get("readinessProbe") or not c.get("livenessProbe"):
            problem(obj, f"container {c.get('name')}: readiness and liveness probes required")
    for v in spec.get("volumes") or []:
        sources = (v.get("projected") or {}).get("sources") or []
        for src in sources:
            sat = src.get("serviceAccountToken")
            if sat is not None:
                # Without an audience the token is an API token of the ServiceAccount.
                aud = sat.get("audience") or ""
                if not aud or aud in ("api", "https://kubernetes.default.svc", "https://kubernetes.default.svc.cluster.local"):
                    problem(obj, f"volume {v['name']}: a projected token needs an audience of its own, not {aud!r}")
        # Private keys (tls.key and the like) are readable by the owner and group (fsGroup) only.
        for items in [(src.get("secret") or {}).get("items") or [] for src in sources] + [(v.get("secret") or {}).get("items") or []]:
            for it in items:
                if it.get("key", "").endswith(".key") and (it.get("mode") is None or it["mode"] & 0o007):
                    problem(obj, f"volume {v['name']}: {it['key']} must not be world-readable (mode {it.get('mode')})")
        if sources or "secret" in v:
            for c in spec.get("containers") or []:
                for m in c.get("volumeMounts") or []:
                    if m.get("name") == v["name"] and not m.get("readOnly"):
                        problem(obj, f"volume {v['name']} (secrets or tokens) must be mounted read-only")
        if "hostPath" in v:
            mounts = [m for c in spec.get("containers") or [] for m in c.get("volumeMounts") or []
                      if m.get("name") == v["name"]]
            writable = [m for m in mounts if not m.get("readOnly")]
            if writable and v["name"] != "state":
                problem(obj, f"hostPath volume {v['name']} must be mounted read-only")


ETCD_FILE_KEYS = ("etcd_ca_file", "etcd_cert_file", "etcd_key_file")


def check_etcd_tls(docs):
    """TLS to etcd is all or nothing, on ClusterD's side and on the deployed etcd's."""
    for wl in (d for d in docs if is_clusterd(d)):
        spec = wl["spec"]["template"]["spec"]
        vol = next((v for v in spec.get("volumes") or [] if v["name"] == "config"), None)
        mount = next((m for c in spec.get("containers") or [] for m in c.get("volumeMounts") or []
                      if m.get("name") == "config"), None)
        cms = [d for d in docs if d.get("kind") == "ConfigMap" and "config.json" in (d.get("data") or {})
               and any((s.get("configMap") or {}).get("name") == d["metadata"]["name"]
                       for s in ((vol or {}).get("projected") or {}).get("sources") or [])]
        for cm in cms:
            try:
                cfg = json.loads(cm["data"]["config.json"])
            except json.JSONDecodeError:
                continue  # check_json_payloads says so
            eps = cfg.get("etcd_endpoints") or []
            https = [e.startswith("https://") for e in eps]
            if any(https) and not all(https):
                problem(cm, f"etcd_endpoints mix https:// and plaintext: {eps}")
            files = {k: cfg[k] for k in ETCD_FILE_KEYS if k in cfg}
            if files and not (https and all(https)):
                problem(cm, f"{sorted(files)} need https:// etcd_endpoints")
            if ("etcd_cert_file" in cfg) != ("etcd_key_file" in cfg):
                problem(cm, "etcd_cert_file and etcd_key_file go together")
            projected = {mount["mountPath"] + "/" + it["path"]
                         for s in ((vol or {}).get("projected") or {}).get("sources") or []
                         for it in (s.get("secret") or {}).get("items") or []} if mount else set()
            for k, path in files.items():
                if path not in projected or not mount.get("readOnly"):
                    problem(wl, f"config.json {k} {path!r} is not a Secret item of the read-only config volume")
    for s in (d for d in docs if d.get("kind") == "StatefulSet" and component(d) == "etcd"):
        pod = s["spec"]["template"]["spec"]
        c = pod["containers"][0]
        args = {}
        for a in c.get("args") or []:
            k, _, v = a.partition("=")
            args[k] = v if _ else "true"
        client = [args.get(k, "") for k in ("--listen-client-urls", "--advertise-client-urls")]
        peer = [args.get(k, "") for k in ("--listen-peer-urls", "--initial-advertise-peer-urls")] + \
            [m.split("=", 1)[1] for m in args.get("--initial-cluster", "").split(",") if "=" in m]
        for what, urls, need in (
                ("client", client, ("--cert-file", "--key-file", "--trusted-ca-file", "--client-cert-auth")),
                ("peer", peer, ("--peer-cert-file", "--peer-key-file", "--peer-trusted-ca-file",
                                "--peer-client-cert-auth"))):
            tls = [u.startswith("https://") for u in urls]
            if any(tls) and not all(tls):
                problem(s, f"etcd's {what} URLs mix https and http: {urls}")
            if any(tls):
                missing = [k for k in need if not args.get(k) or args.get(k) == "false"]
                if missing:
                    problem(s, f"etcd serves {what} TLS without {missing}")
        # The certificate files come from a read-only Secret volume.
        mounts = {m["name"]: m for m in c.get("volumeMounts") or []}
        secret_dirs = [mounts[v["name"]]["mountPath"] + "/" for v in pod.get("volumes") or []
                       if "secret" in v and v["name"] in mounts and mounts[v["name"]].get("readOnly")]
        for k, v in args.items():
            if k.endswith("-file") and not any(v.startswith(d) for d in secret_dirs):
                problem(s, f"etcd {k}={v} is not in a read-only Secret volume")
        # The probes use the plaintext metrics port, apart from the client port (etcd's API).
        metrics = args.get("--listen-metrics-urls", "")
        if not metrics.startswith("http://") or metrics.rsplit(":", 1)[-1] == args.get("--listen-client-urls", "").rsplit(":", 1)[-1]:
            problem(s, f"--listen-metrics-urls {metrics!r} must be a plaintext port of its own (the probes)")
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            port = ((c.get(probe) or {}).get("httpGet") or {}).get("port")
            if port is not None and port != "metrics":
                problem(s, f"{probe} must use the metrics port, not {port!r}")
        labels = s["spec"]["selector"]["matchLabels"]
        for np in (d for d in docs if d.get("kind") == "NetworkPolicy"):
            sel = ((np.get("spec") or {}).get("podSelector") or {}).get("matchLabels") or {}
            if sel and all(labels.get(k) == v for k, v in sel.items()):
                for rule in np["spec"].get("ingress") or []:
                    ports = [p.get("port") for p in rule.get("ports") or []]
                    if not ports or "metrics" in ports or 2381 in ports:
                        problem(np, f"an ingress rule opens etcd's metrics port (or every port): {ports}")


def check_json_payloads(obj):
    for key, value in (obj.get("data") or {}).items():
        if key.endswith(".json"):
            try:
                parsed = json.loads(value)
            except json.JSONDecodeError as e:
                problem(obj, f"data[{key}] is not valid JSON: {e}")
                continue
            if key == "config.json":
                for k, v in parsed.items():
                    if not (isinstance(v, (str, bool)) or (isinstance(v, int) and v >= 0)
                            or (isinstance(v, list) and all(isinstance(x, str) for x in v))):
                        problem(obj, f"config.json key {k}: values must be strings, booleans, "
                                     "non-negative integers or lists of strings")
            if key.endswith("dashboard.json") or key == "clusterd.json":
                if not parsed.get("panels") or not parsed.get("title"):
                    problem(obj, f"data[{key}] is not a Grafana dashboard (no title/panels)")


def main():
    version, files = sys.argv[1], sys.argv[2:]
    kinds = []
    for path in files:
        with open(path) as f:
            docs = [d for d in yaml.safe_load_all(f) if d]
        if not docs:
            problems.append(f"{path}: rendered nothing")
        for obj in docs:
            kinds.append(obj.get("kind"))
            key = (obj.get("apiVersion"), obj.get("kind"))
            if key in CRD_KINDS:
                {"ServiceMonitor": check_service_monitor, "PrometheusRule": check_prometheus_rule,
                 "Certificate": check_certificate, "Issuer": check_issuer}[key[1]](obj)
            else:
                try:
                    kubernetes_validate.validate(obj, version, strict=True)
                except kubernetes_validate.ValidationError as e:
                    path_s = ".".join(str(p) for p in e.path)
                    problem(obj, f"schema (Kubernetes {version}): {path_s}: {e.message}")
                except kubernetes_validate.SchemaNotFoundError:
                    problem(obj, f"no Kubernetes {version} schema for {key}: an unexpected kind")
            kind = obj.get("kind")
            if kind in ("Role", "ClusterRole"):
                check_role(obj)
            if kind == "ServiceAccount" and obj.get("automountServiceAccountToken") is not False:
                problem(obj, "automountServiceAccountToken must be false")
            if kind == "Deployment":
                spec = obj["spec"]
                if spec.get("replicas") != 1 or (spec.get("strategy") or {}).get("type") != "Recreate":
                    problem(obj, "ClusterD must run 1 replica with strategy Recreate")
            if kind in ("Deployment", "DaemonSet", "StatefulSet"):
                check_pod(obj, obj["spec"]["template"])
            if kind == "ConfigMap":
                check_json_payloads(obj)
        check_rbac(docs)
        check_statefulsets(docs)
        check_etcd_tls(docs)
    for p in problems:
        print(f"  FAIL {p}")
    summary = ", ".join(f"{k} x{kinds.count(k)}" for k in sorted(set(kinds), key=str))
    print(f"  {len(kinds)} objects against Kubernetes {version}: {summary}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
