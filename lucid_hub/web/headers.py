"""Security headers on every response of the hub.

The pages (the admin console, a patch as HTML) load script and style from the hub's own
files only: the Content-Security-Policy forbids inline script and style, so a value that
slips into a page as markup still cannot run. API answers carry the same headers; they cost
nothing there and keep a browser from sniffing a JSON or RDF answer into a page.
"""

from __future__ import annotations

from flask import Flask, Response

CONTENT_SECURITY_POLICY = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
                           "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
}


def register(app: Flask) -> None:
    @app.after_request
    def security_headers(response: Response) -> Response:
        for name, value in HEADERS.items():
            response.headers.setdefault(name, value)
        return response
