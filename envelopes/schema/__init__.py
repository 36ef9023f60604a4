"""The envelope contract: parsing, dialects, consistency rules (CONTRACT.md section 2).

The JSON Schema dicts in `contract.py` are the single source of truth for the shapes; Python
adds what a schema cannot say readably. The rooms: `validation` (the shapes, compiled twice,
and the field errors), `dialects` (compact and mcp as canonical), `consistency` (times and
contradictions), `parse` (all of it, then the untrusted text sanitised).
Pure Python, no Django, no database.
"""

from envelopes.contract import (
    CATEGORIES,
    CODE_PATTERN,
    COMMIT_STATES,
    COMPACT_CATEGORIES,
    COMPACT_SCHEMA,
    DATE_TIME_PATTERN,
    DEFAULT_SAFE_DETAIL_KEYS,
    DIALECTS,
    ENVELOPE_SCHEMA,
    ERROR_ENVELOPE_SCHEMA,
    MAX_INT,
    MAX_SAFE_DETAILS,
    MCP_SCHEMA,
    NEXT_ACTIONS,
    PRINTABLE_PATTERN,
    RETRY_DIRECTIVES,
    SCOPES,
    SUCCESS_ENVELOPE_SCHEMA,
    TOOL_PATTERN,
)

from .consistency import time_window_error
from .dialects import ToolContext, dialect_from_content_type
from .parse import ParsedEnvelope, parse_envelope
from .validation import EnvelopeRejected, FieldError, identify, safe_field_name

# The shapes are re-exported: callers use `schema.ENVELOPE_SCHEMA`, `schema.TOOL_PATTERN`, ...
__all__ = [
    "CATEGORIES",
    "CODE_PATTERN",
    "COMMIT_STATES",
    "COMPACT_CATEGORIES",
    "COMPACT_SCHEMA",
    "DATE_TIME_PATTERN",
    "DEFAULT_SAFE_DETAIL_KEYS",
    "DIALECTS",
    "ENVELOPE_SCHEMA",
    "ERROR_ENVELOPE_SCHEMA",
    "MAX_INT",
    "MAX_SAFE_DETAILS",
    "MCP_SCHEMA",
    "NEXT_ACTIONS",
    "PRINTABLE_PATTERN",
    "RETRY_DIRECTIVES",
    "SCOPES",
    "SUCCESS_ENVELOPE_SCHEMA",
    "TOOL_PATTERN",
    "EnvelopeRejected",
    "FieldError",
    "ParsedEnvelope",
    "ToolContext",
    "dialect_from_content_type",
    "identify",
    "parse_envelope",
    "safe_field_name",
    "time_window_error",
]
