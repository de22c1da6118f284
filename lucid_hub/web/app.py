"""Application factory: no work at import time; everything comes from the settings."""

from __future__ import annotations

from flask import Flask

from lucid_hub.config import Settings
from lucid_hub.runtime import Runtime
from lucid_hub.web import admin, archive, errors, graphs, headers, mirrors, oauth, ops, sparql, websub
from lucid_hub.web.bodies import BoundedRequest


def create_app(settings: Settings | None = None, runtime: Runtime | None = None) -> Flask:
    """A hub app; it opens (and owns) a Runtime unless one is given."""
    settings = settings or Settings.from_env()
    app = Flask("lucid_hub")
    app.request_class = BoundedRequest
    app.config["MAX_CONTENT_LENGTH"] = settings.max_body_bytes
    app.extensions["lucid"] = runtime or Runtime.open(settings)
    errors.register(app)
    headers.register(app)
    ops.init_request_observation(app)
    app.extensions["lucid"].start_delivery(settings.deliver_in_process)
    if app.extensions["lucid"].leader:  # one process of a hub keeps the mirrors and serves the metrics port
        app.extensions["lucid"].mirrors.start()
        app.extensions["lucid"].start_metrics_listener()
    oauth.init_oauth(app)
    admin.init_admin(app)
    for blueprint in (graphs.blueprint, archive.blueprint, sparql.blueprint, ops.blueprint, oauth.blueprint,
                      admin.api, admin.ui, websub.blueprint, mirrors.blueprint):
        app.register_blueprint(blueprint)
    return app
