"""Rules offered between hubs over HTTP (docs/rules.md, "Rules across hubs").

- `POST /rules/offers`: this hub's inbox for offers (LDN): a partner's `Offer` or `Undo`,
  signed with its hub's key (`X-Lucid-Signature`), sent with its client's token.
- `GET /rules/offers`: the offers (an admin: every offer, both ways, partners asked first how
  ours stand; a party: the offers it made to this hub); `?id=` one of them.
- `POST /rules/offers/outgoing` (admin): offer a rule file to a partner hub.
- `POST /rules/offers/accept|reject|withdraw?id=` (admin): decide on a partner's offer;
  withdraw one of ours.

The same routes are under `/admin/rules/offers`.
"""

from __future__ import annotations

from flask import Blueprint, Response, jsonify, request

from lucid_hub.errors import ForbiddenError, InputError, InputTooLargeError, UnsupportedMediaTypeError
from lucid_hub.rules.language import MAX_RULE_BYTES
from lucid_hub.rules.model import Owner
from lucid_hub.rules.offering import SIGNATURE_HEADER, RuleOffers
from lucid_hub.rules.offers import MAX_OFFER_BYTES, read_activity
from lucid_hub.web.authz import author, principal, require_scope
from lucid_hub.web.http import json_object_body, runtime

ACTIVITY_TYPES = ("application/ld+json", "application/activity+json", "application/json")


def _offers() -> RuleOffers:
    offers = runtime().rule_offers
    assert offers is not None
    return offers


def _owner() -> Owner:
    caller = principal()
    if "admin" in caller.scopes:
        return Owner(True, caller.account, caller.endpoint_id, tuple(sorted(caller.party.groups)))
    caller = require_scope("graphs:write")
    return Owner(False, caller.account, caller.endpoint_id, tuple(sorted(caller.party.groups)))


def _admin() -> Owner:
    owner = _owner()
    if not owner.admin:
        raise ForbiddenError("deciding on offers of rules is for admins (scope admin)")
    return owner


def _id() -> str:
    offer_id = request.args.get("id", "")
    if not offer_id:
        raise InputError("name the offer: ?id=UUID")
    return offer_id.removeprefix("urn:uuid:")


def inbox() -> Response:
    """A partner's Offer (201, Location: the offer here) or Undo (200)."""
    owner = _owner()
    if owner.admin:
        raise ForbiddenError("offers come from partners' clients (a party with graphs:write), not an admin token")
    if (request.mimetype or "").lower() not in ACTIVITY_TYPES:
        raise UnsupportedMediaTypeError(f"post an activity as application/ld+json, not {request.mimetype or '(none)'}")
    if (request.content_length or 0) > MAX_OFFER_BYTES:
        raise InputTooLargeError(f"an offer is at most {MAX_OFFER_BYTES:,} bytes")
    raw = request.get_data(cache=False)
    activity = read_activity(raw)
    offers = _offers()
    recorded, new = offers.receive(activity, raw, request.headers.get(SIGNATURE_HEADER), owner,
                                   runtime().rules.callback_prefixes(owner))
    response = jsonify(offers.state_for(recorded["id"], owner))
    if new:
        response.status_code = 201
        response.headers["Location"] = f"{runtime().settings.public_url}/rules/offers?id={recorded['id']}"
    return response


def listing() -> Response:
    owner = _owner()
    offers = _offers()
    if "id" in request.args:
        if owner.admin:
            found = [o for o in offers.all() if o["id"] == _id()]
            if found:
                return jsonify(found[0])
        return jsonify(offers.state_for(_id(), owner))
    if not owner.admin:
        return jsonify({"offers": [o for o in offers.all("in") if o["party"] == owner.account]})
    offers.refresh()
    return jsonify({"offers": offers.all()})


def outgoing() -> Response:
    """Offer a rule file: JSON {"hub": URL, "rules": "RULE …", "client_id", "client_secret"}."""
    _admin()
    body = json_object_body('{"hub": URL, "rules": "RULE …", "client_id": "…", "client_secret": "…"}')
    fields = {k: body.get(k) for k in ("hub", "rules", "client_id", "client_secret")}
    missing = [k for k, v in fields.items() if not isinstance(v, str) or not v]
    if missing:
        raise InputError(f"name {', '.join(missing)} (strings): the partner hub, the rule file, our client there")
    if len(str(fields["rules"]).encode()) > MAX_RULE_BYTES:
        raise InputTooLargeError(f"a rule file is at most {MAX_RULE_BYTES:,} bytes")
    made = _offers().offer(str(fields["hub"]), str(fields["rules"]), str(fields["client_id"]),
                           str(fields["client_secret"]), author())
    response = jsonify(made)
    response.status_code = 201
    return response


def accept() -> Response:
    _admin()
    return jsonify(_offers().accept(_id(), author()))


def reject() -> Response:
    _admin()
    reason = json_object_body('{"reason": "…"}').get("reason", "")
    return jsonify(_offers().reject(_id(), author(), str(reason)[:4000]))


def withdraw() -> Response:
    _admin()
    return jsonify(_offers().withdraw(_id(), author()))


def register(bp: Blueprint, prefix: str = "") -> None:
    """The offer routes on a blueprint (/rules, and the admin API's /admin/rules)."""
    bp.add_url_rule(f"{prefix}/offers", "offers_inbox", inbox, methods=["POST"])
    bp.add_url_rule(f"{prefix}/offers", "offers_list", listing, methods=["GET"])
    bp.add_url_rule(f"{prefix}/offers/outgoing", "offers_outgoing", outgoing, methods=["POST"])
    bp.add_url_rule(f"{prefix}/offers/accept", "offers_accept", accept, methods=["POST"])
    bp.add_url_rule(f"{prefix}/offers/reject", "offers_reject", reject, methods=["POST"])
    bp.add_url_rule(f"{prefix}/offers/withdraw", "offers_withdraw", withdraw, methods=["POST"])
