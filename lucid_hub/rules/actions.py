"""What a rule does when it fires: its edits as signed patches (through the writer it is
handed), or a signed webhook or a Linked Data Notification (through lucid_hub.outbound)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import requests

from lucid_hub import outbound
from lucid_hub.config import Settings
from lucid_hub.diff import GraphChange
from lucid_hub.publish.hooks import Writer
from lucid_hub.publish.update import edit_computer
from lucid_hub.rdf.canon import Canonicalizer
from lucid_hub.rdf.patch import Patch
from lucid_hub.rules.lanes import Lanes
from lucid_hub.rules.model import Registered, RuleFailed
from lucid_hub.signing import SigningKey, sign_text
from lucid_hub.store.graphs import GraphStore
from lucid_hub.store.sparql import GraphEdit


class Actions:
    """Carries out rules' actions."""

    def __init__(self, settings: Settings, store: GraphStore, lanes: Lanes, canonicalizer: Canonicalizer,
                 read_only: Callable[[str], bool], key: SigningKey | None = None) -> None:
        """`read_only`: the graphs no rule may write (mirrors); `key` signs webhooks."""
        self.settings = settings
        self.store = store
        self.lanes = lanes
        self.canonicalizer = canonicalizer
        self.read_only = read_only
        self.key = key
        self._http: requests.Session | None = None
        self._pool: Any = None

    def write(self, reg: Registered, trigger: Patch, edits: dict[str, Any], writer: Writer) -> list[Patch]:
        """The action's changes as signed patches (one per graph, one transaction), authored by
        the rule, their message naming the triggering patch."""
        writes = reg.rule.writes
        changes = {}
        versions = {}
        for graph, edit in edits.items():
            if graph not in writes or self.read_only(graph):
                raise RuleFailed(reg.rule.iri, f"its action wrote <{graph}>, which it may not")
            removed = self.store.read.published(graph, edit["removed"])
            graph_edit = GraphEdit(self.lanes.lane(reg.owner).replica.version(graph), removed, edit["added"])
            changes[graph] = edit_computer(graph, graph_edit, self.canonicalizer)
            versions[graph] = graph_edit.version
        return list(writer.publish_all(changes, versions, author=f"rule <{reg.rule.iri}>"[:512],
                                       message=f"fired by patch {trigger.id} of <{trigger.graph}>"))

    def undo(self, patch: Patch, reason: str, writer: Writer) -> None:
        """A compensating patch: the inverse of a rule's patch (the caller keeps rules quiet)."""
        inverse = GraphChange(patch.graph, patch.added, patch.removed)
        writer.publish(patch.graph, lambda _view: inverse, author="rule engine",
                       message=f"rolled back {patch.id}: {reason}"[:4096])

    def send(self, reg: Registered, patch: Patch, answer: dict[str, Any]) -> None:
        """A deferred rule's webhook (signed JSON) or notification (ActivityStreams to an LDN
        inbox); RuleFailed unless the receiver took it."""
        rule = reg.rule
        public = self.settings.public_url
        message = {"rule": rule.iri, "graph": patch.graph, "patch": patch.id,
                   "patchUrl": f"{public}/patches/{patch.id}", "rows": answer["rows"],
                   "moreRows": answer.get("more_rows", 0)}
        policy = outbound.AddressPolicy.of(self.settings)
        if rule.action == "webhook":
            assert self.key is not None
            if self._pool is None:
                self._pool = outbound.pool_manager(policy, timeout=10.0, retries=False)
            body = json.dumps(message).encode()
            headers = {"Content-Type": "application/json", "X-Lucid-Rule": rule.iri, "X-Lucid-Trigger": patch.id,
                       "X-Lucid-Signature": sign_text(body, self.key)}
            status, account = outbound.signed_post(self._pool, rule.target, body, headers, None)
            if not 200 <= status < 300:
                raise RuleFailed(rule.iri, f"the webhook {rule.target} answered {account}")
            return
        notification = {
            "@context": "https://www.w3.org/ns/activitystreams", "type": "Announce",
            "id": f"{public}/rules/firings?rule={rule.iri}&trigger={patch.id}",
            "actor": public, "object": message["patchUrl"], "target": patch.graph,
            "summary": f"rule <{rule.iri}> fired by patch {patch.id}",
            "content": json.dumps(answer["rows"]),
        }
        if self._http is None:
            self._http = outbound.session(policy, "lucid-hub rules")
        try:
            reply = self._http.post(rule.target, data=json.dumps(notification).encode(), timeout=10.0,
                                    headers={"Content-Type": "application/ld+json"}, allow_redirects=False)
        except requests.RequestException as exc:
            raise RuleFailed(rule.iri, f"the inbox {rule.target} did not answer: {type(exc).__name__}") from None
        if reply.status_code not in (201, 202):
            raise RuleFailed(rule.iri, f"the inbox {rule.target} answered HTTP {reply.status_code}")
