"""``/api/v1/schedules``: URLs archived again on a schedule (``UrlScheduleService``); ``boxcar
schedule`` calls these."""

from __future__ import annotations

from typing import Annotated, Literal

import anyio.to_thread
from litestar import Controller, Request, delete, get, post
from litestar.di import NamedDependency
from litestar.exceptions import NotFoundException
from litestar.params import JSONBody, PathParameter
from litestar.status_codes import HTTP_201_CREATED, HTTP_202_ACCEPTED

from boxcar.ingest import routes
from boxcar.ingest.access import Viewer
from boxcar.ingest.api.auth import require_read_access, require_token
from boxcar.ingest.api.controllers import ObjectId, strict_body, unavailable, unprocessable
from boxcar.ingest.api.openapi import READS, SECURITY, WRITE_ONE, WRITES
from boxcar.ingest.api.schemas import ControlAccepted, ScheduleCreate, ScheduleOut
from boxcar.ingest.feeds import UrlScheduleService
from boxcar.ingest.services import InputError
from boxcar.ingest.signals import BusUnavailable, Signals
from boxcar.shared.messages import ScheduleControl


class ScheduleController(Controller):
    path = routes.SCHEDULES
    tags = ["schedules"]

    @post(
        "/",
        operation_id="CreateSchedule",
        status_code=HTTP_201_CREATED,
        guards=[require_token],
        security=SECURITY,
        raises=WRITES,
    )
    async def create_schedule(
        self,
        request: Request,
        data: JSONBody[ScheduleCreate],
        schedule_service: NamedDependency[UrlScheduleService],
        signals: NamedDependency[Signals],
        viewer: NamedDependency[Viewer],
    ) -> ScheduleOut:
        """Archive URLs now and again ``every`` minute/hour/day/week/month/year or on a cron
        expression; each run is a crawl that makes new snapshots (``ONLY_NEW`` off)."""
        data = await strict_body(request, ScheduleCreate)
        try:
            schedule = await anyio.to_thread.run_sync(lambda: schedule_service.create(data, owner=viewer.username))
        except InputError as exc:
            raise unprocessable(exc) from None
        await signals.feed_due(schedule.id)  # the runners' schedule loop
        return schedule

    @get(
        "/",
        operation_id="ListSchedules",
        sync_to_thread=True,
        guards=[require_read_access],
        security=SECURITY,
        raises=READS,
    )
    def list_schedules(
        self, schedule_service: NamedDependency[UrlScheduleService], viewer: NamedDependency[Viewer]
    ) -> list[ScheduleOut]:
        """Every URL schedule with its next and last run and how many runs it made."""
        return schedule_service.list(viewer=viewer)

    @delete(
        "/{schedule_id:str}", operation_id="DeleteSchedule", guards=[require_token], security=SECURITY, raises=WRITE_ONE
    )
    async def delete_schedule(
        self,
        schedule_id: ObjectId,
        schedule_service: NamedDependency[UrlScheduleService],
        viewer: NamedDependency[Viewer],
    ) -> None:
        """Remove a schedule (the crawls it made stay)."""
        if not await anyio.to_thread.run_sync(lambda: schedule_service.delete(schedule_id, viewer=viewer)):
            raise NotFoundException(f"no schedule {schedule_id}")

    @post(
        "/{schedule_id:str}/{action:str}",
        operation_id="ControlSchedule",
        status_code=HTTP_202_ACCEPTED,
        guards=[require_token],
        security=SECURITY,
        raises=WRITE_ONE,
    )
    async def control(
        self,
        schedule_id: ObjectId,
        action: Annotated[Literal["run", "pause", "resume"], PathParameter()],
        schedule_service: NamedDependency[UrlScheduleService],
        signals: NamedDependency[Signals],
        viewer: NamedDependency[Viewer],
    ) -> ControlAccepted:
        """Run now, pause or resume (applied by the crawl-runner)."""
        if await anyio.to_thread.run_sync(lambda: schedule_service.get(schedule_id, viewer=viewer)) is None:
            raise NotFoundException(f"no schedule {schedule_id}")
        wire = "poll" if action == "run" else action
        try:
            await signals.control("schedule", schedule_id, ScheduleControl(schedule_id=schedule_id, action=wire))
        except BusUnavailable as exc:
            raise unavailable(exc) from None
        return ControlAccepted(id=schedule_id, action=action)
