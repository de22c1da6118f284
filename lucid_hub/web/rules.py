"""Rules over HTTP (docs/rules.md): `/rules` for parties that may write the graphs their
rules write (they see and change their own rules), the same under `/admin/rules` for admins
(every rule). A rule file is sent as `text/plain` (UTF-8, at most 64 KiB)."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, jsonify, request

from lucid_hub.auth.tokens import Principal
from lucid_hub.errors import ForbiddenError, InputError, InputTooLargeError, NotFoundError, UnsupportedMediaTypeError
from lucid_hub.policy.policy_graph import verified_history
from lucid_hub.rdf.rdfpatch import parse_rdf_patch
from lucid_hub.rules.analysis import Analysis, analyse
from lucid_hub.rules.language import MAX_RULE_BYTES
from lucid_hub.rules.model import RULES_GRAPH, Owner, Registered
from lucid_hub.signing import TrustedKeys
from lucid_hub.web import rule_offers
from lucid_hub.web.authz import author, principal, require_scope
from lucid_hub.web.http import json_object_body, negotiate, runtime

blueprint = Blueprint("rules", __name__, url_prefix="/rules")
RULE_TYPES = ("text/plain", "application/x-lucid-rules")


def _owner() -> tuple[Principal, Owner]:
    caller = principal()
    if "admin" in caller.scopes:
        return caller, Owner(True, caller.account, caller.endpoint_id, tuple(sorted(caller.party.groups)))
    caller = require_scope("graphs:write")
    return caller, Owner(False, caller.account, caller.endpoint_id, tuple(sorted(caller.party.groups)))


def _visible(owner: Owner, rules: list[Registered]) -> list[Registered]:
    return rules if owner.admin else [r for r in rules if r.owner.account == owner.account]


def _text() -> str:
    if (request.mimetype or "").lower() not in RULE_TYPES:
        raise UnsupportedMediaTypeError(f"send a rule file as text/plain (UTF-8), not {request.mimetype or '(none)'}")
    if (request.content_length or 0) > MAX_RULE_BYTES:
        raise InputTooLargeError(f"a rule file is at most {MAX_RULE_BYTES:,} bytes")
    data = request.get_data(cache=False)
    if len(data) > MAX_RULE_BYTES:
        raise InputTooLargeError(f"a rule file is at most {MAX_RULE_BYTES:,} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"a rule file is UTF-8 (byte {exc.start} is not)") from None


def _iri() -> str:
    iri = request.args.get("iri")
    if not iri:
        raise InputError("name the rule: ?iri=IRI")
    return iri


def analysis_json(analysis: Analysis) -> dict[str, Any]:
    return {"terminates": analysis.terminates, "edges": [list(e) for e in analysis.edges],
            "cycles": [list(c) for c in analysis.cycles], "unbounded": [list(c) for c in analysis.unbounded],
            "explanation": analysis.explain()}


def list_rules() -> Response:
    _caller, owner = _owner()
    engine = runtime().rules
    iri = request.args.get("iri")
    if iri:
        rule = engine.get(iri)
        if rule not in _visible(owner, [rule]):
            raise NotFoundError(f"no rule <{iri}> of yours")
        if negotiate(["application/json", "text/plain"], "application/json") == "text/plain":
            return Response(rule.text, mimetype="text/plain")
        return jsonify(rule.describe())
    response = jsonify({"rules": [r.describe() for r in _visible(owner, engine.rules())]})
    # (LDN discovery: where partners offer rules to this hub)
    response.headers["Link"] = f'<{runtime().settings.public_url}/rules/offers>; rel="http://www.w3.org/ns/ldp#inbox"'
    return response


def add_rules() -> Response:
    _caller, owner = _owner()
    text = _text()
    engine = runtime().rules
    before = engine.version
    added = engine.add(text, owner, author())
    response = jsonify({"rules": [r.describe() for r in added]})
    response.status_code = 201 if engine.version != before else 200  # the same rules again: nothing changed
    return response


def remove_rule() -> Response:
    _caller, owner = _owner()
    runtime().rules.remove(_iri(), owner, author())
    return Response(status=204)


def explain_rules() -> Response:
    """The rule set's triggering graph; with a rule file (POST), the set as it would be with it
    (nothing is stored: what `add` would refuse, and why)."""
    _owner()
    engine = runtime().rules
    if request.method == "POST":
        parsed = engine.parse(_text())
        new = {rule.iri for rule, _reads, _text in parsed}
        current = [r for r in engine.rules() if r.rule.iri not in new]
        return jsonify(analysis_json(analyse([*(r.rule for r in current), *(rule for rule, _r, _t in parsed)])))
    return jsonify(analysis_json(engine.explain()))


def firings() -> Response:
    _caller, owner = _owner()
    engine = runtime().rules
    rule = request.args.get("rule")
    try:
        limit = int(request.args.get("limit", "100"))
    except ValueError:
        raise InputError("limit is a whole number") from None
    if rule is not None:
        engine.get(rule)  # 404 for an unknown rule
    entries = engine.history(rule, limit)
    if not owner.admin:
        mine = {r.rule.iri for r in _visible(owner, engine.rules())}
        entries = [e for e in entries if e["rule"] in mine]
    return jsonify({"firings": entries})


def changes() -> Response:
    """The rules graph's audit trail: every change, its signature and chain link verified."""
    _caller, owner = _owner()
    if not owner.admin:
        raise ForbiddenError("the rules' audit trail is for admins (scope admin)")
    rt = runtime()
    return jsonify({"graph": RULES_GRAPH, "changes": verified_history(rt.archive, RULES_GRAPH,
                                                                      TrustedKeys(rt.keys.jwks()), rt.canonicalizer)})


def test_rules() -> Response:
    """What a rule file would do with a patch (`rules test`), writing nothing: JSON {"rules":
    the file, "graph": IRI, "patch": an RDF Patch}. For admins: a simulation evaluates the
    conditions over every graph, whoever may read them."""
    _caller, owner = _owner()
    if not owner.admin:
        raise ForbiddenError("trying rules on a patch is for admins (scope admin): it reads every graph")
    body = json_object_body('{"rules": "RULE …", "graph": "IRI", "patch": "an RDF Patch"}')
    text, graph, raw = body.get("rules"), body.get("graph"), body.get("patch")
    if not isinstance(text, str) or not isinstance(graph, str) or not isinstance(raw, str):
        raise InputError('send {"rules": "…", "graph": "IRI", "patch": "…"} (strings)')
    if len(text.encode()) > MAX_RULE_BYTES:
        raise InputTooLargeError(f"a rule file is at most {MAX_RULE_BYTES:,} bytes")
    rt = runtime()
    doc = parse_rdf_patch(raw.encode(), rt.canonicalizer, graph=graph)
    removed = [s for m in doc.removed for s in m.statements]
    added = [s for m in doc.added for s in m.statements]
    return jsonify({"firings": rt.rules.simulate(text, graph, removed, added)})


def register(bp: Blueprint, prefix: str = "") -> None:
    """The rule routes on a blueprint (this one, and the admin API's under /admin/rules)."""
    bp.add_url_rule(prefix or "", "rules_list", list_rules, methods=["GET"])
    bp.add_url_rule(prefix or "", "rules_add", add_rules, methods=["POST"])
    bp.add_url_rule(prefix or "", "rules_remove", remove_rule, methods=["DELETE"])
    bp.add_url_rule(f"{prefix}/explain", "rules_explain", explain_rules, methods=["GET", "POST"])
    bp.add_url_rule(f"{prefix}/firings", "rules_firings", firings, methods=["GET"])
    bp.add_url_rule(f"{prefix}/history", "rules_history", changes, methods=["GET"])
    bp.add_url_rule(f"{prefix}/test", "rules_test", test_rules, methods=["POST"])


register(blueprint)
rule_offers.register(blueprint)
