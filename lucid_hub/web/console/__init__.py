"""The console: pages for the people who run a hub, on the admin pages' sign-in and
CSRF protection (web.admin's `ui` blueprint). Server-rendered, no script needed to read them;
every list is a page of a bounded size.

The overview (what needs attention, figures, charts), the graphs, a graph (its history as a
timeline, who may read and write it, its subscribers, two versions compared), a patch shown as
a review shows a change, the subscribers, the mirrors and the clients, with their actions
behind confirmation pages. Pages with moving figures follow a Server-Sent Events stream each
(`live._live`); a page and its stream take their figures from one function (docs/console.md).

The modules: figures (what moves), live (its stream), review (a patch as a change), pages
(the hub's own data), partners (subscribers, clients, mirrors), offers (rules offered between
hubs), capabilities (rules, the hub's own work).
"""

from __future__ import annotations

from lucid_hub.web.console import capabilities, offers, pages, partners  # noqa: F401 (their pages join the blueprint)
from lucid_hub.web.console.figures import PAGE, graph_figures, mirror_figures, overview_figures, subscription_figures

__all__ = ["PAGE", "graph_figures", "mirror_figures", "overview_figures", "subscription_figures"]
