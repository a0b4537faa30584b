"""The gate refuses what breaks the rules, counts by reason, and derives what the answer must not set."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from consolidation import gate as G
from consolidation.models import Op
from ledger.errors import BodyRejected
from ledger.models import Kind, MemoryRecord, Provenance, Status
from ledger.screening import screen_body
from tests.conftest import T0

SCOPE = "account:local"


def rec(rid: str, **kw: object) -> MemoryRecord:
    base = MemoryRecord(
        id=rid,
        scope_key=SCOPE,
        kind=Kind.FACT,
        body=f"body {rid}",
        provenance=Provenance.USER_EXPLICIT,
        status=Status.ACTIVE,
        source_session_id=None,
        supersedes=[],
        superseded_by=None,
        confidence_bps=None,
        rationale=None,
        valid_from=T0,
        valid_to=None,
        expires_at=None,
        conflict_group=None,
        created_at=T0,
        updated_at=T0,
    )
    return replace(base, **kw)  # type: ignore[arg-type]


RECORDS = {
    "a": rec("a"),
    "b": rec("b", kind=Kind.PREFERENCE),
    "c": rec("c", expires_at=T0 + timedelta(days=2)),
    "d": rec("d", expires_at=T0 + timedelta(days=1)),
    "old": rec("old", status=Status.SUPERSEDED, valid_to=T0, superseded_by="a"),
    "other": rec("other", scope_key="account:someone-else"),
    "g1": rec("g1", conflict_group="region"),
    "soon": rec("soon", expires_at=T0 + timedelta(seconds=1)),
}
NOW = T0 + timedelta(seconds=5)


def gate(ops: object, *, allowed: tuple[str, ...] = ("merge", "correct", "keep")) -> G.GateResult:
    return G.check_batch(
        {"operations": ops}, scope_key=SCOPE, records=RECORDS, allowed_ops=allowed, now=NOW, screen=screen_body
    )


def test_a_clean_batch_passes_with_derived_fields() -> None:
    result = gate(
        [
            {"op": "merge", "targets": ["c", "d"], "body": "merged"},
            {"op": "correct", "targets": ["g1"], "body": "fixed"},
            {"op": "keep", "targets": ["a"]},
        ]
    )
    assert result.refusals == {}
    merge, correct, keep = result.passed
    assert merge.op == Op.MERGE and merge.expires_at == T0 + timedelta(days=1)  # earliest among targets
    assert merge.kind == Kind.FACT and merge.conflict_group is None
    assert correct.conflict_group == "region"
    assert keep.body is None
    assert result.proposed == 3


def test_answer_cannot_set_status_provenance_scope_or_interval() -> None:
    result = gate([{"op": "correct", "targets": ["a"], "body": "x", "status": "active", "scope_key": "evil"}])
    assert result.refusals == {G.MALFORMED: 1}


def test_kind_is_common_kind_else_one_of_the_targets() -> None:
    result = gate([{"op": "merge", "targets": ["a", "b"], "body": "m", "kind": "constraint"}])
    assert result.passed[0].kind in (Kind.FACT, Kind.PREFERENCE)
    result = gate([{"op": "merge", "targets": ["a", "b"], "body": "m", "kind": "preference"}])
    assert result.passed[0].kind == Kind.PREFERENCE


@pytest.mark.parametrize(
    ("ops", "reason"),
    [
        ([{"op": "delete", "targets": ["a"]}], G.UNKNOWN_OP),
        ([{"op": "merge", "targets": ["a"], "body": "x"}], G.MALFORMED),
        ([{"op": "correct", "targets": ["a", "c"], "body": "x"}], G.MALFORMED),
        ([{"op": "correct", "targets": ["a"]}], G.MALFORMED),
        ([{"op": "keep", "targets": ["a"], "body": "x"}], G.MALFORMED),
        ([{"op": "correct", "targets": "a", "body": "x"}], G.MALFORMED),
        ([{"op": "correct", "targets": ["a"], "body": "x", "confidence_bps": 20000}], G.MALFORMED),
        (["not an object"], G.MALFORMED),
        ([{"op": "correct", "targets": ["nope"], "body": "x"}], G.NOT_IN_SCOPE),
        ([{"op": "correct", "targets": ["other"], "body": "x"}], G.NOT_IN_SCOPE),
        ([{"op": "correct", "targets": ["old"], "body": "x"}], G.NOT_ACTIVE),
        ([{"op": "correct", "targets": ["soon"], "body": "x"}], G.NOT_ACTIVE),
        ([{"op": "merge", "targets": ["a", "a"], "body": "x"}], G.DUPLICATE_TARGET),
        ([{"op": "correct", "targets": ["a"], "body": "   "}], G.BODY_REJECTED),
        ([{"op": "correct", "targets": ["a"], "body": "key sk-ant-api03-" + "Q" * 90}], G.BODY_REJECTED),
    ],
)
def test_each_refusal_reason(ops: list[object], reason: str) -> None:
    result = gate(ops)
    assert result.refusals == {reason: 1}
    assert result.passed == []


def test_op_not_allowed_by_scope_settings() -> None:
    result = gate(
        [{"op": "merge", "targets": ["a", "c"], "body": "x"}, {"op": "keep", "targets": ["d"]}], allowed=("keep",)
    )
    assert result.refusals == {G.NOT_ALLOWED: 1}
    assert [p.op for p in result.passed] == [Op.KEEP]


def test_a_target_named_by_two_operations_refuses_both_and_spares_the_rest() -> None:
    result = gate(
        [
            {"op": "correct", "targets": ["a"], "body": "x"},
            {"op": "merge", "targets": ["a", "c"], "body": "y"},
            {"op": "keep", "targets": ["d"]},
        ]
    )
    assert result.refusals == {G.DUPLICATE_TARGET: 2}
    assert [p.targets for p in result.passed] == [("d",)]


@pytest.mark.parametrize("answer", [None, {}, {"operations": "all"}, [], "text"])
def test_an_answer_without_an_operations_list_is_one_malformed_refusal(answer: object) -> None:
    result = G.check_batch(
        answer,
        scope_key=SCOPE,
        records=RECORDS,
        allowed_ops=["merge"],
        now=NOW,  # type: ignore[arg-type]
        screen=screen_body,
    )
    assert result.refusals == {G.MALFORMED: 1} and result.passed == []


def test_screen_is_called_for_bodies() -> None:
    seen: list[str] = []

    def screen(body: str) -> str:
        seen.append(body)
        raise BodyRejected("no", why="credential")

    result = G.check_batch(
        {"operations": [{"op": "correct", "targets": ["a"], "body": "hello"}]},
        scope_key=SCOPE,
        records=RECORDS,
        allowed_ops=["correct"],
        now=NOW,
        screen=screen,
    )
    assert seen == ["hello"] and result.refusals == {G.BODY_REJECTED: 1}


@pytest.mark.parametrize("kind", [["fact"], {"k": 1}, 3, True])
def test_a_kind_of_the_wrong_type_is_malformed_not_a_crash(kind: object) -> None:
    result = gate([{"op": "correct", "targets": ["a"], "body": "x", "kind": kind}])
    assert result.refusals == {G.MALFORMED: 1}


def test_a_body_with_a_nul_character_is_refused() -> None:
    result = gate([{"op": "correct", "targets": ["a"], "body": "hel\x00lo"}])
    assert result.refusals == {G.BODY_REJECTED: 1}
