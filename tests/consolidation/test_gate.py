"""The gate refuses what breaks the rules, counts by reason, and derives what the answer must not set."""

from __future__ import annotations

from datetime import timedelta

import pytest

from consolidation import gate
from consolidation.models import Op
from ledger import Kind, MemoryRecord, Status, screen_body
from ledger.errors import BodyRejected
from tests.conftest import T0
from tests.records import active_record

SCOPE = "account:local"


def rec(rid: str, **kw: object) -> MemoryRecord:
    return active_record(rid, **{"scope_key": SCOPE, **kw})  # type: ignore[arg-type]


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


ALL = ("merge", "correct", "expire", "group", "retire", "keep")


def judge(ops: object, *, allowed: tuple[str, ...] = ALL, allow_removal: bool = True) -> gate.GateResult:
    return gate.check_batch(
        {"operations": ops},
        scope_key=SCOPE,
        records=RECORDS,
        allowed_ops=allowed,
        now=NOW,
        screen=screen_body,
        allow_removal=allow_removal,
    )


def test_a_clean_batch_passes_with_derived_fields() -> None:
    result = judge(
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
    result = judge([{"op": "correct", "targets": ["a"], "body": "x", "status": "active", "scope_key": "evil"}])
    assert result.refusals == {gate.FIELD_NOT_CARRIED: 1}


def test_kind_is_common_kind_else_one_of_the_targets() -> None:
    result = judge([{"op": "merge", "targets": ["a", "b"], "body": "m", "kind": "constraint"}])
    assert result.passed[0].kind in (Kind.FACT, Kind.PREFERENCE)
    result = judge([{"op": "merge", "targets": ["a", "b"], "body": "m", "kind": "preference"}])
    assert result.passed[0].kind == Kind.PREFERENCE


@pytest.mark.parametrize(
    ("ops", "reason"),
    [
        ([{"op": "delete", "targets": ["a"]}], gate.UNKNOWN_OP),
        ([{"targets": ["a"]}], gate.UNKNOWN_OP),
        ([{"op": "merge", "targets": ["a"], "body": "x"}], gate.TOO_FEW_TARGETS),
        ([{"op": "group", "targets": ["a"], "subject": "x"}], gate.TOO_FEW_TARGETS),
        ([{"op": "keep", "targets": []}], gate.TOO_FEW_TARGETS),
        ([{"op": "correct", "targets": ["a", "c"], "body": "x"}], gate.TOO_MANY_TARGETS),
        ([{"op": "expire", "targets": ["a", "c"], "after_days": 3}], gate.TOO_MANY_TARGETS),
        ([{"op": "retire", "targets": ["a", "c"]}], gate.TOO_MANY_TARGETS),
        ([{"op": "keep", "targets": ["a", "c"]}], gate.TOO_MANY_TARGETS),
        ([{"op": "merge", "targets": [f"t{i}" for i in range(11)], "body": "x"}], gate.TOO_MANY_TARGETS),
        ([{"op": "group", "targets": [f"t{i}" for i in range(11)], "subject": "x"}], gate.TOO_MANY_TARGETS),
        ([{"op": "correct", "targets": ["a"]}], gate.MALFORMED),
        ([{"op": "correct", "targets": ["a"], "body": 3}], gate.MALFORMED),
        ([{"op": "correct", "targets": "a", "body": "x"}], gate.MALFORMED),
        ([{"op": "correct", "targets": [""], "body": "x"}], gate.MALFORMED),
        ([{"op": "correct", "targets": ["a"], "body": "x", "confidence_bps": 20000}], gate.MALFORMED),
        ([{"op": "correct", "targets": ["a"], "body": "x", "rationale": 7}], gate.MALFORMED),
        ([{"op": "expire", "targets": ["a"]}], gate.MALFORMED),
        ([{"op": "expire", "targets": ["a"], "after_days": "3"}], gate.MALFORMED),
        ([{"op": "expire", "targets": ["a"], "after_days": 2.5}], gate.MALFORMED),
        ([{"op": "expire", "targets": ["a"], "after_days": True}], gate.MALFORMED),
        ([{"op": "group", "targets": ["a", "c"]}], gate.MALFORMED),
        ([{"op": "group", "targets": ["a", "c"], "subject": ["x"]}], gate.MALFORMED),
        (["not an object"], gate.MALFORMED),
        ([{"op": "keep", "targets": ["a"], "body": "x"}], gate.FIELD_NOT_CARRIED),
        ([{"op": "keep", "targets": ["a"], "rationale": "fine"}], gate.FIELD_NOT_CARRIED),
        ([{"op": "correct", "targets": ["a"], "body": "x", "kind": "fact"}], gate.FIELD_NOT_CARRIED),
        ([{"op": "expire", "targets": ["a"], "after_days": 3, "body": "x"}], gate.FIELD_NOT_CARRIED),
        ([{"op": "group", "targets": ["a", "c"], "subject": "s", "after_days": 3}], gate.FIELD_NOT_CARRIED),
        ([{"op": "retire", "targets": ["a"], "body": "gone"}], gate.FIELD_NOT_CARRIED),
        ([{"op": "merge", "targets": ["a", "c"], "body": "x", "subject": "s"}], gate.FIELD_NOT_CARRIED),
        ([{"op": "expire", "targets": ["a"], "after_days": 0}], gate.HORIZON_OUT_OF_RANGE),
        ([{"op": "expire", "targets": ["a"], "after_days": -1}], gate.HORIZON_OUT_OF_RANGE),
        ([{"op": "expire", "targets": ["a"], "after_days": 3651}], gate.HORIZON_OUT_OF_RANGE),
        ([{"op": "group", "targets": ["a", "c"], "subject": "   "}], gate.SUBJECT_OUT_OF_RANGE),
        ([{"op": "group", "targets": ["a", "c"], "subject": "x" * 81}], gate.SUBJECT_OUT_OF_RANGE),
        ([{"op": "group", "targets": ["a", "c"], "subject": "!!!"}], gate.SUBJECT_OUT_OF_RANGE),
        ([{"op": "correct", "targets": ["nope"], "body": "x"}], gate.NOT_IN_SCOPE),
        ([{"op": "correct", "targets": ["other"], "body": "x"}], gate.NOT_IN_SCOPE),
        ([{"op": "expire", "targets": ["other"], "after_days": 3}], gate.NOT_IN_SCOPE),
        ([{"op": "retire", "targets": ["nope"]}], gate.NOT_IN_SCOPE),
        ([{"op": "correct", "targets": ["old"], "body": "x"}], gate.NOT_ACTIVE),
        ([{"op": "correct", "targets": ["soon"], "body": "x"}], gate.NOT_ACTIVE),
        ([{"op": "group", "targets": ["a", "old"], "subject": "s"}], gate.NOT_ACTIVE),
        ([{"op": "retire", "targets": ["old"]}], gate.NOT_ACTIVE),
        ([{"op": "merge", "targets": ["a", "a"], "body": "x"}], gate.DUPLICATE_TARGET),
        ([{"op": "correct", "targets": ["a"], "body": "   "}], gate.BODY_REJECTED),
        ([{"op": "correct", "targets": ["a"], "body": "key sk-ant-api03-" + "Q" * 90}], gate.BODY_REJECTED),
        ([{"op": "merge", "targets": ["a", "c"], "body": "x" * 100_000}], gate.BODY_REJECTED),
    ],
)
def test_each_refusal_reason(ops: list[object], reason: str) -> None:
    result = judge(ops)
    assert result.refusals == {reason: 1}
    assert result.passed == []


def test_op_not_allowed_by_scope_settings() -> None:
    result = judge(
        [{"op": "merge", "targets": ["a", "c"], "body": "x"}, {"op": "keep", "targets": ["d"]}], allowed=("keep",)
    )
    assert result.refusals == {gate.NOT_ALLOWED: 1}
    assert [p.op for p in result.passed] == [Op.KEEP]


def test_a_target_named_by_two_operations_refuses_both_and_spares_the_rest() -> None:
    result = judge(
        [
            {"op": "correct", "targets": ["a"], "body": "x"},
            {"op": "merge", "targets": ["a", "c"], "body": "y"},
            {"op": "keep", "targets": ["d"]},
        ]
    )
    assert result.refusals == {gate.DUPLICATE_TARGET: 2}
    assert [p.targets for p in result.passed] == [("d",)]


@pytest.mark.parametrize("answer", [None, {}, {"operations": "all"}, [], "text"])
def test_an_answer_without_an_operations_list_is_one_malformed_refusal(answer: object) -> None:
    result = gate.check_batch(
        answer,
        scope_key=SCOPE,
        records=RECORDS,
        allowed_ops=["merge"],
        now=NOW,  # type: ignore[arg-type]
        screen=screen_body,
    )
    assert result.refusals == {gate.MALFORMED: 1} and result.passed == []


def test_screen_is_called_for_bodies() -> None:
    seen: list[str] = []

    def screen(body: str) -> str:
        seen.append(body)
        raise BodyRejected("no", why="credential")

    result = gate.check_batch(
        {"operations": [{"op": "correct", "targets": ["a"], "body": "hello"}]},
        scope_key=SCOPE,
        records=RECORDS,
        allowed_ops=["correct"],
        now=NOW,
        screen=screen,
    )
    assert seen == ["hello"] and result.refusals == {gate.BODY_REJECTED: 1}


@pytest.mark.parametrize("kind", [["fact"], {"k": 1}, 3, True])
def test_a_kind_of_the_wrong_type_is_malformed_not_a_crash(kind: object) -> None:
    result = judge([{"op": "merge", "targets": ["a", "c"], "body": "x", "kind": kind}])
    assert result.refusals == {gate.MALFORMED: 1}


def test_a_body_with_a_nul_character_is_refused() -> None:
    result = judge([{"op": "correct", "targets": ["a"], "body": "hel\x00lo"}])
    assert result.refusals == {gate.BODY_REJECTED: 1}


def test_every_reason_is_in_the_closed_set() -> None:
    assert len(set(gate.REASONS)) == len(gate.REASONS)
    assert {gate.REMOVAL_OFF, gate.TOO_MANY_OPERATIONS, gate.BUDGET_EXCEEDED, gate.UNPARSEABLE} <= set(gate.REASONS)


def test_retire_is_refused_when_removal_is_off_and_never_downgraded() -> None:
    result = judge([{"op": "retire", "targets": ["a"]}, {"op": "keep", "targets": ["b"]}], allow_removal=False)

    assert result.refusals == {gate.REMOVAL_OFF: 1}
    assert [p.op for p in result.passed] == [Op.KEEP]


def test_retire_passes_when_removal_is_on() -> None:
    [retire] = judge([{"op": "retire", "targets": ["a"], "rationale": "stale"}]).passed

    assert retire.op == Op.RETIRE and retire.targets == ("a",) and retire.body is None


def test_retire_not_in_allowed_ops_is_op_not_allowed() -> None:
    result = judge([{"op": "retire", "targets": ["a"]}], allowed=("merge",), allow_removal=True)

    assert result.refusals == {gate.NOT_ALLOWED: 1}


def test_expire_derives_the_expiry_from_after_days_and_the_earlier_wins() -> None:
    result = judge(
        [
            {"op": "expire", "targets": ["a"], "after_days": 7},
            {"op": "expire", "targets": ["c"], "after_days": 30},  # c already expires at T0 + 2 days
            {"op": "expire", "targets": ["b"], "after_days": 3650},
        ]
    )

    a, c, b = result.passed
    assert a.expires_at == NOW + timedelta(days=7) and a.after_days == 7
    assert c.expires_at == T0 + timedelta(days=2)
    assert b.expires_at == NOW + timedelta(days=3650)
    assert a.body == "body a" and a.kind == Kind.FACT  # what a proposal to expire it carries


def test_group_derives_the_key_from_the_subject_and_the_newest_target_survives() -> None:
    records = {
        **RECORDS,
        "paris": rec("paris", body="I live in Paris", valid_from=T0),
        "lyon": rec("lyon", body="I live in Lyon", kind=Kind.PREFERENCE, valid_from=T0 + timedelta(seconds=1)),
    }
    result = gate.check_batch(
        {"operations": [{"op": "group", "targets": ["lyon", "paris"], "subject": "  Home CITY!  "}]},
        scope_key=SCOPE,
        records=records,
        allowed_ops=ALL,
        now=NOW,
        screen=screen_body,
    )

    [group] = result.passed
    assert group.conflict_group == "home-city" == gate.group_key("home city")
    assert group.survivor == "lyon" and group.body == "I live in Lyon" and group.kind == Kind.PREFERENCE
    assert group.targets == ("lyon", "paris")


@pytest.mark.parametrize(
    ("subject", "key"),
    [("Home city", "home-city"), ("  home   CITY ", "home-city"), ("Ünïcode Straße", "ünïcode-strasse"),
     ("a" * 80, "a" * 64), ("editor/IDE", "editor-ide"), ("x\n\u0000y", "x-y")],
)  # fmt: skip
def test_group_key_is_derived_never_verbatim(subject: str, key: str) -> None:
    assert gate.group_key(subject) == key


def test_at_most_20_operations_are_considered_and_the_rest_counted() -> None:
    ops = [{"op": "keep", "targets": [f"k{i}"]} for i in range(25)]
    records = {f"k{i}": rec(f"k{i}") for i in range(25)}

    result = gate.check_batch(
        {"operations": ops}, scope_key=SCOPE, records=records, allowed_ops=ALL, now=NOW, screen=screen_body
    )

    assert len(result.passed) == 20
    assert result.refusals == {gate.TOO_MANY_OPERATIONS: 5}
    assert [r.index for r in result.refused] == [20, 21, 22, 23, 24]
    assert result.proposed == 25 == len(result.passed) + len(result.refused)


def test_an_excess_operation_naming_a_considered_target_does_not_contest_it() -> None:
    ops = [{"op": "keep", "targets": [f"k{i}"]} for i in range(20)] + [{"op": "retire", "targets": ["k0"]}]
    records = {f"k{i}": rec(f"k{i}") for i in range(20)}

    result = gate.check_batch(
        {"operations": ops}, scope_key=SCOPE, records=records, allowed_ops=ALL, now=NOW, screen=screen_body
    )

    assert len(result.passed) == 20 and result.refusals == {gate.TOO_MANY_OPERATIONS: 1}


def test_merge_and_group_take_up_to_ten_targets() -> None:
    records = {f"t{i}": rec(f"t{i}", valid_from=T0 + timedelta(milliseconds=i)) for i in range(10)}
    ids = list(records)

    result = gate.check_batch(
        {"operations": [{"op": "merge", "targets": ids, "body": "all"}]},
        scope_key=SCOPE, records=records, allowed_ops=ALL, now=NOW, screen=screen_body,
    )  # fmt: skip
    assert len(result.passed) == 1
    result = gate.check_batch(
        {"operations": [{"op": "group", "targets": ids, "subject": "s"}]},
        scope_key=SCOPE, records=records, allowed_ops=ALL, now=NOW, screen=screen_body,
    )  # fmt: skip
    assert result.passed[0].survivor == "t9"


def test_null_optional_fields_count_as_absent() -> None:
    [keep] = judge([{"op": "keep", "targets": ["a"], "rationale": None}]).passed
    assert keep.op == Op.KEEP


def test_applied_plus_refused_always_equals_the_answer() -> None:
    ops: list[object] = [
        {"op": "merge", "targets": ["c", "d"], "body": "m"},
        {"op": "retire", "targets": ["a"]},
        {"op": "nope"},
        7,
        {"op": "expire", "targets": ["b"], "after_days": 99999},
    ] * 6
    result = judge(ops)

    assert result.proposed == len(ops) == len(result.passed) + len(result.refused)
