"""The operator's log lines: text for people, or one JSON object per line for log
pipelines (Cloud Logging, Loki, Elasticsearch) that index fields rather than grep text.

A record may carry what it is about as `extra` fields, which the JSON form keeps as
fields of their own: `request` (namespace/name of the TrainingRequest), `phase`,
`pool` (a GKE node pool) and `operation` (a GKE operation: Create, ScaleDown...).
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"
#: The `extra` fields a JSON line keeps, when a record has them.
FIELDS = ("request", "phase", "pool", "operation")


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time (RFC 3339, UTC), level, logger, message, the
    record's domain fields, and the exception's text when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                line[name] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False, default=str)


def configure_logging(log_format: str, level: int = logging.INFO) -> None:
    """The root logger writes to stderr in `log_format` (`text` or `json`)."""
    handler = logging.StreamHandler()
    handler.setFormatter(
        JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT)
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)


def about(request: str, **fields: Any) -> dict[str, Any]:
    """`extra` for a record about the TrainingRequest `request` (namespace/name)."""
    return {"request": request, **fields}
