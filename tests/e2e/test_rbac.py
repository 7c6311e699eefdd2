"""The shipped RBAC (manifests/rbac), asked of the real API server's authorizer with
`kubectl auth can-i --as=<the ServiceAccount>`: what the operator and the Dedicated
schedulers may do (what scheduling, preemption, status, events, leader election, the
webhook and Dedicated mode need), and what they may not (issue 26, finding 2: the
operator could mint any token, bind any role, patch any webhook and read every Secret).
The bar is kube-scheduler's system:kube-scheduler role (docs/security.md)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from polsched.controller.process.options import DEDICATED_LEASE_NAMESPACE
from tests.conftest import Cluster
from tests.e2e.rbac import DEDICATED_SA, OPERATOR_NAMESPACE, OPERATOR_SA, install_rbac

pytestmark = pytest.mark.e2e

NS = OPERATOR_NAMESPACE
LEASES = DEDICATED_LEASE_NAMESPACE
OPERATOR = f"system:serviceaccount:{NS}:{OPERATOR_SA}"
DEDICATED = f"system:serviceaccount:{NS}:{DEDICATED_SA}"

# (verb, resource[/name][:subresource], namespace or None for cluster-wide / every
# namespace, why)
Check = tuple[str, str, str | None, str]

# What scheduling needs, both identities alike (system:kube-scheduler's rules).
SCHEDULER_MAY: list[Check] = [
    ("list", "pods", None, "the cache"),
    ("watch", "nodes", None, "the cache"),
    ("create", "pods:binding", "default", "bind"),
    ("delete", "pods", "default", "preemption deletes its victims, as kube-scheduler"),
    ("delete", "pods", "kube-system", "victims may be in any namespace"),
    ("patch", "pods:status", "default", "PodScheduled, DisruptionTarget, nominatedNodeName"),
    ("create", "events", "default", "core events"),
    ("create", "events.events.k8s.io", "default", "Scheduled, FailedScheduling, Preempted"),
    ("patch", "events.events.k8s.io", "default", "event series"),
    ("update", "persistentvolumes", None, "VolumeBinding PreBind (system:volume-scheduler)"),
    ("update", "persistentvolumeclaims", "default", "VolumeBinding PreBind"),
    ("list", "poddisruptionbudgets.policy", None, "preemption"),
    ("list", "priorityclasses.scheduling.k8s.io", None, "preemption"),
    ("watch", "schedulingpolicies.polsched.io", None, "the policies"),
    ("patch", "schedulingpolicies.polsched.io:status", None, "status"),
    # DynamicResources, as system:kube-scheduler's DRA rules.
    ("watch", "resourceslices.resource.k8s.io", None, "the devices"),
    ("watch", "deviceclasses.resource.k8s.io", None, "the device classes"),
    ("watch", "devicetaintrules.resource.k8s.io", None, "taints for devices"),
    ("watch", "resourceclaims.resource.k8s.io", None, "the claims"),
    ("update", "resourceclaims.resource.k8s.io", "default", "PreBind's finalizer"),
    ("update", "resourceclaims.resource.k8s.io:status", "default",
     "PreBind's allocation and reservedFor"),
    ("update", "resourceclaims.resource.k8s.io:binding", "default",
     "granular status authorization of the allocation"),
    ("create", "resourceclaims.resource.k8s.io", "default",
     "DRAExtendedResource: the claim for extended resources served by devices"),
    ("delete", "resourceclaims.resource.k8s.io", "default",
     "DRAExtendedResource: Unreserve and PostFilter delete that claim"),
    ("update", "pods:finalizers", "default", "as system:kube-scheduler (owned claims)"),
]
SCHEDULER_MAY_NOT: list[Check] = [
    ("create", "clusterrolebindings", None, "would grant itself anything"),
    ("create", "rolebindings", NS, "no bindings, even at home"),
    ("create", "rolebindings", "kube-system", "no bindings"),
    ("escalate", "clusterroles", None, "no escalation"),
    ("bind", "clusterroles/cluster-admin", None, "no binding of cluster-admin"),
    ("impersonate", "users", None, "no impersonation"),
    ("impersonate", "serviceaccounts", NS, "no impersonation"),
    ("create", "serviceaccounts", "default", "no identities elsewhere"),
    ("create", "serviceaccounts:token", "kube-system", "no tokens of other accounts"),
    ("get", "secrets", "kube-system", "no Secrets outside its namespace"),
    ("list", "secrets", None, "no Secrets cluster-wide"),
    ("create", "pods", "default", "schedules pods, never makes them"),
    ("create", "pods:eviction", "default", "victims are deleted, not evicted"),
    ("create", "deployments.apps", "default", "no workloads outside its namespace"),
    ("patch", "nodes", None, "nodes are read-only"),
    ("create", "resourceslices.resource.k8s.io", None, "devices are the drivers'"),
    ("create", "resourceclaimtemplates.resource.k8s.io", "default",
     "templates are the users'"),
    ("delete", "resourceslices.resource.k8s.io", None, "devices are the drivers'"),
    ("delete", "namespaces", None, "read-only"),
    ("delete", "schedulingpolicies.polsched.io", None, "policies belong to their authors"),
    ("update", "customresourcedefinitions.apiextensions.k8s.io", None, "no CRD writes"),
    ("patch", "validatingwebhookconfigurations.admissionregistration.k8s.io/other", None,
     "another webhook configuration"),
    ("create", "validatingwebhookconfigurations.admissionregistration.k8s.io", None,
     "the install makes polsched.io"),
    ("patch", "mutatingwebhookconfigurations.admissionregistration.k8s.io/polsched.io",
     None, "no mutating webhooks"),
    ("get", "leases.coordination.k8s.io/kube-scheduler", "kube-system",
     "kube-scheduler's Lease"),
    ("create", "leases.coordination.k8s.io", "kube-system", "Leases only at home"),
]

OPERATOR_MAY: list[Check] = SCHEDULER_MAY + [
    ("patch", "schedulingpolicies.polsched.io", None, "the last-good annotation"),
    ("create", "leases.coordination.k8s.io", NS, "its Lease (create is never by name)"),
    ("get", "leases.coordination.k8s.io/polsched-operator", NS, "its Lease"),
    ("update", "leases.coordination.k8s.io/polsched-operator", NS, "its Lease"),
    ("get", "leases.coordination.k8s.io/polsched-names", NS, "the names held"),
    ("update", "leases.coordination.k8s.io/polsched-names", NS, "the names held"),
    ("patch", "validatingwebhookconfigurations.admissionregistration.k8s.io/polsched.io",
     None, "injects its CA into its own webhook configuration"),
    ("get", "secrets/ext-ca", NS, "extender CAs in its namespace"),
    ("create", "secrets", NS, "the webhook's certificate Secret"),
    ("update", "secrets/polsched-webhook-tls", NS, "renews the webhook's certificate"),
    ("update", "secrets/polsched-webhook-ca", NS, "renews the webhook's CA, kept apart"),
    ("watch", "secrets/polsched-webhook-tls", NS, "an invalid edit is made good at once"),
    ("watch", "secrets/polsched-webhook-ca", NS, "an invalid edit is made good at once"),
    ("watch", "validatingwebhookconfigurations.admissionregistration.k8s.io/polsched.io",
     None, "a re-created configuration gets its caBundle back"),
    ("create", "subjectaccessreviews.authorization.k8s.io", None,
     "may the author read the CA Secret it names (as system:kube-scheduler)"),
    ("create", "selfsubjectreviews.authentication.k8s.io", None,
     "the webhook knows its own last-good writes (system:basic-user)"),
    ("create", "deployments.apps", NS, "Dedicated schedulers"),
    ("patch", "deployments.apps/polsched-dedicated-x", NS, "Dedicated schedulers"),
    ("delete", "deployments.apps/polsched-dedicated-x", NS, "Dedicated schedulers"),
]
OPERATOR_MAY_NOT: list[Check] = SCHEDULER_MAY_NOT + [
    ("create", "serviceaccounts", NS, "Dedicated schedulers' identity is the install's"),
    ("patch", "serviceaccounts/polsched-operator", NS, "its own identity"),
    ("create", "serviceaccounts:token", NS, "no tokens, not even at home"),
    ("update", "leases.coordination.k8s.io/polsched-scheduler-x", NS,
     "a Dedicated scheduler's Lease"),
    ("update", "secrets/ext-ca", NS, "CAs are read, not written"),
    ("list", "secrets", NS, "get by name only"),
    ("delete", "secrets/polsched-webhook-tls", NS, "renewed in place"),
    ("delete", "secrets/polsched-webhook-ca", NS, "renewed in place"),
    ("watch", "secrets", NS, "watches its two Secrets by name only"),
    ("watch", "validatingwebhookconfigurations.admissionregistration.k8s.io", None,
     "watches its own configuration only"),
    ("create", "roles", NS, "no roles"),
]

# GangScheduling, as system:kube-scheduler's GenericWorkload rules: checked by
# tests/e2e/test_gangs.py against the gated control plane, which serves the kinds.
GANG_MAY: list[Check] = [
    ("watch", "podgroups.scheduling.k8s.io", None, "the pod groups"),
    ("patch", "podgroups.scheduling.k8s.io:status", "default", "PodGroupInitiallyScheduled"),
    ("update", "podgroups.scheduling.k8s.io:status", "default", "PodGroupInitiallyScheduled"),
]
GANG_MAY_NOT: list[Check] = [
    ("create", "podgroups.scheduling.k8s.io", "default", "pod groups are the users'"),
    ("update", "podgroups.scheduling.k8s.io", "default", "only their status"),
    ("delete", "podgroups.scheduling.k8s.io", "default", "pod groups are the users'"),
    ("get", "workloads.scheduling.k8s.io", "default", "kube-scheduler's role has no Workloads"),
]

DEDICATED_MAY: list[Check] = SCHEDULER_MAY + [
    ("create", "leases.coordination.k8s.io", LEASES, "its Lease"),
    ("get", "leases.coordination.k8s.io/polsched-scheduler-x", LEASES, "its Lease"),
    ("update", "leases.coordination.k8s.io/polsched-scheduler-x", LEASES, "its Lease"),
]
DEDICATED_MAY_NOT: list[Check] = SCHEDULER_MAY_NOT + [
    # issue 36: one write of leaseDurationSeconds parked the operator
    ("update", "leases.coordination.k8s.io/polsched-operator", NS, "the operator's Lease"),
    ("get", "leases.coordination.k8s.io/polsched-operator", NS, "the operator's Lease"),
    ("update", "leases.coordination.k8s.io/polsched-names", NS,
     "the names held for deleted policies"),
    ("create", "leases.coordination.k8s.io", NS, "Leases only in their own namespace"),
    ("get", "secrets/polsched-webhook-tls", NS, "the webhook's keys"),
    ("get", "secrets/polsched-webhook-ca", NS, "the webhook's CA key"),
    ("get", "secrets/ext-ca", NS, "its CA Secrets are mounted, not read"),
    ("patch", "schedulingpolicies.polsched.io", None, "reads its policy only"),
    ("create", "deployments.apps", NS, "only the operator deploys"),
    ("patch", "validatingwebhookconfigurations.admissionregistration.k8s.io/polsched.io",
     None, "the operator's webhook"),
    ("create", "serviceaccounts", NS, "no identities"),
]


def can_i(cluster: Cluster, user: str, check: Check) -> bool:
    verb, resource, namespace, _ = check
    ns = ["-n", namespace] if namespace else ["--all-namespaces"]
    resource, _, sub = resource.partition(":")
    subresource = [f"--subresource={sub}"] if sub else []
    p = cluster.kubectl("auth", "can-i", verb, resource, *subresource, f"--as={user}", *ns,
                        check=False)
    answer = p.stdout.strip()
    # `no` exits 1; anything else (an unknown resource, a server error) is not an answer.
    assert answer in ("yes", "no"), f"kubectl auth can-i {verb} {resource}: {p.stderr}"
    return answer == "yes"


def wrong(cluster: Cluster, user: str, may: list[Check], may_not: list[Check]) -> list[str]:
    """Every answer that differs from the expected one, as a readable line."""
    with ThreadPoolExecutor(8) as pool:  # one kubectl per check
        allowed = list(pool.map(lambda c: can_i(cluster, user, c), may + may_not))
    out = [f"may not {v} {r} in {ns or 'all namespaces'} ({why})"
           for (v, r, ns, why), yes in zip(may, allowed[:len(may)], strict=True) if not yes]
    out += [f"MAY {v} {r} in {ns or 'all namespaces'} ({why})"
            for (v, r, ns, why), yes in zip(may_not, allowed[len(may):], strict=True) if yes]
    return out


@pytest.fixture(scope="module")
def rbac(cluster: Cluster) -> Cluster:
    install_rbac(cluster)
    return cluster


def test_the_operator_may_schedule_preempt_elect_and_deploy_and_nothing_more(
        rbac: Cluster) -> None:
    assert wrong(rbac, OPERATOR, OPERATOR_MAY, OPERATOR_MAY_NOT) == []


def test_a_dedicated_scheduler_may_schedule_preempt_and_elect_and_nothing_more(
        rbac: Cluster) -> None:
    assert wrong(rbac, DEDICATED, DEDICATED_MAY, DEDICATED_MAY_NOT) == []


def test_the_old_rbac_would_fail_these_checks(rbac: Cluster) -> None:
    """The checks can fail: a user with the pre-issue-26 grants (cluster-wide Secrets and
    role bindings, no pod delete) is caught by them."""
    user = "e2e-rbac-old-operator"
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": user}, "rules": [
                {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
                {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]},
                {"apiGroups": ["rbac.authorization.k8s.io"],
                 "resources": ["clusterrolebindings", "rolebindings"],
                 "verbs": ["get", "create", "patch", "delete"]}]}
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
               "metadata": {"name": user},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                           "name": user},
               "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                             "name": user}]}
    rbac.apply([role, binding])
    try:
        found = wrong(rbac, user, OPERATOR_MAY, OPERATOR_MAY_NOT)
        assert any(f.startswith("may not delete pods") for f in found), found
        assert any(f.startswith("MAY get secrets in kube-system") for f in found), found
        assert any(f.startswith("MAY create clusterrolebindings") for f in found), found
    finally:
        rbac.kubectl("delete", "clusterrolebinding,clusterrole", user, check=False)
