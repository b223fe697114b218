"""aiohttp's router, with the outcome of a path it resolved before remembered.

aiohttp resolves every request from scratch: it walks the path's segments back to ``/``,
looking each up in its index and matching each candidate's pattern; for a proxy whose
catch-all sits at ``/`` that is every segment of every request, a stream start's largest
single piece of routing. Resolution is a pure function of the method and the path once the
router is frozen (the app has no domain or sub-app resources, which look at more: with
any, nothing is remembered), so a hit is what aiohttp would find.

A path is remembered only once its request is let in (:func:`remember`, called by the
front door): requests it refuses leave nothing behind. The paths are the client's, so the
memory is bounded in bytes (:class:`~sse_proxy.cache.BoundedCache`).
"""

from __future__ import annotations

from typing import Final

from aiohttp import web
from aiohttp.web_urldispatcher import AbstractRoute, UrlDispatcher, UrlMappingMatchInfo

from sse_proxy.cache import BoundedCache, size_of

__all__ = ["RESOLVED_BUDGET", "remember", "remember_resolutions"]

RESOLVED_BUDGET: Final = 4 << 20
"""Bytes of (method, path) pairs and their matches remembered; past it, the memory starts
again empty."""

_Resolved = tuple[dict[str, str], AbstractRoute]
_Cache = BoundedCache[tuple[str, str], _Resolved]


class _FirstSeen(UrlMappingMatchInfo):
    """A plain match of a path not remembered yet: :func:`remember` keeps it."""

    __slots__ = ("_cache", "_key")

    _cache: _Cache
    _key: tuple[str, str]

    def keep(self) -> None:
        match = dict(self)
        cost = size_of(*self._key, *match.values())
        self._cache.put(self._key, (match, self._route), cost)


class _RememberingDispatcher(UrlDispatcher):
    _resolved: _Cache

    async def resolve(self, request: web.Request) -> UrlMappingMatchInfo:
        key = (request.method, request.rel_url.path_safe)
        hit = self._resolved.get(key)
        if hit is not None:
            return UrlMappingMatchInfo(*hit)
        match = await super().resolve(request)
        # only a plain match (not an error, not a sub-app's), on a router of such routes
        if type(match) is UrlMappingMatchInfo and not match.apps:
            if self._matched_sub_app_resources:
                return match
            first = _FirstSeen(dict(match), match.route)
            first._cache, first._key = self._resolved, key
            return first
        return match


def remember(request: web.Request) -> None:
    """Remember how ``request``'s path resolved (a request let in), if it is not yet."""
    match = request.match_info
    if type(match) is _FirstSeen:
        match.keep()


def remember_resolutions(app: web.Application) -> None:
    """Make ``app``'s router remember what it resolved (before the app starts)."""
    router = app.router
    assert type(router) is UrlDispatcher, router
    router.__class__ = _RememberingDispatcher
    assert isinstance(router, _RememberingDispatcher)
    router._resolved = BoundedCache(RESOLVED_BUDGET)
