"""``POST /api/v1/imports``: bookmark exports, feeds, history, CSV/JSON/JSONL, text or markdown
files (multipart ``file`` fields, or the raw body) become one crawl; the format is detected from
the content. The upload is read here (size, fields, parameters); parsing and policy are
``CrawlService.create_import``'s."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Annotated

import anyio.to_thread
from litestar import Controller, Request, post
from litestar.datastructures import UploadFile
from litestar.di import NamedDependency
from litestar.openapi.spec import OpenAPIMediaType, OpenAPIType, Operation, RequestBody, Schema
from litestar.params import QueryParameter
from litestar.status_codes import (
    HTTP_201_CREATED,
)

from boxcar.ingest import routes
from boxcar.ingest.access import Viewer
from boxcar.ingest.api.auth import require_token
from boxcar.ingest.api.controllers import unprocessable
from boxcar.ingest.api.openapi import (
    SECURITY,
    WRITES,
    TooLarge,
)
from boxcar.ingest.api.schemas import (
    ImportCounts,
    ImportCreated,
)
from boxcar.ingest.services import CrawlService, InputError
from boxcar.ingest.signals import Signals
from boxcar.shared.crawlconfig import MAX_DEPTH, parse_depth
from boxcar.shared.settings import parse_bool


class ImportOperation(Operation):
    """OpenAPI for ``POST /api/v1/imports``: a multipart upload or the file as the raw body."""

    def __post_init__(self) -> None:
        self.request_body = RequestBody(
            required=True,
            description="The export file: multipart field `file` (other fields as the query "
            "parameters), or the file itself as the body.",
            content={
                "multipart/form-data": OpenAPIMediaType(
                    schema=Schema(
                        type=OpenAPIType.OBJECT,
                        required=["file"],
                        properties={
                            "file": Schema(type=OpenAPIType.STRING, format="binary"),
                            "format": Schema(type=OpenAPIType.STRING),
                            "tags": Schema(type=OpenAPIType.STRING),
                            "max_depth": Schema(type=OpenAPIType.INTEGER, minimum=0, maximum=MAX_DEPTH),
                        },
                    )
                ),
                "application/octet-stream": OpenAPIMediaType(schema=Schema(type=OpenAPIType.STRING, format="binary")),
                "text/plain": OpenAPIMediaType(schema=Schema(type=OpenAPIType.STRING)),
            },
        )


@dataclass
class ImportParams:
    format: str | None = None
    tags: list[str] = field(default_factory=list)
    max_depth: int = 0
    plugins: list[str] = field(default_factory=list)
    only_new: bool | None = None
    folder_tags: bool = False
    config: dict = field(default_factory=dict)


def _split(value: str | None) -> list[str]:
    return [v.strip() for v in (value or "").split(",") if v.strip()]


def _config(value: str | None) -> dict:
    """A ``config`` parameter: a JSON object of per-crawl settings."""
    if not value:
        return {}
    try:
        config = json.loads(value)
    except ValueError:
        raise InputError("config", 'expected a JSON object like {"WGET_TIMEOUT": 30}') from None
    if not isinstance(config, dict):
        raise InputError("config", 'expected a JSON object like {"WGET_TIMEOUT": 30}')
    return config


def _flag(value: str | None, name: str) -> bool | None:
    if value in (None, ""):
        return None
    parsed = parse_bool(value)
    if parsed is None:
        raise InputError(name, f"expected true or false, got {value[:20]!r}")
    return parsed


class ImportController(Controller):
    path = routes.IMPORTS
    tags = ["imports"]

    @post(
        "/",
        operation_id="ImportFile",
        status_code=HTTP_201_CREATED,
        guards=[require_token],
        security=SECURITY,
        raises=[*WRITES, TooLarge],
        operation_class=ImportOperation,
    )
    async def import_file(
        self,
        request: Request,
        crawl_service: NamedDependency[CrawlService],
        signals: NamedDependency[Signals],
        viewer: NamedDependency[Viewer],
        format: Annotated[str | None, QueryParameter(description="format name; default: detect from content")] = None,
        tags: Annotated[str | None, QueryParameter(description="comma-separated tags for every entry")] = None,
        max_depth: Annotated[int, QueryParameter(ge=0, le=MAX_DEPTH)] = 0,
        plugins: Annotated[str | None, QueryParameter(description="comma-separated plugins")] = None,
        only_new: Annotated[str | None, QueryParameter(description="skip URLs archived before (true/false)")] = None,
        folder_tags: Annotated[bool, QueryParameter(description="bookmark folders become tags")] = False,
        config: Annotated[
            str | None, QueryParameter(description='per-crawl settings as a JSON object, e.g. {"WGET_TIMEOUT": 30}')
        ] = None,
    ) -> ImportCreated:
        """Import a bookmark export, feed, history export, CSV/JSON/JSONL, text or markdown file.

        One crawl is created with every entry's URL, title, tags and date (several ``file``
        fields: one crawl of all of them); each file is kept under ``sources/`` (URL passwords
        redacted). One bad entry never drops the others: rejected entries are counted and the
        first 50 listed with their reasons.

        Returns:
            The crawl id, the format used, counts, and the first rejected entries.
        """
        try:
            files, params = await self._read(
                request,
                ImportParams(
                    format=format,
                    tags=_split(tags),
                    max_depth=max_depth,
                    plugins=_split(plugins),
                    only_new=_flag(only_new, "only_new"),
                    folder_tags=folder_tags,
                    config=_config(config),
                ),
            )
            outcome = await anyio.to_thread.run_sync(
                lambda: crawl_service.create_import(
                    files,
                    format=params.format,
                    tags=params.tags,
                    max_depth=params.max_depth,
                    plugins=params.plugins,
                    only_new=params.only_new,
                    owner=viewer.username,
                    folder_tags=params.folder_tags,
                    config=params.config,
                )
            )
        except InputError as exc:
            raise unprocessable(exc) from None
        await signals.crawl_queued(outcome.crawl.id)
        admission = outcome.admission
        return ImportCreated(
            crawl_id=outcome.crawl.id,
            format=outcome.format,
            rejected=outcome.rejected[:50],
            counts=ImportCounts(
                entries=outcome.entries_seen,
                accepted=len(admission.seeds),
                duplicates=admission.duplicates,
                rejected=len(outcome.rejected),
                skipped_existing=admission.skipped_existing,
            ),
        )

    @staticmethod
    async def _read(request: Request, params: ImportParams) -> tuple[list[tuple[bytes, str]], ImportParams]:
        if request.content_type[0] == "multipart/form-data":
            form = await request.form()
            uploads = [u for u in form.getall("file") if isinstance(u, UploadFile)] if "file" in form else []
            if not uploads:
                raise InputError("file", "multipart upload needs a `file` field")
            files = [(await upload.read(), upload.filename or "") for upload in uploads]
            if "format" in form:
                params.format = str(form["format"]) or None
            if "tags" in form:
                params.tags = _split(str(form["tags"]))
            if "plugins" in form:
                params.plugins = _split(str(form["plugins"]))
            if "max_depth" in form:
                try:
                    params.max_depth = parse_depth(form["max_depth"])
                except ValueError as exc:
                    raise InputError("max_depth", str(exc)) from None
            if "only_new" in form:
                params.only_new = _flag(str(form["only_new"]), "only_new")
            if "config" in form:
                params.config = _config(str(form["config"]))
        else:
            files = [(await request.body(), "")]
        for data, name in files:
            if not data.strip():
                raise InputError("file", f"empty upload{f' ({name})' if name else ''}")
        return files, params
