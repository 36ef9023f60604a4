"""`holdpoint audit verify FILE [--jwks URL|FILE]`: check an audit export (contract §13) with
no server and no database.

The export is JSON lines (the README's "Audit export" says it all): a header, every link of
the team's chains (the tools', then the steps', by id, each in seq order), then its seals.
Each link's and seal's hash is recomputed from the fields it carries, sha256(prev_hash + "|" + canonical(fields)) with
canonical = JSON with sorted keys and no whitespace, non-ASCII escaped; each chain must run
1, 2, 3... from the genesis hash, each link naming the one before; the seals chain the same
way, and every head a seal records must be the link the export holds. A decision's link
carries its receipt: with `--jwks` its signature is checked, and always that it is for that
link's team, action, input and time, and for one step and tool per chain.

The first break is reported (`line N: where: what`) and the exit status is 1; 0 when intact.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import httpx
import jwt

from .envelopes import parse_rfc3339

FORMAT = "holdpoint-audit/1"
GENESIS = "0" * 64


def _time(value: Any) -> Any:
    try:
        return parse_rfc3339(value) if isinstance(value, str) else None
    except ValueError:
        return None


def link_hash(prev_hash: str, fields: Mapping[str, Any]) -> str:
    canonical = json.dumps(fields, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(f"{prev_hash}|{canonical}".encode()).hexdigest()


class Break(Exception):
    def __init__(self, where: str, problem: str) -> None:
        super().__init__(f"{where}: {problem}")
        self.where, self.problem = where, problem


@dataclass
class _Chain:
    first_seq: int
    last_seq: int
    last_hash: str
    operation_ref: str | None = None
    tool: str | None = None


@dataclass
class Report:
    links: int = 0
    seals: int = 0
    receipts: int = 0
    signatures_checked: bool = False
    line: int = 0
    broken: Break | None = None

    def __str__(self) -> str:
        if self.broken is not None:
            return f"line {self.line}: {self.broken}"
        checked = "signatures checked" if self.signatures_checked else "signatures NOT checked (no --jwks)"
        return f"intact: {self.links} links, {self.seals} seals, {self.receipts} receipts ({checked})"


@dataclass
class _Verifier:
    keys: dict[str, Any] | None
    report: Report = field(default_factory=Report)
    header: dict[str, Any] | None = None
    windowed: bool = False
    position: tuple[bool, int, int] = (False, -1, 0)
    chains: dict[str, _Chain] = field(default_factory=dict)
    hashes: set[bytes] = field(default_factory=set)  # 16-byte prefixes of every verified link's hash
    seal: tuple[int, str] | None = None  # (seq, hash) of the last seal

    def line(self, entry: Any) -> None:
        if not isinstance(entry, dict):
            raise Break("line", "not a JSON object")
        kind = entry.get("type")
        if self.header is None:
            if kind != "header" or entry.get("format") != FORMAT:
                raise Break("header", f"the first line must be the {FORMAT} header")
            self.header = entry
            self.windowed = entry.get("since") is not None or entry.get("until") is not None
            return
        if kind == "link":
            if self.seal is not None:
                raise Break(f"link {entry.get('id')}", "comes after the seals: the lines were reordered")
            self.link(entry)
        elif kind == "seal":
            self.seal_line(entry)
        else:
            raise Break("line", f"unknown line type {kind!r}")

    def _hashed(self, entry: dict[str, Any], where: str) -> dict[str, Any]:
        fields, prev, claimed = entry.get("fields"), entry.get("prev_hash"), entry.get("hash")
        if not isinstance(fields, dict) or not isinstance(prev, str) or not isinstance(claimed, str):
            raise Break(where, "lacks its fields, prev_hash or hash")
        if link_hash(prev, fields) != claimed:
            raise Break(where, "was altered after it was written (its hash does not match its fields)")
        assert self.header is not None
        if fields.get("team") != self.header["team"]["id"]:
            raise Break(where, "belongs to another team")
        return fields

    def link(self, entry: dict[str, Any]) -> None:
        fields = self.hashed_link(entry)
        chain_name, seq = fields["chain"], fields["seq"]
        where = f"{chain_name}#{seq}"
        # The tools' chains, then the steps', by id, each in seq order: any other order is a
        # reordered export.
        kind, _, holder = chain_name.partition(":")
        if kind not in ("tool", "step") or not holder.isdigit():
            raise Break(where, "names no chain of a tool or a step")
        position = (kind == "step", int(holder), seq)
        if position <= self.position:
            raise Break(where, "is out of order: the lines were reordered")
        self.position = position
        chain = self.chains.get(chain_name)
        if chain is None:
            if not self.windowed and (seq != 1 or entry["prev_hash"] != GENESIS):
                raise Break(where, f"links 1..{seq - 1} of its chain are missing")
            chain = self.chains[chain_name] = _Chain(first_seq=seq, last_seq=seq - 1, last_hash=entry["prev_hash"])
        if seq != chain.last_seq + 1:
            problem = f"link {chain.last_seq + 1} is missing" if seq > chain.last_seq + 1 else "is out of order"
            raise Break(where, problem)
        if entry["prev_hash"] != chain.last_hash:
            raise Break(where, "does not follow the previous link of its chain")
        chain.last_seq, chain.last_hash = seq, entry["hash"]
        self.hashes.add(bytes.fromhex(entry["hash"])[:16])
        self.report.links += 1
        receipt = (fields.get("data") or {}).get("receipt") if isinstance(fields.get("data"), dict) else None
        if fields.get("kind") == "decision" and receipt:
            self.receipt(receipt, fields, chain, where)

    def hashed_link(self, entry: dict[str, Any]) -> dict[str, Any]:
        where = f"link {entry.get('id')}"
        fields = self._hashed(entry, where)
        if not isinstance(fields.get("chain"), str) or not isinstance(fields.get("seq"), int):
            raise Break(where, "names no chain or seq")
        return fields

    def receipt(self, receipt: str, fields: dict[str, Any], chain: _Chain, where: str) -> None:
        try:
            header = jwt.get_unverified_header(receipt)
            claims = jwt.decode(receipt, options={"verify_signature": False})
        except jwt.PyJWTError as error:
            raise Break(where, f"its receipt is not a JWS ({error})") from error
        if self.keys is not None:
            jwk = self.keys.get(header.get("kid")) if header.get("alg") == "EdDSA" else None
            if jwk is None:
                raise Break(where, f"its receipt is signed by no key of the JWKS (kid {header.get('kid')!r})")
            try:
                jwt.decode(receipt, jwt.PyJWK(jwk).key, algorithms=["EdDSA"])
            except jwt.PyJWTError as error:
                raise Break(where, "its receipt's signature does not verify") from error
        data = fields.get("data") or {}
        assert self.header is not None
        expected = {
            "team": self.header["team"]["slug"],
            "action": fields.get("reason"),
            "input_fingerprint": data.get("input_fingerprint"),
        }
        for claim, value in expected.items():
            if claims.get(claim) != value:
                raise Break(where, f"its receipt is for another {claim.replace('_', ' ')}: {claims.get(claim)!r}")
        decided_at, created_at = _time(claims.get("decided_at")), _time(fields.get("created_at"))
        if decided_at is None or decided_at != created_at:
            raise Break(where, f"its receipt is for another decision time: {claims.get('decided_at')!r}")
        for claim in ("operation_ref", "tool"):
            value = claims.get(claim)
            known = getattr(chain, claim)
            if known is None:
                setattr(chain, claim, value)
            elif known != value:
                raise Break(where, f"its receipt is for another {claim.replace('_', ' ')} than its chain's: {value!r}")
        self.report.receipts += 1

    def seal_line(self, entry: dict[str, Any]) -> None:
        where = f"seal {(entry.get('fields') or {}).get('seq') if isinstance(entry.get('fields'), dict) else '?'}"
        fields = self._hashed(entry, where)
        seq = fields.get("seq")
        if self.seal is None:
            if not self.windowed and (seq != 1 or entry["prev_hash"] != GENESIS):
                raise Break(where, f"seals 1..{seq - 1 if isinstance(seq, int) else '?'} are missing")
        else:
            if seq != self.seal[0] + 1:
                raise Break(where, f"seal {self.seal[0] + 1} is missing")
            if entry["prev_hash"] != self.seal[1]:
                raise Break(where, "does not follow the previous seal")
        self.seal = (seq, entry["hash"])  # type: ignore[assignment]
        heads = fields.get("heads")
        if not isinstance(heads, dict):
            raise Break(where, "records no heads")
        for chain_name, head in heads.items():
            if not (isinstance(head, list) and len(head) == 2):
                raise Break(where, f"records a malformed head for {chain_name}")
            head_seq, head_hash = head
            chain = self.chains.get(chain_name)
            held = chain is not None and chain.first_seq <= head_seq <= chain.last_seq
            if held:
                if bytes.fromhex(head_hash)[:16] not in self.hashes:
                    raise Break(where, f"{chain_name}#{head_seq} no longer matches this seal")
            elif not self.windowed:
                raise Break(where, f"{chain_name}#{head_seq} is sealed but missing from the export")
        self.report.seals += 1


def jwks_keys(source: str) -> dict[str, Any]:
    """kid -> JWK from a JWKS file or URL."""
    if source.startswith(("http://", "https://")):
        response = httpx.get(source, timeout=10.0, follow_redirects=True)
        response.raise_for_status()
        body = response.json()
    else:
        body = json.loads(Path(source).read_text())
    return {key["kid"]: key for key in body.get("keys", []) if isinstance(key, dict) and "kid" in key}


def verify_lines(lines: Iterable[bytes | str], *, keys: dict[str, Any] | None = None) -> Report:
    """Check an export line by line; the report names the first break, if any."""
    verifier = _Verifier(keys=keys)
    verifier.report.signatures_checked = keys is not None
    try:
        for number, raw in enumerate(lines, start=1):
            verifier.report.line = number
            if not raw.strip():
                continue
            try:
                entry = json.loads(raw)
            except ValueError as error:
                raise Break("line", f"not JSON ({error})") from error
            verifier.line(entry)
        if verifier.header is None:
            verifier.report.line = 1
            raise Break("header", "the export is empty")
    except Break as broken:
        verifier.report.broken = broken
    return verifier.report


def verify_main(path: str, jwks: str | None, *, stdout: IO[str], stderr: IO[str]) -> int:
    keys = jwks_keys(jwks) if jwks else None
    with open(path, "rb") as export:
        report = verify_lines(export, keys=keys)
    if report.broken is not None:
        stderr.write(f"holdpoint audit verify: BROKEN at {report}\n")
        return 1
    stdout.write(f"holdpoint audit verify: {report}\n")
    return 0
