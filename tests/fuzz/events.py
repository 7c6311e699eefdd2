"""Event-stream fuzz cases: SchedulingPolicies created, updated (with specs that load and
specs that do not), deleted and created again under the same name, claiming a few
schedulerNames, as watch events fed to the operator's book of policies
(controller.policies.book.PolicyBook, what the reconciler keeps); restarts are a fresh
book that reads back the running one's record of owners and holds (what the operator
keeps in its Lease, controller.policies.names) and sees the live objects in another
order. The book's clock moves 10 s an event, so a deleted owner's name is held
(PolicyBook.held, the tenancy's nameGraceSeconds, 300 s) for 30 events, past the end of
many cases and released within the longer ones; a release happens between two events.

A case is the list of events, drawn when it is generated (uids, generations and
creationTimestamps included), so that it replays from its seed and index.

Invariants, after every event:
- nothing escapes observe() or forget() (a spec that does not load is a PolicyError on
  its record);
- every name owner is a live, non-shadow policy that claims that name, and every name a
  live non-shadow policy claims has an owner, unless it is held for its deleted owner
  (then it has none, or that owner's name re-created);
- an event about policy X changes the owner of no name that X claims neither before nor
  after it (one tenant's edits never move another's name);
- a spec that does not load never replaces the one that runs: the record keeps the
  policy it had;
- a policy deleted and created again starts over: nothing of the old object is kept;
and at each restart, when every live spec loads: the fresh book names the same owners
and holds the same names as the running book, and the dry run's view of the same objects
(api.claims over the objects with the status the operator writes, what explain and
simulate use) names the same owners but for the names held.
"""

from __future__ import annotations

import random
from typing import Any

from polsched.api import claims
from polsched.controller.policies.book import PolicyBook

Json = dict[str, Any]

NAMES = ("team-a", "team-b", "team-c", "team-d")
SCHEDULER_NAMES = ("gpu", "batch", "web", None)  # None: no schedulerName, claims its own


def _spec(rng: random.Random) -> Json:
    r = rng.random()
    spec: Json = {}
    sname = rng.choice(SCHEDULER_NAMES)
    if sname is not None:
        spec["schedulerName"] = sname
    if r < 0.2:  # does not load
        spec["filters"] = [{"name": rng.choice(("NoSuchPlugin", "Expression"))}]
    elif r < 0.25:
        spec["schedulerName"] = rng.choice(("default-scheduler", "", "UPPER", 7))
    elif r < 0.35:
        spec["shadowOf"] = rng.choice(NAMES)
    return spec


def generate(rng: random.Random) -> Json:
    """The inputs of an "events" case: {"events": [...]}, each {"op": "apply", "object"}
    (an ADDED or MODIFIED watch event), {"op": "delete", "name"} or {"op": "restart",
    "order"} (a permutation of the live objects' names)."""
    live: dict[str, Json] = {}
    clock = 0
    incarnation = 0
    events: list[Json] = []
    for _ in range(rng.randint(5, 60)):
        r = rng.random()
        name = rng.choice(NAMES)
        if r < 0.6:
            obj = live.get(name)
            if obj is None:
                incarnation += 1
                clock += rng.choice((0, 1, 1, 5))  # equal timestamps: ties on the name
                obj = {"apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
                       "metadata": {"name": name, "uid": f"uid-{incarnation}",
                                    "generation": 0,
                                    "creationTimestamp": f"2026-01-01T00:{clock // 60:02d}:"
                                                         f"{clock % 60:02d}Z"}}
            obj = {**obj, "metadata": {**obj["metadata"],
                                       "generation": obj["metadata"]["generation"] + 1},
                   "spec": _spec(rng)}
            live[name] = obj
            events.append({"op": "apply", "object": obj})
        elif r < 0.85:
            if live.pop(name, None) is not None or rng.random() < 0.2:
                events.append({"op": "delete", "name": name})
        else:
            order = sorted(live)
            rng.shuffle(order)
            events.append({"op": "restart", "order": order})
    order = sorted(live)
    rng.shuffle(order)
    events.append({"op": "restart", "order": order})
    return {"events": events}


def _reported(obj: Json, owners: dict[str, str]) -> Json:
    """`obj` with the Ready condition the operator writes for it (owners: book.owners)."""
    name = obj["metadata"]["name"]
    if name in owners.values():
        ready = {"type": "Ready", "status": "True", "reason": "Scheduling"}
    else:
        ready = {"type": "Ready", "status": "False", "reason": claims.CONFLICT_REASON}
    return {**obj, "status": {"conditions": [ready]}}


def _check(book: PolicyBook, out: Json, where: str) -> None:
    owners = book.owners()
    held = book.held()
    records = {r.name: r for r in book.records()}
    claimed = {r.claimed for r in records.values() if not r.shadow_of}
    for sname, (former, _) in held.items():
        if sname in owners and owners[sname] != former:
            out["violations"].append(f"owner:{where}: {sname!r}, held for {former!r}, "
                                     f"owned by {owners[sname]!r}")
    for sname, owner in owners.items():
        rec = records.get(owner)
        if rec is None or rec.shadow_of or rec.claimed != sname:
            out["violations"].append(f"owner:{where}: {sname!r} owned by {owner!r}, which "
                                     "is no live non-shadow claimant of it")
    if set(owners) != claimed - (set(held) - set(owners)):
        out["violations"].append(f"owner:{where}: names claimed {sorted(claimed)!r}, "
                                 f"owned {sorted(owners)!r}")


def run(case: Json, out: Json) -> None:
    """Feed the case's events to a PolicyBook; add what breaks to out."""
    now = [0.0]
    book = PolicyBook(clock=lambda: now[0])
    live: dict[str, Json] = {}
    for i, ev in enumerate(case["events"]):
        where = f"event {i} ({ev['op']})"
        now[0] = 10.0 * i  # held names due by now are released before the event
        before = book.owners()
        subject = ev.get("name") or (ev.get("object") or {}).get("metadata", {}).get("name")
        touched = {s for s, o in before.items() if o == subject}
        old = book.get(subject) if subject else None
        try:
            if ev["op"] == "apply":
                obj = ev["object"]
                rec, _ = book.observe(obj)
                live[obj["metadata"]["name"]] = obj
                same = old is not None and old.uid == rec.uid
                if rec.error is not None and same and old is not None \
                        and old.loaded is not None and rec.loaded is not old.loaded:
                    out["violations"].append(f"last-good:{where}: a spec that does not "
                                             "load replaced the running policy")
                if not same and rec.error is not None and rec.loaded is not None:
                    out["violations"].append(f"recreate:{where}: the new object runs a "
                                             "policy it never loaded")
                if rec.claimed:
                    touched.add(rec.claimed)
            elif ev["op"] == "delete":
                book.forget(ev["name"])
                live.pop(ev["name"], None)
            else:
                fresh = PolicyBook(clock=lambda: now[0])
                fresh.restore(book.held_until(now[0]), now[0])
                fresh.restore_recorded(book.recorded())
                for name in ev["order"]:
                    fresh.observe(live[name])
                fresh.forget_unknown_owners()
                if all(r.error is None for r in book.records()):
                    running = book.owners()
                    reported = [claims.ObjectClaim.of(_reported(o, running))
                                for o in live.values()]
                    dry = claims.owners(reported, claims.reported_owners(reported))
                    held = book.held()
                    for who, got, skip in (("restart", fresh.owners(), set()),
                                           ("dry-run", dry, set(held))):
                        got = {s: o for s, o in got.items() if s not in skip}
                        want = {s: o for s, o in running.items() if s not in skip}
                        if got != want:
                            out["violations"].append(
                                f"owner:{where}: after a {who} {got!r}, running {want!r}")
                    if fresh.held().keys() != held.keys():
                        out["violations"].append(f"hold:{where}: after a restart "
                                                 f"{sorted(fresh.held())!r} held, running "
                                                 f"{sorted(held)!r}")
                _check(fresh, out, f"{where} fresh")
        except BaseException as err:  # noqa: BLE001 - the invariant: nothing escapes
            out["violations"].append(f"escape:events: {where}: {type(err).__name__}: "
                                     f"{str(err)[:300]}")
            return
        _check(book, out, where)
        if {r.name for r in book.records()} != set(live):
            out["violations"].append(f"records:{where}: the book holds "
                                     f"{sorted(r.name for r in book.records())!r}, the "
                                     f"cluster {sorted(live)!r}")
        after = book.owners()
        for sname in set(before) | set(after):
            if sname not in touched and before.get(sname) != after.get(sname):
                out["violations"].append(f"owner:{where}: {sname!r} moved from "
                                         f"{before.get(sname)!r} to {after.get(sname)!r} "
                                         f"on an event about {subject!r}")
        out["evaluations"] += 1
