"""The HTTP layer: one Flask app, a blueprint per area, each a thin shell that parses the
request, calls the domain code and renders the response (and HTML pages for people)."""

from lucid_hub.web.app import create_app

__all__ = ["create_app"]
