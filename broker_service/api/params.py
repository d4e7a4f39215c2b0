"""Path and query parameters the routes share, with what ``/openapi.json`` says of them.

Topic and group names are only described here: the domain checks them, so a bad one is answered
400 ``INVALID_TOPIC_NAME`` / ``INVALID_PRODUCER_GROUP_NAME`` / ``SYSTEM_TOPIC`` as docs/api.md says (Conventions; the codes under Errors).
Ids and search text must be text the stores can look up (valid Unicode, no NUL).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Path, Query

from broker_service.api.schemas.common import NAME_SCHEMA, TEXT_PATTERN, USER_TOPIC_SCHEMA, Storable

TopicName = Annotated[str, Path(json_schema_extra=NAME_SCHEMA)]
UserTopicName = Annotated[str, Path(json_schema_extra=USER_TOPIC_SCHEMA)]
GroupName = Annotated[str, Path(json_schema_extra=NAME_SCHEMA)]
IdPath = Annotated[Storable, Path(json_schema_extra={"pattern": TEXT_PATTERN})]

_TEXT = {"pattern": TEXT_PATTERN}
TopicQuery = Annotated[Storable | None, Query(max_length=255, json_schema_extra=_TEXT)]
KeyQuery = Annotated[Storable | None, Query(min_length=1, max_length=128, json_schema_extra=_TEXT)]
TextQuery = Annotated[Storable, Query(min_length=1, max_length=255, json_schema_extra=_TEXT)]
GroupQuery = Annotated[Storable | None, Query(max_length=255, json_schema_extra=_TEXT)]
