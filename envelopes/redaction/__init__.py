"""Secrets and instruction-like text in untrusted strings.

Everything an agent sends is untrusted: messages, safe_details values, resource ids, proposed
inputs. Before any of it is stored, `redact` (text) and `redact_json` (decoded JSON) replace
secrets with `[REDACTED:<kind>]`, and `looks_like_instruction` flags prompt-injection-shaped text.
Flagging never changes behaviour: no branch anywhere may depend on message text (contract, §2).

Pure Python, no Django. The modules: `rules` (how a text rule finds and replaces), `secrets` (the
rules for keys, tokens, credentials and pairs, and `redact`), `hosts` (internal hosts), `structured`
(decoded JSON, credential-named keys, request bodies) and `instructions`.
"""

from .instructions import looks_like_instruction
from .rules import Redacted
from .secrets import KINDS, redact
from .structured import is_credential_key, redact_body, redact_json

__all__ = [
    "KINDS",
    "Redacted",
    "is_credential_key",
    "looks_like_instruction",
    "redact",
    "redact_body",
    "redact_json",
]
