"""Registering a windowed query: as JSON (`WindowRequest`) or as a C-SPARQL registration,
checked before anything is stored (name, size, window, graphs the party may read, its limit
of queries, the query itself on an empty window)."""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from lucid_hub.auth.tokens import Principal
from lucid_hub.config import Settings
from lucid_hub.db.models import WindowedQuery
from lucid_hub.db.times import now
from lucid_hub.errors import ForbiddenError, InputError, InputTooLargeError, QueryLimitExceeded
from lucid_hub.policy.policy_graph import PolicyService
from lucid_hub.queries import csparql
from lucid_hub.queries.evaluator import BudgetExceeded, Overruns, QueryEngine, Refusal
from lucid_hub.queries.window_content import WINDOW_GRAPH, Window, WindowContent
from lucid_hub.queries.window_records import WindowRecords, taken

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
VIEWS = ("changes", "triples")  # what a window's default graph holds (docs/queries.md)


@dataclass
class WindowRequest:
    """A windowed query as its party asks for it."""

    name: str
    text: str  # standard SPARQL
    graphs: list[str]  # the streams: graphs whose patches the window holds
    range_spec: Any
    step_spec: Any
    with_state: bool = False
    view: str = "changes"
    static: list[str] = field(default_factory=list)  # merged into the default graph
    named: list[str] = field(default_factory=list)  # named graphs of the dataset
    source: str | None = None  # the C-SPARQL text, when it came as one
    callback: str | None = None
    secret: str | None = None


class Registrar:
    """Checks and stores new windowed queries."""

    def __init__(self, settings: Settings, policies: PolicyService, records: WindowRecords, content: WindowContent,
                 trial: QueryEngine, overruns: Overruns, clock: Callable[[], float]) -> None:
        self.settings = settings
        self.policies = policies
        self.records = records
        self.content = content
        self.trial = trial
        self.overruns = overruns
        self.clock = clock

    def csparql(self, caller: Principal, name: str | None, text: str, *, callback: str | None = None,
                secret: str | None = None) -> str:
        """Register a C-SPARQL query (`REGISTER QUERY name AS ...`): its streams are graphs (or
        their stream URLs on this hub), its window's default graph holds the window's triples,
        its FROM graphs are joined as they are at the window's end. `name`, when given (the
        URL's), is the one the text registers. The name registered."""
        self.overruns.check(caller.party.account)
        self._size(text)
        found = csparql.parse(text)
        if name is not None and found.name != name:
            raise InputError(f"the query registers {found.name}, but was sent to /windows/{name}: the names must "
                             "match (or POST it to /windows)")
        prefix = f"{self.settings.public_url}/streams?graph="
        graphs = [unquote(iri[len(prefix):]) if iri.startswith(prefix) else iri for iri in found.streams]
        return self.register(caller, WindowRequest(
            found.name, found.sparql, graphs, found.range_spec, found.step_spec, view="triples", static=found.static,
            named=found.named, source=text, callback=callback, secret=secret))

    def _size(self, text: str) -> None:
        if len(text.encode()) > self.settings.max_query_bytes:
            raise InputTooLargeError(f"the query is longer than {self.settings.max_query_bytes:,} bytes "
                                     "(LUCID_MAX_QUERY_BYTES)")

    def register(self, caller: Principal, asked: WindowRequest) -> str:
        """Check and store the query; its name."""
        self.overruns.check(caller.party.account)  # first: a refused party's flood costs the least
        if not _NAME.fullmatch(asked.name):
            raise InputError("a windowed query's name is 1-64 letters, digits, '.', '_' or '-', starting with a "
                             "letter or digit")
        self._size(asked.text)
        window = Window.parse(asked.range_spec, asked.step_spec)
        graphs = asked.graphs
        if not graphs or len(graphs) > 100 or not all(isinstance(g, str) and g for g in graphs):
            raise InputError("graphs must list 1-100 graph IRIs whose patches the window holds")
        if asked.view not in VIEWS:
            raise InputError(f"view must be one of {', '.join(VIEWS)}")
        extra = [*asked.static, *asked.named]
        if len(extra) > 100 or not all(isinstance(g, str) and g for g in extra):
            raise InputError("from and fromNamed list at most 100 graph IRIs together")
        party = caller.party
        wanted = sorted(set(graphs) | set(extra))
        unreadable = [g for g in wanted if g not in set(self.policies.readable(party, wanted))]
        if unreadable:
            raise ForbiddenError(f"{party.account} may not read {', '.join(unreadable[:5])}")
        held = self.records.held(party.account)
        if held >= self.settings.query_subscriptions_per_party:
            raise QueryLimitExceeded(f"{party.account} holds {held} windowed queries, the most one party may "
                                     "hold (LUCID_QUERY_SUBSCRIPTIONS_PER_PARTY)")
        if self.records.named(party.account, asked.name):
            raise taken(asked.name)
        self._check_query(asked.text, party.account)
        stamp = now()
        dataset = {"default": sorted(set(asked.static)), "named": sorted(set(asked.named))}
        row = WindowedQuery(id="wq-" + secrets.token_hex(12), name=asked.name, account=party.account,
                            endpoint_id=party.endpoint_id, groups=" ".join(sorted(party.groups)),
                            token_id=caller.jti, query=asked.text, graphs=json.dumps(sorted(set(graphs))),
                            range_spec=str(asked.range_spec).strip(), step_spec=str(asked.step_spec).strip(),
                            with_state=asked.with_state, view=asked.view, dataset=json.dumps(dataset),
                            source=asked.source, state="active", reason="", next_end_at=None, next_end_position=0,
                            sequence=-1, callback=asked.callback, secret=asked.secret, callback_seq=-1,
                            callback_attempts=0, callback_next_at=None, callback_error="",
                            created_at=stamp, updated_at=stamp)
        self.content.schedule(row, window, self.clock())
        self.records.add(row)
        return asked.name

    def _check_query(self, text: str, account: str) -> None:
        """Evaluate the query once on an empty window: a query that does not parse (or is
        not SELECT/ASK/CONSTRUCT) is refused now, not at its first window."""
        try:
            self.trial.window(text, WINDOW_GRAPH, [], {})
        except Refusal as refusal:
            raise refusal.as_error() from None
        except BudgetExceeded as exc:
            self.overruns.overran(account)
            raise QueryLimitExceeded(f"the query on an empty window {exc.args[0]} (LUCID_QUERY_BUDGET)") from None
        self.overruns.completed(account)
