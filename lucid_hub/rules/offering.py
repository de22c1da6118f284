"""Rules across hubs at run time (rules.offers has the words and the book): `RuleOffers`
makes offers to partner hubs, withdraws them and asks how they stand (`out`), and receives,
accepts and rejects offers partners make to this hub (`in`)."""

from __future__ import annotations

import json
import logging
import time
import uuid
from typing import Any

import requests

from lucid_hub import outbound
from lucid_hub.client import client_credentials_token, fetch_jwks
from lucid_hub.config import Settings
from lucid_hub.db.models import RuleOffer
from lucid_hub.db.session import Database
from lucid_hub.db.times import now
from lucid_hub.errors import (
    ConflictError,
    ForbiddenError,
    InputError,
    LucidError,
    PatchSignatureError,
    RateLimitedError,
    RemoteError,
)
from lucid_hub.outbound import AddressPolicy
from lucid_hub.rules.analysis import terminating
from lucid_hub.rules.model import Owner
from lucid_hub.rules.offers import (
    OPEN,
    OfferBook,
    Received,
    body_bytes,
    check_actor,
    describe,
    digest,
    offer_activity,
    reads_any,
    summary,
    told_summaries,
    undo_activity,
)
from lucid_hub.rules.service import RuleService
from lucid_hub.signing import SigningKey, TrustedKeys, sign_text

log = logging.getLogger(__name__)
SIGNATURE_HEADER = "X-Lucid-Signature"
SCOPE = "graphs:read graphs:write"  # what our client at the partner asks for (rules need write)
TIMEOUT = 10
ASK_TIMEOUT = 3  # how long a listing waits for each partner's word on an offer (a page load waits for it)
MAX_PENDING = 20  # a party's offers waiting for a decision at once


class RuleOffers:
    """Offers of rules between this hub and its partners (docs/rules.md)."""

    def __init__(self, settings: Settings, db: Database, rules: RuleService, key: SigningKey,
                 policy: AddressPolicy) -> None:
        self.settings = settings
        self.book = OfferBook(db)
        self.rules = rules
        self.key = key
        self.policy = policy
        self.asked: float | None = None  # when the partners were last asked (time.time())
        rules.foreign = self.book.foreign  # every rule-set change is analysed with the partners' rules

    def _http(self) -> requests.Session:
        return outbound.session(self.policy, "lucid-hub rule offers")

    # --- this hub offers ---------------------------------------------------------------------
    def offer(self, peer: str, text: str, client_id: str, client_secret: str, by: str) -> dict[str, Any]:
        """Offer a rule file to the hub at `peer`, as our client there; the offer as recorded."""
        peer = peer.rstrip("/")
        if not peer.startswith(("http://", "https://")):
            raise InputError(f"the partner hub {peer!r} is not an http(s) URL")
        parsed = self.rules.parse(text)
        offered = [rule for rule, _reads, _text in parsed]
        # Our side of the termination analysis: our rules, the rules of our other open offers
        # and what partners told of theirs, with these running at the partner.
        terminating([*(r.rule for r in self.rules.rules()), *offered], self.rules.foreign(),
                    {r.iri: peer for r in offered})
        offer_id = str(uuid.uuid4())
        mine = [summary(r.rule) for r in self.rules.rules()]
        activity = offer_activity(offer_id, self.settings.public_url, peer, text, [r.iri for r in offered], mine)
        answer = self._post(peer, client_id, client_secret, activity)
        location = str(answer.get("location") or "")
        said = answer.get("summaries")
        told: list[Any] = said if isinstance(said, list) else []
        row = RuleOffer(id=offer_id, direction="out", peer=peer, rules=text,
                        rule_iris=" ".join(r.iri for r in offered),
                        summaries=json.dumps([summary(r) for r in offered] + list(told)), owner="", jwks="",
                        client_id=client_id, client_secret=client_secret, location=location,
                        state=str(answer.get("state") or "pending"), reason="", decided_by=by[:255],
                        created_at=now(), decided_at=None)
        self.book.add(row)
        return describe(row)

    def withdraw(self, offer_id: str, by: str) -> dict[str, Any]:
        """Withdraw an offer this hub made: the partner removes its rules (`Undo`)."""
        row = self.book.get(offer_id, "out")
        if row.state not in OPEN:
            raise ConflictError(f"offer urn:uuid:{offer_id} is {row.state}: nothing to withdraw")
        self._post(row.peer, row.client_id, row.client_secret,
                   undo_activity(offer_id, self.settings.public_url, row.peer))
        return describe(self.book.decide(offer_id, "withdrawn", by))

    def refresh(self, every: float = 0.0) -> None:
        """Ask each partner how our open offers stand (accepted, rejected), and for the
        summaries of its rules; a partner that does not answer keeps the last known state.
        Not again within `every` seconds of the last asking (a page reloaded, or followed live)."""
        if self.asked is not None and time.time() - self.asked < every:
            return
        self.asked = time.time()
        for row in self.book.all("out", OPEN):
            try:
                http = self._http()
                token = client_credentials_token(row.peer, row.client_id, row.client_secret, SCOPE, http=http)
                answer = http.get(row.location, headers={"Authorization": f"Bearer {token}",
                                                         "Accept": "application/json"}, timeout=ASK_TIMEOUT)
                state = answer.json() if answer.status_code == 200 else None
            except (RemoteError, requests.RequestException, ValueError) as exc:
                log.info("offer %s: the partner at %s did not say how it stands: %s", row.id, row.peer, exc)
                continue
            if not isinstance(state, dict) or state.get("state") == row.state:
                continue
            if state.get("state") in ("accepted", "rejected"):
                told = state.get("summaries") if isinstance(state.get("summaries"), list) else []
                offered = json.loads(row.summaries)[:len(row.rule_iris.split())]
                self.book.decide(row.id, str(state["state"]), str(state.get("decidedBy") or row.peer),
                                 str(state.get("reason") or ""), expect=(row.state,),
                                 summaries=json.dumps(offered + told))

    def _post(self, peer: str, client_id: str, client_secret: str, activity: dict[str, Any]) -> dict[str, Any]:
        body = body_bytes(activity)
        http = self._http()
        try:
            token = client_credentials_token(peer, client_id, client_secret, SCOPE, http=http)
            answer = http.post(f"{peer}/rules/offers", data=body, timeout=TIMEOUT, allow_redirects=False,
                               headers={"Authorization": f"Bearer {token}", "Content-Type": "application/ld+json",
                                        SIGNATURE_HEADER: sign_text(body, self.key)})
        except RemoteError as exc:
            raise InputError(f"the partner hub at {peer} refused the client: {exc}") from None
        except requests.RequestException as exc:
            raise InputError(f"cannot reach the partner hub at {peer}: {outbound.explain(exc)}") from None
        if answer.status_code not in (200, 201):
            raise InputError(f"the partner hub at {peer} refused ({answer.status_code}): {answer.text.strip()[:300]}")
        try:
            result = answer.json()
        except ValueError:
            result = {}
        return {**(result if isinstance(result, dict) else {}), "location": answer.headers.get("Location", "")}

    # --- partners offer ----------------------------------------------------------------------
    def receive(self, activity: Received, raw: bytes, signature: str | None, owner: Owner,
                prefixes: list[str]) -> tuple[dict[str, Any], bool]:
        """An Offer or Undo a partner posted: (the offer as recorded, whether it is new)."""
        check_actor(activity.actor, prefixes)
        if activity.kind == "Undo":
            row = self.book.get(activity.offer_id, "in")
            if json.loads(row.owner).get("account") != owner.account or row.peer != activity.actor:
                raise ForbiddenError(f"offer urn:uuid:{activity.offer_id} is not yours to withdraw")
            self._verify(json.loads(row.jwks), raw, signature)
            if row.state == "withdrawn":
                return describe(row), False  # (withdrawn already: the same answer again)
            if row.state == "accepted":
                for iri in row.rule_iris.split():
                    try:
                        self.rules.remove(iri, owner, f"offer urn:uuid:{row.id} withdrawn by {activity.actor}")
                    except LucidError as exc:  # (removed here meanwhile: withdrawn all the same)
                        log.info("withdrawing offer %s: rule <%s>: %s", row.id, iri, exc)
            return describe(self.book.decide(row.id, "withdrawn", f"{activity.actor} (withdrawn)")), False
        waiting = [r for r in self.book.all("in", ("pending",)) if json.loads(r.owner).get("account") == owner.account]
        if len(waiting) >= MAX_PENDING:  # (a partner cannot fill the database with offers nobody decides)
            raise RateLimitedError(f"{len(waiting)} of your offers wait for a decision already; withdraw one "
                                   "or wait for this hub's admin", retry_after=3600)
        jwks = json.loads(fetch_jwks(f"{activity.actor}/.well-known/jwks.json", self._http()))
        self._verify(jwks, raw, signature)
        parsed = self.rules.parse(activity.rules_text)  # (a file that is not rules: 400 now)
        row = RuleOffer(id=activity.offer_id, direction="in", peer=activity.actor, rules=activity.rules_text,
                        rule_iris=" ".join(rule.iri for rule, _reads, _text in parsed),
                        summaries=json.dumps(list(activity.summaries)), owner=json.dumps(owner.to_json()),
                        jwks=json.dumps(jwks), client_id=owner.endpoint_id, client_secret="", location="",
                        state="pending", reason="", decided_by="", created_at=now(), decided_at=None)
        self.book.add(row)
        return describe(row), True

    def _verify(self, jwks: dict[str, Any], raw: bytes, signature: str | None) -> None:
        try:
            TrustedKeys(jwks).verify(digest(raw), signature)
        except (PatchSignatureError, LucidError) as exc:
            raise ForbiddenError(f"the activity's {SIGNATURE_HEADER} does not verify with the offering hub's "
                                    f"keys: {exc}") from None

    def accept(self, offer_id: str, by: str) -> dict[str, Any]:
        """Add an offer's rules, owned by the offering party: refused (and left pending) when
        that party may not define them or the rules could fire forever with either hub's."""
        row = self.book.get(offer_id, "in")
        if row.state != "pending":
            raise ConflictError(f"offer urn:uuid:{offer_id} is {row.state} already")
        owner = Owner.from_json(json.loads(row.owner))
        self.rules.add(row.rules, owner, f"{by}, accepting offer urn:uuid:{offer_id} of {row.peer}")
        return describe(self.book.decide(offer_id, "accepted", by, expect=("pending",)))

    def reject(self, offer_id: str, by: str, reason: str) -> dict[str, Any]:
        row = self.book.get(offer_id, "in")
        if row.state != "pending":
            raise ConflictError(f"offer urn:uuid:{offer_id} is {row.state} already")
        return describe(self.book.decide(offer_id, "rejected", by, reason, expect=("pending",)))

    def state_for(self, offer_id: str, owner: Owner) -> dict[str, Any]:
        """How an offer stands, for the party that made it: with the summaries of this hub's
        rules over graphs that party may read (its hub's side of the termination analysis)."""
        row = self.book.get(offer_id, "in")
        if not owner.admin and json.loads(row.owner).get("account") != owner.account:
            raise ForbiddenError(f"offer urn:uuid:{offer_id} is not yours")
        offering = Owner.from_json(json.loads(row.owner))
        party = offering.party

        def may_read(graph: str) -> bool:
            return self.rules.allows(party, graph, "read")

        visible = told_summaries([(r.rule, r.owner.account == offering.account) for r in self.rules.rules()
                                  if reads_any(r.rule, may_read)], may_read)
        return {**describe(row), "summaries": visible}

    def all(self, direction: str | None = None) -> list[dict[str, Any]]:
        return [describe(row) for row in self.book.all(direction)]
