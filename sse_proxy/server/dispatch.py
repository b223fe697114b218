"""aiohttp's router, with the outcome of a path it resolved before remembered.

aiohttp resolves every request from scratch: it walks the path's segments back to ``/``,
looking each up in its index and matching each candidate's pattern; for a proxy whose
catch-all sits at ``/`` that is every segment of every request, a stream start's largest
single piece of routing (issue 23). Resolution is a pure function of the method and the
path once the router is frozen (the app has no domain or sub-app resources, which look at
more: with any, nothing is remembered), so a hit is what aiohttp would find.
"""

from __future__ import annotations

from typing import Final

from aiohttp import web
from aiohttp.web_urldispatcher import AbstractRoute, UrlDispatcher, UrlMappingMatchInfo

__all__ = ["MAX_RESOLVED_PATHS", "remember_resolutions"]

MAX_RESOLVED_PATHS: Final = 1024
"""(method, path) pairs remembered; past it (a client inventing paths), new ones are
resolved each time."""


class _RememberingDispatcher(UrlDispatcher):
    _resolved: dict[tuple[str, str], tuple[dict[str, str], AbstractRoute]]

    async def resolve(self, request: web.Request) -> UrlMappingMatchInfo:
        key = (request.method, request.rel_url.path_safe)
        hit = self._resolved.get(key)
        if hit is not None:
            return UrlMappingMatchInfo(*hit)
        match = await super().resolve(request)
        # only a plain match (not an error, not a sub-app's), on a router of such routes
        if (
            type(match) is UrlMappingMatchInfo
            and not match.apps
            and not self._matched_sub_app_resources
            and len(self._resolved) < MAX_RESOLVED_PATHS
        ):
            self._resolved[key] = (dict(match), match.route)
        return match


def remember_resolutions(app: web.Application) -> None:
    """Make ``app``'s router remember what it resolved (before the app starts)."""
    router = app.router
    assert type(router) is UrlDispatcher, router
    router.__class__ = _RememberingDispatcher
    assert isinstance(router, _RememberingDispatcher)
    router._resolved = {}
