"""The in-process map of spliced responses (`idmap.LocalIdMap`): lookups, the lifetime, and the
size bounds, on a clock the test moves."""

from __future__ import annotations

from typing import Any

from spillguard.idmap import LocalIdMap, Spliced


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def message(item_id: str, text: str) -> dict[str, Any]:
    return {"id": item_id, "type": "message", "content": [{"type": "output_text", "text": text}]}


def splice(n: int, text: str = "Checking.") -> Spliced:
    item = message(f"msg_{n}", text)
    return Spliced(f"resp_{n}", f"resp_{n}_retry", {f"msg_{n}": item}, (item,), 1741476542)


def test_a_splice_maps_its_response_and_its_items() -> None:
    ids = LocalIdMap(shared=True)
    ids.put(splice(1))
    assert ids.response("resp_1") == "resp_1_retry"
    assert ids.item("msg_1") == message("msg_1", "Checking.")
    assert ids.response("resp_2") is None
    assert ids.item("msg_2") is None
    assert ids.response("resp_1_retry") is None  # the retry's own id is the upstream's
    assert ids.shared


def test_a_splice_is_forgotten_after_its_lifetime() -> None:
    clock = Clock()
    ids = LocalIdMap(shared=True, ttl=60, clock=clock)
    ids.put(splice(1))
    clock.now += 30
    ids.put(splice(2))
    clock.now += 30  # the first one's lifetime is over, the second's is not
    assert ids.response("resp_1") is None and ids.item("msg_1") is None
    assert ids.response("resp_2") == "resp_2_retry"
    assert len(ids) == 1


def test_the_oldest_splices_go_first_past_the_bounds() -> None:
    ids = LocalIdMap(shared=False, entries=2)
    for n in (1, 2, 3):
        ids.put(splice(n))
    assert [ids.response(f"resp_{n}") for n in (1, 2, 3)] == [None, "resp_2_retry", "resp_3_retry"]
    assert ids.item("msg_1") is None
    assert not ids.shared

    small = LocalIdMap(shared=True, chars=splice(1, "x" * 500).size + 10)
    small.put(splice(1, "x" * 500))
    small.put(splice(2, "y" * 500))  # over the character budget: the first goes
    assert small.response("resp_1") is None
    assert small.response("resp_2") == "resp_2_retry"
    assert len(small) == 1


def test_putting_the_same_response_again_replaces_it() -> None:
    ids = LocalIdMap(shared=True)
    ids.put(splice(1))
    ids.put(Spliced("resp_1", "resp_1_again", {}, (), None))
    assert ids.response("resp_1") == "resp_1_again"
    assert ids.item("msg_1") is None
    assert len(ids) == 1


def test_a_splice_is_found_whole_and_forgotten_on_request() -> None:
    ids = LocalIdMap(shared=True)
    ids.put(splice(1))
    ids.put(splice(2))
    assert ids.spliced("resp_1") == splice(1)
    assert ids.spliced("msg_1") is None and ids.spliced("resp_1_retry") is None
    ids.forget("resp_1")
    ids.forget("resp_9")  # never spliced: nothing to forget
    assert ids.spliced("resp_1") is None and ids.item("msg_1") is None
    assert ids.response("resp_2") == "resp_2_retry" and len(ids) == 1


def test_the_output_counts_toward_the_character_budget() -> None:
    one = splice(1, "x" * 500)
    assert one.size > 2 * 500  # the item, and the output that lists it
    small = LocalIdMap(shared=True, chars=one.size + 10)
    small.put(one)
    small.put(splice(2, "y" * 500))
    assert small.response("resp_1") is None and len(small) == 1
