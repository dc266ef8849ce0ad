"""The web view: one page (a Jinja2 template) drawn with Plotly, kept live by a push of JSON every interval.

The live sections (cluster, partitions, transactions, groups, half messages) are pushed as Server-Sent
Events on /api/live (Starlette's StreamingResponse; the browser's EventSource reconnects by itself);
each also has its own JSON endpoint, which the page polls whenever the push has gone quiet. What the
user picks (a timeline, a partition's records) is polled. Plain `def` endpoints and the sections run
in Starlette's thread pool, so the blocking admin calls never hold up the event loop. plotly.min.js
comes from the installed `plotly` package and is served from here: the page needs no network beyond
loopback.
"""
from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import plotly
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from coordinator.layout import ClusterLayout
from proto.errors import (
    ErrorClass,
    GroupIdNotFoundError,
    IllegalArgumentError,
    InvalidRequestError,
    KafkaError,
    TransactionalIdNotFoundError,
    UnknownTopicOrPartitionError,
    error_class_of,
)
from proto.structs import validate_topic_name
from txnsim.ui import queries
from txnsim.ui.sampler import ClusterSampler
from txnsim.ui.shared import Answer, SharedSections

log = logging.getLogger(__name__)

HERE = Path(__file__).parent
PLOTLY_JS = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"


def attempt(fn: Callable[[], dict[str, Any]]) -> Answer:
    """The query's answer, or its Kafka error as one line (the page shows it and stays live): 404 for something
    that does not exist, 400 for a request no cluster could answer, 503 when the cluster could not answer now."""
    try:
        return 200, fn()
    except KafkaError as exc:
        if isinstance(exc, (UnknownTopicOrPartitionError, TransactionalIdNotFoundError, GroupIdNotFoundError)):
            status = 404
        elif error_class_of(exc) is ErrorClass.INVALID_CONFIG or isinstance(exc, (InvalidRequestError,
                                                                                   IllegalArgumentError)):
            status = 400
        else:
            status = 503
        return status, {"error": f"{type(exc).__name__}: {exc}"}


def sse_event(name: str, status: int, body: dict[str, Any]) -> str:
    """One Server-Sent Event: the section's name, its JSON on one line (a failed query's body says so)."""
    return f"event: {name}\ndata: {json.dumps(body if status == 200 else {**body, 'failed': True})}\n\n"


def create_app(data_dir: Path, *, interval_s: float = 1.0, stopping: Callable[[], bool] = lambda: False) -> Starlette:
    """The app for the cluster whose files are in `data_dir` (its nodes found through its cluster file).

    `stopping`: true once the server shuts down; the live streams then end, so the shutdown need not
    wait for browsers to go away.
    """
    sampler = ClusterSampler(ClusterLayout(data_dir), interval_s=interval_s)
    templates = Jinja2Templates(directory=str(HERE / "templates"))
    rebalances = queries.RebalanceHistory()
    timelines = queries.Timelines(data_dir)
    group_timelines = queries.GroupTimelines(data_dir)
    browser = queries.Messages(data_dir)

    @asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        sampler.start()
        try:
            yield
        finally:
            sampler.stop()

    def page(request: Request) -> Response:
        return templates.TemplateResponse(request, "index.html", {
            "data_dir": str(data_dir), "bootstrap_servers": sampler.spec.bootstrap_servers,
            "interval_ms": int(interval_s * 1000)})

    def described_groups() -> dict[str, Any]:
        found = queries.groups(sampler.admin)
        rebalances.observe(found)
        return {"groups": found}

    #: the live sections: name -> its answer now (each is pushed on /api/live and served at /api/<name>),
    #: computed at most about twice an interval whatever the number of open pages
    live = SharedSections({
        "cluster": lambda: (200, sampler.cluster()),
        "partitions": lambda: (200, sampler.partitions()),
        "transactions": lambda: attempt(lambda: {"transactions": queries.transactions(sampler.admin)}),
        "groups": lambda: attempt(described_groups),
        "half-messages": lambda: attempt(lambda: {"half_messages": queries.half_messages(sampler.admin)}),
    }, max_age_s=interval_s / 2)

    def answer(fn: Callable[[], dict[str, Any]]) -> JSONResponse:
        status, body = attempt(fn)
        return JSONResponse(body, status_code=status)

    async def section(request: Request) -> JSONResponse:
        status, body = await live.get(request.url.path.removeprefix("/api/"))
        return JSONResponse(body, status_code=status)

    async def stream() -> AsyncIterator[str]:
        """Every live section each interval, each sent as soon as it is answered: a slow one (a node that
        does not answer within the request timeout) holds up only itself."""
        yield f"retry: {int(interval_s * 1000)}\n\n"
        loop = asyncio.get_running_loop()
        running: dict[str, asyncio.Future[Answer]] = {}
        try:
            while not stopping():
                tick = loop.time()
                for name in live.names():
                    if name not in running:
                        running[name] = asyncio.ensure_future(live.get(name))
                await asyncio.wait(running.values(), timeout=interval_s)
                for name, task in list(running.items()):
                    if task.done():
                        del running[name]
                        try:
                            status, body = task.result()
                        except Exception as exc:  # one section's bug: said in its place, the others go on
                            log.exception("the live section %s failed", name)
                            status, body = 500, {"error": f"{type(exc).__name__}: {exc}"}
                        yield sse_event(name, status, body)
                await asyncio.sleep(max(0.0, interval_s - (loop.time() - tick)))
        finally:
            for task in running.values():
                task.cancel()

    def pushed(_request: Request) -> StreamingResponse:
        return StreamingResponse(stream(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})

    def last_of(request: Request, default: int) -> int | None:
        """A whole number of at most 9 digits (a longer one is no count anyone means, and Python refuses to
        convert one of over 4,300 digits), or None."""
        last = request.query_params.get("last", str(default))
        return int(last) if last.lstrip("-").isdigit() and len(last.lstrip("-")) <= 9 else None

    def timeline(request: Request) -> JSONResponse:
        last = last_of(request, queries.TIMELINE_TRANSACTIONS)
        if last is None:
            return JSONResponse({"error": "INVALID_REQUEST: last is a whole number (negative: all)"}, 400)
        return answer(lambda: timelines(request.path_params["transactional_id"], last))

    def group_timeline(request: Request) -> JSONResponse:
        last = last_of(request, queries.GROUP_GENERATIONS)
        if last is None:
            return JSONResponse({"error": "INVALID_REQUEST: last is a whole number (negative: all)"}, 400)
        return answer(lambda: group_timelines(request.path_params["group_id"], last))

    def messages(request: Request) -> JSONResponse:
        q = request.query_params
        topic = q.get("topic", "")
        try:  # the name becomes a directory name: only a topic's may (no "..", no "/")
            validate_topic_name(topic)
        except KafkaError as exc:
            return JSONResponse({"error": f"INVALID_TOPIC_EXCEPTION: {exc.message}"}, 400)
        if any(len(q.get(name, "")) > 19 for name in ("partition", "offset", "limit")):
            return JSONResponse({"error": "INVALID_REQUEST: partition, offset and limit are whole numbers"}, 400)
        try:
            partition, offset, limit = int(q.get("partition", "0")), int(q.get("offset", "0")), int(q.get("limit", "50"))
        except ValueError:
            return JSONResponse({"error": "INVALID_REQUEST: partition, offset and limit are whole numbers"}, 400)
        if partition < 0 or offset < 0 or not 1 <= limit <= 1000:
            return JSONResponse({"error": "INVALID_REQUEST: partition and offset must be >= 0, limit 1..1000"}, 400)
        return answer(lambda: {"records": browser(topic, partition, offset, limit)})

    def plotly_js(_request: Request) -> FileResponse:
        return FileResponse(PLOTLY_JS, media_type="application/javascript")

    routes = [
        Route("/", page),
        Route("/api/live", pushed),
        *(Route(f"/api/{name}", section) for name in live.names()),
        Route("/api/transactions/{transactional_id:path}/timeline", timeline),
        Route("/api/groups/{group_id:path}/timeline", group_timeline),
        Route("/api/messages", messages),
        Route("/static/plotly.min.js", plotly_js),
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
    ]
    return Starlette(routes=routes, lifespan=lifespan)
