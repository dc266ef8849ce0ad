"""The web view: one page (a Jinja2 template) that polls JSON endpoints every second and draws with Plotly.

Starlette runs the endpoints; plain `def` endpoints run in its thread pool, so the blocking admin
calls never hold up the event loop. plotly.min.js comes from the installed `plotly` package and is
served from here: the page needs no network beyond loopback.
"""
from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import plotly
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from coordinator.layout import ClusterLayout
from proto.errors import KafkaError
from txnsim.ui import queries
from txnsim.ui.sampler import ClusterSampler

HERE = Path(__file__).parent
PLOTLY_JS = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"


def create_app(data_dir: Path, *, interval_s: float = 1.0) -> Starlette:
    """The app for the cluster whose files are in `data_dir` (its nodes found through its cluster file)."""
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

    def answer(fn: Callable[[], Any]) -> JSONResponse:
        """The query's answer, or its Kafka error as one line (the page shows it and keeps polling)."""
        try:
            return JSONResponse(fn())
        except KafkaError as exc:
            return JSONResponse({"error": f"{type(exc).__name__}: {exc}"}, status_code=503)

    def cluster(_request: Request) -> JSONResponse:
        return JSONResponse(sampler.cluster())

    def partitions(_request: Request) -> JSONResponse:
        return JSONResponse(sampler.partitions())

    def transactions(_request: Request) -> JSONResponse:
        return answer(lambda: {"transactions": queries.transactions(sampler.admin)})

    def groups(_request: Request) -> JSONResponse:
        def described() -> dict[str, Any]:
            found = queries.groups(sampler.admin)
            rebalances.observe(found)
            return {"groups": found}
        return answer(described)

    def half(_request: Request) -> JSONResponse:
        return answer(lambda: {"half_messages": queries.half_messages(sampler.admin)})

    def last_of(request: Request, default: int) -> int | None:
        last = request.query_params.get("last", str(default))
        return int(last) if last.lstrip("-").isdigit() else None

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
        try:
            partition, offset, limit = int(q.get("partition", "0")), int(q.get("offset", "0")), int(q.get("limit", "50"))
        except ValueError:
            return JSONResponse({"error": "INVALID_REQUEST: partition, offset and limit are whole numbers"}, 400)
        if partition < 0 or offset < 0 or not 1 <= limit <= 1000:
            return JSONResponse({"error": "INVALID_REQUEST: partition and offset must be >= 0, limit 1..1000"}, 400)
        return answer(lambda: {"records": browser(q.get("topic", ""), partition, offset, limit)})

    def plotly_js(_request: Request) -> FileResponse:
        return FileResponse(PLOTLY_JS, media_type="application/javascript")

    routes = [
        Route("/", page),
        Route("/api/cluster", cluster),
        Route("/api/partitions", partitions),
        Route("/api/transactions", transactions),
        Route("/api/transactions/{transactional_id:path}/timeline", timeline),
        Route("/api/groups", groups),
        Route("/api/groups/{group_id:path}/timeline", group_timeline),
        Route("/api/half-messages", half),
        Route("/api/messages", messages),
        Route("/static/plotly.min.js", plotly_js),
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
    ]
    return Starlette(routes=routes, lifespan=lifespan)
