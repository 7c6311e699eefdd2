"""The admin's tenancy model against a real API server, the operator running as its
ServiceAccount: a schedulerName has one owner, kept across a delete and re-create for a
grace period; the webhook checks who claims a name (userInfo, by impersonation) and
refuses a second claimant and a policy that switches off a fencing plugin."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from polsched.commands import render
from tests.conftest import Cluster, NodeFactory, unique
from tests.e2e.operators import Harness, wait_for, zone_policy
from tests.e2e.rbac import OPERATOR_NAMESPACE

pytestmark = pytest.mark.e2e


def tenancy_file(h: Harness, name: str, config: dict[str, Any]) -> str:
    """The configuration as the install's ConfigMap holds it (render, the chart)."""
    path = h.workdir / f"{name}.json"
    path.write_text(render.tenancy_json(config))
    return str(path)


def reason(h: Harness, name: str) -> str:
    return str(h.condition(name, "Ready").get("reason") or "")


def test_a_replaced_policy_keeps_its_name_and_pods(harness: Harness, namespace: str,
                                                   nodes: NodeFactory) -> None:
    """Team B deletes and re-creates its policy (a GitOps replace); team A's idle policy
    of the same schedulerName never receives B's pods, not after the grace period nor
    after a restart, and takes the name over only when the grace period has passed
    without B."""
    h = harness
    rid = unique("grace")
    zone_a = nodes(f"{rid}-a", labels={"zone": "a"})
    zone_b = nodes(f"{rid}-b", labels={"zone": "b"})
    sname = f"{rid}-s"
    op = h.operator(f"{rid}-op", "--tenancy-config",
                    tenancy_file(h, rid, {"nameGraceSeconds": 20}))
    team_b = h.apply_policy(zone_policy(f"{rid}-b", "a", scheduler=sname))
    h.wait_ready(team_b)
    team_a = h.apply_policy(zone_policy(f"{rid}-a", "b", scheduler=sname))
    wait_for(lambda: reason(h, team_a) == "SchedulerNameConflict", 10, "team A conflicts")

    h.cluster.kubectl("delete", "spol", team_b)
    wait_for(lambda: f"SchedulingPolicy {team_b} deleted" in op.log(), 10, "B deleted")
    wait_for(lambda: "is held for" in str(h.condition(team_a, "Ready").get("message")),
             10, "A told that the name is held for B")
    h.create_pods(namespace, ["during-replace"], sname)
    h.apply_policy(zone_policy(team_b, "a", scheduler=sname))
    h.wait_ready(team_b)
    # B's filter keeps zone a: the pod made while B was gone went to B, not A (zone b).
    wait_for(lambda: h.bound(namespace).get("during-replace") == zone_a, 15,
             "the pod bound by B's re-created policy")
    assert reason(h, team_a) == "SchedulerNameConflict"
    # B is now the newest claimant, A the oldest. The grace period ends with nothing to
    # see (the name stays B's: that is the point), so its end is waited for on the clock.
    grace_over = time.monotonic() + 21
    wait_for(lambda: time.monotonic() > grace_over, 30, "the grace period over", interval=1)
    h.create_pods(namespace, ["after-grace-b"], sname)
    wait_for(lambda: h.bound(namespace).get("after-grace-b") == zone_a, 15,
             "B still binds after the grace period")
    assert reason(h, team_a) == "SchedulerNameConflict"
    # And after a restart of the operator, which reads only the objects.
    op.stop()
    op = h.operator(f"{rid}-op2", "--tenancy-config",
                    tenancy_file(h, rid, {"nameGraceSeconds": 20}))
    h.create_pods(namespace, ["after-restart"], sname)
    wait_for(lambda: h.bound(namespace).get("after-restart") == zone_a, 30,
             "B binds after the restart")
    assert reason(h, team_a) == "SchedulerNameConflict"

    # Without B for the grace period, the next claimant owns the name.
    h.cluster.kubectl("delete", "spol", team_b)
    h.wait_ready(team_a, timeout=40)
    h.create_pods(namespace, ["after-grace"], sname)
    wait_for(lambda: h.bound(namespace).get("after-grace") == zone_b, 15,
             "A binds once it owns the name")


def test_a_name_held_for_a_deleted_owner_stays_held_across_a_restart(
        harness: Harness, namespace: str, nodes: NodeFactory, free_port: int) -> None:
    """The owner is deleted, and the operator restarts within the grace period: the new
    process reads the hold back (Lease polsched-names) and still keeps the name for
    the owner, so the pod made meanwhile waits and goes to the re-created owner, never to
    the other team's idle policy of the same schedulerName (made before the webhook was
    there); the restarted operator's webhook admits the owner's re-creation."""
    h = harness
    rid = unique("hold")
    zone_a = nodes(f"{rid}-a", labels={"zone": "a"})
    nodes(f"{rid}-b", labels={"zone": "b"})
    sname = f"{rid}-s"
    tenancy = tenancy_file(h, rid, {"nameGraceSeconds": 300})
    op = h.operator(f"{rid}-op", "--tenancy-config", tenancy)
    team_b = h.apply_policy(zone_policy(f"{rid}-b", "a", scheduler=sname))
    h.wait_ready(team_b)
    team_a = h.apply_policy(zone_policy(f"{rid}-a", "b", scheduler=sname))
    wait_for(lambda: reason(h, team_a) == "SchedulerNameConflict", 10, "team A conflicts")

    h.cluster.kubectl("delete", "spol", team_b)

    def recorded() -> bool:
        p = h.cluster.kubectl("get", "lease", "polsched-names", "-n",
                              OPERATOR_NAMESPACE, "-o", "json", check=False)
        if p.returncode != 0:
            return False
        held = json.loads(json.loads(p.stdout)["metadata"]["annotations"][
            "polsched.io/held-names"])
        return bool(held.get(sname, {}).get("policy") == team_b)
    wait_for(recorded, 10, "the hold recorded in the Lease")
    h.create_pods(namespace, ["during-restart"], sname)
    op.stop()
    op = h.operator(f"{rid}-op2", "--tenancy-config", tenancy,
                    "--webhook-listen", f"127.0.0.1:{free_port}")
    # The new process has synced every policy once this one is Ready.
    probe = h.apply_policy(zone_policy(f"{rid}-probe", "a"))
    h.wait_ready(probe)
    assert f"schedulerName {sname!r} is held for the deleted SchedulingPolicy {team_b}" \
        in op.log()
    assert reason(h, team_a) == "SchedulerNameConflict"
    assert "is held for" in str(h.condition(team_a, "Ready").get("message"))
    assert "during-restart" not in h.bound(namespace)

    # The webhook answers (a bad policy is refused), then admits B's re-creation.
    bad = zone_policy(f"{rid}-bad", "a")
    bad["spec"]["filters"].append(
        {"name": "Expression", "args": {"expression": "node.metadata.name =="}})
    wait_for(lambda: h.cluster.kubectl("apply", "--dry-run=server", "-f", "-",
                                       input=json.dumps(bad), check=False).returncode != 0,
             20, "the webhook serving", interval=0.5)
    try:
        h.apply_policy(zone_policy(team_b, "a", scheduler=sname))
    finally:
        h.cluster.kubectl("delete", "validatingwebhookconfiguration", "polsched.io",
                          "--ignore-not-found", check=False)
    h.wait_ready(team_b)
    wait_for(lambda: h.bound(namespace).get("during-restart") == zone_a, 15,
             "the pod bound by B's re-created policy")
    assert reason(h, team_a) == "SchedulerNameConflict"


def test_a_status_written_by_others_does_not_move_a_name(
        harness: Harness, namespace: str, nodes: NodeFactory) -> None:
    """Whoever may patch schedulingpolicies/status rewrites the reports while the operator
    is down: team A's idle policy says it runs, team B's (the owner) that it conflicts;
    before, ownership read these reports, and A took B's name and pods. The restarted
    operator keeps B the owner (its record, in its own namespace), and B's pods go to B."""
    h = harness
    rid = unique("status")
    zone_a = nodes(f"{rid}-a", labels={"zone": "a"})
    nodes(f"{rid}-b", labels={"zone": "b"})
    sname = f"{rid}-s"
    op = h.operator(f"{rid}-op")
    team_b = h.apply_policy(zone_policy(f"{rid}-b", "a", scheduler=sname))
    h.wait_ready(team_b)
    team_a = h.apply_policy(zone_policy(f"{rid}-a", "b", scheduler=sname))
    wait_for(lambda: reason(h, team_a) == "SchedulerNameConflict", 10, "team A conflicts")
    op.stop()

    def report(name: str, ready: dict[str, str]) -> None:
        h.cluster.kubectl("patch", "spol", name, "--subresource=status", "--type=merge",
                          "-p", json.dumps({"status": {"conditions": [
                              {**ready, "type": "Ready",
                               "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}))
    report(team_a, {"status": "True", "reason": "Scheduling", "message": "runs"})
    report(team_b, {"status": "False", "reason": "SchedulerNameConflict", "message": "no"})
    h.operator(f"{rid}-op2")
    probe = h.apply_policy(zone_policy(f"{rid}-probe", "a"))
    h.wait_ready(probe)
    h.create_pods(namespace, ["after-restart"], sname)
    wait_for(lambda: h.bound(namespace).get("after-restart") == zone_a, 15,
             "B binds after the restart")
    wait_for(lambda: reason(h, team_a) == "SchedulerNameConflict", 10,
             "team A told again that it conflicts")
    h.wait_ready(team_b)


def test_webhook_checks_who_claims_a_name(harness: Harness, free_port: int) -> None:
    h = harness
    rid = unique("claims")
    group_a, group_b = f"{rid}-team-a", f"{rid}-team-b"
    config = {"schedulerNames": [{"names": [f"{rid}-a-*"], "groups": [group_a]},
                                 {"names": [f"{rid}-b-*"], "groups": [group_b]}]}
    # The teams may write SchedulingPolicies (what an admin grants policy authors).
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": rid},
            "rules": [{"apiGroups": ["polsched.io"], "resources": ["schedulingpolicies"],
                       "verbs": ["get", "list", "create", "update", "patch"]}]}
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
               "metadata": {"name": rid},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                           "name": rid},
               "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                             "name": g} for g in (group_a, group_b)]}
    h.cluster.apply(role)
    h.cluster.apply(binding)
    op = h.operator(f"{rid}-op", "--webhook-listen", f"127.0.0.1:{free_port}",
                    "--tenancy-config", tenancy_file(h, rid, config))
    try:
        def configured() -> bool:
            p = h.cluster.kubectl("get", "validatingwebhookconfiguration", "polsched.io",
                                  "-o", "jsonpath={.webhooks[*].clientConfig.url}", check=False)
            return f"127.0.0.1:{free_port}" in p.stdout
        wait_for(configured, 15, "the ValidatingWebhookConfiguration", interval=0.2)

        def apply_as(user: str, group: str, body: dict[str, Any]) -> tuple[int, str]:
            h.policies.append(str(body["metadata"]["name"]))
            p = h.cluster.kubectl("--as", user, "--as-group", group, "apply", "-f", "-",
                                  input=json.dumps(body), check=False)
            return p.returncode, p.stderr

        # The webhook may not answer yet while kopf starts: wait for a first admission.
        first = zone_policy(f"{rid}-1", "a", scheduler=f"{rid}-a-batch")
        wait_for(lambda: apply_as("alice", group_a, first)[0] == 0, 20, "alice's policy")

        code, err = apply_as("bob", group_b, zone_policy(f"{rid}-2", "a",
                                                         scheduler=f"{rid}-a-other"))
        assert code != 0 and "is not granted" in err, err
        code, err = apply_as("carol", group_a, zone_policy(f"{rid}-3", "a",
                                                           scheduler=f"{rid}-a-batch"))
        assert code != 0 and f"already claimed by SchedulingPolicy '{rid}-1'" in err, err
        code, err = apply_as("bob", group_b, zone_policy(
            f"{rid}-4", "a", scheduler=f"{rid}-b-x", disabledPlugins=["TaintToleration"]))
        assert code != 0 and "spec.disabledPlugins" in err, err
        # caSecretRef: a Secret the author may not read is refused with one answer,
        # whether or not it exists (the operator's webhook Secret exists).
        answers = []
        for secret in ("polsched-webhook-tls", f"{rid}-absent"):
            code, err = apply_as("bob", group_b, zone_policy(
                f"{rid}-5", "a", scheduler=f"{rid}-b-ca", extenders=[{
                    "urlPrefix": "https://ext.example:8443/", "filterVerb": "filter",
                    "tlsConfig": {"caSecretRef": {"name": secret,
                                                  "namespace": OPERATOR_NAMESPACE}}}]))
            assert code != 0, err
            answers.append(err.replace(secret, "SECRET"))
        assert answers[0] == answers[1] and "may not read Secret" in answers[0], answers
        # The owner's own edits pass.
        first["spec"]["percentageOfNodesToScore"] = 50
        code, err = apply_as("alice", group_a, first)
        assert code == 0, err
        # The operator, granted no name, still writes its last-good record on the policy
        # (an UPDATE that leaves the spec as it was, by the webhook's own identity).
        wait_for(lambda: '"generation":2' in (h.policy(first["metadata"]["name"])[
            "metadata"].get("annotations") or {}).get("polsched.io/last-good", ""), 15,
            "the operator's last-good record of generation 2")
        # Another team may neither annotate the policy nor take it over by renaming it.
        p = h.cluster.kubectl("--as", "bob", "--as-group", group_b, "annotate", "spol",
                              f"{rid}-1", "team=b", check=False)
        assert p.returncode != 0 and "is not granted" in p.stderr, p.stderr
        taken = json.loads(json.dumps(first))
        taken["spec"]["schedulerName"] = f"{rid}-b-taken"
        code, err = apply_as("bob", group_b, taken)
        assert code != 0 and "the name this policy claims before the edit" in err, err

        # The owner deleted: its name is held for it, at the webhook too. Another policy
        # of the team is refused; the owner re-created gets it back.
        h.cluster.kubectl("delete", "spol", f"{rid}-1")
        wait_for(lambda: f"SchedulingPolicy {rid}-1 deleted" in op.log(), 10, "the delete")
        code, err = apply_as("carol", group_a, zone_policy(f"{rid}-6", "a",
                                                           scheduler=f"{rid}-a-batch"))
        assert code != 0 and f"is held for SchedulingPolicy '{rid}-1'" in err, err
        code, err = apply_as("alice", group_a, zone_policy(f"{rid}-1", "a",
                                                           scheduler=f"{rid}-a-batch"))
        assert code == 0, err
        h.wait_ready(f"{rid}-1")
    finally:
        h.cluster.kubectl("delete", "validatingwebhookconfiguration", "polsched.io",
                          "--ignore-not-found", check=False)
        h.cluster.kubectl("delete", "clusterrolebinding,clusterrole", rid,
                          "--ignore-not-found", check=False)


def deployed(h: Harness, policy: str) -> bool:
    return h.cluster.kubectl("get", "deployment", f"polsched-dedicated-{policy}", "-n",
                             OPERATOR_NAMESPACE, check=False).returncode == 0


def test_dedicated_policies_over_the_cap_or_refused_are_reported_once(
        harness: Harness) -> None:
    h = harness
    rid = unique("cap")
    op = h.operator(f"{rid}-op", "--tenancy-config",
                    tenancy_file(h, rid, {"dedicated": {"maxPolicies": 1}}))
    first = h.apply_policy(zone_policy(f"{rid}-1", "a", runtime={"mode": "Dedicated"}))
    wait_for(lambda: deployed(h, first), 30, "the first Dedicated policy deployed")
    second = h.apply_policy(zone_policy(f"{rid}-2", "a", runtime={"mode": "Dedicated"}))
    wait_for(lambda: reason(h, second) == "DedicatedRefused", 15, "the second over the cap")
    assert "maxPolicies" in h.condition(second, "Ready")["message"]
    assert not deployed(h, second)
    h.cluster.kubectl("delete", "spol", first)
    wait_for(lambda: deployed(h, second), 30, "the second deployed once the first went")

    # Requests over limits: the loader lets it through, the API server refuses the
    # Deployment. Reported in status, and not applied again on later syncs.
    bad = h.apply_policy(zone_policy(f"{rid}-3", "a", runtime={
        "mode": "Dedicated", "resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}}))
    h.cluster.kubectl("delete", "spol", second)
    # (Over the cap until `second` goes, with the same reason: wait for the server's.)
    wait_for(lambda: "422" in str(h.condition(bad, "Ready").get("message")), 30,
             "the API server's refusal in status")
    assert reason(h, bad) == "DedicatedRefused" and not deployed(h, bad)
    refusals = op.log().count(f"SchedulingPolicy {bad}: the API server refused")
    # More syncs: another policy comes and goes.
    other = h.apply_policy(zone_policy(f"{rid}-4", "b"))
    h.wait_ready(other)
    h.cluster.kubectl("delete", "spol", other)
    wait_for(lambda: f"SchedulingPolicy {other} deleted" in op.log(), 10, "the sync")
    assert op.log().count(f"SchedulingPolicy {bad}: the API server refused") == refusals == 1


def test_the_installs_tenancy_configmap_and_network_policy_are_accepted(
        cluster: Cluster, namespace: str) -> None:
    """What `render operator --tenancy-config --webhook-allow-from` (and the chart) add is
    accepted by the API server as rendered: the ConfigMap, the Deployment that mounts it
    and the NetworkPolicy with named ports (server-side dry run: nothing is created)."""
    objs = render.operator_templated(namespace, options=render.InstallOptions(
        tenancy={"nameGraceSeconds": 60}, allow_from=("10.96.0.1/32", "fd00::/120")))
    kept = [o for o in objs if o["kind"] in ("ConfigMap", "Deployment", "NetworkPolicy")]
    assert len(kept) == 3
    p = cluster.kubectl("apply", "--dry-run=server", "-o", "json", "-f", "-",
                        input=json.dumps({"apiVersion": "v1", "kind": "List", "items": kept}))
    served = {o["kind"]: o for o in json.loads(p.stdout)["items"]}
    ingress = served["NetworkPolicy"]["spec"]["ingress"]
    assert ingress[0]["ports"] == [{"port": "webhook", "protocol": "TCP"}]
    assert [f["ipBlock"]["cidr"] for f in ingress[0]["from"]] == ["10.96.0.1/32",
                                                                  "fd00::/120"]
    assert json.loads(served["ConfigMap"]["data"]["tenancy.json"])["nameGraceSeconds"] == 60
