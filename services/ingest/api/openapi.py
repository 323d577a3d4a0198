"""The OpenAPI document as the server behaves: errors each operation answers, bodies that refuse
extra fields, URLs that must be absolute, the two ways to send a token — checked by schemathesis
with every check on (``tests/test_openapi.py``, against a running stack).

Litestar builds the document from the handlers. What it cannot see is added here, in one place:

- ``raises`` lists (``READS``, ``WRITES``, …): the exceptions a handler answers with, which
  Litestar documents as responses (a 401 without a valid token, a 403 for a read-only token on a
  write, 404, 409, 413, 422 for input that parses but cannot be used, 503 when the message bus or
  the database is down);
- ``document``: request bodies that refuse unknown fields (msgspec ``forbid_unknown_fields``,
  which Litestar does not carry into the schema) get ``additionalProperties: false``; URL fields
  say they are absolute http(s) URLs; the security schemes the operations name are declared.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec
from litestar.exceptions import (
    HTTPException,
    NotAuthorizedException,
    NotFoundException,
    PermissionDeniedException,
    ServiceUnavailableException,
)
from litestar.openapi.spec import Components, OpenAPIType, Schema, SecurityScheme
from litestar.status_codes import (
    HTTP_409_CONFLICT,
    HTTP_413_REQUEST_ENTITY_TOO_LARGE,
    HTTP_422_UNPROCESSABLE_ENTITY,
)

from boxcar.ingest.api import schemas as api_schemas
from boxcar.ingest.api.auth import API_KEY_HEADER
from boxcar.ingest.api.schemas import DEPTH_DESCRIPTION
from boxcar.shared.crawlconfig import MAX_DEPTH

if TYPE_CHECKING:
    from litestar import Litestar

#: the names the operations' ``security`` lists use
SECURITY = [{"BearerToken": []}, {"ApiKey": []}]
SECURITY_SCHEMES = {
    "BearerToken": SecurityScheme(
        type="http",
        scheme="bearer",
        description="An API token (`boxcar token create`); `--read-only` tokens may only read.",
    ),
    "ApiKey": SecurityScheme(
        type="apiKey",
        name=API_KEY_HEADER,
        security_scheme_in="header",
        description="The same token in a header of its own.",
    ),
}

#: an absolute http(s) URL: what every URL field takes (a relative or other-scheme URL is a 422)
ABSOLUTE_URL = "^[Hh][Tt][Tt][Pp][Ss]?://[^\\s/?#]"


class Unprocessable(HTTPException):
    """422: the body parses but cannot be used (an unknown plugin, a refused config key, a URL
    that is not http(s)); ``extra.field`` names where."""

    status_code = HTTP_422_UNPROCESSABLE_ENTITY


class Conflict(HTTPException):
    """409: the resource is busy (a snapshot being captured)."""

    status_code = HTTP_409_CONFLICT


class TooLarge(HTTPException):
    """413: the request body is over ``MAX_REQUEST_BODY``."""

    status_code = HTTP_413_REQUEST_ENTITY_TOO_LARGE


#: every operation may answer 503 while the database (or, for controls, the message bus) is down
READS = [NotAuthorizedException, ServiceUnavailableException]
READ_ONE = [*READS, NotFoundException]
WRITES = [*READS, PermissionDeniedException, Unprocessable]
WRITE_ONE = [*READS, PermissionDeniedException, NotFoundException]


def components() -> Components:
    """The components Litestar's generated ones are merged with: the security schemes."""
    return Components(security_schemes=SECURITY_SCHEMES)


def document(app: Litestar) -> None:
    """Complete the app's generated document (see the module docstring); call once, at start."""
    schemas = app.openapi_schema.components.schemas
    for struct in vars(api_schemas).values():  # every strict body, however many there come to be
        if isinstance(struct, type) and issubclass(struct, msgspec.Struct) and struct.__name__ in schemas:
            if struct.__struct_config__.forbid_unknown_fields:
                schemas[struct.__name__].additional_properties = False
    url = Schema(type=OpenAPIType.STRING, pattern=ABSOLUTE_URL, description="An absolute http(s) URL")
    schemas["SeedIn"].properties["url"] = url
    schemas["FeedCreate"].properties["url"] = url
    if "ScheduleCreate" in schemas:
        schemas["ScheduleCreate"].properties["urls"].items = url
    # Litestar drops ``minimum: 0`` of an optional integer (falsy): the body refuses -1
    schemas["FeedUpdate"].properties["max_depth"] = Schema(
        one_of=[Schema(type=OpenAPIType.INTEGER, minimum=0, maximum=MAX_DEPTH), Schema(type=OpenAPIType.NULL)],
        description=DEPTH_DESCRIPTION,
    )
    urls = schemas["CrawlCreate"].properties["urls"]
    urls.items.one_of = [url if getattr(s, "type", None) == OpenAPIType.STRING else s for s in urls.items.one_of]
