"""Application factory: no work at import time; everything comes from the settings."""

from __future__ import annotations

from flask import Flask

from lucid_hub.config import Settings
from lucid_hub.web import (
    admin,
    archive,
    console,  # noqa: F401 (its pages join the admin pages' blueprint when imported)
    errors,
    graphs,
    headers,
    inbox,
    jsap,
    mirrors,
    oauth,
    ops,
    queries,
    registration,
    rules,
    sparql,
    streams,
    websub,
    windows,
)
from lucid_hub.web.bodies import BoundedRequest
from lucid_hub.web.console.attention import notes
from lucid_hub.web.parts import HubParts


def create_app(settings: Settings, runtime: HubParts) -> Flask:
    """The app of a hub whose parts the composition root opened (lucid_hub.runtime); it only
    serves them: the caller starts their background work (`Runtime.start`) and closes them."""
    app = Flask("lucid_hub")
    app.request_class = BoundedRequest
    app.config["MAX_CONTENT_LENGTH"] = settings.max_body_bytes
    # SE protocol messages on /subscribe: a query and its envelope; pings keep proxies from closing it.
    app.config["SOCK_SERVER_OPTIONS"] = {"max_message_size": settings.max_query_bytes + 16_384,
                                        "ping_interval": settings.ws_ping_seconds}
    app.extensions["lucid"] = runtime
    errors.register(app)
    headers.register(app)
    ops.init_request_observation(app)
    oauth.init_oauth(app)
    admin.init_admin(app)
    jsap.init_jsap(app)
    for blueprint in (graphs.blueprint, archive.blueprint, sparql.blueprint, ops.blueprint, oauth.blueprint,
                      admin.api, admin.ui, websub.blueprint, mirrors.blueprint, queries.blueprint, queries.sockets,
                      windows.blueprint, streams.blueprint, inbox.blueprint, rules.blueprint,
                      registration.blueprint, jsap.blueprint):
        app.register_blueprint(blueprint)
    queries.sock.init_app(app)
    # what only this process knows needs attention goes into its replica report (the console
    # of every replica names it): the console's judgement, so the app hands it to the runtime
    runtime.notes_from["console"] = lambda: notes(runtime)
    return app
