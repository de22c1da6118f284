"""The console's page of rules offered between hubs (docs/rules.md, "Rules across hubs"):
partners' offers to accept or reject, and this hub's own, to withdraw."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from flask import Response, redirect, render_template, request, session, url_for

from lucid_hub.errors import LucidError
from lucid_hub.rules.offering import RuleOffers
from lucid_hub.web.admin import ui
from lucid_hub.web.console.live import _changes, version
from lucid_hub.web.http import runtime


def _offers() -> RuleOffers:
    offers = runtime().rule_offers
    assert offers is not None
    return offers


ASK_EVERY = 60.0  # seconds between two askings of the partners how this hub's offers stand


@ui.get("/rule-offers")
def rule_offers_page() -> Any:
    offers = _offers()
    offers.refresh(every=ASK_EVERY)  # (how our offers stand, asked of the partners at most once a minute)
    every = offers.all()
    asked = datetime.fromtimestamp(offers.asked, UTC) if offers.asked is not None else None
    return render_template("rule_offers.html", incoming=[o for o in every if o["direction"] == "in"],
                           outgoing=[o for o in every if o["direction"] == "out"], asked=asked,
                           message=request.args.get("message"), version=version(every))


@ui.get("/rule-offers/events")
def rule_offers_events() -> Response:
    """The page's changes: an offer received, decided or withdrawn (partners are not asked)."""
    return _changes(lambda: _offers().all(), request.args.get("shown", "")[:64])


PAST = {"accept": "accepted", "reject": "rejected", "withdraw": "withdrawn"}


def _decide(verb: str) -> Any:
    offers, offer_id = _offers(), request.form.get("id", "")
    who = f"admin {session['admin']} (console)"
    try:
        if verb == "accept":
            done = offers.accept(offer_id, who)
        elif verb == "reject":
            done = offers.reject(offer_id, who, request.form.get("reason", "")[:4000])
        else:
            done = offers.withdraw(offer_id, who)
        message = f"offer {offer_id}: {done['state']}"
    except LucidError as exc:  # (refused: said on the page, the offer as it was)
        message = f"offer {offer_id} not {PAST[verb]}: {exc}"
    return redirect(url_for("admin_ui.rule_offers_page", message=message))


@ui.post("/rule-offers/accept")
def accept_offer() -> Any:
    return _decide("accept")


@ui.post("/rule-offers/reject")
def reject_offer() -> Any:
    return _decide("reject")


@ui.post("/rule-offers/withdraw")
def withdraw_offer() -> Any:
    return _decide("withdraw")
